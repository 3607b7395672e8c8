package shard_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
)

// TestListPagesInDueOrder: pages walk a shard in due order, ties by id,
// each message once, with its envelope; the last page says there is no
// more.
func TestListPagesInDueOrder(t *testing.T) {
	b := setup(t, 1)
	base := time.Now().Add(time.Hour)
	var msgs []shard.Message
	var want []string
	for i := range 300 {
		id := fmt.Sprintf("m%03d", i)
		// Three messages share each due time: ties.
		msgs = append(msgs, shard.Message{ID: id, Topic: "t", Body: []byte(id), At: base.Add(time.Duration(i/3) * time.Millisecond)})
		want = append(want, id)
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var got []string
	var after shard.ListCursor
	for pages := 0; ; pages++ {
		page, next, more, err := b.store.List(b.ctx, 0, after, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page {
			if l.Envelope == nil || string(l.Envelope.Body) != l.ID || l.Shard != 0 {
				t.Fatalf("listed %+v", l)
			}
			got = append(got, l.ID)
		}
		if !more {
			break
		}
		if pages > 10 {
			t.Fatal("listing does not end")
		}
		after = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d ids %v..., want %d in due order", len(got), got[:min(5, len(got))], len(want))
	}
	if _, _, _, err := b.store.List(b.ctx, 0, shard.ListCursor{}, 5000); err == nil {
		t.Error("a page of 5000 was accepted")
	}
}

// TestListGoesOnWhenItsAnchorLeaves: when the message a page ended with is
// claimed or cancelled before the next page, the listing goes on from its
// due time and skips nothing.
func TestListGoesOnWhenItsAnchorLeaves(t *testing.T) {
	b := setup(t, 1)
	base := time.Now().Add(time.Hour)
	for i := range 10 {
		if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: fmt.Sprintf("a%d", i), Topic: "t", At: base.Add(time.Duration(i/2) * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	page, next, _, err := b.store.List(b.ctx, 0, shard.ListCursor{}, 4) // a0..a3; a2 and a3 share a due time
	if err != nil || len(page) != 4 || next.ID != "a3" {
		t.Fatalf("first page: %v %+v %v", len(page), next, err)
	}
	if err := b.prod.Cancel(b.ctx, "a3"); err != nil {
		t.Fatal(err)
	}
	page, _, _, err = b.store.List(b.ctx, 0, next, 10)
	var ids []string
	for _, l := range page {
		ids = append(ids, l.ID)
	}
	if err != nil || strings.Join(ids, ",") != "a2,a4,a5,a6,a7,a8,a9" {
		t.Fatalf("after the anchor left: %v %v (a2 may repeat, nothing may be skipped)", ids, err)
	}
}

// TestCancelBatch: one call cancels many ids, each with its own outcome:
// cancelled, in flight, unknown, invalid; also ids an older M left in
// another shard.
func TestCancelBatch(t *testing.T) {
	b := setup(t, 1)
	old := shard.NewProducer(b.store, fixed(4), shard.ProducerOptions{})
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		if _, err := old.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.Enqueue(b.ctx, shard.Message{ID: "flying", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.store.Claim(b.ctx, shard.Of("flying", 4), 1, time.Minute); err != nil || len(r.Msgs) != 1 {
		t.Fatalf("claim: %+v %v", r, err)
	}
	prod := shard.NewProducer(b.store, fixed(16), shard.ProducerOptions{}) // after a resize 4 -> 16
	errs, err := prod.CancelBatch(b.ctx, append(ids, "flying", "nobody", ""))
	if err != nil {
		t.Fatal(err)
	}
	for j, id := range ids {
		if errs[j] != nil {
			t.Errorf("cancel %s: %v", id, errs[j])
		}
	}
	n := len(ids)
	if !errors.Is(errs[n], shard.ErrInFlight) || !errors.Is(errs[n+1], shard.ErrNotFound) || !errors.Is(errs[n+2], shard.ErrInvalid) {
		t.Errorf("flying, nobody, empty: %v / %v / %v", errs[n], errs[n+1], errs[n+2])
	}
	st, _ := b.store.Stats(b.ctx, 16)
	for _, s := range st {
		if s.Scheduled != 0 {
			t.Errorf("shard %d still has %d scheduled", s.Shard, s.Scheduled)
		}
	}
}

// TestBulkCancelByTopic: a bulk cancel takes what matches, page after
// page, and leaves the rest and what is in flight.
func TestBulkCancelByTopic(t *testing.T) {
	b := setup(t, 1)
	var msgs []shard.Message
	for i := range 1200 {
		topic := "keep"
		if i%2 == 0 {
			topic = "drop"
		}
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("x%d", i), Topic: topic, Delay: time.Duration(i) * time.Millisecond})
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if r, err := b.store.Claim(b.ctx, 0, 1, time.Minute); err != nil || len(r.Msgs) != 1 || r.Msgs[0].ID != "x0" {
		t.Fatalf("claim x0 (topic drop): %+v %v", r, err)
	}
	p, err := b.store.BulkCancel(b.ctx, 1, shard.BulkFilter{Topic: "drop"}, 0, nil)
	if err != nil || p.Done != 599 || p.InFlight != 0 {
		t.Fatalf("clear topic drop: %+v, %v; want 599 cancelled, 0 in flight", p, err)
	}
	st, _ := b.store.Stats(b.ctx, 1)
	if st[0].Scheduled != 600 || st[0].InFlight != 1 {
		t.Errorf("after clear: %+v, want 600 scheduled (keep), 1 in flight", st[0])
	}
}

// TestBrowseFiltersAndBounds: a listing over every shard pages by a
// cursor that names the shard, filters by topic, prefix and due window,
// and with MaxScan reads no more than that many entries per page (a
// filter that matches little ends the page early, with a cursor).
func TestBrowseFiltersAndBounds(t *testing.T) {
	b := setup(t, 3)
	base := time.Now().Add(time.Hour)
	for i := range 60 {
		topic := "a"
		if i%3 == 0 {
			topic = "b"
		}
		m := shard.Message{ID: fmt.Sprintf("id-%02d", i), Topic: topic, At: base.Add(time.Duration(i) * time.Second)}
		if _, err := b.prod.Enqueue(b.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	walk := func(q shard.BrowseQuery) (ids []string, pages int) {
		for {
			page, next, err := b.store.Browse(b.ctx, b.m, q)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, l := range page {
				ids = append(ids, l.ID)
			}
			if next == nil {
				return ids, pages
			}
			c, err := shard.ParseBrowseCursor(next.String())
			if err != nil || c != *next {
				t.Fatalf("cursor %q does not read back: %v", next, err)
			}
			q.After = c
		}
	}
	if ids, pages := walk(shard.BrowseQuery{Shard: -1, Limit: 7}); len(ids) != 60 || pages != 9 {
		t.Errorf("all: %d ids in %d pages, want 60 in 9", len(ids), pages)
	}
	if ids, _ := walk(shard.BrowseQuery{Shard: -1, Topic: "b", Limit: 100}); len(ids) != 20 {
		t.Errorf("topic b: %d ids, want 20", len(ids))
	}
	if ids, _ := walk(shard.BrowseQuery{Shard: -1, Prefix: "id-1", Limit: 100}); len(ids) != 10 {
		t.Errorf("prefix id-1: %d ids, want 10", len(ids))
	}
	window, _ := walk(shard.BrowseQuery{Shard: -1, From: base.Add(10 * time.Second), To: base.Add(19 * time.Second), Limit: 100})
	slices.Sort(window)
	if len(window) != 10 || window[0] != "id-10" || window[9] != "id-19" {
		t.Errorf("due window: %v, want id-10 to id-19", window)
	}
	// At most 5 entries read per page: a prefix that matches one id
	// takes pages that end early, and still finds it.
	page, next, err := b.store.Browse(b.ctx, b.m, shard.BrowseQuery{Shard: -1, Prefix: "id-59", Limit: 10, MaxScan: 5})
	if err != nil || len(page) > 1 || next == nil {
		t.Fatalf("bounded page: %d ids, next %v, %v", len(page), next, err)
	}
	if ids, pages := walk(shard.BrowseQuery{Shard: -1, Prefix: "id-59", Limit: 10, MaxScan: 5}); len(ids) != 1 || pages < 12 {
		t.Errorf("bounded walk: %v in %d pages, want id-59 in at least 12", ids, pages)
	}
	if _, _, err := b.store.Browse(b.ctx, b.m, shard.BrowseQuery{Shard: 3, Limit: 10}); !errors.Is(err, shard.ErrInvalid) {
		t.Errorf("shard out of range: %v", err)
	}
}
