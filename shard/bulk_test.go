package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
)

// TestBulkCancelByFilter: topic, prefix and due window combine; a run
// stopped half way and run again counts what the first one cancelled; a
// finished filter counts anew; a filter without a condition is refused.
func TestBulkCancelByFilter(t *testing.T) {
	b := setup(t, 4)
	base := time.Now().Add(time.Hour)
	var msgs []shard.Message
	for i := range 3000 {
		topic := []string{"a", "b"}[i%2]
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("m-%04d", i), Topic: topic, At: base.Add(time.Duration(i) * time.Second)})
	}
	res, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// Topic a, due in the first 2,000 seconds: 1,000 messages.
	f := shard.BulkFilter{Topic: "a", To: base.Add(1999 * time.Second)}
	if n, err := b.store.CountMatching(b.ctx, 4, f); err != nil || n != 1000 {
		t.Fatalf("dry run: %d, %v; want 1000", n, err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	pages := 0
	p, err := b.store.BulkCancel(ctx, 4, f, 1000, func(shard.BulkProgress) {
		if pages++; pages == 2 {
			cancel() // the caller dies
		}
	})
	if err == nil || p.Done == 0 || p.Done >= 1000 {
		t.Fatalf("stopped run: %+v, %v; want some, not all, and an error", p, err)
	}
	first := p.Done
	if j, err := b.store.BulkStatus(b.ctx, 4, f.Job()); err != nil || j.State != "running" || j.Matched != 1000 || j.Done != first || j.Filter != f.String() {
		t.Fatalf("the stopped job as Redis records it: %+v, %v", j, err)
	}
	p, err = b.store.BulkCancel(b.ctx, 4, f, 0, nil)
	if err != nil || p.Done != 1000 || p.Before != first {
		t.Fatalf("run again: %+v, %v; want 1000 with %d before", p, err, first)
	}
	if j, err := b.store.BulkStatus(b.ctx, 4, f.Job()); err != nil || j.State != "done" || j.Done != 1000 {
		t.Errorf("the finished job: %+v, %v", j, err)
	}
	if j, err := b.store.BulkStatus(b.ctx, 4, "nosuchjob"); err != nil || j.State != "" {
		t.Errorf("an unknown job: %+v, %v", j, err)
	}
	if n, _ := b.store.CountMatching(b.ctx, 4, f); n != 0 {
		t.Errorf("%d still match after the cancel", n)
	}
	if n, _ := b.store.CountMatching(b.ctx, 4, shard.BulkFilter{All: true}); n != 2000 {
		t.Errorf("%d scheduled in all after the cancel, want 2000", n)
	}
	// The same filter once finished counts anew.
	if p, err := b.store.BulkCancel(b.ctx, 4, f, 0, nil); err != nil || p.Done != 0 || p.Before != 0 {
		t.Errorf("the finished filter again: %+v, %v; want 0", p, err)
	}
	// Prefix and window.
	if p, err := b.store.BulkCancel(b.ctx, 4, shard.BulkFilter{Prefix: "m-29", From: base.Add(2950 * time.Second)}, 0, nil); err != nil || p.Done != 50 {
		t.Errorf("prefix m-29 due from 2950 s: %+v, %v; want 50", p, err)
	}
	for _, bad := range []shard.BulkFilter{{}, {All: true, Topic: "a"}, {From: base, To: base.Add(-time.Second)}} {
		if _, err := b.store.BulkCancel(b.ctx, 4, bad, 0, nil); !errors.Is(err, shard.ErrInvalid) {
			t.Errorf("filter %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if !strings.Contains(f.String(), `topic="a" due in [open, `) {
		t.Errorf("filter text %q", f.String())
	}
}

// TestBulkRescheduleByFilter: the selected messages move to one time; a
// run stopped half way and run again with the same delay goes on to the
// same time and counts what the first run moved; the rest stay.
func TestBulkRescheduleByFilter(t *testing.T) {
	b := setup(t, 4)
	base := time.Now().Add(time.Hour)
	var msgs []shard.Message
	for i := range 2000 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("%s-%04d", []string{"late", "keep"}[i%2], i), Topic: "t",
			At: base.Add(time.Duration(i) * time.Second)})
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	f := shard.BulkFilter{Prefix: "late-"}
	ctx, cancel := context.WithCancel(b.ctx)
	pages := 0
	p, err := b.store.BulkReschedule(ctx, 4, f, 3*time.Hour, time.Time{}, 1000, func(shard.BulkProgress) {
		if pages++; pages == 2 {
			cancel()
		}
	})
	if err == nil || p.Done == 0 || p.Done >= 1000 {
		t.Fatalf("stopped run: %+v, %v", p, err)
	}
	first := p.Done
	p, err = b.store.BulkReschedule(b.ctx, 4, f, 3*time.Hour, time.Time{}, 1000, nil)
	if err != nil || p.Done != 1000 || p.Before != first {
		t.Fatalf("run again: %+v, %v; want 1000 with %d before", p, err, first)
	}
	// Every late- message is due at one time, 3 h after the first run
	// started; the keep- ones where they were.
	dues := map[int64]int{}
	for _, id := range []string{"late-0000", "late-1000", "late-1998"} {
		info, err := b.prod.Inspect(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		dues[info.At.UnixMilli()]++
		if d := time.Until(info.At); d < 2*time.Hour+50*time.Minute || d > 3*time.Hour {
			t.Errorf("%s due in %s, want about 3h", id, d)
		}
	}
	if len(dues) != 1 {
		t.Errorf("the moved messages are due at %d times, want one: %v", len(dues), dues)
	}
	if info, _ := b.prod.Inspect(b.ctx, "keep-0001"); !info.At.Equal(base.Add(time.Second).Truncate(time.Millisecond)) {
		t.Errorf("keep-0001 moved to %s", info.At)
	}
	if _, err := b.store.BulkReschedule(b.ctx, 4, f, -time.Second, time.Time{}, 0, nil); !errors.Is(err, shard.ErrInvalid) {
		t.Errorf("a negative delay: %v, want ErrInvalid", err)
	}
}

// TestWindowIsHalfOpenLikeTheProfile: a due window [from, to) selects what
// the due profile's bucket of the same bounds counts: a message due
// exactly at from is in, one due exactly at to is the next bucket's, in a
// listing, a dry run and a bulk cancel alike.
func TestWindowIsHalfOpenLikeTheProfile(t *testing.T) {
	b := setup(t, 4)
	now, err := b.store.RedisNow(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	const width = time.Minute
	from := time.UnixMilli(now - now%width.Milliseconds()).Add(2 * width) // a bucket boundary two minutes ahead
	to := from.Add(width)
	var msgs []shard.Message
	for id, at := range map[string]time.Time{"at-from": from, "inside": from.Add(30 * time.Second), "at-to": to, "before": from.Add(-time.Millisecond)} {
		msgs = append(msgs, shard.Message{ID: id, Topic: "t", At: at})
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	p, err := b.store.DueProfile(b.ctx, 4, width, 5)
	if err != nil {
		t.Fatal(err)
	}
	j := int(from.Sub(p.Start) / width)
	if j < 1 || j >= len(p.Counts) || p.Counts[j] != 2 || p.Counts[j+1] != 1 || p.Counts[j-1] != 1 {
		t.Fatalf("profile from %s: %v, want 1, 2, 1 around bucket %d", p.Start, p.Counts, j)
	}
	page, _, err := b.store.Browse(b.ctx, 4, shard.BrowseQuery{Shard: -1, From: from, To: to, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range page {
		got[l.ID] = true
	}
	if len(got) != 2 || !got["at-from"] || !got["inside"] {
		t.Errorf("browse [from, to): %v, want at-from and inside", got)
	}
	f := shard.BulkFilter{From: from, To: to}
	if n, err := b.store.CountMatching(b.ctx, 4, f); err != nil || n != 2 {
		t.Errorf("dry run: %d, %v; want 2 (the bucket's count)", n, err)
	}
	if p, err := b.store.BulkCancel(b.ctx, 4, f, 0, nil); err != nil || p.Done != 2 {
		t.Errorf("bulk cancel: %+v, %v; want 2", p, err)
	}
	for _, id := range []string{"at-to", "before"} {
		if info, err := b.store.Inspect(b.ctx, shard.Of(id, 4), id); err != nil || info.State != shard.StateScheduled {
			t.Errorf("%s after the cancel of [from, to): %s, %v; want scheduled", id, info.State, err)
		}
	}
	if !strings.HasSuffix(f.String(), ")") {
		t.Errorf("filter text %q does not show a half-open window", f.String())
	}
}

// TestBulkRescheduleCountsEachOnceWhileScannersRun: a reschedule to now
// while the scanners take what it moves (some published, some refused
// and set due again a little later, some still in flight) counts every
// message once and none as in flight: the walk meets what it moved again
// and knows it by its scheduled time.
func TestBulkRescheduleCountsEachOnceWhileScannersRun(t *testing.T) {
	b := setup(t, 2)
	base := time.Now().Add(time.Hour)
	var msgs []shard.Message
	for i := range 3000 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("r-%04d", i), Topic: "t", At: base.Add(time.Duration(i) * time.Second)})
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	pages := 0
	scanner := func(shard.BulkProgress) {
		// A scanner between two pages: claims what is due in each shard;
		// acks a third, releases a third for a retry 1 s later (a refused
		// publish), and leaves a third in flight.
		pages++
		res, errs := b.store.ClaimShards(b.ctx, []int{0, 1}, 100, time.Minute)
		for j, r := range res {
			if errs[j] != nil {
				t.Fatal(errs[j])
			}
			for k, c := range r.Msgs {
				switch k % 3 {
				case 0:
					if _, err := b.store.Ack(b.ctx, j, c.Lease); err != nil {
						t.Fatal(err)
					}
				case 1:
					if _, err := b.store.Release(b.ctx, j, c.Lease, time.Second); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	p, err := b.store.BulkReschedule(b.ctx, 2, shard.BulkFilter{Prefix: "r-"}, 0, time.Time{}, 3000, scanner)
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != 3000 || p.InFlight != 0 {
		t.Errorf("rescheduled %d, %d in flight, over %d pages; want 3000 and 0", p.Done, p.InFlight, pages)
	}
}

// TestBatchGivenTwiceIsADuplicate: an id given twice in one batch is a
// duplicate the second time, also when the two go in different script
// calls of their shard; with upsert the second replaces the first.
func TestBatchGivenTwiceIsADuplicate(t *testing.T) {
	b := setup(t, 1)
	msgs := []shard.Message{{ID: "twice", Topic: "t", Body: []byte("first"), Delay: time.Hour}}
	for j := range 150 { // more than a script call takes
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("m%03d", j), Topic: "t", Delay: time.Hour})
	}
	msgs = append(msgs, shard.Message{ID: "twice", Topic: "t", Body: []byte("second"), Delay: time.Hour})
	res, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[len(res)-1].Err, shard.ErrDuplicate) {
		t.Errorf("enqueue: first %v, second %v; want stored, then a duplicate", res[0].Err, res[len(res)-1].Err)
	}
	res, err = b.prod.UpsertBatch(b.ctx, []shard.Message{msgs[0], msgs[len(msgs)-1]})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("upsert: %v %+v", err, res)
	}
	info, err := b.store.Inspect(b.ctx, 0, "twice")
	if err != nil || info.Envelope == nil || string(info.Envelope.Body) != "second" {
		t.Errorf("after the upsert: %+v, %v; want the second body", info.Envelope, err)
	}
}
