package shard_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"200": 200, "0.5": 0.5, "200/s": 200, "30/m": 0.5, "360/h": 0.1, "none": 0, "0": 0} {
		if got, err := shard.ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-5", "fast", "", "NaN", "Inf", "2000001", "1/d", "0.00001"} {
		_, err := shard.ParseRate(in)
		var ie *shard.InvalidError
		if !errors.As(err, &ie) || ie.Field != "rate" {
			t.Errorf("ParseRate(%q): %v, want an invalid rate", in, err)
		}
	}
}

// TestFlowWindow: the window lets the rate through when the burst allows
// it, between its bounds.
func TestFlowWindow(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
		want  time.Duration
	}{
		{2000, 0, shard.MinFlowWindow}, {2000, 50, shard.MinFlowWindow}, {2000, 200, 1100 * time.Millisecond},
		{2000, 2000, shard.MaxFlowWindow}, {0.5, 0, shard.MinFlowWindow}, {0, 10, shard.MinFlowWindow},
	} {
		if got := (shard.Flow{Rate: c.rate, Burst: c.burst}).Window(); got != c.want {
			t.Errorf("rate %v burst %d: window %s, want %s", c.rate, c.burst, got, c.want)
		}
	}
}

// TestFlowBadInput: bad rates, bursts, topics and pauses are refused with
// the field named, and change nothing; an unreadable stored value is
// named with its key and left out, the others still read.
func TestFlowBadInput(t *testing.T) {
	b := setup(t, 1)
	for _, err := range []error{
		func() error { _, err := b.store.SetLimit(b.ctx, "sms", -1, 0, "test"); return err }(),
		func() error { _, err := b.store.SetLimit(b.ctx, "sms", 10, -1, "test"); return err }(),
		func() error { _, err := b.store.SetLimit(b.ctx, " sms", 10, 0, "test"); return err }(),
		func() error { _, err := b.store.Pause(b.ctx, "sms", time.Now().Add(-time.Second), "test"); return err }(),
	} {
		if !errors.Is(err, shard.ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	}
	if _, err := b.store.Pause(b.ctx, "sms", time.Now().Add(-time.Second), "test"); !errors.Is(err, shard.ErrPauseOver) {
		t.Errorf("a pause ending in the past: %v", err)
	}
	if flows, err := b.store.Flows(b.ctx); len(flows) != 0 || err != nil {
		t.Fatalf("flows after bad input: %+v, %v", flows, err)
	}
	if _, err := b.store.SetLimit(b.ctx, "good", 5, 1, "test"); err != nil {
		t.Fatal(err)
	}
	b.rdb.HSet(b.ctx, shard.FlowKey(b.store.Namespace()), "broken", "fast 1 0 0 x")
	flows, err := b.store.Flows(b.ctx)
	if len(flows) != 1 || flows[0].Topic != "good" || err == nil ||
		!containsAll(err.Error(), shard.FlowKey(b.store.Namespace()), `topic "broken"`, "rate") {
		t.Errorf("flows with one broken value: %+v, %v", flows, err)
	}
}

// TestNoHeadOfLineBlocking: a shard whose earliest due entries belong to
// a limited topic still hands out the others at once; the limited ones
// wait in their held set, in due order, for their grants, and cancel,
// inspect and reschedule find them there. On a single Redis and on a
// 3-master cluster (every script in one slot).
func TestNoHeadOfLineBlocking(t *testing.T) {
	b := setup(t, 1)
	exerciseHolds(t, b.rdb, b.store)
	st, err := shard.NewStore(b.rdb, b.store.Namespace()+"-pre")
	if err != nil {
		t.Fatal(err)
	}
	exercisePreHold(t, st)
}

func TestNoHeadOfLineBlockingOnCluster(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := shard.NewStore(rdb, "flow")
	if err != nil {
		t.Fatal(err)
	}
	exerciseHolds(t, rdb, st)
	if st, err = shard.NewStore(rdb, "flow-pre"); err != nil {
		t.Fatal(err)
	}
	exercisePreHold(t, st)
}

// exercisePreHold: a limited backlog due shortly is set apart before it
// falls due, a page at a time after the shard's cursor; the other topic
// stays, and when it falls due the claims take it at once; what comes in
// behind the cursor is left to the claims; a message set apart early
// reads as scheduled and is not yet counted as held back.
func exercisePreHold(t *testing.T, st *shard.Store) {
	ctx := t.Context()
	prod := shard.NewProducer(st, fixed(1), shard.ProducerOptions{})
	soon := time.Now().Add(1800 * time.Millisecond).Truncate(time.Millisecond)
	var msgs []shard.Message
	for j := range 600 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("p-%03d", j), Topic: "p", At: soon})
	}
	for j := range 5 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("q-%d", j), Topic: "q", At: soon})
	}
	for j := range 3 { // beyond the lookahead
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("p-late-%d", j), Topic: "p", At: soon.Add(time.Minute)})
	}
	if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetLimit(ctx, "p", 50, 0, "test"); err != nil {
		t.Fatal(err)
	}
	read, moved, calls := 0, 0, 0
	for more := true; more; calls++ {
		res, errs := st.PreHold(ctx, []int{0}, []string{"p"}, 2*time.Second, 64)
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		read, moved, more = read+res[0].Read, moved+res[0].Moved, res[0].More
	}
	if time.Now().After(soon) {
		t.Fatal("setting apart ahead took until the messages were due")
	}
	if read != 605 || moved != 600 || calls != 10 {
		t.Errorf("set apart ahead: %d calls read %d and moved %d, want 10 calls, 605 and 600", calls, read, moved)
	}
	if info, err := st.Inspect(ctx, 0, "p-010"); err != nil || info.State != shard.StateScheduled || !info.At.Equal(soon) {
		t.Errorf("inspect a message set apart ahead: %+v, %v; want scheduled at %s", info, err, soon)
	}
	if fs, err := st.FlowStatuses(ctx, 1); err != nil || len(fs) != 1 || fs[0].Held != 0 {
		t.Errorf("flow status before anything is due: %+v, %v; want nothing held back", fs, err)
	}
	// Behind the cursor (it stands at q-4): left to the claims.
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "p-new", Topic: "p", At: soon}); err != nil {
		t.Fatal(err)
	}
	if res, errs := st.PreHold(ctx, []int{0}, []string{"p"}, 2*time.Second, 64); errs[0] != nil || res[0].Read != 0 {
		t.Errorf("set apart ahead again: %+v, %v; want nothing read", res, errs[0])
	}
	shardtest.WaitFor(t, 10*time.Second, func() bool { return time.Now().After(soon.Add(10 * time.Millisecond)) },
		func() string { return "the clock did not pass the due time" })
	var got []string
	held := 0
	for claims := 0; claims < 3 && len(got) < 5; claims++ {
		res, errs := st.ClaimHolding(ctx, []int{0}, 5, time.Minute, []string{"p"})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		held += res[0].Held
		for _, m := range res[0].Msgs {
			got = append(got, m.ID)
		}
	}
	if fmt.Sprint(got) != "[q-0 q-1 q-2 q-3 q-4]" || held != 1 {
		t.Errorf("claims at the due time got %v and set %d apart, want q-0..q-4 and p-new alone", got, held)
	}
	hc, err := st.ClaimHeld(ctx, 0, "p", 10, time.Minute)
	if err != nil || len(hc.Msgs) != 10 || hc.Msgs[0].ID != "p-000" || hc.Left != 591 {
		t.Errorf("release after the due time: %+v, %v; want p-000.. (10), 591 left (p-new among them; the 3 due later are not set apart)", hc, err)
	}
}

func exerciseHolds(t *testing.T, rdb redis.UniversalClient, st *shard.Store) {
	ctx := t.Context()
	prod := shard.NewProducer(st, fixed(1), shard.ProducerOptions{})
	past := time.Now().Add(-time.Minute)
	var msgs []shard.Message
	for j := range 300 { // the limited topic's 300 come first in due order
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("a%03d", j), Topic: "a", At: past.Add(time.Duration(j) * time.Millisecond)})
	}
	for j := range 5 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("b%d", j), Topic: "b", At: past.Add(time.Second)})
	}
	if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetLimit(ctx, "a", 50, 0, "test"); err != nil {
		t.Fatal(err)
	}
	var got []string
	held, claims := 0, 0
	for len(got) < 5 && claims < 10 { // a claim sets at most 128 apart: 3 claims reach the first b
		claims++
		res, errs := st.ClaimHolding(ctx, []int{0}, 1, time.Minute, []string{"a"})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		held += res[0].Held
		for _, m := range res[0].Msgs {
			got = append(got, m.ID)
		}
	}
	if fmt.Sprint(got) != "[b0 b1 b2 b3 b4]" || held != 300 || claims != 7 {
		t.Fatalf("%d claims behind 300 limited entries got %v and held %d, want 7 claims, b0..b4 and 300", claims, got, held)
	}
	if info, err := st.Inspect(ctx, 0, "a007"); err != nil || info.State != shard.StateHeld {
		t.Errorf("inspect a held message: %+v, %v", info, err)
	}
	if err := st.Cancel(ctx, 0, "a001"); err != nil {
		t.Errorf("cancel a held message: %v", err)
	}
	if _, err := prod.Reschedule(ctx, "a002", time.Now().Add(time.Hour)); err != nil {
		t.Errorf("reschedule a held message: %v", err)
	}
	hc, err := st.ClaimHeld(ctx, 0, "a", 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(hc.Msgs) != 3 || hc.Msgs[0].ID != "a000" || hc.Msgs[1].ID != "a003" || hc.Left != 295 {
		t.Errorf("held claim: %+v, want a000 a003 a004 with 295 left", hc)
	}
	if hc.Msgs[0].DueMs != past.UnixMilli() {
		t.Errorf("held claim of a000 says due %d, want %d", hc.Msgs[0].DueMs, past.UnixMilli())
	}
	flows, err := st.FlowStatuses(ctx, 1)
	if err != nil || len(flows) != 1 || flows[0].Held != 295 || flows[0].HeldFor() < 50*time.Second {
		t.Errorf("flow status: %+v, %v", flows, err)
	}
	// Bulk jobs select held messages too: the dry run counts them, a
	// cancel by prefix removes them, a reschedule by due window moves them
	// back to the due set.
	if n, err := st.CountMatching(ctx, 1, shard.BulkFilter{Prefix: "a1"}); err != nil || n != 100 {
		t.Errorf("dry run of prefix a1 over held messages: %d, %v; want 100", n, err)
	}
	if p, err := st.BulkCancel(ctx, 1, shard.BulkFilter{Prefix: "a1"}, 100, nil); err != nil || p.Done != 100 {
		t.Errorf("bulk cancel of prefix a1: %+v, %v; want 100", p, err)
	}
	if p, err := st.BulkReschedule(ctx, 1, shard.BulkFilter{Topic: "a", To: past.Add(150 * time.Millisecond)}, time.Hour, time.Time{}, 0, nil); err != nil || p.Done != 95 {
		t.Errorf("bulk reschedule of topic a due by +150 ms: %+v, %v; want a005..a099, 95", p, err)
	}
	if info, err := st.Inspect(ctx, 0, "a050"); err != nil || info.State != shard.StateScheduled {
		t.Errorf("a050 after the bulk reschedule: %+v, %v", info, err)
	}
	if info, err := st.Inspect(ctx, 0, "a150"); err != nil || info.State != shard.StateUnknown {
		t.Errorf("a150 after the bulk cancel: %+v, %v", info, err)
	}
	if flows, err = st.FlowStatuses(ctx, 1); err != nil || len(flows) != 1 || flows[0].Held != 100 {
		t.Errorf("flow status after the bulk jobs: %+v, %v; want a200..a299 held", flows, err)
	}

	// The bucket: four callers at once never take more than rate + burst
	// in any window, and together take the rate.
	f := flows[0].Flow
	var mu sync.Mutex
	var grants []shard.Grant
	var wg sync.WaitGroup
	end := time.Now().Add(2500 * time.Millisecond)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(end) {
				g, err := st.TakeGrant(ctx, f, 10)
				if err != nil {
					t.Error(err)
					return
				}
				if g.N > 0 {
					mu.Lock()
					grants = append(grants, g)
					mu.Unlock()
				} else {
					time.Sleep(g.Wait)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, g := range grants {
		total += g.N
		in := 0
		for _, h := range grants {
			if h.AtMs <= g.AtMs && h.AtMs > g.AtMs-shard.MinFlowWindow.Milliseconds() {
				in += h.N
			}
		}
		if in > 50 {
			t.Fatalf("%d granted in the window ending at %d, want at most 50", in, g.AtMs)
		}
	}
	// 119 at the pace (50/s over a 1.05 s window, from an empty bucket);
	// fewer when the callers' sleeps overrun on a loaded box (98 seen).
	if total < 80 || total > 130 {
		t.Errorf("%d granted in 2.5 s at 50/s", total)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
