package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/delayq/delayq/publisher/amqpdial"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/backoff"
	"github.com/delayq/delayq/shard/scope"
)

// Route is one ingress queue and the exchange its messages are delivered
// to when due (with the routing key they were published with): the
// plugin's x-delayed-type, as an exchange of its own. Exchange "" is the
// default exchange, which routes by queue name.
type Route struct {
	Queue    string
	Exchange string
	// Scope, when set, is all the queue may schedule into (scope.go).
	Scope *scope.Scope
}

// Options configure an Ingress. Zero fields take the documented defaults.
type Options struct {
	// URLs are the nodes of one RabbitMQ cluster (one for a single node),
	// tried in turn from the one after the node last lost; at least one.
	URLs           []string
	TLS            *tls.Config // for amqps://; nil uses the system's roots
	ConnectionName string      // shown in the RabbitMQ management UI
	Routes         []Route     // at least one
	// Prefetch bounds the deliveries held unacknowledged per queue, and so
	// the memory they take (Prefetch bodies: lower it for large bodies).
	// Default 2048. A batch is at most half of it, so that the next batch
	// arrives while the last one is being written. The ingress's rate
	// follows its batches' size, which the prefetch bounds: with 2048,
	// batches of 260-850 messages at the broker's fast level and 130-280 at
	// its slow one, as fast as the host is (cmd/delayq-bench's README,
	// which also measured 1024 and 4096).
	Prefetch int
	// Linger is how long a batch waits for more deliveries after its first
	// one before it is handed to the writer (less when it fills up).
	// Default 2ms: a delay message has time, and Redis gets fewer, larger
	// writes. A batch the writer cannot take yet (it is writing the one
	// before) keeps filling until it can, up to half the prefetch: so the
	// batches grow with the time a write takes instead of queueing small
	// ones, and the broker gets fewer acks.
	Linger time.Duration
	// MaxBody is the largest body accepted. Default shard.DefaultMaxBody.
	MaxBody int
	// MinBackoff and MaxBackoff bound the wait between reconnects and
	// between Redis write attempts, doubling after each failure (each
	// wait spread over its upper half: shard/backoff). Defaults
	// amqpdial.MinBackoff and amqpdial.MaxBackoff, as for the publisher.
	MinBackoff, MaxBackoff time.Duration
	// WriteTimeout bounds one Redis write (EnqueueBatch, Cancel, Retry).
	// Default 10s.
	WriteTimeout time.Duration
	// ExchangeExists, when set, is asked about the exchange of each
	// message to schedule: one that does not exist is rejected
	// (ReasonTarget) now rather than dead-lettered when due. An error is
	// an outage: the batch waits. The publisher's cached check fits.
	ExchangeExists func(ctx context.Context, name string) (bool, error)
	// CancelWindow is how long a cancel (x-delayq-cancel) that finds
	// nothing scheduled refuses a message with that id: two consumers of
	// one queue (two scanners) can settle a message and the cancel
	// published right behind it in either order, and the cancel must win.
	// Default 1m: longer than the broker takes to redeliver the message
	// of a consumer that died holding it. Negative: no tombstones (a
	// cancel that comes first misses).
	CancelWindow time.Duration
	// AtStep, when set, is called at each Step of every batch: the crash
	// tests kill the process there.
	AtStep func(Step)
}

// Step names a point of the ingress path (Options.AtStep).
type Step string

// The steps of a batch, in order.
const (
	StepReceived Step = "received" // deliveries taken from the broker; nothing written
	StepStored   Step = "stored"   // Redis stored the batch; nothing acked
	StepAcked    Step = "acked"    // the batch is acked
)

func (in *Ingress) at(s Step) {
	if in.opts.AtStep != nil {
		in.opts.AtStep(s)
	}
}

func (o *Options) defaults() {
	if o.Prefetch <= 0 {
		o.Prefetch = 2048
	}
	if o.MaxBody <= 0 {
		o.MaxBody = shard.DefaultMaxBody
	}
	if o.Linger <= 0 {
		o.Linger = 2 * time.Millisecond
	}
	o.MinBackoff, o.MaxBackoff = amqpdial.Backoff(o.MinBackoff, o.MaxBackoff)
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.CancelWindow == 0 {
		o.CancelWindow = time.Minute
	}
}

// Scheduler is what the ingress needs of a shard.Producer.
type Scheduler interface {
	EnqueueBatch(ctx context.Context, msgs []shard.Message) ([]shard.BatchResult, error)
	CancelAhead(ctx context.Context, id string, window time.Duration) error
	Retry(ctx context.Context, d shard.Delivery, cause string) (shard.RetryOutcome, error)
}

// Outcomes: the outcome label of delayq_ingress_messages_total.
const (
	OutcomeScheduled  = "scheduled"
	OutcomeDuplicate  = "duplicate"     // the id was already there: a redelivery, or a producer's second publish
	OutcomeCancelled  = "cancelled"     // a cancel that found its message
	OutcomeCancelMiss = "cancel_missed" // a cancel that found nothing scheduled (delivered, in flight, or not yet stored)
	// A message whose cancel was settled first (the tombstone of a
	// cancel_missed refused it): acked, never scheduled.
	OutcomeCancelledAhead = "cancelled_ahead"
	OutcomeRetried        = "retried" // a retry request scheduled its next step (or was a duplicate of one)
	OutcomeRetriedDead    = "retry_exhausted"
	OutcomeRejected       = "rejected" // to the dead-letter exchange; delayq_ingress_rejected_total says why
)

// Metrics are the ingress's Prometheus metrics. Labels: queue (the
// configured routes) and fixed enumerations.
type Metrics struct {
	Messages  *prometheus.CounterVec // queue, outcome
	Rejected  *prometheus.CounterVec // queue, reason
	Batch     prometheus.Histogram   // messages per Redis write
	Consuming prometheus.Gauge       // 1 while every ingress queue is consumed
}

// NewMetrics creates the ingress metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: "ingress_messages_total",
			Help: "Ingress messages settled, by queue and outcome."}, []string{"queue", "outcome"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: "ingress_rejected_total",
			Help: "Ingress messages rejected to the queue's dead-letter exchange, by reason."}, []string{"queue", "reason"}),
		Batch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "delayq", Name: "ingress_batch_size",
			Help: "Messages per Redis write of the ingress.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		Consuming: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "delayq", Name: "ingress_consuming",
			Help: "1 while the ingress consumes every configured queue."}),
	}
	if reg != nil {
		reg.MustRegister(m.Messages, m.Rejected, m.Batch, m.Consuming)
	}
	return m
}

// Ingress consumes the ingress queues and schedules what they hold.
type Ingress struct {
	opts  Options
	sched Scheduler
	log   *zap.Logger
	m     *Metrics

	next int // index in URLs of the node to try first; only run's goroutine uses it

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New checks opts and returns an Ingress that has not started.
func New(opts Options, sched Scheduler, log *zap.Logger, m *Metrics) (*Ingress, error) {
	opts.defaults()
	if len(opts.URLs) == 0 {
		return nil, errors.New("ingress: no AMQP URL")
	}
	if len(opts.Routes) == 0 {
		return nil, errors.New("ingress: no queues")
	}
	seen := map[string]bool{}
	for _, r := range opts.Routes {
		if r.Queue == "" {
			return nil, errors.New("ingress: a route without a queue")
		}
		if seen[r.Queue] {
			return nil, fmt.Errorf("ingress: queue %q is listed twice", r.Queue)
		}
		seen[r.Queue] = true
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Ingress{opts: opts, sched: sched, log: log.Named("ingress"), m: m}, nil
}

// Start begins consuming in a goroutine that Stop ends. It does not wait
// for the broker: an unreachable broker is retried with backoff.
func (in *Ingress) Start(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.done != nil {
		return errors.New("ingress: started twice")
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in.cancel, in.done = cancel, make(chan struct{})
	go func() {
		defer close(in.done)
		in.run(rctx)
	}()
	return nil
}

// Stop stops consuming and closes the connection. A batch whose Redis
// write is under way finishes it (bounded by WriteTimeout) and is acked;
// every delivery not acked goes back to its queue when the channel
// closes, so nothing is lost. Stop returns ctx's error if that takes
// longer than ctx allows.
func (in *Ingress) Stop(ctx context.Context) error {
	in.mu.Lock()
	cancel, done := in.cancel, in.done
	in.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ingress: stop: %w", ctx.Err())
	}
}

// run connects, consumes until the connection fails, and reconnects,
// until ctx ends.
func (in *Ingress) run(ctx context.Context) {
	b := backoff.New(in.opts.MinBackoff, in.opts.MaxBackoff)
	for ctx.Err() == nil {
		started := time.Now()
		err := in.session(ctx)
		in.m.Consuming.Set(0)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > in.opts.MaxBackoff {
			b.Reset()
		}
		wait := b.Next()
		in.log.Warn("ingress disconnected; reconnecting", zap.Error(err), zap.Duration("backoff", wait))
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// session is one connection: a channel per queue, each consumed by its
// own goroutine. It returns when one of them fails or ctx ends, after
// all of them have returned.
func (in *Ingress) session(ctx context.Context) error {
	conn, used, err := amqpdial.First(ctx, in.opts.URLs, in.next, amqpdial.Config(in.opts.ConnectionName, in.opts.TLS))
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	in.next = (used + 1) % len(in.opts.URLs) // after losing this node, start with the next
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { // before conn.Close: the goroutines may still ack
		cancel()
		wg.Wait()
	}()
	errc := make(chan error, len(in.opts.Routes))
	for _, r := range in.opts.Routes {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if err := ch.Qos(in.opts.Prefetch, 0, false); err != nil {
			return fmt.Errorf("queue %q: prefetch: %w", r.Queue, err)
		}
		deliveries, err := ch.Consume(r.Queue, in.opts.ConnectionName, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("queue %q: consume: %w", r.Queue, err)
		}
		wg.Go(func() {
			if err := in.consume(sctx, ch, r, deliveries); err != nil {
				errc <- fmt.Errorf("queue %q: %w", r.Queue, err)
			}
		})
	}
	in.m.Consuming.Set(1)
	in.log.Info("ingress consuming", zap.Int("queues", len(in.opts.Routes)), zap.Int("prefetch", in.opts.Prefetch))
	if in.opts.ExchangeExists != nil {
		for _, r := range in.opts.Routes {
			if ok, err := in.opts.ExchangeExists(ctx, r.Exchange); err == nil && !ok {
				in.log.Error("the target exchange of an ingress queue does not exist: its messages are rejected to the dead-letter exchange until it does",
					zap.String("queue", r.Queue), zap.String("exchange", r.Exchange))
			}
		}
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	case e := <-closed:
		if e == nil {
			return errors.New("connection closed")
		}
		return e
	}
}

// consume gathers deliveries into batches and hands them to a writer
// goroutine that settles them in order, so that the next batch gathers
// while the last one is written. A batch takes the first delivery, then
// whatever comes within Linger, then, while the writer is still busy with
// the batch before, whatever else comes, up to half the prefetch: so a
// batch is as large as what arrives while one is written, and a slower
// write makes fewer, larger batches instead of a queue of small ones. It
// returns when ctx ends, the channel closes or settling fails, after the
// writer has returned.
func (in *Ingress) consume(ctx context.Context, ch *amqp.Channel, r Route, deliveries <-chan amqp.Delivery) error {
	size := max(1, in.opts.Prefetch/2)
	// Two buffers: one being written, one gathering.
	free := make(chan []amqp.Delivery, 2)
	for range 2 {
		free <- make([]amqp.Delivery, 0, size)
	}
	full := make(chan []amqp.Delivery) // unbuffered: taken only by an idle writer
	werr := make(chan error, 1)
	wctx, stopWriter := context.WithCancel(ctx)
	go func() {
		defer close(werr)
		for b := range full {
			if err := in.settle(wctx, ch, r, b); err != nil {
				werr <- err
				stopWriter()
				for range full { // unblock the gatherer; these stay unacked
				}
				return
			}
			free <- b[:0]
		}
	}()
	err := in.gather(wctx, deliveries, free, full)
	close(full)
	if werr := <-werr; werr != nil {
		err = werr
	}
	stopWriter()
	return err
}

// gather fills batches from free and hands them on full until ctx ends
// (nil) or deliveries closes (an error). A batch is offered to the writer
// once its linger is over, it is full or deliveries closed, and takes
// deliveries until then and while the writer is busy (up to its
// capacity).
func (in *Ingress) gather(ctx context.Context, deliveries <-chan amqp.Delivery, free, full chan []amqp.Delivery) error {
	linger := time.NewTimer(0)
	defer linger.Stop()
	for {
		var batch []amqp.Delivery
		select {
		case <-ctx.Done():
			return nil
		case batch = <-free:
		}
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the broker ended the consumer (channel closed)")
			}
			batch = append(batch, d)
		}
		linger.Reset(in.opts.Linger)
		lingered, open := false, true
		for batch != nil {
			var take <-chan amqp.Delivery // nil: no more for this batch
			if open && len(batch) < cap(batch) {
				take = deliveries
			}
			var offer chan<- []amqp.Delivery // nil: not yet
			if lingered || take == nil {
				offer = full
			}
			select {
			case d, ok := <-take:
				if !ok {
					open = false
					continue
				}
				batch = append(batch, d)
			case <-linger.C:
				lingered = true
			case offer <- batch:
				batch = nil
			case <-ctx.Done():
				return nil // unacked: the broker redelivers
			}
		}
	}
}

// batchState tracks the settlement of one batch of deliveries.
type batchState struct {
	ch       *amqp.Channel
	r        Route
	rejected map[uint64]bool
	pending  []pendingMsg // schedules not yet written
}

type pendingMsg struct {
	d   *amqp.Delivery
	req Request
}

// settle writes a batch to Redis in delivery order (consecutive schedules
// in one EnqueueBatch; a cancel or retry request after the schedules
// before it), rejects what can never be scheduled, and then acks the rest
// with one multiple ack. Nothing is acked before Redis stored it: while
// Redis fails, settle retries with backoff and acks nothing, so the broker
// sends nothing more (prefetch) and keeps every message. It returns only
// an AMQP error (the caller reconnects) or nil; when ctx ends it leaves
// what is not stored unacked, for the broker to redeliver.
func (in *Ingress) settle(ctx context.Context, ch *amqp.Channel, r Route, batch []amqp.Delivery) error {
	st := &batchState{ch: ch, r: r, rejected: map[uint64]bool{}}
	in.at(StepReceived)
	for i := range batch {
		d := &batch[i]
		req, err := Parse(d, r.Exchange, in.opts.MaxBody)
		if err == nil {
			err = r.allows(req)
		}
		if err != nil {
			if err := in.reject(st, d, err); err != nil {
				return err
			}
			continue
		}
		if req.Kind == Schedule {
			ok, err := in.exchangeExists(ctx, req.Message.Exchange)
			if err != nil {
				return stopping(ctx, err)
			}
			if !ok {
				if err := in.reject(st, d, reject(ReasonTarget, "exchange %q not found", req.Message.Exchange)); err != nil {
					return err
				}
				continue
			}
			st.pending = append(st.pending, pendingMsg{d: d, req: req})
			continue
		}
		if err := in.flush(ctx, st); err != nil {
			return stopping(ctx, err)
		}
		if err := in.control(ctx, st, d, req); err != nil {
			return stopping(ctx, err)
		}
	}
	if err := in.flush(ctx, st); err != nil {
		return stopping(ctx, err)
	}
	in.at(StepStored)
	for i := len(batch) - 1; i >= 0; i-- {
		if tag := batch[i].DeliveryTag; !st.rejected[tag] {
			if err := ch.Ack(tag, true); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			break
		}
	}
	in.at(StepAcked)
	return nil
}

// exchangeExists asks Options.ExchangeExists, retrying while the broker
// cannot answer, until ctx ends.
func (in *Ingress) exchangeExists(ctx context.Context, name string) (bool, error) {
	if in.opts.ExchangeExists == nil || name == "" {
		return true, nil
	}
	b := backoff.New(in.opts.MinBackoff, in.opts.MaxBackoff)
	for {
		ok, err := in.opts.ExchangeExists(ctx, name)
		if err == nil {
			return ok, nil
		}
		in.log.Warn("ingress cannot check an exchange; holding the batch", zap.String("exchange", name), zap.Error(err))
		if err := b.Wait(ctx); err != nil {
			return false, err
		}
	}
}

// stopping turns the error of a write abandoned because ctx ended into
// nil (a clean stop; the broker redelivers); other errors pass.
func stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// flush writes the pending schedules, retrying those that failed for
// want of Redis until they are stored or ctx ends.
func (in *Ingress) flush(ctx context.Context, st *batchState) error {
	todo := st.pending
	st.pending = nil
	b := backoff.New(in.opts.MinBackoff, in.opts.MaxBackoff)
	for len(todo) > 0 {
		msgs := make([]shard.Message, len(todo))
		for i, p := range todo {
			msgs[i] = p.req.Message
		}
		in.m.Batch.Observe(float64(len(msgs)))
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.WriteTimeout)
		res, batchErr := in.sched.EnqueueBatch(wctx, msgs)
		cancel()
		var again []pendingMsg
		var lastErr error
		for i, p := range todo {
			err := res[i].Err
			switch {
			case err == nil:
				in.m.Messages.WithLabelValues(st.r.Queue, OutcomeScheduled).Inc()
			case errors.Is(err, shard.ErrCancelled):
				in.m.Messages.WithLabelValues(st.r.Queue, OutcomeCancelledAhead).Inc()
				in.log.Info("message cancelled before it was stored: not scheduled",
					zap.String("id", p.req.Message.ID), zap.String("queue", st.r.Queue))
			case errors.Is(err, shard.ErrDuplicate):
				in.m.Messages.WithLabelValues(st.r.Queue, OutcomeDuplicate).Inc()
				if p.req.GeneratedID {
					in.log.Warn("generated id collided", zap.String("id", p.req.Message.ID))
				}
			case ReasonOf(err) != "":
				if err := in.reject(st, p.d, &RejectError{Reason: ReasonOf(err), Detail: err.Error()}); err != nil {
					return err
				}
			default: // Redis, the network, or ErrCapacity: not the message's fault
				again = append(again, p)
				lastErr = err
			}
		}
		if len(again) == 0 {
			return nil
		}
		if lastErr == nil {
			lastErr = batchErr
		}
		wait := b.Next()
		in.log.Warn("ingress cannot store messages; holding them unacked and retrying",
			zap.String("queue", st.r.Queue), zap.Int("messages", len(again)), zap.Error(lastErr),
			zap.Duration("backoff", wait))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
		todo = again
	}
	return nil
}

// control carries out a cancel or retry request, retrying while Redis
// fails.
func (in *Ingress) control(ctx context.Context, st *batchState, d *amqp.Delivery, req Request) error {
	b := backoff.New(in.opts.MinBackoff, in.opts.MaxBackoff)
	for {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.WriteTimeout)
		var err error
		outcome := ""
		switch req.Kind {
		case Cancel:
			err = in.sched.CancelAhead(wctx, req.ID, in.opts.CancelWindow)
			switch {
			case err == nil:
				outcome = OutcomeCancelled
			case errors.Is(err, shard.ErrNotFound):
				outcome, err = OutcomeCancelMiss, nil
				in.log.Info("cancel found nothing scheduled; a message with this id is refused for the cancel window",
					zap.String("id", req.ID), zap.String("queue", st.r.Queue), zap.Duration("window", max(in.opts.CancelWindow, 0)))
			case errors.Is(err, shard.ErrInFlight):
				outcome, err = OutcomeCancelMiss, nil
				in.log.Info("cancel came too late: the message is being published", zap.String("id", req.ID), zap.String("queue", st.r.Queue))
			}
		case Retry:
			var out shard.RetryOutcome
			out, err = in.sched.Retry(wctx, req.Delivery, req.Cause)
			outcome = OutcomeRetried
			if out.Dead {
				outcome = OutcomeRetriedDead
			}
		}
		cancel()
		if err == nil {
			in.m.Messages.WithLabelValues(st.r.Queue, outcome).Inc()
			return nil
		}
		if reason := ReasonOf(err); reason != "" {
			return in.reject(st, d, &RejectError{Reason: reason, Detail: err.Error()})
		}
		wait := b.Next()
		in.log.Warn("ingress cannot reach Redis; holding the message unacked and retrying",
			zap.String("id", d.MessageId), zap.Error(err), zap.Duration("backoff", wait))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// reject sends d to the queue's dead-letter exchange (reject without
// requeue), logs why and counts it.
func (in *Ingress) reject(st *batchState, d *amqp.Delivery, err error) error {
	reason, detail := ReasonInvalid, err.Error()
	var re *RejectError
	if errors.As(err, &re) {
		reason, detail = re.Reason, re.Detail
	}
	in.log.Warn("ingress message rejected", zap.String("queue", st.r.Queue), zap.String("id", d.MessageId),
		zap.String("reason", reason), zap.String("detail", detail))
	in.m.Messages.WithLabelValues(st.r.Queue, OutcomeRejected).Inc()
	in.m.Rejected.WithLabelValues(st.r.Queue, reason).Inc()
	st.rejected[d.DeliveryTag] = true
	if err := st.ch.Reject(d.DeliveryTag, false); err != nil {
		return fmt.Errorf("reject: %w", err)
	}
	return nil
}
