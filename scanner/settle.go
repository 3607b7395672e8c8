package scanner

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/shard"
)

// sent is a published message waiting for the broker's confirm.
type sent struct {
	shard     int
	c         shard.Claimed
	confirm   *publisher.Confirm
	deadline  time.Time // publish + confirm must be done by then, else release
	published time.Time
	held      string     // the topic whose releaser let it go, "" when a claim took it
	span      trace.Span // its publish span; nil when tracing is off
}

// settle waits for confirms and settles each message: ack (batched) on
// success, dead-letter when returned, release otherwise. Several settle
// goroutines read the same queue, so one slow confirm does not hold up the
// others.
//
// One timer per settler, re-armed per message, bounds the wait (cheaper
// than a context with a deadline per message); a confirm already in is
// taken without arming it.
func (s *Scanner) settle(ctx context.Context, queue <-chan sent) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for m := range queue {
		var err error
		select {
		case <-m.confirm.Done():
			err = m.confirm.Err()
		default:
			timer.Reset(time.Until(m.deadline))
			select {
			case <-m.confirm.Done():
				err = m.confirm.Err()
			case <-timer.C:
				err = context.DeadlineExceeded
			case <-ctx.Done():
				err = ctx.Err()
			}
			timer.Stop()
		}
		switch {
		case err == nil:
			now := time.Now()
			s.d.Metrics.Published.Inc()
			s.d.Metrics.ConfirmTime.Observe(now.Sub(m.published).Seconds())
			lateBy := max(0, now.Sub(time.UnixMilli(m.c.DueMs)))
			late := lateBy.Seconds()
			if m.held == "" {
				observe(s.d.Metrics.Lateness, late, m.span)
			} else { // the lateness its topic's limit or pause chose: apart
				s.d.Metrics.FlowLateness.WithLabelValues(m.held).Observe(late)
				lateBy = -1
			}
			if m.c.Attempt > 1 {
				s.d.Metrics.Redelivered.Inc()
			}
			s.acks.add(m.shard, shard.Confirmed{Lease: m.c.Lease, Late: lateBy})
			endSpan(m.span, "", "", false)
		case errors.Is(err, publisher.ErrReturned):
			s.undeliverable(ctx, m.shard, &m.c, deadReason{ReasonReturned, err.Error(), true})
			endSpan(m.span, "refused", err.Error(), false)
		case errors.Is(err, publisher.ErrNacked):
			s.undeliverable(ctx, m.shard, &m.c, deadReason{ReasonNacked, err.Error(), true})
			endSpan(m.span, "refused", err.Error(), false)
		default:
			s.release(ctx, m.shard, &m.c, err)
			endSpan(m.span, "released for a retry", err.Error(), false)
		}
		s.windowOf(m.held).Release(1) // this message no longer counts against its window
	}
}

// ackBatcher collects the leases of confirmed messages and acks them per
// shard, all shards in one pipelined round trip, so that acking costs a
// fraction of a Redis call per message. A lease waits at most flushEvery
// (ackFlushEvery): long enough that a busy process acks several leases per
// shard and script call (with a 1 ms interval, 16 shards got about one
// lease per call and the acks cost Redis more CPU than the claims), short
// next to any lease.
// Losing a batch (the process dies, Redis fails) only means those messages
// are published again after their lease: at least once, never lost.
type ackBatcher struct {
	store      *shard.Store
	metrics    *Metrics
	warn       func(msg string, err error) // rate-limited warnings
	flushEvery time.Duration
	maxPending int

	mu      sync.Mutex
	pending map[int][]shard.Confirmed
	n       int
	started chan struct{} // signalled by the first lease of a batch
	full    chan struct{} // signalled when n reaches maxPending
	room    *sync.Cond    // waited on by add while n >= 4*maxPending
}

// The ack batcher's flush interval and batch size.
const (
	ackFlushEvery = 10 * time.Millisecond
	ackMaxPending = 1024
)

func newAckBatcher(store *shard.Store, metrics *Metrics, warn func(string, error)) *ackBatcher {
	a := &ackBatcher{store: store, metrics: metrics, warn: warn, flushEvery: ackFlushEvery, maxPending: ackMaxPending, pending: map[int][]shard.Confirmed{},
		started: make(chan struct{}, 1), full: make(chan struct{}, 1)}
	a.room = sync.NewCond(&a.mu)
	return a
}

func (a *ackBatcher) add(i int, l shard.Confirmed) {
	a.mu.Lock()
	for a.n >= 4*a.maxPending { // Redis is slower than the broker: hold the settlers back
		a.room.Wait()
	}
	a.pending[i] = append(a.pending[i], l)
	a.n++
	n := a.n
	a.mu.Unlock()
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	if n == 1 {
		signal(a.started)
	}
	if n >= a.maxPending {
		signal(a.full)
	}
}

// run flushes each batch flushEvery after its first lease (or when it is
// full) until ctx ends, then once more with flushCtx (bounded by the
// caller's shutdown deadline). An idle scanner has no batch, so no timer.
func (a *ackBatcher) run(ctx context.Context, flushCtx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.flush(flushCtx)
			return
		case <-a.started:
		case <-a.full:
		}
		t.Reset(a.flushEvery)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-a.full:
		}
		t.Stop()
		a.flush(flushCtx)
	}
}

func (a *ackBatcher) flush(ctx context.Context) {
	a.mu.Lock()
	if a.n == 0 {
		a.mu.Unlock()
		return
	}
	batch := a.pending
	n := a.n
	a.pending, a.n = make(map[int][]shard.Confirmed, len(batch)), 0
	a.room.Broadcast()
	a.mu.Unlock()
	acked, err := a.store.AckShards(ctx, batch)
	switch {
	case errors.Is(err, shard.ErrNotReplicated):
		a.warn("ack after confirm not yet on the replicas; the messages are delivered again only if the master fails over first", err)
	case err != nil:
		a.warn("ack after confirm; the messages will be delivered again", err)
	}
	a.metrics.LostLeases.Add(float64(n - acked))
}
