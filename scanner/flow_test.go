package scanner_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// enqueueAt enqueues n messages of topic with ids prefix-0.. due at at,
// with opt applied to each, and fails the test if that took until at.
func (f *fleet) enqueueAt(prefix, topic string, n int, at time.Time, opt func(*shard.Message)) []string {
	f.t.Helper()
	ids := make([]string, n)
	msgs := make([]shard.Message, n)
	for j := range msgs {
		ids[j] = fmt.Sprintf("%s-%d", prefix, j)
		msgs[j] = shard.Message{ID: ids[j], Topic: topic, At: at, Body: []byte("x")}
		if opt != nil {
			opt(&msgs[j])
		}
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 500)
		if _, err := f.prod.EnqueueBatch(f.t.Context(), msgs[:n]); err != nil {
			f.t.Fatal(err)
		}
		msgs = msgs[n:]
	}
	if time.Now().After(at) {
		f.t.Fatalf("enqueueing %d messages took past their due time", n)
	}
	return ids
}

// receipts are the receive times of ids' first deliveries, sorted; each
// must be at or after its due time.
func (f *fleet) receipts(ids []string) []time.Time {
	f.t.Helper()
	out := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		d := f.delivered(id)
		if len(d) == 0 {
			continue
		}
		if d[0].at.UnixMilli() < d[0].dueMs {
			f.t.Errorf("%s delivered %d ms early", id, d[0].dueMs-d[0].at.UnixMilli())
		}
		out = append(out, d[0].at)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// TestRateLimitHoldsForTheFleet is the limit's promise: 20,000 messages
// of a topic limited to 2,000/s with a burst of 200 fall due at one
// instant on 16 shards with three scanner processes. The releases
// (x-delayq-released-ms, the Redis clock of their grants) have at most
// 2,200 in any second, the consumer's receive times that plus what the
// path to it crowds together (shardtest.CheckLimit); the drain takes from 9.9 s (the burst goes at
// once) to 11 s, none is early; 1,000 messages of an unlimited topic due
// at the same instant all arrive within a second on an idle box.
//
// Not parallel, and scripts/test.sh runs it alone, after the other
// packages' tests: it measures the consumer's seconds, which other tests
// sharing the two cores would crowd.
func TestRateLimitHoldsForTheFleet(t *testing.T) {
	cfg := scanner.Config{Goroutines: 16}
	f := newFleet(t, 16, cfg, rabbit.URL)
	newFleetSharing(t, f, cfg)
	newFleetSharing(t, f, cfg)
	if _, err := f.store.SetLimit(t.Context(), "t", 2000, 200, "test"); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
	limited := f.enqueueAt("limited", "t", 20000, due, nil)
	free := f.enqueueAt("free", "u", 1000, due, nil)
	f.waitAll(free, 10*time.Second)
	fr := f.receipts(free)
	t.Logf("unlimited: first %s, last %s after due", fr[0].Sub(due), fr[len(fr)-1].Sub(due))
	// Within 1 s of due with the scanners built without the race
	// detector (cmd/delayq's TestRateLimitHoldsOnCluster); 1.5 s here.
	if last := fr[len(fr)-1]; last.Sub(due) > 1500*time.Millisecond {
		t.Errorf("the unlimited topic's last message arrived %s after its due time, want within 1.5 s", last.Sub(due))
	}
	f.waitAll(limited, 20*time.Second)
	at := f.receipts(limited)
	shardtest.CheckLimit(t, due, at, f.releases(limited), 2200)
	if d := at[len(at)-1].Sub(due); d < 9900*time.Millisecond || d > 11*time.Second {
		t.Errorf("the limited topic drained in %s, want 9.9 to 11 s", d)
	}
}

// releases are the release times (x-delayq-released-ms) of ids' first
// deliveries, sorted.
func (f *fleet) releases(ids []string) []time.Time {
	f.t.Helper()
	out := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		if d := f.delivered(id); len(d) > 0 {
			ms, ok := d[0].raw.Headers[shard.HeaderReleasedMs].(int64)
			if !ok || ms < d[0].dueMs {
				f.t.Errorf("%s: released at %v, due at %d", id, d[0].raw.Headers[shard.HeaderReleasedMs], d[0].dueMs)
			}
			out = append(out, time.UnixMilli(ms))
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// TestPauseHoldsOneTopic: a paused topic publishes nothing while other
// topics flow on time; resumed, it drains at its limit; a pause until a
// time ends by itself.
func TestPauseHoldsOneTopic(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 8, scanner.Config{Goroutines: 8}, rabbit.URL)
	if _, err := f.store.Pause(t.Context(), "t", time.Time{}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SetLimit(t.Context(), "t", 200, 0, "test"); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Second)
	paused := f.enqueueAt("paused", "t", 400, due, nil)
	free := f.enqueueAt("free", "u", 400, due, nil)
	f.waitAll(free, 10*time.Second)
	// Within a second when alone; this test runs beside the package's others.
	if late := f.receipts(free)[len(free)-1].Sub(due); late > 2*time.Second {
		t.Errorf("the other topic's last message arrived %s after due, want within 2 s", late)
	}
	var held shard.FlowStatus
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		st, err := f.store.FlowStatuses(t.Context(), f.m)
		if err == nil && len(st) == 1 {
			held = st[0]
		}
		return held.Held == 400
	}, func() string { return fmt.Sprintf("flow status %+v, want 400 held", held) })
	if !strings.Contains(held.String(), "paused until resumed") {
		t.Errorf("flow says %q", held.String())
	}
	for time.Since(due) < 5*time.Second { // a 5 s pause under way: nothing of t is published
		if n := len(f.receipts(paused)); n > 0 {
			t.Fatalf("%d messages of the paused topic published", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info, err := f.prod.Inspect(t.Context(), "paused-7"); err != nil || info.State != shard.StateHeld {
		t.Errorf("inspect paused-7: %+v, %v; want held", info, err)
	}
	if err := f.prod.Cancel(t.Context(), "paused-7"); err != nil {
		t.Errorf("cancel a held message: %v", err)
	}
	resumed := time.Now()
	if _, err := f.store.Resume(t.Context(), "t", "test"); err != nil {
		t.Fatal(err)
	}
	rest := slices.DeleteFunc(slices.Clone(paused), func(id string) bool { return id == "paused-7" })
	f.waitAll(rest, 10*time.Second)
	at := f.receipts(rest)
	shardtest.CheckLimit(t, resumed, at, f.releases(rest), 200) // "after due": after the resume
	if d := at[len(at)-1].Sub(resumed); d < 1800*time.Millisecond {
		t.Errorf("399 messages at 200/s drained in %s", d)
	}
	if len(f.delivered("paused-7")) != 0 {
		t.Error("the cancelled held message was published")
	}

	// A pause until a time resumes by itself.
	if _, err := f.store.Pause(t.Context(), "t", time.Now().Add(-time.Second), "test"); !errors.Is(err, shard.ErrPauseOver) {
		t.Errorf("pause until a past time: %v, want ErrPauseOver", err)
	}
	end := time.Now().Add(3 * time.Second)
	if _, err := f.store.Pause(t.Context(), "t", end, "test"); err != nil {
		t.Fatal(err)
	}
	later := f.enqueueAt("later", "t", 20, time.Now().Add(500*time.Millisecond), nil)
	f.waitAll(later, 10*time.Second)
	if first := f.receipts(later)[0]; first.Before(end) {
		t.Errorf("a message published %s before the pause's end", end.Sub(first))
	}
}

// TestLimitChangeTakesEffectWithinASecond: a limit raised under load
// raises the pace of releases within a second. Not parallel, and
// scripts/test.sh runs it alone: it measures a pace.
func TestLimitChangeTakesEffectWithinASecond(t *testing.T) {
	f := newFleet(t, 8, scanner.Config{Goroutines: 8}, rabbit.URL)
	if _, err := f.store.SetLimit(t.Context(), "t", 100, 0, "test"); err != nil {
		t.Fatal(err)
	}
	ids := f.enqueueAt("x", "t", 2000, time.Now().Add(500*time.Millisecond), nil)
	shardtest.WaitFor(t, 10*time.Second, func() bool { return len(f.receipts(ids)) >= 200 },
		func() string { return fmt.Sprintf("%d delivered", len(f.receipts(ids))) })
	changed := time.Now()
	if _, err := f.store.SetLimit(t.Context(), "t", 1000, 0, "test"); err != nil {
		t.Fatal(err)
	}
	f.waitAll(ids, 20*time.Second)
	f.receipts(ids) // none early
	at := f.releases(ids)
	count := func(from, to time.Time) int {
		n := 0
		for _, x := range at {
			if !x.Before(from) && x.Before(to) {
				n++
			}
		}
		return n
	}
	before := count(changed.Add(-time.Second), changed)
	after := count(changed.Add(time.Second), changed.Add(2*time.Second))
	t.Logf("released in the second before the change: %d, in the second after the first: %d", before, after)
	if before > 100 || after < 800 || after > 1000 {
		t.Errorf("%d released in the second before the change (want <= 100), %d in its second second (want 800 to 1000)", before, after)
	}
}

// TestHeldBacklogExpiresTheLateOnes: a limited topic whose backlog
// outlives the messages' maximum lateness expires exactly those released
// past it, and publishes the others.
func TestHeldBacklogExpiresTheLateOnes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 4}, rabbit.URL)
	if _, err := f.store.SetLimit(t.Context(), "t", 100, 0, "test"); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(500 * time.Millisecond)
	ids := f.enqueueAt("m", "t", 600, due, func(m *shard.Message) { m.MaxLateness = 2 * time.Second })
	dead := 0
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		dead = 0
		for _, id := range ids {
			if len(f.delivered(id)) > 0 {
				continue
			}
			info, err := f.prod.Inspect(t.Context(), id)
			if err != nil || info.State != shard.StateDead {
				return false
			}
			if !strings.Contains(info.Reason, "expired: claimed") {
				t.Fatalf("%s dead because %q", id, info.Reason)
			}
			dead++
		}
		return true
	}, func() string { return "not every message is delivered or dead yet" })
	got := f.receipts(ids)
	t.Logf("%d published, %d expired", len(got), dead)
	for _, x := range got {
		if x.Sub(due) > 2500*time.Millisecond {
			t.Errorf("a message published %s after due, past its 2 s maximum lateness", x.Sub(due))
			break
		}
	}
	if len(got) < 150 || len(got) > 260 || dead != len(ids)-len(got) {
		t.Errorf("%d published and %d expired of %d at 100/s with 2 s of lateness allowed", len(got), dead, len(ids))
	}
}
