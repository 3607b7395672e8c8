package scanner

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// dueBoard is one scanner process's view of when each shard next has work:
// the head due times seen in claim replies and wake-up notices. Idle
// goroutines sleep on it until the earliest known head falls due, and then
// exactly one of them (per process) visits that shard.
type dueBoard struct {
	mu      sync.Mutex
	heads   map[int]int64     // shard -> due ms (Redis clock) of its earliest message
	learned map[int]time.Time // shard -> when its head was last set (local clock)
	changed chan struct{}     // closed and replaced when an earlier head appears

	nextPatrol atomic.Int64 // unix ns before which no idle patrol starts

	// offsetUs estimates Redis time minus local time in microseconds, so
	// that sleeps end on the Redis clock that decides "due". Each claim
	// reply gives a sample: Redis read its clock (nowMs, truncated to the
	// millisecond) somewhere between sending and receiving, so the sample
	// is taken at the middle of both and of the millisecond, with an error
	// of at most half the round trip plus half a millisecond. The sample
	// with the shortest round trip of the last clockSampleTTL is kept:
	// taking the receive time instead (as a naive estimate would) puts the
	// Redis clock behind by the whole reply delay and the truncation, and
	// every wake-up that much late.
	offsetUs atomic.Int64
	bestRTT  time.Duration // round trip of the kept sample; guarded by mu
	bestAt   time.Time     // when it was taken; guarded by mu
	now      func() time.Time
}

// clockSampleTTL is how long a clock sample with a short round trip is
// preferred to newer ones with longer round trips.
const clockSampleTTL = 2 * time.Second

func newDueBoard(now func() time.Time) *dueBoard {
	return &dueBoard{heads: map[int]int64{}, learned: map[int]time.Time{}, changed: make(chan struct{}), now: now}
}

func (b *dueBoard) redisNowUs() int64 { return b.now().UnixMicro() + b.offsetUs.Load() }

// observe records a claim reply of shard i: its head (-1: empty) at Redis
// time nowMs, for a claim sent at sent and answered at recv.
//
// A head learned after the claim was sent (a wake-up notice, another
// claim's reply) may be newer than what this reply says: the claim may
// have run before the enqueue that announced it. Then the reply can only
// bring the head earlier, never forget it; forgetting it would leave the
// message to the idle patrol, seconds late.
func (b *dueBoard) observe(i int, headMs, nowMs int64, sent, recv time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rtt := recv.Sub(sent); rtt <= b.bestRTT || recv.Sub(b.bestAt) > clockSampleTTL {
		b.bestRTT, b.bestAt = rtt, recv
		b.offsetUs.Store(nowMs*1000 + 500 - sent.Add(rtt/2).UnixMicro())
	}
	old, ok := b.heads[i]
	if ok && b.learned[i].After(sent) { // the reply may predate what we know
		if headMs >= 0 && headMs < old {
			b.setLocked(i, headMs)
			b.broadcastLocked()
		}
		return
	}
	if headMs < 0 {
		b.forgetLocked(i)
		return
	}
	b.setLocked(i, headMs)
	if !ok || headMs < old {
		b.broadcastLocked()
	}
}

func (b *dueBoard) forgetLocked(i int) {
	delete(b.heads, i)
	delete(b.learned, i)
}

// setLocked records head due of shard i, learned now; the caller holds mu
// and broadcasts if the head came earlier.
func (b *dueBoard) setLocked(i int, due int64) {
	b.heads[i] = due
	b.learned[i] = b.now()
}

// notice records a wake-up notice: shard i has a new head due at dueMs.
func (b *dueBoard) notice(i int, dueMs int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.heads[i]; ok && old <= dueMs {
		return
	}
	b.setLocked(i, dueMs)
	b.broadcastLocked()
}

func (b *dueBoard) broadcastLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// takePatrol reports whether the caller may make this process's next idle
// patrol visit: at most one per interval.
func (b *dueBoard) takePatrol(interval time.Duration) bool {
	now := b.now().UnixNano()
	next := b.nextPatrol.Load()
	return now >= next && b.nextPatrol.CompareAndSwap(next, now+interval.Nanoseconds())
}

// takeDue returns a shard whose known head is due now, the earliest, after
// taking it off the board; -1 if none is.
func (b *dueBoard) takeDue() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, bestDue := b.earliestLocked()
	if best >= 0 && bestDue*1000 <= b.redisNowUs() {
		b.forgetLocked(best)
		return best
	}
	return -1
}

func (b *dueBoard) earliestLocked() (int, int64) {
	best, bestDue := -1, int64(math.MaxInt64)
	for i, d := range b.heads {
		if d < bestDue {
			best, bestDue = i, d
		}
	}
	return best, bestDue
}

// wait blocks until a known head is due, and returns its shard after
// taking it off the board (so no other goroutine of this process goes for
// it too), or returns -1 after maxSleep or when ctx ends.
func (b *dueBoard) wait(ctx context.Context, maxSleep time.Duration) int {
	deadline := b.now().Add(maxSleep)
	timer := time.NewTimer(maxSleep)
	defer timer.Stop()
	for {
		b.mu.Lock()
		best, bestDue := b.earliestLocked()
		nowUs := b.redisNowUs()
		if best >= 0 && bestDue*1000 <= nowUs {
			b.forgetLocked(best)
			b.mu.Unlock()
			return best
		}
		changed := b.changed
		b.mu.Unlock()

		wake := time.Until(deadline)
		if wake <= 0 {
			return -1
		}
		if best >= 0 {
			wake = min(wake, time.Duration(bestDue*1000-nowUs)*time.Microsecond)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wake)
		select {
		case <-ctx.Done():
			return -1
		case <-changed:
		case <-timer.C:
		}
	}
}
