package scanner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// fakeClock is a settable local clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// The board estimates the Redis clock from the claim reply with the
// shortest round trip, at the middle of the round trip and of the reported
// millisecond, so it neither wakes late by the reply delay nor trusts a
// slow sample over a fast one.
func TestBoardClockUsesFastestRoundTrip(t *testing.T) {
	local := &fakeClock{t: time.UnixMilli(1_000_000)}
	b := newDueBoard(local.now, 0)
	// Redis runs 5 s ahead. A slow reply (20 ms round trip) first: Redis
	// read its clock somewhere in those 20 ms.
	sent := local.t
	local.t = sent.Add(20 * time.Millisecond)
	redisAt := sent.Add(5*time.Second + 7*time.Millisecond) // when Redis actually read TIME
	b.observe(0, -1, redisAt.UnixMilli(), sent, local.t)
	if err := offBy(b, local, 5*time.Second); err > 11*time.Millisecond {
		t.Fatalf("slow sample: estimate off by %s, want within half the round trip", err)
	}
	// A fast reply (200 µs) replaces it.
	sent = local.t
	local.t = sent.Add(200 * time.Microsecond)
	b.observe(0, -1, sent.Add(5*time.Second+100*time.Microsecond).UnixMilli(), sent, local.t)
	if err := offBy(b, local, 5*time.Second); err > 700*time.Microsecond {
		t.Fatalf("fast sample: estimate off by %s, want < 0.7ms", err)
	}
	// A later slow one does not replace it while it is fresh ...
	sent = local.t
	local.t = sent.Add(30 * time.Millisecond)
	b.observe(0, -1, sent.Add(5*time.Second).UnixMilli(), sent, local.t)
	if err := offBy(b, local, 5*time.Second); err > 700*time.Microsecond {
		t.Fatalf("a slow sample replaced a fresh fast one: off by %s", err)
	}
	// ... but does once the fast one is older than clockSampleTTL, so a
	// clock step is followed.
	local.t = local.t.Add(clockSampleTTL + time.Second)
	sent = local.t
	local.t = sent.Add(2 * time.Millisecond)
	b.observe(0, -1, sent.Add(9*time.Second+time.Millisecond).UnixMilli(), sent, local.t)
	if err := offBy(b, local, 9*time.Second); err > 2*time.Millisecond {
		t.Fatalf("stale fast sample kept: off by %s", err)
	}
}

func offBy(b *dueBoard, local *fakeClock, ahead time.Duration) time.Duration {
	est := time.Duration(b.redisNowUs()-local.t.UnixMicro()) * time.Microsecond
	if d := est - ahead; d >= 0 {
		return d
	}
	return ahead - est
}

// startDispatcher runs b's dispatcher until the test ends.
func startDispatcher(t *testing.T, b *dueBoard, patrol time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx, patrol) }()
	t.Cleanup(func() { cancel(); <-done })
}

// receive waits up to d for the dispatcher to hand out a shard.
func receive(b *dueBoard, d time.Duration) (int, bool) {
	select {
	case i := <-b.ready:
		return i, true
	case <-time.After(d):
		return 0, false
	}
}

// waitOffering waits until the dispatcher offers offer.
func waitOffering(t *testing.T, b *dueBoard, offer int) {
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.offering == offer
	}, func() string { return fmt.Sprintf("the dispatcher never offered %d", offer) })
}

// offeredBoard returns a board whose dispatcher offers shard i, due now.
func offeredBoard(t *testing.T, i int) (*dueBoard, time.Time) {
	b := newDueBoard(time.Now, 0)
	startDispatcher(t, b, time.Hour)
	now := time.Now()
	b.observe(i, now.UnixMilli()-1, now.UnixMilli(), now, now)
	waitOffering(t, b, i)
	return b, now
}

// waitNoOffer waits until the dispatcher offers nothing; then no goroutine
// can receive from ready.
func waitNoOffer(t *testing.T, b *dueBoard) {
	waitOffering(t, b, noOffer)
	select {
	case i := <-b.ready:
		t.Fatalf("the dispatcher handed out %d with nothing due", i)
	default:
	}
}

// A head falls due on the estimated Redis clock, to the microsecond, and
// is handed to one idle goroutine.
func TestBoardHandsOutHeadAtDueTime(t *testing.T) {
	b := newDueBoard(time.Now, 0)
	startDispatcher(t, b, time.Hour)
	now := time.Now()
	b.observe(3, now.Add(30*time.Millisecond).UnixMilli(), now.UnixMilli(), now, now)
	start := time.Now()
	i, ok := receive(b, 5*time.Second)
	if !ok || i != 3 {
		t.Fatalf("received %d, %v; want shard 3", i, ok)
	}
	if el := time.Since(start); el < 25*time.Millisecond || el > 500*time.Millisecond {
		t.Fatalf("handed out after %s for a head due in about 30 ms", el)
	}
}

// Each due head goes to exactly one goroutine, earliest first, and leaves
// the board; with nothing due, nothing is handed out.
func TestBoardHandsOutEachHeadOnce(t *testing.T) {
	b := newDueBoard(time.Now, 0)
	now := time.Now()
	b.observe(7, now.Add(-20*time.Millisecond).UnixMilli(), now.UnixMilli(), now, now)
	b.observe(2, now.Add(-10*time.Millisecond).UnixMilli(), now.UnixMilli(), now, now)
	b.observe(5, now.Add(time.Hour).UnixMilli(), now.UnixMilli(), now, now)
	startDispatcher(t, b, time.Hour)
	for _, want := range []int{7, 2} {
		if i, ok := receive(b, 5*time.Second); !ok || i != want {
			t.Fatalf("received %d, %v; want shard %d", i, ok, want)
		}
	}
	waitNoOffer(t, b)
	if _, ok := b.heads[5]; !ok {
		t.Fatal("a head not yet due left the board")
	}
}

// A goroutine that takes the offered shard itself (takeDue, while busy)
// withdraws the dispatcher's offer, so no idle goroutine visits it again.
func TestBoardTakeDueWithdrawsOffer(t *testing.T) {
	b, _ := offeredBoard(t, 4)
	if i := b.takeDue(); i != 4 {
		t.Fatalf("takeDue = %d, want 4", i)
	}
	waitNoOffer(t, b)
}

// The goroutine that receives a shard may claim it and report its new
// head before the dispatcher, after the hand-off, takes the shard off the
// board: the new head stays.
func TestBoardHandOffKeepsNewerHead(t *testing.T) {
	b, now := offeredBoard(t, 3)
	b.mu.Lock() // the dispatcher cannot take it off the board before the new head is in
	if i, ok := receive(b, 5*time.Second); !ok || i != 3 {
		b.mu.Unlock()
		t.Fatalf("received %d, %v; want shard 3", i, ok)
	}
	later := now.Add(time.Hour).UnixMilli()
	b.setLocked(3, later) // what the claim reply reports
	b.mu.Unlock()
	waitNoOffer(t, b)
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.heads[3]; !ok || h.due != later {
		t.Fatalf("head of shard 3 after the hand-off: %+v, %v; want due %d", h, ok, later)
	}
}

// A head that falls due after a round of hand-outs has ended waits for
// the next round, one round after the start of the last.
func TestBoardHandsOutInRounds(t *testing.T) {
	const round = 80 * time.Millisecond
	b := newDueBoard(time.Now, round)
	startDispatcher(t, b, time.Hour)
	now := time.Now()
	b.observe(1, now.UnixMilli()-1, now.UnixMilli(), now, now)
	if i, ok := receive(b, 5*time.Second); !ok || i != 1 {
		t.Fatalf("received %d, %v; want shard 1", i, ok)
	}
	first := time.Now()
	waitNoOffer(t, b) // the round has ended: nothing was due
	now = time.Now()
	b.observe(2, now.UnixMilli()-1, now.UnixMilli(), now, now)
	if i, ok := receive(b, 5*time.Second); !ok || i != 2 {
		t.Fatalf("received %d, %v; want shard 2", i, ok)
	}
	if gap := time.Since(first); gap < round-5*time.Millisecond {
		t.Fatalf("second round %s after the first, want at least %s", gap, round)
	}
}

// With nothing due, one goroutine at a time is sent on patrol, once per
// interval.
func TestBoardPatrolsEveryInterval(t *testing.T) {
	b := newDueBoard(time.Now, 0)
	const every = 40 * time.Millisecond
	start := time.Now()
	startDispatcher(t, b, every)
	var at []time.Duration
	for range 3 {
		i, ok := receive(b, 5*time.Second)
		if !ok || i != patrolShard {
			t.Fatalf("received %d, %v; want a patrol", i, ok)
		}
		at = append(at, time.Since(start))
	}
	for j, d := range at {
		if min := time.Duration(j+1) * every; d < min {
			t.Fatalf("patrol %d after %s, before %s: patrols %v", j, d, min, at)
		}
	}
}

// knowsAll: every shard below the high-water mark has replied once.
func TestBoardKnowsAllShards(t *testing.T) {
	b := newDueBoard(time.Now, 0)
	now := time.Now()
	if b.knowsAll(0) || b.knowsAll(1) {
		t.Fatal("knows all before any reply")
	}
	for _, i := range []int{2, 0, 1} {
		b.observe(i, -1, now.UnixMilli(), now, now)
	}
	if !b.knowsAll(3) || b.knowsAll(4) || b.knowsAll(0) {
		t.Fatalf("knowsAll(3)=%v knowsAll(4)=%v knowsAll(0)=%v; want true false false", b.knowsAll(3), b.knowsAll(4), b.knowsAll(0))
	}
}

// A claim reply that may predate a wake-up notice (the claim ran before the
// enqueue that announced the head) cannot make the board forget that head.
func TestBoardKeepsNoticeNewerThanClaim(t *testing.T) {
	local := &fakeClock{t: time.UnixMilli(2_000_000)}
	b := newDueBoard(local.now, 0)
	sent := local.t
	local.t = local.t.Add(time.Millisecond)
	b.notice(5, local.t.UnixMilli()+200) // arrives while the claim is under way
	local.t = local.t.Add(time.Millisecond)
	b.observe(5, -1, sent.UnixMilli(), sent, local.t) // "shard 5 is empty", from before the enqueue
	if _, ok := b.heads[5]; !ok {
		t.Fatal("a claim reply older than the notice made the board forget the head")
	}
	// A reply to a claim sent after the notice is believed.
	sent = local.t.Add(time.Millisecond)
	local.t = sent.Add(time.Millisecond)
	b.observe(5, -1, sent.UnixMilli(), sent, local.t)
	if _, ok := b.heads[5]; ok {
		t.Fatal("a newer claim reply did not clear the head")
	}
}
