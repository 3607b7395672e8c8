package scanner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/router"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/backoff"
	"github.com/delayq/delayq/shard/scope"
)

// Config tunes a Scanner. Zero fields take the documented defaults.
type Config struct {
	// Goroutines is the number of claim loops. Their claims go to Redis in
	// shared round trips (see claimer), so many loops are cheap, and at
	// claim batch 1 they are what keeps enough messages moving: on a
	// 2-core benchmark, 128 dispatched about 1.5x what 32 did. Default 128.
	Goroutines int
	// ClaimBatch is k, the most messages one claim takes. Default 1.
	ClaimBatch int
	// Lease is how long a claimed message may stay unconfirmed before any
	// scanner re-queues it. Default 30s.
	Lease time.Duration
	// PublishTimeout bounds publish plus confirm of one batch; on timeout
	// the messages are released for a retry. Default Lease/3.
	PublishTimeout time.Duration
	// RetryDelay is how long a message whose publish failed (nack,
	// connection lost, timeout) first waits before it is due again; each
	// further failed publish of the same message doubles the wait, up to
	// MaxRetryDelay, give or take a fifth (jitter, so retries of a burst
	// spread out). Default 1s.
	RetryDelay time.Duration
	// MaxRetryDelay caps the wait between retries. Default 1m.
	MaxRetryDelay time.Duration
	// MaxRefusals is how many times the broker may refuse a message (a
	// nack, an unroutable return, a missing exchange) before it goes to
	// the dead set with the broker's last reason. Refusals can clear (a
	// binding or an exchange declared a little late, a queue below its
	// limit again), so they are retried with the backoff above first.
	// Connection losses, timeouts and flow control are outages, not
	// refusals: they never count, and never dead-letter a message.
	// Default 5.
	MaxRefusals int
	// VisitBudget is how many claims one visit makes in a row while they
	// come back full, before moving to the next shard. Default 16.
	VisitBudget int
	// Window is the most messages a process holds claimed and not yet
	// settled (being published, or published and waiting for the broker's
	// confirm). A worker takes places for a whole claim batch before it
	// claims and gives back those the claim did not fill, so workers claim
	// again while their last messages wait for confirms, but never more
	// than can be published at once: when confirms slow down (a slow or
	// blocked broker), the window fills and claims stop, instead of
	// claimed messages waiting for a place while their leases run. Default
	// 160, and at least ClaimBatch. The releaser of held messages (flow
	// control) has a window of its own of the same size.
	//
	// The window covers a message from before its claim to its confirm, so
	// it must hold the claims under way as well as the publishes the broker
	// has unconfirmed; with too few places the pipeline waits with CPU to
	// spare, with too many the broker spends more CPU per message. Saturated
	// on two shared cores (each drain between two measurements of the
	// shared-core limit, three rounds a run; cmd/delayq-bench -only
	// saturated -scanner-env DELAYQ_WINDOW=…, interleaved): 160 against 192
	// in four pairs, 87-96 against 81-94 % of that limit at k = 8 (ahead in
	// all four) and 90-96 against 81-96 % at k = 32 (ahead in three), k = 1
	// 117 and 131 against 114 and 112 % (two pairs). 192 against 256 in
	// three pairs: 86-96 against 71-80 % at k = 8, 88-90 against 76-78 % at
	// k = 32, RabbitMQ 40-53 against 45-62 µs a message. An earlier series:
	// 128 reached 86-94 / 70-79 / 68-77 % of that limit at k = 1 / 8 / 32
	// with the box 1.66-1.82 cores busy, 256 86-106 / 75-90 / 65-87 % with
	// 1.74-1.88, 384 88-111 / 69-97 / 72-91 % but with RabbitMQ at 33-65 µs
	// a message against 29-49; 512 was costly for the broker (56-89 µs a
	// message at k = 8 and 32) and 64 too few at k = 1. At k = 32, where
	// each claim takes 32 places before it is sent (160 hold five claims
	// under way), 160 gave the same lateness as 192 or lower at a steady
	// 8,550 msg/s (two pairs: p99 8.1-13.3 against 12.1-20.8 ms with one
	// and two scanners; with three, a load of 29-43 % of that limit on the
	// host of the moment, 41.5 and 133.9 against 34.6 and 421.6 ms).
	// One process publishes at most Window per confirm round trip: 160,000
	// msg/s at 1 ms; raise it for a broker far away.
	Window int
	// PatrolInterval: while idle, the process visits one shard from the
	// cursor this often, to learn heads whose wake-up notice was lost (Pub/Sub
	// is best effort) and leases that expired. Idle cost: about 5 Redis
	// commands per interval per process (INCR, and the claim script's own
	// calls). Default 1s.
	PatrolInterval time.Duration
}

func (c *Config) defaults() {
	if c.Goroutines <= 0 {
		c.Goroutines = 128
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = 1
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = c.Lease / 3
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.MaxRetryDelay <= 0 {
		c.MaxRetryDelay = time.Minute
	}
	if c.MaxRefusals <= 0 {
		c.MaxRefusals = 5
	}
	if c.VisitBudget <= 0 {
		c.VisitBudget = 16
	}
	if c.PatrolInterval <= 0 {
		c.PatrolInterval = time.Second
	}
	if c.Window <= 0 {
		c.Window = 160
	}
	c.Window = max(c.Window, c.ClaimBatch)
}

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	c.defaults()
	switch {
	case c.Goroutines > 4096:
		return fmt.Errorf("goroutines %d: want at most 4096", c.Goroutines)
	case c.ClaimBatch > 1000:
		return fmt.Errorf("claim batch %d: want at most 1000", c.ClaimBatch)
	case c.Lease < time.Second:
		return fmt.Errorf("lease %s: want at least 1s", c.Lease)
	case c.PublishTimeout >= c.Lease:
		return fmt.Errorf("publish timeout %s must be shorter than the lease %s", c.PublishTimeout, c.Lease)
	case c.MaxRetryDelay < c.RetryDelay:
		return fmt.Errorf("max retry delay %s is shorter than the retry delay %s", c.MaxRetryDelay, c.RetryDelay)
	case c.MaxRefusals > 1000:
		return fmt.Errorf("max refusals %d: want at most 1000", c.MaxRefusals)
	}
	return nil
}

// Publisher is what the scanner needs of publisher.Publisher.
type Publisher interface {
	Ready() bool
	WaitReady(ctx context.Context) error
	PublishNotify(ctx context.Context, m publisher.Message, done func(error)) error
	ExchangeExists(ctx context.Context, name string) (bool, error)
}

var _ Publisher = (*publisher.Publisher)(nil)

// Deps are the scanner's collaborators; the caller owns and closes them.
type Deps struct {
	Store     *shard.Store
	Shards    balance.Source
	Cursor    *balance.Cursor
	Routes    *router.Table
	Publisher Publisher
	Log       *zap.Logger
	Now       func() time.Time // default time.Now
	// Metrics, when set, are updated as messages move (NewMetrics).
	Metrics *Metrics
	// Tracer, when set, gives each message a publish span (trace.go;
	// tracing.Setup makes it from the OTEL_* variables). nil: no spans.
	Tracer trace.Tracer
	// Scopes, when set, are the teams sharing the namespace: each
	// published message is counted in its scope's metrics
	// (Metrics.ScopePublished, ScopeLateness).
	Scopes *scope.Set
	// AtStep, when set, is called at each step of a message's way where a
	// crash test kills the process: StepFired (an occurrence of a
	// schedule fired: its next one stored, itself not yet published),
	// StepConfirmed (the broker confirmed a message, its ack not yet
	// queued: on the publisher's confirm goroutine). For tests; nil in
	// production.
	AtStep func(step string)
}

// The steps Deps.AtStep is called at.
const (
	StepFired     = "fired"
	StepConfirmed = "confirmed"
)

// Counts are a scanner's running totals.
type Counts struct {
	Claimed     int64 // messages claimed
	Published   int64 // confirmed by the broker and acked in Redis
	Redelivered int64 // published with attempt > 1
	Dead        int64 // dead-lettered
	Released    int64 // publish failed; due again after RetryDelay
	LostLeases  int64 // confirmed, but the lease had expired (a duplicate will follow)
	Reaped      int64 // expired leases re-queued by this scanner's claims
	EmptyClaims int64 // claims that found nothing due
	Recovered   int64 // lost claims put back as due by their receipts
}

// Scanner runs the claim loops of one process.
type Scanner struct {
	cfg   Config
	d     Deps
	log   *zap.Logger
	board *dueBoard
	aff   *affinity // which shards' wake-ups this process takes

	errLog rateLimited

	window *semaphore.Weighted // one place per claimed, unsettled message of the claims (Config.Window)
	// The releaser's places (as many again), apart from the claims':
	// a releaser waiting for room never queues ahead of a claim, so held
	// traffic cannot delay what falls due meanwhile (flow.go).
	releaseWindow *semaphore.Weighted
	watch         confirmWatch // published messages waiting for their confirms (settle.go)
	failed        chan *sent   // messages whose publish failed, for the failure settlers
	acks          *ackBatcher
	claims        *claimer
	flow          *flowControl // flow control at release (flow.go)
	fair          *fairControl // fair release across classes (fair.go)
	claimsFailing atomic.Bool  // the last claim failed: sweep at the next that does not (sweep.go)

	mu       sync.Mutex
	state    int      // notStarted, running, stopped
	stages   []*stage // in start order; Stop ends them in reverse
	stopWork context.CancelFunc
}

// The states of a Scanner: it starts once and stops once.
const (
	notStarted = iota
	running
	stopped
)

// stage is a group of the scanner's goroutines that end together: end
// makes them return (it cancels their context, or closes the queue they
// drain), and the next stage of the shutdown waits for them.
type stage struct {
	name string
	end  func()
	wg   sync.WaitGroup
}

// stage adds a stage, in start order.
func (s *Scanner) stage(name string, end func()) *stage {
	st := &stage{name: name, end: end}
	s.stages = append(s.stages, st)
	return st
}

// dispatchRound is the least time between two rounds in which the due
// board hands due shards to idle goroutines (see dueBoard.run). Rounds of
// 2-4 ms make fewer, fuller claims (0.5 instead of 0.6 claims a message
// at a steady 6,000 msg/s, k = 8) but raised the p50 (by 1.0-1.7 ms at
// 3 ms) and lowered no p99 (cmd/delayq-bench's README, "Measured and left
// out").
const dispatchRound = time.Millisecond

// failureSettlers is the number of goroutines that settle failed publishes
// (settle.go).
const failureSettlers = 4

// New checks cfg and deps and returns a Scanner ready to Start.
func New(cfg Config, d Deps) (*Scanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if d.Store == nil || d.Shards == nil || d.Cursor == nil || d.Publisher == nil || d.Log == nil {
		return nil, errors.New("scanner: Store, Shards, Cursor, Publisher and Log are required")
	}
	if d.Routes == nil {
		d.Routes, _ = router.New("", nil)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(prometheus.NewRegistry()) // counted, not exported
	}
	log := d.Log.Named("scanner")
	s := &Scanner{cfg: cfg, d: d, log: log, board: newDueBoard(d.Now, dispatchRound), aff: newAffinity(), errLog: rateLimited{log: log, every: 5 * time.Second},
		window: semaphore.NewWeighted(int64(cfg.Window)), releaseWindow: semaphore.NewWeighted(int64(cfg.Window)),
		failed: make(chan *sent, 2*cfg.Window)}
	s.acks = newAckBatcher(d.Store, d.Metrics, s.errLog.warn)
	s.flow = newFlowControl()
	s.fair = newFairControl(cfg.Window)
	s.claims = newClaimer(d.Store, cfg.ClaimBatch, cfg.Lease, s.flow.holdTopics, s.fair.currentPlan, s.recovered)
	return s, nil
}

// Counts returns the running totals.
func (s *Scanner) Counts() Counts { return s.d.Metrics.counts() }

// Start loads the scripts, subscribes to wake-up notices and starts the
// claim goroutines. It returns once they run; ctx bounds the startup only.
func (s *Scanner) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != notStarted {
		return errors.New("scanner already started; a stopped scanner cannot start again")
	}
	if err := s.d.Store.Load(ctx); err != nil {
		return err
	}
	sub, err := s.d.Store.Notices(ctx)
	if err != nil {
		return err
	}
	s.readFlows(ctx)   // the first claims already set limited and paused topics apart
	s.readClasses(ctx) // and a late shard's messages by class
	s.state = running
	// The loops live until Stop (each stage's own context, not ctx); the
	// Redis and AMQP calls of a claim, publish, settle or ack under way
	// use workCtx, which Stop cancels only when it abandons them.
	workCtx, stopWork := context.WithCancel(context.Background())
	s.stopWork = stopWork
	life := func(name string) (*stage, context.Context) {
		ctx, cancel := context.WithCancel(context.Background())
		return s.stage(name, cancel), ctx
	}
	st, subCtx := life("wake-up notices")
	st.wg.Go(func() { s.listen(subCtx, sub) })
	st, memberCtx := life("membership") // leaves at Stop, after the claims stopped
	st.wg.Go(func() { s.heartbeat(memberCtx) })
	st, ackCtx := life("acks")
	st.wg.Go(func() { s.acks.run(ackCtx, workCtx) })
	// No more publishes once the claim stages ended: the confirm watch
	// waits for the last confirms, then the failure settlers return.
	noMore := make(chan struct{})
	st = s.stage("settlers", func() { close(noMore) })
	st.wg.Go(func() { s.watchConfirms(workCtx, noMore) })
	for range failureSettlers {
		st.wg.Go(func() { s.settleFailed(workCtx) })
	}
	st, claimerCtx := life("claimer") // answers every claim it took before it returns
	for range claimPipelines {
		st.wg.Go(func() { s.claims.run(claimerCtx, workCtx) })
	}
	st, claimCtx := life("claims")
	st.wg.Go(func() { s.board.run(claimCtx, s.cfg.PatrolInterval) })
	st.wg.Go(func() { s.refreshFlows(claimCtx) })
	st.wg.Go(func() { s.releaseHeld(claimCtx, workCtx) })
	st.wg.Go(func() { s.refreshClasses(claimCtx) })
	for range fairReleasers {
		st.wg.Go(func() { s.releaseBacklogs(claimCtx, workCtx) })
	}
	st.wg.Go(func() { s.promoteFar(claimCtx, workCtx) })
	st.wg.Go(func() { s.maintainQuotas(claimCtx, workCtx) })
	st.wg.Go(func() { s.adoptQuotas(claimCtx) })
	st.wg.Go(func() { s.preHold(claimCtx, workCtx) })
	for range s.cfg.Goroutines {
		st.wg.Go(func() { s.work(claimCtx, workCtx) })
	}
	s.log.Info("scanner started", zap.String("namespace", s.d.Store.Namespace()),
		zap.Int("goroutines", s.cfg.Goroutines), zap.Int("claim_batch", s.cfg.ClaimBatch), zap.Duration("lease", s.cfg.Lease),
		zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
	return nil
}

// Stop ends the stages Start began, the last started first, each once
// the one before has returned:
//
//  1. claims: no worker starts a new claim, nor the releasers of held
//     messages and class backlogs; they finish publishing what they
//     claimed and exit, and so do the due board's dispatcher and the
//     flows' and classes' readers;
//  2. claimer: it has answered every claim it took;
//  3. settlers: no more publishes, so the confirm watch waits until each
//     outstanding message is settled (its ack queued on its confirm, or
//     handed to the failure settlers: refused, lost, past its deadline),
//     then the failure settlers finish and return;
//  4. acks: the ack batcher flushes the last acks;
//  5. wake-up notices.
//
// If ctx ends before that, the Redis and AMQP calls still under way are
// canceled: those messages stay leased and any scanner re-queues them
// once the lease expires. The caller then closes the publisher and the
// Redis client. Stop returns ctx's error if it had to abandon work, and is
// safe to call more than once; a stopped Scanner does not start again.
func (s *Scanner) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != running {
		return nil
	}
	s.state = stopped
	done := make(chan struct{})
	go func() {
		for i := len(s.stages) - 1; i >= 0; i-- {
			s.stages[i].end()
			s.stages[i].wg.Wait()
			s.log.Debug("scanner stage stopped", zap.String("stage", s.stages[i].name))
		}
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("scanner stop: abandoned unconfirmed messages (they stay leased): %w", ctx.Err())
		s.stopWork()
		<-done
	}
	s.stopWork()
	s.errLog.stop()
	c := s.Counts()
	s.log.Info("scanner stopped", zap.Int64("published", c.Published), zap.Int64("dead", c.Dead), zap.Int64("released", c.Released))
	return err
}

// listen feeds wake-up notices to the board until ctx ends. When the
// subscription was lost and made again, the notices published between
// the two are lost: the process sweeps its shards (sweep.go).
func (s *Scanner) listen(ctx context.Context, sub *shard.Notices) {
	defer sub.Close()
	for {
		n, err := sub.Next(ctx)
		switch {
		case errors.Is(err, shard.ErrBadNotice):
			s.errLog.warn("bad wake-up notice", err)
		case err != nil:
			return // stopping
		case n.Resubscribed:
			s.sweep("wake-up notices subscribed again")
		case s.aff.owns(n.Shard):
			s.board.notice(n.Shard, n.DueMs)
		}
	}
}

// work is one claim loop.
func (s *Scanner) work(claimCtx, workCtx context.Context) {
	empty, idle, fromBoard := 0, false, false
	hw := 0 // high-water mark, from the last cursor visit
	reply := make(chan claimReply, 1)
	retry := backoff.New(50*time.Millisecond, 2*time.Second) // while Redis fails
	for claimCtx.Err() == nil {
		if err := s.d.Publisher.WaitReady(claimCtx); err != nil {
			return // stopping; nothing is claimed that cannot be published
		}
		i := -1
		switch {
		case idle:
			select { // a due shard, or patrolShard (-1): the cursor's
			case i = <-s.board.ready:
			case <-claimCtx.Done():
				return
			}
		case fromBoard:
			// Busy: every other visit goes to a shard known to have due
			// messages (a hot shard draws the goroutines that are free),
			// the others follow the cursor, so every shard still gets its
			// visit each round.
			i = s.board.takeDue()
		}
		fromBoard = !fromBoard
		covered := 0
		if i < 0 {
			var err error
			if i, covered, err = s.d.Cursor.Next(workCtx); err != nil {
				s.errLog.warn("pick next shard", err)
				_ = retry.Wait(claimCtx) // an error: stopping, which the loop checks
				continue
			}
			hw = covered
		}
		n, drained, err := s.visit(claimCtx, workCtx, i, reply)
		s.claimOutcome(err)
		if err != nil {
			s.errLog.warn("claim", err)
			_ = retry.Wait(claimCtx) // an error: stopping, which the loop checks
			// The board forgot shard i when it handed it out: visit from
			// the cursor until a visit drains a shard, so heads lost with
			// the failed claims are learned again.
			idle = false
			continue
		}
		retry.Reset()
		switch {
		case !drained:
			// The visit budget ran out with messages still due: a
			// backlog, so keep claiming.
			empty, idle = 0, false
		case s.board.knowsAll(hw):
			// Nothing more is due here, and the board has heard from
			// every shard: it says when one next has work.
			idle = true
		case n > 0:
			empty, idle = 0, false
		case covered > 0:
			// Until the board has heard from every shard: go idle once
			// a whole round of the cursor found nothing.
			if empty++; empty >= covered {
				idle = true
			}
		}
	}
}

// visit claims from shard i while the claim replies say more messages are
// due there, up to the visit budget, and delivers what it claims. It
// returns how many it claimed and whether it left the shard drained
// (nothing due), as opposed to stopping at the budget. A claim, once sent,
// is always delivered (workCtx), even if claiming stops meanwhile.
func (s *Scanner) visit(claimCtx, workCtx context.Context, i int, reply chan claimReply) (total int, drained bool, err error) {
	for n := range s.cfg.VisitBudget {
		if claimCtx.Err() != nil {
			return total, true, nil
		}
		if n > 0 && !s.d.Publisher.Ready() {
			// The broker went away or blocked us mid-visit: claim no more
			// (the loop waits until it is ready again). Without this, each
			// goroutine went on claiming for the rest of its visit, each
			// claim waiting out the publish timeout and being released.
			return total, false, nil
		}
		// Places for a whole batch first (backpressure from the broker):
		// what comes back can be published at once.
		k := int64(s.cfg.ClaimBatch)
		if s.window.Acquire(claimCtx, k) != nil {
			return total, true, nil // claiming stops
		}
		start, sent := time.Now(), s.d.Now()
		res, err := s.claims.claim(workCtx, i, reply)
		if err != nil {
			s.window.Release(k)
			return total, true, err
		}
		s.window.Release(k - int64(len(res.Msgs)))
		s.d.Metrics.ClaimTime.Observe(time.Since(start).Seconds())
		s.d.Metrics.Claimed.Add(float64(len(res.Msgs)))
		// The board hears when the shard next has work: a message that
		// falls due, or a lease that expires (a crashed scanner's
		// messages are due work too).
		next := res.NextWorkMs()
		if s.aff.owns(i) || next >= 0 && next <= res.NowMs {
			// Its wake-ups are ours; or they are another process's, but
			// work is due there now (expired leases of a process that
			// died, a backlog its owner is behind on): help.
			s.board.observe(i, next, res.NowMs, sent, s.d.Now())
		} else { // another process takes its future heads; leases are watched everywhere
			s.board.observe(i, res.LeaseHeadMs, res.NowMs, sent, s.d.Now())
		}
		s.d.Metrics.Reaped.Add(float64(res.Reaped))
		if res.Held > 0 {
			s.flow.heldIn(i)
			s.fair.heardIn(i)
		}
		if len(res.Msgs) == 0 {
			if res.Reaped == 0 {
				s.d.Metrics.EmptyClaims.Inc()
			}
			return total, true, nil
		}
		for j := range res.Msgs {
			s.d.Metrics.ClaimLateness.Observe(float64(max(0, res.NowMs-res.Msgs[j].DueMs)) / 1e3)
		}
		total += len(res.Msgs)
		s.deliver(workCtx, i, res.NowMs, res.Msgs, origin{}, 0)
		// The claim read one entry past its batch: the new head. When it
		// is not due yet (or the shard is empty), and no more leases have
		// expired, another claim would come back empty.
		if next < 0 || next > res.NowMs {
			return total, true, nil
		}
	}
	return total, false, nil
}

// deliver publishes a claimed batch of shard i, let go by from (a claim,
// or a releaser: of a topic under flow control at releasedMs, the Redis
// clock of its grant, 0 otherwise; or of a class's backlog); each confirm
// is settled where it is read (settle.go). It returns once the batch is published, so the worker
// can claim again while confirms are under way.
// Each message holds a place in the window (taken before the claim) until
// it is settled: here if it is not published, else on its confirm or by
// the confirm watch.
// A message that can never be published (past its deadline at nowMs, the
// claim's Redis clock, among others) is dead-lettered, one that cannot be
// published now is released. What cannot be settled (Redis unreachable,
// shutdown deadline) stays leased and comes back.
func (s *Scanner) deliver(ctx context.Context, i int, nowMs int64, msgs []shard.Claimed, from origin, releasedMs int64) {
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	w := s.windowOf(from)
	for j := range msgs {
		c := &msgs[j]
		m, span, sc, dead, err := s.prepare(pctx, i, nowMs, c, releasedMs)
		switch {
		case errors.Is(err, errNotToPublish): // a missed occurrence its schedule skips, or one another scanner has
			w.Release(1)
			continue
		case dead != nil:
			endUndeliverable(span, *dead, s.undeliverable(ctx, i, c, *dead))
			w.Release(1)
			continue
		case err != nil:
			s.release(ctx, i, c, err)
			endSpan(span, "released for a retry", err.Error(), false)
			w.Release(1)
			continue
		}
		if err := s.publish(pctx, i, c, m, deadline, from, sc, span); err != nil {
			s.release(ctx, i, c, err)
			endSpan(span, "released for a retry", err.Error(), false)
			w.Release(1)
		}
	}
}

// origin says what let a claimed message go: a claim (the zero origin),
// the releaser of a topic under flow control, or the releasers of a
// class's backlog (fair.go).
type origin struct {
	topic string // flow control: the topic whose grant released it
	class string // fair release: the class whose turn released it
	// apart: its lateness was chosen (a limit, a pause, a class of weight
	// 0) and is kept out of the fleet's lateness.
	apart bool
}

// windowOf is the window a message's place was taken from: the flow
// releaser's, the class releasers', or the claims'.
func (s *Scanner) windowOf(from origin) *semaphore.Weighted {
	switch {
	case from.topic != "":
		return s.releaseWindow
	case from.class != "":
		return s.fair.window
	}
	return s.window
}

// errNotToPublish: the claimed message is not to be published (a missed
// occurrence its schedule's policy skips), or not by this scanner.
var errNotToPublish = errors.New("not to be published")

// deadReason says why a message cannot be delivered: a metric label and
// the text stored with the message. A refusal by the broker may clear, so
// it is retried up to MaxRefusals times; anything else (a corrupt
// envelope, no route) never will, so it goes to the dead set at once.
type deadReason struct {
	label, text string
	refused     bool
}

// prepare turns a message claimed at nowMs (released by its topic's flow
// control at releasedMs, 0 if not held) into a publish, starts its
// publish span (nil when tracing is off; the caller ends it), and names
// its scope ("" for none, or without Deps.Scopes). A non-nil dead means
// it can never be published (dead-letter); an error means not now
// (release).
func (s *Scanner) prepare(ctx context.Context, i int, nowMs int64, c *shard.Claimed, releasedMs int64) (publisher.Message, trace.Span, string, *deadReason, error) {
	if c.Envelope == nil {
		return publisher.Message{}, nil, "", &deadReason{ReasonCorrupt, "envelope missing from the msg hash", false}, nil
	}
	env, err := shard.DecodeEnvelope(c.Envelope)
	if err != nil {
		return publisher.Message{}, nil, "", &deadReason{ReasonCorrupt, err.Error(), false}, nil
	}
	if env.Occurrence.Schedule != "" {
		// Fired before anything else, so the schedule goes on whatever
		// becomes of this occurrence (dead, refused, retried).
		f, err := s.d.Store.FireOccurrence(ctx, i, c, &env, nowMs)
		s.d.Metrics.OccurrencesSkipped.Add(float64(f.Skipped))
		switch {
		case err != nil && !f.Publish:
			return publisher.Message{}, nil, "", nil, err // released: due again shortly
		case err != nil:
			s.errLog.warn("fire an occurrence of a schedule", err)
		case !f.Publish:
			return publisher.Message{}, nil, "", nil, errNotToPublish
		}
		s.d.Metrics.Occurrences.Inc()
		if s.d.AtStep != nil {
			s.d.AtStep(StepFired)
		}
	}
	span := s.startPublishSpan(c, &env, i, nowMs)
	dest, err := s.d.Routes.Resolve(env.Topic, env.Exchange, env.RoutingKey)
	if err != nil {
		return publisher.Message{}, span, "", &deadReason{ReasonNoRoute, err.Error(), false}, nil
	}
	destined(span, dest.Exchange, dest.RoutingKey) // before any refusal, so its span names where it went
	why, expired := env.Expired(c.DueMs, nowMs)
	if expired && dest.Expired != router.ExpiredPublish {
		return publisher.Message{}, span, "", &deadReason{ReasonExpired, why, false}, nil
	}
	ok, err := s.d.Publisher.ExchangeExists(ctx, dest.Exchange)
	if err != nil {
		return publisher.Message{}, span, "", nil, err
	}
	if !ok {
		return publisher.Message{}, span, "", &deadReason{ReasonExchangeMissing, fmt.Sprintf("exchange %q not found", dest.Exchange), true}, nil
	}
	h := make(amqp.Table, len(env.Headers)+5)
	for _, kv := range env.Headers {
		h[kv.Key] = kv.Value
	}
	h[shard.HeaderDueMs] = c.DueMs
	h[shard.HeaderAttempt] = int32(c.Attempt)
	if expired { // its route publishes it all the same: say how late
		h[shard.HeaderLateMs] = nowMs - c.DueMs
	}
	if releasedMs > 0 { // flow control held it back until then
		// Never before its due time: a grant taken a little before the
		// message fell due (the releaser claims what is due when its claim
		// runs, after the grant) did not hold it at all.
		h[shard.HeaderReleasedMs] = max(releasedMs, c.DueMs)
	}
	if env.ExpiresMs > 0 { // the deadline goes along, for a stepped retry
		h[shard.HeaderExpiresAt] = env.ExpiresMs
	}
	if env.MaxLatenessMs > 0 {
		h[shard.HeaderMaxLateness] = env.MaxLatenessMs
	}
	if o := env.Occurrence; o.Schedule != "" {
		h[shard.HeaderSchedule] = o.Schedule
		h[shard.HeaderNominalMs] = o.NominalMs
	}
	routed(span, h)
	p := env.Properties
	ts := p.Timestamp
	if ts.IsZero() {
		ts = s.d.Now()
	}
	return publisher.Message{
		Exchange: dest.Exchange, RoutingKey: dest.RoutingKey, MessageID: c.ID,
		ContentType: env.ContentType, ContentEncoding: p.ContentEncoding, CorrelationID: p.CorrelationID,
		ReplyTo: p.ReplyTo, Expiration: p.Expiration, Type: p.Type, AppID: p.AppID, Priority: p.Priority,
		DeliveryMode: p.DeliveryMode, Headers: h, Body: env.Body, Timestamp: ts,
	}, span, s.scopeOf(c.ID, &env), nil, nil
}

// undeliverable settles a message that could not be published for why: a
// refusal is retried until MaxRefusals, anything else is dead at once. It
// reports whether the message went to the dead set.
func (s *Scanner) undeliverable(ctx context.Context, i int, c *shard.Claimed, why deadReason) bool {
	if !why.refused {
		ok, err := s.d.Store.DeadLetter(ctx, i, c.Lease, why.text)
		if err != nil {
			s.errLog.warn("dead-letter; the message stays leased and will be retried", err)
		} else if ok {
			s.buried(i, c, why)
		}
		return ok && err == nil
	}
	if ctx.Err() != nil {
		return false // shutting down past the deadline: the lease brings it back
	}
	out, err := s.d.Store.Refuse(ctx, i, c.Lease, s.retryDelay(c.Attempt), s.cfg.MaxRefusals, why.text)
	switch {
	case err != nil:
		s.errLog.warn("release after a refusal; the message stays leased and will be retried", err)
	case out == shard.Buried:
		s.buried(i, c, why)
		return true
	case out == shard.Released:
		s.d.Metrics.Released.Inc()
		s.errLog.warn("broker refused the message; released for a retry", fmt.Errorf("%s: %s", c.ID, why.text))
	}
	return false
}

func (s *Scanner) buried(i int, c *shard.Claimed, why deadReason) {
	s.d.Metrics.Dead.WithLabelValues(why.label).Inc()
	level := zap.ErrorLevel
	if why.label == ReasonExpired { // what its producer asked for, not a fault
		level = zap.InfoLevel
	}
	s.log.Log(level, "message dead-lettered", zap.String("id", c.ID), zap.Int("shard", i),
		zap.Int("attempt", c.Attempt), zap.String("reason", why.text))
}

// retryDelay is the wait before the next publish of a message whose
// attempt-th publish failed: RetryDelay doubled per earlier attempt, at
// most MaxRetryDelay, with ±20% jitter.
func (s *Scanner) retryDelay(attempt int) time.Duration {
	d := s.cfg.RetryDelay << min(max(attempt-1, 0), 20)
	if d <= 0 || d > s.cfg.MaxRetryDelay {
		d = s.cfg.MaxRetryDelay
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func (s *Scanner) release(ctx context.Context, i int, c *shard.Claimed, cause error) {
	if ctx.Err() != nil {
		return // shutting down past the deadline: the lease brings it back
	}
	ok, err := s.d.Store.Release(ctx, i, c.Lease, s.retryDelay(c.Attempt))
	if err != nil {
		s.errLog.warn("release; the message stays leased and will be retried", err)
		return
	}
	if ok {
		s.d.Metrics.Released.Inc()
		s.errLog.warn("publish failed; message released for a retry", fmt.Errorf("%s: %w", c.ID, cause))
	}
}

// rateLimited logs each kind of repeating warning (by message) at most
// once per period, so a loop that hits a down server does not flood the
// log, and one kind does not hide another. What it swallowed is not lost:
// when a period with swallowed warnings ends, one line says how many there
// were, with the latest error, even if no warning of that kind comes
// after it (a burst right after an outage's first warning was otherwise
// never seen). Its timers end at stop, which reports what is still
// swallowed; after stop every warning is logged.
type rateLimited struct {
	log   *zap.Logger
	every time.Duration

	mu      sync.Mutex
	kinds   map[string]*limitState
	stopped bool
}

type limitState struct {
	last       time.Time
	suppressed int
	latest     error       // the latest swallowed error
	report     *time.Timer // set while swallowed ones wait for their report
}

func (r *rateLimited) warn(msg string, err error) {
	if errors.Is(err, context.Canceled) {
		return // shutting down: not an error
	}
	r.mu.Lock()
	if r.kinds == nil {
		r.kinds = map[string]*limitState{}
	}
	st := r.kinds[msg]
	if st == nil {
		st = &limitState{}
		r.kinds[msg] = st
	}
	now := time.Now()
	if now.Sub(st.last) < r.every && !r.stopped { // after stop, no timer would report it: log it
		st.suppressed++
		st.latest = err
		if st.report == nil {
			st.report = time.AfterFunc(st.last.Add(r.every).Sub(now), func() { r.reportSwallowed(msg) })
		}
		r.mu.Unlock()
		return
	}
	n := st.suppressed
	st.last, st.suppressed, st.latest = now, 0, nil
	if st.report != nil {
		st.report.Stop()
		st.report = nil
	}
	r.mu.Unlock()
	r.log.Warn(msg, zap.Error(err), zap.Int("suppressed_since_last", n))
}

// reportSwallowed logs how many warnings msg swallowed since its last
// line, if any, and starts a new period.
func (r *rateLimited) reportSwallowed(msg string) {
	r.mu.Lock()
	st := r.kinds[msg]
	st.report = nil
	n, err := st.suppressed, st.latest
	if n == 0 {
		r.mu.Unlock()
		return
	}
	st.last, st.suppressed, st.latest = time.Now(), 0, nil
	r.mu.Unlock()
	r.log.Warn(msg+" (repeated)", zap.Int("times", n), zap.NamedError("latest", err))
}

// stop reports every kind's swallowed warnings now and ends the timers.
func (r *rateLimited) stop() {
	r.mu.Lock()
	r.stopped = true
	var waiting []string
	for msg, st := range r.kinds {
		if st.report != nil && st.report.Stop() {
			waiting = append(waiting, msg)
		}
	}
	r.mu.Unlock()
	for _, msg := range waiting {
		r.reportSwallowed(msg)
	}
}
