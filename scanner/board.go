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
	heads   map[int]int64 // shard -> due ms (Redis clock) of its earliest message
	changed chan struct{} // closed and replaced when an earlier head appears

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
	return &dueBoard{heads: map[int]int64{}, changed: make(chan struct{}), now: now}
}

func (b *dueBoard) redisNowUs() int64 { return b.now().UnixMicro() + b.offsetUs.Load() }

// observe records a claim reply of shard i: its head (-1: empty) at Redis
// time nowMs, for a claim sent at sent and answered at recv.
func (b *dueBoard) observe(i int, headMs, nowMs int64, sent, recv time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rtt := recv.Sub(sent); rtt <= b.bestRTT || recv.Sub(b.bestAt) > clockSampleTTL {
		b.bestRTT, b.bestAt = rtt, recv
		b.offsetUs.Store(nowMs*1000 + 500 - sent.Add(rtt/2).UnixMicro())
	}
	if headMs < 0 {
		delete(b.heads, i)
		return
	}
	old, ok := b.heads[i]
	b.heads[i] = headMs
	if !ok || headMs < old {
		b.broadcastLocked()
	}
}

// notice records a wake-up notice: shard i has a new head due at dueMs.
func (b *dueBoard) notice(i int, dueMs int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.heads[i]; ok && old <= dueMs {
		return
	}
	b.heads[i] = dueMs
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
		delete(b.heads, best)
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
			delete(b.heads, best)
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
