package scanner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/backoff"
)

// sent is a published message waiting for the broker's confirm.
type sent struct {
	shard     int
	c         shard.Claimed
	deadline  time.Time // publish + confirm must be done by then, else release
	published time.Time
	from      origin     // what let it go: a claim, or a releaser
	scope     string     // the scope it belongs to (Deps.Scopes), "" for none
	span      trace.Span // its publish span; nil when tracing is off
	// settled is set once, by whichever comes first: its confirm, or the
	// confirm watch when the deadline passed (or the scanner abandons
	// its work). The other one then leaves it alone.
	settled atomic.Bool
	err     error // why it failed, for the failure settlers
}

// Settling a message, the design: the publisher calls back on the
// goroutine that reads its channel's confirms (PublishNotify), and the
// usual outcome, a confirm, is settled right there: metrics, the lease
// to the ack batcher, its place in the window given back. No goroutine
// waits per message, and a confirm is not handed from goroutine to
// goroutine on its way to the ack (a settler per message cost two
// hand-offs and a timer each). What needs Redis at once (a refusal to
// dead-letter, a failure to release) goes to the failure settlers
// (settleFailed), since a Redis call on the publisher's goroutine would
// hold up every confirm of its channel.
//
// The confirm watch (watchConfirms) bounds the wait instead of a timer per
// message: every watchEvery it takes each message still unconfirmed past
// its deadline and releases it for a retry, as the settler's timer did;
// a confirm that arrives after that finds it settled and is ignored (the
// message is published again: at least once).
//
// What it saves, against settler goroutines (bin/delayq-bench -only ab
// -before <that build> -batches 8 -rounds 5 -scanners 1,2,3 -limit 6000
// on the two-core benchmark VM, the builds in turn): saturated dispatch at
// k = 8 6 % more messages a second for 5 % less CPU a message (medians of
// five rounds); at a steady 3,000 msg/s the p99 within the host's noise
// (12.1 / 11.7, 17.2 / 19.2 and 31.9 / 26.1 ms with 1, 2 and 3 scanners,
// rounds of one build spreading 2x). What it costs: a message's
// settlement runs on its channel's confirm goroutine, so a slow ack
// batcher (Redis behind) holds up that channel's confirms rather than
// queueing them; and a publish past its deadline is found up to
// watchEvery late, far inside its lease.

// confirmWatch is the set of published messages not yet known settled.
type confirmWatch struct {
	mu      sync.Mutex
	waiting []*sent      // published; the settled ones are dropped at each tick
	open    atomic.Int64 // published and not yet settled (nor handed to a failure settler)
}

// watchEvery is how often the confirm watch looks for messages past their
// deadline: a tenth of the publish timeout, within [10 ms, 100 ms].
func (s *Scanner) watchEvery() time.Duration {
	return min(max(s.cfg.PublishTimeout/10, 10*time.Millisecond), 100*time.Millisecond)
}

// publish sends m (the message of claim c, taken from shard i) and hands its
// outcome to onConfirm. It reports the publisher's error, in which case
// nothing was published and the caller settles c.
//
// The watch sees the message only once the publish is out: a publish
// that waits (for a connection, or while the broker blocks publishers)
// ends at ctx's deadline, the message's own, and its caller settles it;
// were the watch to take it meanwhile, both would.
func (s *Scanner) publish(ctx context.Context, i int, c *shard.Claimed, m publisher.Message, deadline time.Time, from origin, scope string, span trace.Span) error {
	x := &sent{shard: i, c: *c, deadline: deadline, published: time.Now(), from: from, scope: scope, span: span}
	s.watch.open.Add(1) // before the publish: its confirm may come before the append below
	if err := s.d.Publisher.PublishNotify(ctx, m, func(err error) { s.onConfirm(x, err) }); err != nil {
		s.watch.open.Add(-1)
		return err
	}
	s.watch.mu.Lock()
	s.watch.waiting = append(s.watch.waiting, x) // settled already, maybe: dropped at the next tick
	s.watch.mu.Unlock()
	return nil
}

// onConfirm settles m with its publish's outcome, on the publisher's
// goroutine: a confirm here (acks.add waits only while Redis is behind
// the broker by 4 flushes: backpressure on the confirms, as intended),
// anything else by the failure settlers.
func (s *Scanner) onConfirm(m *sent, err error) {
	if !m.settled.CompareAndSwap(false, true) {
		return // the watch released it already
	}
	if err != nil {
		m.err = err
		s.failed <- m
		s.watch.open.Add(-1)
		return
	}
	if s.d.AtStep != nil {
		s.d.AtStep(StepConfirmed)
	}
	now := time.Now()
	s.d.Metrics.Published.Inc()
	s.d.Metrics.ConfirmTime.Observe(now.Sub(m.published).Seconds())
	lateBy := max(0, now.Sub(time.UnixMilli(m.c.DueMs)))
	late := lateBy.Seconds()
	switch {
	case m.from.topic != "": // the lateness its topic's limit or pause chose: apart
		s.d.Metrics.FlowLateness.WithLabelValues(m.from.topic).Observe(late)
	case m.from.class != "": // released from its class's backlog
		s.d.Metrics.ClassLateness.WithLabelValues(m.from.class).Observe(late)
	}
	if m.from.apart {
		lateBy = -1
	} else {
		observe(s.d.Metrics.Lateness, late, m.span)
	}
	if m.scope != "" {
		s.d.Metrics.ScopePublished.WithLabelValues(m.scope).Inc()
		s.d.Metrics.ScopeLateness.WithLabelValues(m.scope).Observe(late)
	}
	if m.c.Attempt > 1 {
		s.d.Metrics.Redelivered.Inc()
	}
	s.acks.add(m.shard, shard.Confirmed{Lease: m.c.Lease, Late: lateBy})
	endSpan(m.span, "", "", false)
	s.windowOf(m.from).Release(1) // this message no longer counts against its window
	s.watch.open.Add(-1)
}

// watchConfirms hands every message still unconfirmed past its deadline to
// the failure settlers, every watchEvery, and all of them once workCtx
// ends (Stop abandons the work: each stays leased). After noMore is
// closed (no more publishes), it returns, closing s.failed, once every
// message is settled.
func (s *Scanner) watchConfirms(workCtx context.Context, noMore <-chan struct{}) {
	t := time.NewTicker(s.watchEvery())
	defer t.Stop()
	draining := false
	for {
		select {
		case <-t.C:
		case <-noMore:
			draining, noMore = true, nil
			t.Reset(5 * time.Millisecond) // Stop waits on the last confirms
		case <-workCtx.Done():
		}
		s.expireOverdue(time.Now(), workCtx.Err())
		if draining && s.watch.open.Load() == 0 {
			close(s.failed)
			return
		}
		if workCtx.Err() != nil {
			t.Reset(5 * time.Millisecond)
		}
	}
}

// expireOverdue takes the messages past their deadline at now (all of
// them when abandon is not nil) from the watch and hands them to the
// failure settlers, and drops the settled ones.
func (s *Scanner) expireOverdue(now time.Time, abandon error) {
	s.watch.mu.Lock()
	keep := s.watch.waiting[:0]
	var overdue []*sent
	for _, m := range s.watch.waiting {
		switch {
		case m.settled.Load():
		case abandon == nil && !now.After(m.deadline):
			keep = append(keep, m)
		case m.settled.CompareAndSwap(false, true):
			m.err = abandon
			if m.err == nil {
				m.err = context.DeadlineExceeded
			}
			overdue = append(overdue, m)
		}
	}
	clear(s.watch.waiting[len(keep):])
	s.watch.waiting = keep
	s.watch.mu.Unlock()
	for _, m := range overdue {
		s.failed <- m
		s.watch.open.Add(-1)
	}
}

// settleFailed settles the messages whose publish failed: dead-letter when
// the broker refused them, release otherwise. Several run, so one slow
// Redis call does not hold up the others.
func (s *Scanner) settleFailed(ctx context.Context) {
	for m := range s.failed {
		err := m.err
		switch {
		case errors.Is(err, publisher.ErrReturned):
			why := deadReason{ReasonReturned, err.Error(), true}
			endUndeliverable(m.span, why, s.undeliverable(ctx, m.shard, &m.c, why))
		case errors.Is(err, publisher.ErrNacked):
			why := deadReason{ReasonNacked, err.Error(), true}
			endUndeliverable(m.span, why, s.undeliverable(ctx, m.shard, &m.c, why))
		default:
			s.release(ctx, m.shard, &m.c, err)
			endSpan(m.span, "released for a retry", err.Error(), false)
		}
		s.windowOf(m.from).Release(1)
	}
}

// ackBatcher collects the leases of confirmed messages and acks them per
// shard, all shards in one pipelined round trip, so that acking costs a
// fraction of a Redis call per message. A lease waits at most flushEvery
// (ackFlushEvery): long enough that a busy process acks several leases per
// shard and script call (with a 1 ms interval, 16 shards got about one
// lease per call and the acks cost Redis more CPU than the claims), short
// next to any lease.
//
// An ack that fails (Redis down, restarting, failing over) is sent again,
// after a doubling wait (ackRetryMin to ackRetryMax), until Redis answers:
// a confirmed message whose ack was dropped would be published again when
// its lease expires. Dropping them was how a Redis restart made a wave of
// duplicates: for about a second after Redis returns, go-redis fails new
// connections with the last dial error while older ones already claim, so
// the messages claimed then were confirmed and their acks refused. Sending
// an ack again is safe: a lease acked already is not found (and, its
// message gone, not counted), one expired and re-queued meanwhile counts
// as lost (LostLeases: a duplicate follows). Leases
// waiting for a retry count against the batcher's bound, so a long outage
// holds the confirms back instead of growing memory. Losing the batches
// (the process dies) only means those messages are published again after
// their lease: at least once, never lost.
type ackBatcher struct {
	store      *shard.Store
	metrics    *Metrics
	warn       func(msg string, err error) // rate-limited warnings
	flushEvery time.Duration
	maxPending int

	mu      sync.Mutex
	pending map[int][]shard.Confirmed
	n       int
	retry   map[int][]shard.Confirmed // acks that failed, sent again after a wait
	nRetry  int
	started chan struct{} // signalled by the first lease of a batch
	full    chan struct{} // signalled when n reaches maxPending
	room    *sync.Cond    // waited on by add while n + nRetry >= 4*maxPending
}

// The ack batcher's flush interval and batch size, and the bounds of its
// wait before sending failed acks again.
const (
	ackFlushEvery = 10 * time.Millisecond
	ackMaxPending = 1024
	ackRetryMin   = 20 * time.Millisecond
	ackRetryMax   = time.Second
)

func newAckBatcher(store *shard.Store, metrics *Metrics, warn func(string, error)) *ackBatcher {
	a := &ackBatcher{store: store, metrics: metrics, warn: warn, flushEvery: ackFlushEvery, maxPending: ackMaxPending, pending: map[int][]shard.Confirmed{},
		retry: map[int][]shard.Confirmed{}, started: make(chan struct{}, 1), full: make(chan struct{}, 1)}
	a.room = sync.NewCond(&a.mu)
	return a
}

func (a *ackBatcher) add(i int, l shard.Confirmed) {
	a.mu.Lock()
	for a.n+a.nRetry >= 4*a.maxPending { // Redis is slower than the broker, or down: hold the settlers back
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
// full), and the acks that failed after a doubling wait, until ctx ends;
// then it flushes what is left with flushCtx (bounded by the caller's
// shutdown deadline), trying again while acks fail and flushCtx lasts. An
// idle scanner has no batch, so no timer.
func (a *ackBatcher) run(ctx context.Context, flushCtx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	retry := backoff.New(ackRetryMin, ackRetryMax)
	var again <-chan time.Time // while acks wait for a retry
	for {
		select {
		case <-ctx.Done():
			for a.flush(flushCtx, true) && backoff.Sleep(flushCtx, retry.Next()) == nil {
			}
			return
		case <-again:
			again = nil
			a.flush(flushCtx, true)
		case <-a.started:
			t.Reset(a.flushEvery)
			select {
			case <-ctx.Done():
			case <-t.C:
			case <-a.full:
			}
			t.Stop()
			a.flush(flushCtx, false)
		case <-a.full:
			a.flush(flushCtx, false)
		}
		switch {
		case !a.retrying():
			retry.Reset()
			again = nil
		case again == nil:
			again = time.After(retry.Next())
		}
	}
}

// retrying reports whether acks wait to be sent again.
func (a *ackBatcher) retrying() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nRetry > 0
}

// flush acks the pending leases (and, with withRetry, those that failed
// before, in a call of their own), and keeps for a retry the ones whose
// call failed. It reports whether some wait for a retry.
func (a *ackBatcher) flush(ctx context.Context, withRetry bool) bool {
	a.mu.Lock()
	batch, n := a.pending, a.n
	a.pending, a.n = make(map[int][]shard.Confirmed, len(batch)), 0
	var again map[int][]shard.Confirmed
	nAgain := 0
	if withRetry && a.nRetry > 0 {
		again, nAgain = a.retry, a.nRetry
		a.retry, a.nRetry = map[int][]shard.Confirmed{}, 0
	}
	a.room.Broadcast()
	a.mu.Unlock()
	if nAgain > 0 {
		// An ack sent again whose message is gone was most likely run by
		// the call that failed: not a lost lease.
		acked, gone, err := a.store.AckResent(ctx, again)
		a.settled(nAgain, acked+gone, err)
	}
	if n > 0 {
		acked, err := a.store.AckShards(ctx, batch)
		a.settled(n, acked, err)
	}
	return a.retrying()
}

// settled accounts for an ack call of n leases, done of them acked (or
// found acked before): it keeps for a retry those whose call failed,
// and counts the rest that were not done as lost leases.
func (a *ackBatcher) settled(n, done int, err error) {
	var failed *shard.AckError
	switch {
	case errors.As(err, &failed):
		a.mu.Lock()
		for i, ls := range failed.Failed {
			a.retry[i] = append(a.retry[i], ls...)
		}
		a.nRetry += failed.N
		a.mu.Unlock()
		n -= failed.N
		a.warn("ack after confirm failed; sending it again until Redis answers", err)
	case err != nil: // every ack took effect on the master (AckShards)
		a.warn("ack after confirm not yet on the replicas; the messages are delivered again only if the master fails over first", err)
	}
	a.metrics.LostLeases.Add(float64(n - done))
}
