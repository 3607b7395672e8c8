package scanner

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// dueBoard is one scanner process's view of when each shard next has work:
// the head due times seen in claim replies and wake-up notices.
//
// Its dispatcher goroutine (run) hands work to idle goroutines one at a
// time, through an unbuffered channel: when the earliest known head falls
// due, exactly one idle goroutine receives that shard; every
// PatrolInterval, one receives patrolShard (visit a shard from the
// cursor). Idle goroutines do not each sleep until the next head: with 128
// of them, every head that fell due woke all 128 to let one take it, and
// at a quarter of the benchmark's load that herd cost more CPU than the
// dispatch itself.
type dueBoard struct {
	mu       sync.Mutex
	heads    map[int]head  // shard -> its earliest message, as last learned
	order    *headHeap     // the shards of heads, earliest due first
	sets     uint64        // head updates so far; numbers them
	seen     map[int]bool  // shards this process has had a claim reply from
	seenUpTo int           // every shard below it is in seen
	changed  chan struct{} // closed and replaced when the dispatcher must look again
	offering int           // what the dispatcher offers now (noOffer: nothing)

	ready chan int      // the dispatcher's hand-offs to idle goroutines
	round time.Duration // least time between the starts of two hand-out rounds

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

// head is what the board knows of a shard's earliest message.
type head struct {
	due     int64     // ms, Redis clock
	learned time.Time // local clock
	set     uint64    // which update of the board set it
}

// What the dispatcher hands out besides shard indexes.
const (
	patrolShard = -1 // visit the shard the cursor gives
	noOffer     = -2
)

// clockSampleTTL is how long a clock sample with a short round trip is
// preferred to newer ones with longer round trips.
const clockSampleTTL = 2 * time.Second

func newDueBoard(now func() time.Time, round time.Duration) *dueBoard {
	return &dueBoard{heads: map[int]head{}, order: newHeadHeap(), seen: map[int]bool{},
		changed: make(chan struct{}), offering: noOffer, ready: make(chan int), round: round, now: now}
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
	b.seen[i] = true
	h, ok := b.heads[i]
	old := h.due
	if ok && h.learned.After(sent) { // the reply may predate what we know
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
	b.order.remove(i)
}

// setLocked records head due of shard i, learned now; the caller holds mu
// and broadcasts if the head came earlier.
func (b *dueBoard) setLocked(i int, due int64) {
	b.sets++
	b.heads[i] = head{due: due, learned: b.now(), set: b.sets}
	b.order.set(i, due)
}

// notice records a wake-up notice: shard i has a new head due at dueMs.
func (b *dueBoard) notice(i int, dueMs int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.heads[i]; ok && h.due <= dueMs {
		return
	}
	b.setLocked(i, dueMs)
	b.broadcastLocked()
}

func (b *dueBoard) broadcastLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// takeDue returns a shard whose known head is due now, the earliest, after
// taking it off the board; -1 if none is.
func (b *dueBoard) takeDue() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, bestDue := b.earliestLocked()
	if best >= 0 && bestDue*1000 <= b.redisNowUs() {
		b.forgetLocked(best)
		if best == b.offering {
			b.broadcastLocked() // the dispatcher's offer is taken
		}
		return best
	}
	return -1
}

// knowsAll reports whether this process has had a claim reply from every
// shard below hw (hw > 0). From then on, with the wake-up notices, the
// board knows when each shard next has work.
func (b *dueBoard) knowsAll(hw int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for hw > b.seenUpTo && b.seen[b.seenUpTo] {
		b.seenUpTo++
	}
	return hw > 0 && hw <= b.seenUpTo
}

func (b *dueBoard) earliestLocked() (int, int64) { return b.order.earliest() }

// run is the dispatcher: until ctx ends, it offers the earliest due
// shard, or a patrol every patrolEvery, to whichever idle goroutine
// receives from ready first, and otherwise sleeps until the earliest known
// head falls due, the next patrol, or a change on the board. A shard
// handed out leaves the board: the goroutine's claim reply brings back its
// new head. The Scanner starts it before the claim loops and waits for it
// after they have stopped; it ends with the claim context.
//
// Hand-outs come in rounds at most one per round (b.round) apart: a round
// hands out every shard that is due, and ends when none is. Heads that
// fall due between rounds wait for the next, so their claims share one
// pipelined round trip and their publishes share socket writes, which at
// light load costs Redis, RabbitMQ and the consumers far less per message
// than one claim and one publish at a time, for at most one round of
// lateness.
func (b *dueBoard) run(ctx context.Context, patrolEvery time.Duration) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	nextPatrol := b.now().Add(patrolEvery)
	inRound, nextRound := false, time.Time{}
	for {
		b.mu.Lock()
		best, bestDue := b.earliestLocked()
		nowUs := b.redisNowUs()
		now := b.now()
		offer, wake := noOffer, time.Duration(math.MaxInt64)
		switch d := time.Duration(bestDue*1000-nowUs) * time.Microsecond; {
		case best < 0 || d > 0:
			inRound = false
			if best >= 0 {
				wake = d
			}
		case inRound:
			offer = best
		case now.Before(nextRound):
			wake = nextRound.Sub(now) // due; the next round starts then
		default:
			inRound, nextRound = true, now.Add(b.round)
			offer = best
		}
		if offer == noOffer {
			if d := nextPatrol.Sub(now); d <= 0 {
				offer = patrolShard
			} else {
				wake = min(wake, d)
			}
		}
		b.offering = offer
		offered := b.heads[offer].set
		changed := b.changed
		b.mu.Unlock()

		var send chan<- int
		if offer != noOffer {
			send = b.ready
		}
		timer.Reset(wake)
		select {
		case send <- offer:
			b.mu.Lock()
			// The goroutine that took the shard may already have
			// claimed and reported a newer head: keep that one.
			if offer >= 0 && b.heads[offer].set == offered {
				b.forgetLocked(offer)
			} else if offer < 0 {
				nextPatrol = b.now().Add(patrolEvery)
			}
			b.offering = noOffer
			b.mu.Unlock()
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		timer.Stop()
	}
}
