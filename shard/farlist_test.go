package shard_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// farMixed fills one shard with near and far messages whose due times
// interleave: n-* near (enqueued before the tier was on, due 20-49 s
// out), f-* far (due 20.5-49.5 s out), and 300 z-* far in one bucket,
// compacted into a block. It returns every id's due time.
func farMixed(t *testing.T) (*bundle, map[string]time.Time) {
	t.Helper()
	b := setup(t, 1)
	due := map[string]time.Time{}
	for k := range 30 {
		s := b.enqueue(t, fmt.Sprintf("n-%02d", k), 20*time.Second+time.Duration(k)*time.Second)
		due[s.ID] = s.Due
	}
	if err := b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: 3 * time.Second, BucketWidth: time.Second, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	for k := range 30 {
		s := b.enqueue(t, fmt.Sprintf("f-%02d", k), 20500*time.Millisecond+time.Duration(k)*time.Second)
		due[s.ID] = s.Due
	}
	start := time.Now().Add(60 * time.Second).Truncate(time.Second).Add(100 * time.Millisecond)
	for k := range 300 {
		m := shard.Message{ID: fmt.Sprintf("z-%03d", k), Topic: "z", Body: []byte("z"), At: start.Add(time.Duration(k) * time.Millisecond)}
		s, err := b.prod.Enqueue(b.ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		due[s.ID] = s.Due
	}
	if n, err := b.store.CompactFar(b.ctx, 0, 10); err != nil || n != 1 {
		t.Fatalf("compact: %d blocks, %v; want 1", n, err)
	}
	info, err := b.prod.Inspect(b.ctx, "f-00")
	if err != nil || !info.Far {
		t.Fatalf("f-00 is not far: %+v, %v", info, err)
	}
	return b, due
}

// browseAll pages through q and returns what it listed.
func browseAll(t *testing.T, b *bundle, q shard.BrowseQuery) []shard.Listed {
	t.Helper()
	var out []shard.Listed
	for {
		page, next, err := b.store.Browse(b.ctx, b.m, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == nil {
			return out
		}
		q.After = *next
	}
}

// wantOrder returns the ids of due in (due, id) order that keep says.
func wantOrder(due map[string]time.Time, keep func(id string, at time.Time) bool) []string {
	var ids []string
	for id, at := range due {
		if keep(id, at) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(x, y string) int {
		return cmp.Or(due[x].Compare(due[y]), cmp.Compare(x, y))
	})
	return ids
}

// A listing shows far messages in their place in due order among near
// ones (raw records and compressed blocks alike), marked far, with their
// envelopes; a cancelled far message is not listed; a due window and a
// small page size hold across the tiers.
func TestFarMessagesListedInDueOrder(t *testing.T) {
	b, due := farMixed(t)
	if err := b.prod.Cancel(b.ctx, "f-05"); err != nil {
		t.Fatal(err)
	}
	delete(due, "f-05")
	got := browseAll(t, b, shard.BrowseQuery{Shard: -1, Limit: 7})
	want := wantOrder(due, func(string, time.Time) bool { return true })
	var ids []string
	for _, l := range got {
		ids = append(ids, l.ID)
		if l.Far != (l.ID[0] != 'n') || l.Envelope == nil || !l.Due.Equal(due[l.ID]) {
			t.Fatalf("%s listed as %+v, want far %v due %s", l.ID, l, l.ID[0] != 'n', due[l.ID])
		}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("listed %d in this order:\n%v\nwant %d:\n%v", len(ids), ids, len(want), want)
	}
	from, to := due["n-10"], due["f-20"]
	got = browseAll(t, b, shard.BrowseQuery{Shard: -1, From: from, To: to, Limit: 3})
	want = wantOrder(due, func(_ string, at time.Time) bool { return !at.Before(from) && at.Before(to) })
	ids = ids[:0]
	for _, l := range got {
		ids = append(ids, l.ID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("window [n-10, f-20): %v, want %v", ids, want)
	}
	if n, err := b.store.CountMatching(b.ctx, 1, shard.BulkFilter{Topic: "z"}); err != nil || n != 300 {
		t.Fatalf("count of topic z: %d, %v; want 300", n, err)
	}
}

// Bulk cancel and reschedule by filter act on far messages as on near
// ones, and count each once: a cancel by prefix takes the far ones (a
// compressed block's too), a reschedule moves far messages to another
// far bucket or near, and running it again moves and counts nothing.
func TestFarMessagesInBulkJobs(t *testing.T) {
	b, due := farMixed(t)
	p, err := b.store.BulkCancel(b.ctx, 1, shard.BulkFilter{Prefix: "z-1"}, 0, nil)
	if err != nil || p.Done != 100 {
		t.Fatalf("cancel z-1*: %+v, %v; want 100 cancelled", p, err)
	}
	for _, id := range []string{"z-100", "z-199"} {
		if info, err := b.prod.Inspect(b.ctx, id); err != nil || info.State != shard.StateUnknown {
			t.Fatalf("%s after the cancel: %+v, %v", id, info, err)
		}
	}
	// f-* and n-* due in [f-10, n-30) go to 90 s out: far, in one bucket.
	at := time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	f := shard.BulkFilter{From: due["f-10"], To: due["n-29"]}
	p, err = b.store.BulkReschedule(b.ctx, 1, f, 0, at, 0, nil)
	want := len(wantOrder(due, func(_ string, t time.Time) bool { return !t.Before(f.From) && t.Before(f.To) }))
	if err != nil || p.Done != want {
		t.Fatalf("reschedule: %+v, %v; want %d moved", p, err, want)
	}
	for _, id := range []string{"f-10", "n-20", "f-18"} {
		info, err := b.prod.Inspect(b.ctx, id)
		if err != nil || !info.At.Equal(at) || info.Far != (id[0] == 'f') {
			t.Fatalf("%s after the reschedule: %+v, %v; want due %s", id, info, err, at)
		}
	}
	// Near: a far message goes into the due set.
	soon := time.Now().Add(time.Second).Truncate(time.Millisecond)
	p, err = b.store.BulkReschedule(b.ctx, 1, shard.BulkFilter{Prefix: "z-0"}, 0, soon, 0, nil)
	if err != nil || p.Done != 100 {
		t.Fatalf("reschedule z-0* near: %+v, %v; want 100", p, err)
	}
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	if s := b.rdb.ZScore(b.ctx, ks.Due, "z-042").Val(); s != float64(soon.UnixMilli()) {
		t.Fatalf("z-042 in the due set at %v, want %d", s, soon.UnixMilli())
	}
	p, err = b.store.BulkReschedule(b.ctx, 1, shard.BulkFilter{Prefix: "z-0"}, 0, soon, 0, nil)
	if err != nil || p.Done != 0 {
		t.Fatalf("the same reschedule again: %+v, %v; want 0 moved", p, err)
	}
	st, err := b.store.Stats(b.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Far now: f-* outside the window, f-* moved (far again), z-2*.
	listed := browseAll(t, b, shard.BrowseQuery{Shard: -1, Limit: 1000})
	far := 0
	for _, l := range listed {
		if l.Far {
			far++
		}
	}
	if int64(far) != st[0].Far || len(listed) != 30+30+200 {
		t.Fatalf("after the jobs: %d listed, %d far, stats say %d far; want 260 listed", len(listed), far, st[0].Far)
	}
	p, err = b.store.BulkCancel(b.ctx, 1, shard.BulkFilter{All: true}, 0, nil)
	if err != nil || p.Done != 260 {
		t.Fatalf("clear all: %+v, %v; want 260", p, err)
	}
	if st, _ := b.store.Stats(b.ctx, 1); st[0].Far != 0 || st[0].Scheduled != 0 {
		t.Fatalf("after clear: %+v", st[0])
	}
}

// Far messages stay findable across a resize, as near ones do: under
// a new M, inspect, cancel (one and in batches), enqueue's dedupe and
// upsert find the copy in the shard the old M put it in; the scanners'
// promotion of that shard (all shards up to the high-water mark) brings
// the rest into its due set on time.
func TestFarAcrossResize(t *testing.T) {
	b := setup(t, 1)
	if err := b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: 3 * time.Second, BucketWidth: time.Second, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	var r resizable
	r.m.Store(4)
	r.hw.Store(4)
	prod := shard.NewProducer(b.store, &r, shard.ProducerOptions{})
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("r%d", i)
		ids = append(ids, id)
		if _, err := prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Delay: 8 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	gone := map[string]bool{}
	for _, m := range []int64{16, 2} {
		r.m.Store(m)
		r.hw.Store(max(r.hw.Load(), m))
		var moved []string
		for _, id := range ids {
			if !gone[id] && shard.Of(id, int(m)) != shard.Of(id, 4) {
				moved = append(moved, id)
			}
		}
		if len(moved) < 5 {
			t.Fatalf("M=%d moves %d ids: the test proves nothing", m, len(moved))
		}
		for _, id := range moved {
			info, err := prod.Inspect(b.ctx, id)
			if err != nil || info.State != shard.StateScheduled || !info.Far || info.Shard != shard.Of(id, 4) {
				t.Fatalf("M=%d: inspect %s: %+v %v", m, id, info, err)
			}
		}
		if _, err := prod.Enqueue(b.ctx, shard.Message{ID: moved[0], Topic: "t", Delay: 8 * time.Second}); !errors.Is(err, shard.ErrDuplicate) {
			t.Fatalf("M=%d: enqueue of far %s: %v, want a duplicate", m, moved[0], err)
		}
		if s, err := prod.Upsert(b.ctx, shard.Message{ID: moved[1], Topic: "t2", Delay: 8 * time.Second}); err != nil || s.Shard != shard.Of(moved[1], 4) {
			t.Fatalf("M=%d: upsert of far %s: %+v %v, want its old shard %d", m, moved[1], s, err, shard.Of(moved[1], 4))
		}
		if err := prod.Cancel(b.ctx, moved[2]); err != nil {
			t.Fatalf("M=%d: cancel of far %s: %v", m, moved[2], err)
		}
		errs, err := prod.CancelBatch(b.ctx, moved[3:5])
		if err != nil || errs[0] != nil || errs[1] != nil {
			t.Fatalf("M=%d: cancel batch of far %v: %v %v", m, moved[3:5], errs, err)
		}
		for _, id := range moved[2:5] {
			gone[id] = true
		}
	}
	st, err := b.store.Stats(b.ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	far := int64(0)
	for _, s := range st {
		far += s.Far
	}
	if want := int64(len(ids) - len(gone)); far != want {
		t.Fatalf("%d far after the resizes, want %d (no copy added, the cancelled gone)", far, want)
	}
	shardtest.WaitFor(t, 15*time.Second, func() bool {
		for i := range 16 {
			if _, err := b.store.PromoteDue(b.ctx, i, 10); err != nil {
				t.Fatal(err)
			}
		}
		st, _ := b.store.Stats(b.ctx, 16)
		n := int64(0)
		for _, s := range st {
			n += s.Far
		}
		return n == 0
	}, func() string { return "far messages were not promoted" })
	for _, id := range ids {
		info, err := prod.Inspect(b.ctx, id)
		if gone[id] != (info.State == shard.StateUnknown) || err != nil || !gone[id] && (info.Far || info.Shard != shard.Of(id, 4)) {
			t.Fatalf("%s after promotion: %+v %v (cancelled: %v)", id, info, err, gone[id])
		}
	}
}
