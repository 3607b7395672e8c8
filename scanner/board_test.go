package scanner

import (
	"context"
	"testing"
	"time"
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
	b := newDueBoard(local.now)
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

// A head falls due on the estimated Redis clock, to the microsecond.
func TestBoardWaitEndsAtDueTime(t *testing.T) {
	b := newDueBoard(time.Now)
	now := time.Now()
	b.observe(3, now.Add(30*time.Millisecond).UnixMilli(), now.UnixMilli(), now, now)
	start := time.Now()
	if i := b.wait(context.Background(), time.Second); i != 3 {
		t.Fatalf("wait = %d, want shard 3", i)
	}
	if el := time.Since(start); el < 25*time.Millisecond || el > 500*time.Millisecond {
		t.Fatalf("woke after %s for a head due in about 30 ms", el)
	}
}

// A claim reply that may predate a wake-up notice (the claim ran before the
// enqueue that announced the head) cannot make the board forget that head.
func TestBoardKeepsNoticeNewerThanClaim(t *testing.T) {
	local := &fakeClock{t: time.UnixMilli(2_000_000)}
	b := newDueBoard(local.now)
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
