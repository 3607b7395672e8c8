package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

const (
	exchange  = "bench"
	bodyBytes = 100
	shards    = 16
)

var body = []byte(strings.Repeat("x", bodyBytes))

// bench holds the servers and clients every scenario shares.
type bench struct {
	c      config
	rs     *shardtest.Redis
	rabbit *publishertest.Rabbit
	rdb    *redis.Client
	res    *results
	seq    atomic.Int64
}

func run(ctx context.Context, c config) (*results, error) {
	if _, err := os.Stat(c.delayq); err != nil {
		return nil, fmt.Errorf("delayq binary: %w (go build -o bin/delayq ./cmd/delayq)", err)
	}
	host, _ := os.Hostname()
	r := &results{Machine: fmt.Sprintf("%s, %d cores, %s", host, runtime.NumCPU(), runtime.Version()), Started: time.Now()}
	b := &bench{c: c, res: r}
	say("starting Redis and RabbitMQ on loopback ...")
	var err error
	if b.rs, err = shardtest.StartRedis(shardtest.RedisOptions{}); err != nil {
		return nil, err
	}
	defer b.rs.Close()
	if b.rabbit, err = publishertest.StartRabbit(); err != nil {
		return nil, err
	}
	defer b.rabbit.Close()
	b.rdb = redis.NewClient(&redis.Options{Addr: b.rs.Addr, PoolSize: 64})
	defer b.rdb.Close()
	// Every command over 5 ms is kept (the default log holds 128).
	if err := b.rdb.ConfigSet(ctx, "slowlog-max-len", "1000000").Err(); err != nil {
		return nil, err
	}
	if err := b.rdb.ConfigSet(ctx, "slowlog-log-slower-than", "5000").Err(); err != nil {
		return nil, err
	}
	if err := b.declareExchange(); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{{"ceilings", b.ceilings}, {"saturated", b.saturated}, {"steady", b.steady}, {"burst", b.burst}, {"idle", b.idle}, {"memory", b.memory}, {"far", b.farLateness}, {"bulk", b.bulk}, {"ingress", b.ingress}, {"console", b.console}, {"flow", b.flow}, {"schedules", b.schedules}, {"tracing", b.tracing}, {"quota", b.quota}, {"fair", b.fair}, {"export", b.export}, {"move", b.move}, {"ab", b.ab}}
	for _, step := range steps {
		if c.only != nil && step.name != "ceilings" && !c.only[step.name] || c.only == nil && step.name == "ab" {
			continue
		}
		if err := step.run(ctx); err != nil {
			return r, err
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
	}
	b.targets()
	return r, nil
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) declareExchange() error {
	conn, err := amqp.Dial(b.rabbit.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil)
}

// namespace returns a fresh namespace (and queue / routing key name).
func (b *bench) namespace(what string) string {
	return fmt.Sprintf("%s-%d", what, b.seq.Add(1))
}

// fill enqueues n messages in namespace ns, due after delay (or at the
// same absolute millisecond when at is non-zero), in pipelined batches.
func (b *bench) fill(ctx context.Context, ns string, n int, delay time.Duration, at time.Time) (*shard.Producer, error) {
	return b.fillM(ctx, ns, n, shards, delay, at)
}

// fillM is fill over m shards.
func (b *bench) fillM(ctx context.Context, ns string, n, m int, delay time.Duration, at time.Time) (*shard.Producer, error) {
	return b.fillTopics(ctx, ns, n, m, delay, at, nil)
}

// fillTopics is fillM that gives message i the topic topic(i) (routed by
// the scanners' routes file) instead of the bench's exchange, when topic
// is not nil.
func (b *bench) fillTopics(ctx context.Context, ns string, n, m int, delay time.Duration, at time.Time, topic func(i int) string) (*shard.Producer, error) {
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return nil, err
	}
	prod := shard.NewProducer(st, balance.Static(m), shard.ProducerOptions{})
	const batch = 2000
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	next := atomic.Int64{}
	for range 4 {
		wg.Go(func() {
			for {
				start := int(next.Add(batch)) - batch
				if start >= n {
					return
				}
				msgs := make([]shard.Message, 0, batch)
				for i := start; i < min(n, start+batch); i++ {
					msg := shard.Message{ID: ns + "-" + strconv.Itoa(i), Exchange: exchange, RoutingKey: ns, Body: body, Delay: delay, At: at}
					if topic != nil {
						msg.Topic, msg.Exchange, msg.RoutingKey = topic(i), "", ""
					}
					msgs = append(msgs, msg)
				}
				res, err := prod.EnqueueBatch(ctx, msgs)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return prod, nil
}

// ---- ceilings ----

type ceilings struct {
	Clients      int          `json:"claim_clients"`
	ClaimBatches []claimRate  `json:"claim"`
	Channels     int          `json:"amqp_channels"`
	AMQPWindows  []windowRate `json:"amqp"`
	AMQPBest     float64      `json:"amqp_best"`
}

type claimRate struct {
	Batch int     `json:"batch"`
	Rate  float64 `json:"msgs_per_sec"`
	CPU   *cpuUse `json:"cpu"`
}

type windowRate struct {
	Window int     `json:"window"`
	Rate   float64 `json:"msgs_per_sec"`
	CPU    *cpuUse `json:"cpu"`
}

// sharedLimit is (d), the pipeline's limit when every process shares the
// same cores, as on a benchmark machine: the machine's cores divided by the
// CPU time per message that the two ceilings spent in all processes
// together (claim script for batch k, plus the best AMQP window). Limit (c)
// assumes Redis and RabbitMQ each have the machine to themselves, which
// the pipeline cannot have while the ceilings alone already use about all
// of it. 0 when a ceiling has no CPU figure.
func (c ceilings) sharedLimit(k int) float64 {
	var claim, amqpCPU float64
	for _, cr := range c.ClaimBatches {
		if cr.Batch == k && cr.CPU != nil {
			claim = cr.CPU.usTotal()
		}
	}
	for _, w := range c.AMQPWindows {
		if w.Rate == c.AMQPBest && w.CPU != nil {
			amqpCPU = w.CPU.usTotal()
		}
	}
	if claim == 0 || amqpCPU == 0 {
		return 0
	}
	return float64(runtime.NumCPU()) * 1e6 / (claim + amqpCPU)
}

// limit is (c): the lower of the claim ceiling for batch k and the best
// AMQP ceiling.
func (c ceilings) limit(k int) float64 {
	for _, cr := range c.ClaimBatches {
		if cr.Batch == k {
			return math.Min(cr.Rate, c.AMQPBest)
		}
	}
	return c.AMQPBest
}

func (b *bench) ceilings(ctx context.Context) error {
	c := &b.res.Ceilings
	c.Clients, c.Channels = claimClients, amqpChannels
	for _, k := range b.c.batches {
		cr, err := b.claimCeiling(ctx, k, b.c.ceilingMsgs)
		if err != nil {
			return err
		}
		c.ClaimBatches = append(c.ClaimBatches, cr)
	}
	for _, w := range []int{32, 128, 512} {
		wr, err := b.amqpCeiling(ctx, w, b.c.ceilingMsgs)
		if err != nil {
			return err
		}
		c.AMQPWindows = append(c.AMQPWindows, wr)
		c.AMQPBest = math.Max(c.AMQPBest, wr.Rate)
	}
	return nil
}

const claimClients, amqpChannels = 32, 4

// nearCeilings measures the ceilings for batch k again (the claim script,
// and the AMQP window that was best at the start), right before a
// scenario, with half the messages. The machine's speed drifts over a long
// run (shared hosts; CPU credits), so each scenario is compared with
// ceilings measured next to it, not minutes earlier.
func (b *bench) nearCeilings(ctx context.Context, k int) (ceilings, error) {
	c := ceilings{Clients: claimClients, Channels: amqpChannels}
	cr, err := b.claimCeiling(ctx, k, b.c.ceilingMsgs/2)
	if err != nil {
		return c, err
	}
	best := 128
	for _, w := range b.res.Ceilings.AMQPWindows {
		if w.Rate == b.res.Ceilings.AMQPBest {
			best = w.Window
		}
	}
	wr, err := b.amqpCeiling(ctx, best, b.c.ceilingMsgs/2)
	if err != nil {
		return c, err
	}
	c.ClaimBatches, c.AMQPWindows, c.AMQPBest = []claimRate{cr}, []windowRate{wr}, wr.Rate
	return c, nil
}

// ceilingsAfter empties Redis after a scenario and measures the ceilings
// for batch k again, as nearCeilings does before one.
func (b *bench) ceilingsAfter(ctx context.Context, k int) (ceilings, error) {
	b.rdb.FlushAll(ctx)
	return b.nearCeilings(ctx, k)
}

// claimCeiling: claimClients goroutines run the claim script with batch k
// over n messages, all due, until every shard is empty.
func (b *bench) claimCeiling(ctx context.Context, k, n int) (claimRate, error) {
	ns := b.namespace("ceiling-claim")
	if _, err := b.fill(ctx, ns, n, 0, time.Time{}); err != nil {
		return claimRate{}, err
	}
	defer b.rdb.FlushAll(ctx)
	st, _ := shard.NewStore(b.rdb, ns)
	if err := st.Load(ctx); err != nil {
		return claimRate{}, err
	}
	var claimed atomic.Int64
	var wg sync.WaitGroup
	cpu0 := b.sampleCPU(nil)
	start := time.Now()
	for g := range claimClients {
		wg.Go(func() {
			for i, empty := g, 0; empty < shards; i++ { // done when a whole round of shards is empty
				r, err := st.Claim(ctx, i%shards, k, time.Hour)
				if err != nil {
					return
				}
				if len(r.Msgs) == 0 {
					empty++
					continue
				}
				empty = 0
				i-- // stay on a shard while it has messages
				claimed.Add(int64(len(r.Msgs)))
			}
		})
	}
	wg.Wait()
	rate := float64(claimed.Load()) / time.Since(start).Seconds()
	cpu := b.sampleCPU(nil).since(cpu0, int(claimed.Load()))
	say("ceiling (a): claim script alone, k=%d: %.0f msg/s; CPU %s", k, rate, cpu)
	return claimRate{Batch: k, Rate: rate, CPU: cpu}, nil
}

// amqpCeiling measures bare amqp091-go with confirm window w over n messages.
func (b *bench) amqpCeiling(ctx context.Context, w, n int) (windowRate, error) {
	cpu0 := b.sampleCPU(nil)
	rate, err := b.bareAMQP(ctx, amqpChannels, w, n)
	if err != nil {
		return windowRate{}, err
	}
	cpu := b.sampleCPU(nil).since(cpu0, n)
	say("ceiling (b): bare amqp091-go, %d channels, window %d: %.0f msg/s; CPU %s", amqpChannels, w, rate, cpu)
	return windowRate{Window: w, Rate: rate, CPU: cpu}, nil
}

// bareAMQP publishes n persistent 100-byte messages with confirms over
// channels channels, at most window unconfirmed per channel, to a durable
// queue that a consumer drains, and returns the confirmed rate.
func (b *bench) bareAMQP(ctx context.Context, channels, window, n int) (float64, error) {
	ns := b.namespace("ceiling-amqp")
	stopConsumer, err := b.consume(ctx, ns, nil)
	if err != nil {
		return 0, err
	}
	defer stopConsumer()
	conn, err := amqp.Dial(b.rabbit.URL)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var wg sync.WaitGroup
	per := n / channels
	start := time.Now()
	errs := make(chan error, channels)
	for range channels {
		wg.Go(func() {
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			if err != nil {
				errs <- err
				return
			}
			confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
			outstanding := 0
			for i := range per {
				for outstanding >= window {
					<-confirms
					outstanding--
				}
				err := ch.PublishWithContext(ctx, exchange, ns, true, false, amqp.Publishing{
					DeliveryMode: amqp.Persistent, MessageId: strconv.Itoa(i), Body: body,
					Headers: amqp.Table{shard.HeaderDueMs: int64(0), shard.HeaderAttempt: int32(1)}})
				if err != nil {
					errs <- err
					return
				}
				outstanding++
			}
			for ; outstanding > 0; outstanding-- {
				<-confirms
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(per*channels) / time.Since(start).Seconds(), nil
}

// ---- consumer ----

// tally collects deliveries of one scenario.
type tally struct {
	mu    sync.Mutex
	late  []time.Duration // receive time - x-delayq-due-ms, first deliveries
	at    []time.Time     // receive times of first deliveries
	rel   []int64         // x-delayq-released-ms of first deliveries that have one
	seen  map[string]bool
	early int
	dups  int
	first time.Time
	last  time.Time
	count atomic.Int64
	// classOf, when set, names the class of a message by its id; the
	// receive times of first deliveries are then kept by class too.
	classOf func(id string) string
	byClass map[string][]time.Time
}

func newTally() *tally { return &tally{seen: map[string]bool{}} }

// consume declares queue ns bound to the bench exchange and feeds
// deliveries to t (nil: just drain). It returns a stop function.
func (b *bench) consume(ctx context.Context, ns string, t *tally) (func(), error) {
	conn, err := amqp.Dial(b.rabbit.URL)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(ns, true, false, false, false, nil)
	}
	if err == nil {
		err = ch.QueueBind(ns, ns, exchange, false, nil)
	}
	if err == nil {
		err = ch.Qos(5000, 0, false)
	}
	var d <-chan amqp.Delivery
	if err == nil {
		d, err = ch.Consume(ns, "", true, true, false, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range d {
			if t == nil {
				continue
			}
			now := time.Now()
			due, _ := m.Headers[shard.HeaderDueMs].(int64)
			t.mu.Lock()
			if t.first.IsZero() {
				t.first = now
			}
			t.last = now
			if t.seen[m.MessageId] {
				t.dups++
			} else {
				t.seen[m.MessageId] = true
				if now.UnixMilli() < due {
					t.early++
				}
				t.late = append(t.late, now.Sub(time.UnixMilli(due)))
				t.at = append(t.at, now)
				if t.classOf != nil {
					c := t.classOf(m.MessageId)
					t.byClass[c] = append(t.byClass[c], now)
				}
				if rel, ok := m.Headers[shard.HeaderReleasedMs].(int64); ok {
					t.rel = append(t.rel, rel)
				}
			}
			t.mu.Unlock()
			t.count.Add(1)
		}
	}()
	return func() {
		_, _ = ch.QueueDelete(ns, false, false, false)
		_ = conn.Close()
		<-done
	}, nil
}

// waitFor waits until t has n distinct messages or the timeout passes.
func (t *tally) waitFor(ctx context.Context, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		t.mu.Lock()
		got := len(t.seen)
		t.mu.Unlock()
		if got >= n {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (t *tally) quantiles() (p50, p99, p999, max time.Duration) {
	return t.quantilesBetween(time.Time{}, time.Time{})
}

// quantilesBetween is quantiles of the first deliveries received in
// [from, to) (zero times: no bound).
func (t *tally) quantilesBetween(from, to time.Time) (p50, p99, p999, max time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s []time.Duration
	for j, l := range t.late {
		if at := t.at[j]; (from.IsZero() || !at.Before(from)) && (to.IsZero() || at.Before(to)) {
			s = append(s, l)
		}
	}
	if len(s) == 0 {
		return
	}
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return q(0.5), q(0.99), q(0.999), s[len(s)-1]
}

// ---- scanner processes ----

type fleet struct {
	procs   []*exec.Cmd
	metrics []string // each process's /metrics address
}

func (b *bench) startFleet(ns string, n, k, m int, extraEnv ...string) (*fleet, error) {
	return b.startFleetOf(ns, n, k, m, b.c.goroutines, extraEnv...)
}

func (b *bench) startFleetOf(ns string, n, k, m, goroutines int, extraEnv ...string) (*fleet, error) {
	f := &fleet{}
	for range n {
		addr, err := freeAddr()
		if err != nil {
			f.stop()
			return nil, err
		}
		cmd := exec.Command(b.c.delayq, "scan")
		cmd.Env = append(os.Environ(), "DELAYQ_REDIS_ADDRS="+b.rs.Addr, "DELAYQ_AMQP_URL="+b.rabbit.URL,
			"DELAYQ_NAMESPACE="+ns, fmt.Sprintf("DELAYQ_SHARDS=%d", m), fmt.Sprintf("DELAYQ_CLAIM_BATCH=%d", k),
			fmt.Sprintf("DELAYQ_GOROUTINES=%d", goroutines), "DELAYQ_LOG_LEVEL=error", "DELAYQ_LOG_FORMAT=console",
			"DELAYQ_METRICS_ADDR="+addr)
		cmd.Env = append(cmd.Env, b.c.scannerEnv...)
		cmd.Env = append(cmd.Env, extraEnv...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			f.stop()
			return nil, err
		}
		f.procs = append(f.procs, cmd)
		f.metrics = append(f.metrics, addr)
	}
	return f, nil
}

func (f *fleet) stop() {
	for _, p := range f.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range f.procs {
		_ = p.Wait()
	}
}

// ---- saturated dispatch ----

type saturatedResult struct {
	Batch    int     `json:"batch"`
	Scanners int     `json:"scanners"`
	Messages int     `json:"messages"`
	Rate     float64 `json:"msgs_per_sec"`
	OfLimit  float64 `json:"of_limit"`
	OfShared float64 `json:"of_shared_limit"` // of (d)
	Limit    float64 `json:"limit"`           // (c), of the ceilings measured right before and right after
	Shared   float64 `json:"shared_limit"`    // (d), likewise
	// The fields above are those of the median round (by OfShared); Rounds
	// has every round, in order.
	Rounds []saturatedRound `json:"rounds"`
	Near   ceilings         `json:"near_ceilings"` // measured right before the median round
	After  ceilings         `json:"after_ceilings"`
	CPU    *cpuUse          `json:"cpu"`
}

// saturatedRound is one drain of the backlog and the ceilings on both
// sides of it.
type saturatedRound struct {
	Rate     float64 `json:"msgs_per_sec"`
	OfShared float64 `json:"of_shared_limit"`
	Shared   float64 `json:"shared_limit"`
	Limit    float64 `json:"limit"`
}

// drainBacklog fills n messages due at one moment 2 s ahead, starts the
// fleet, and measures the rate from the first to the last delivery.
func (b *bench) drainBacklog(ctx context.Context, what string, n, k, scanners int) (rate float64, drain time.Duration, cpu *cpuUse, err error) {
	return b.drainBacklogWith(ctx, what, n, k, scanners, nil)
}

// drainBacklogWith is drainBacklog that calls setup (when not nil) with
// the namespace before anything is enqueued into it.
func (b *bench) drainBacklogWith(ctx context.Context, what string, n, k, scanners int, setup func(ns string) error) (rate float64, drain time.Duration, cpu *cpuUse, err error) {
	rate, drain, cpu, _, err = b.drainBacklogHow(ctx, what, n, k, scanners, drainSetup{setup: setup})
	return rate, drain, cpu, err
}

// drainSetup says how drainBacklogHow prepares its namespace: setup runs
// before anything is enqueued; env gives the scanners more variables;
// topic, when set, gives message i a topic instead of the bench's
// exchange (the routes file in env routes it), and the tally then keeps
// the receive times by topic.
type drainSetup struct {
	setup func(ns string) error
	env   func(ns string) ([]string, error)
	topic func(i int) string
}

// drainBacklogHow is drainBacklogWith as s says; it also returns the
// tally of the deliveries.
func (b *bench) drainBacklogHow(ctx context.Context, what string, n, k, scanners int, s drainSetup) (rate float64, drain time.Duration, cpu *cpuUse, t *tally, err error) {
	ns := b.namespace(what)
	t = newTally()
	if s.setup != nil {
		if err := s.setup(ns); err != nil {
			return 0, 0, nil, t, err
		}
	}
	if s.topic != nil {
		prefix := ns + "-"
		t.classOf = func(id string) string {
			i, _ := strconv.Atoi(strings.TrimPrefix(id, prefix))
			return s.topic(i)
		}
		t.byClass = map[string][]time.Time{}
	}
	stop, err := b.consume(ctx, ns, t)
	if err != nil {
		return 0, 0, nil, t, err
	}
	defer stop()
	var extra []string
	if b.c.profileDir != "" {
		extra = append(extra, "DELAYQ_PPROF=true")
	}
	if s.env != nil {
		more, err := s.env(ns)
		if err != nil {
			return 0, 0, nil, t, err
		}
		extra = append(extra, more...)
	}
	f, err := b.startFleet(ns, scanners, k, shards, extra...)
	if err != nil {
		return 0, 0, nil, t, err
	}
	defer f.stop()
	// All due at one millisecond, far enough ahead that filling ends first
	// (filling runs at well over 20k messages/s).
	at := time.Now().Add(2*time.Second + time.Duration(n/20000)*time.Second).Truncate(time.Millisecond)
	fillStart := time.Now()
	if _, err := b.fillTopics(ctx, ns, n, shards, 0, at, s.topic); err != nil {
		return 0, 0, nil, t, err
	}
	say("  %d messages enqueued in %s", n, time.Since(fillStart).Round(time.Millisecond))
	if time.Now().After(at) {
		b.res.Notes = append(b.res.Notes, fmt.Sprintf("%s: filling %d messages ended after they fell due", what, n))
	}
	sleep(ctx, time.Until(at))
	depth, err := b.sampleQueue(ctx, ns)
	if err != nil {
		return 0, 0, nil, t, err
	}
	cpu0 := b.sampleCPU(f)
	var profiled sync.WaitGroup
	if b.c.profileDir != "" {
		// The first 2 s of the drain (60,000 messages take 2-4 s here).
		profiled.Go(func() { b.profile(ctx, f, fmt.Sprintf("%s-k%d-s%d", what, k, scanners), 2*time.Second) })
	}
	delivered := t.waitFor(ctx, n, time.Duration(n/500+60)*time.Second)
	q := depth() // stops the sampler, also when the drain failed
	if !delivered {
		profiled.Wait()
		return 0, 0, nil, t, fmt.Errorf("%s: only %d of %d delivered", what, t.count.Load(), n)
	}
	cpu = b.sampleCPU(f).since(cpu0, n)
	profiled.Wait()
	t.mu.Lock()
	drain = t.last.Sub(t.first)
	t.mu.Unlock()
	say("  %s, k=%d: messages ready in the broker queue during the drain: mean %.0f, max %d (%d samples)", what, k, q.mean, q.max, q.n)
	if q.err != nil {
		say("  %s, k=%d: sampling the broker queue stopped early: %v", what, k, q.err)
	}
	return float64(n) / drain.Seconds(), drain, cpu, t, nil
}

// queueDepth summarises the samples of a broker queue's ready messages.
type queueDepth struct {
	mean float64
	max  int
	n    int
	err  error // what stopped the sampling early, if anything
}

// sampleQueue reads the ready messages of queue ns every 50 ms (a passive
// declare on a connection of its own) until the returned function is
// called, which returns the summary. A backlog in the broker queue means
// the consumer, not the scanners, set the pace, and RabbitMQ spends more
// per message on a queue with a backlog than on one whose consumer waits.
func (b *bench) sampleQueue(ctx context.Context, ns string) (func() queueDepth, error) {
	conn, err := amqp.Dial(b.rabbit.URL)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var q queueDepth
	var sum int
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			st, err := ch.QueueDeclarePassive(ns, true, false, false, false, nil)
			if err != nil {
				q.err = err
				return
			}
			q.n++
			sum += st.Messages
			q.max = max(q.max, st.Messages)
		}
	}()
	return func() queueDepth {
		cancel()
		<-done
		_ = conn.Close()
		if q.n > 0 {
			q.mean = float64(sum) / float64(q.n)
		}
		return q
	}, nil
}

// saturated drains a backlog with each claim batch k in several rounds,
// each between two measurements of the ceilings: the one right before it
// and the one right after it (which is the next round's "before"). A drain
// is compared with both: the host's speed moves within seconds (the (d) of
// one k measured before and after a 4 s drain differed by up to 1.5x on
// the benchmark VM), so one drain against one ceiling is a coin toss
// either way. The median round decides the target; every round is shown.
func (b *bench) saturated(ctx context.Context) error {
	for _, k := range b.c.batches {
		before, err := b.nearCeilings(ctx, k)
		if err != nil {
			return err
		}
		type round struct {
			r             saturatedRound
			before, after ceilings
			cpu           *cpuUse
		}
		var rounds []round
		for range b.c.rounds {
			// One name per round, so -profile keeps each round's profiles.
			rate, _, cpu, err := b.drainBacklog(ctx, fmt.Sprintf("saturated-r%d", len(rounds)+1), b.c.backlog, k, 1)
			if err != nil {
				return err
			}
			after, err := b.ceilingsAfter(ctx, k)
			if err != nil {
				return err
			}
			r := saturatedRound{Rate: rate, Limit: (before.limit(k) + after.limit(k)) / 2, Shared: bracketShared(k, before, after)}
			if r.Shared > 0 {
				r.OfShared = rate / r.Shared
			}
			say("saturated dispatch, k=%d, round %d: %.0f msg/s (%.0f%% of limit (d) %.0f measured right before and after: %.0f, %.0f); CPU %s",
				k, len(rounds)+1, rate, 100*r.OfShared, r.Shared, before.sharedLimit(k), after.sharedLimit(k), cpu)
			rounds = append(rounds, round{r, before, after, cpu})
			before = after
		}
		sorted := slices.Clone(rounds)
		slices.SortFunc(sorted, func(x, y round) int { return cmp.Compare(x.r.OfShared, y.r.OfShared) })
		med := sorted[len(sorted)/2]
		s := saturatedResult{Batch: k, Scanners: 1, Messages: b.c.backlog, Rate: med.r.Rate, Limit: med.r.Limit, Shared: med.r.Shared,
			OfShared: med.r.OfShared, OfLimit: med.r.Rate / med.r.Limit, Near: med.before, After: med.after, CPU: med.cpu}
		for _, r := range rounds {
			s.Rounds = append(s.Rounds, r.r)
		}
		b.res.Saturated = append(b.res.Saturated, s)
		say("saturated dispatch, k=%d: median of %d rounds %.0f msg/s (%.0f%% of limit (c) %.0f, %.0f%% of limit (d) %.0f)",
			k, len(rounds), s.Rate, 100*s.OfLimit, s.Limit, 100*s.OfShared, s.Shared)
	}
	return nil
}

// bracketShared is (d) for batch k from the ceilings measured before and
// after a scenario: the cores over the mean of their CPU per message.
func bracketShared(k int, before, after ceilings) float64 {
	d0, d1 := before.sharedLimit(k), after.sharedLimit(k)
	if d0 == 0 || d1 == 0 {
		return max(d0, d1)
	}
	return 2 / (1/d0 + 1/d1) // cores / mean CPU per message = harmonic mean of the two limits
}

// bestBatch is the batch size with the highest saturated dispatch rate.
func (b *bench) bestBatch() (int, float64) {
	best, rate := 1, 0.0
	for _, s := range b.res.Saturated {
		if s.Rate > rate {
			best, rate = s.Batch, s.Rate
		}
	}
	return best, rate
}

// ---- steady load ----

type steadyResult struct {
	Batch    int           `json:"batch"`
	Scanners int           `json:"scanners"`
	Load     float64       `json:"load_of_limit"`
	Rate     float64       `json:"enqueue_per_sec"`
	Dispatch float64       `json:"dispatch_per_sec"`
	P50      time.Duration `json:"lateness_p50_ns"`
	P99      time.Duration `json:"lateness_p99_ns"`
	P999     time.Duration `json:"lateness_p999_ns"`
	// From the scanners' histograms (bucket upper bounds, so coarse): the
	// Redis time of the claim minus the due time, the part of the
	// lateness spent before a scanner reached the message.
	ClaimP50 time.Duration `json:"claim_lateness_p50_le_ns"`
	ClaimP99 time.Duration `json:"claim_lateness_p99_le_ns"`
	// In the stationary window: CPU of every process (per dispatched
	// message; the enqueues run on the same cores), and the scanners'
	// claim script calls per dispatched message.
	CPU          *cpuUse       `json:"cpu,omitempty"`
	ClaimsPerMsg float64       `json:"claims_per_msg"`
	EmptyPerMsg  float64       `json:"empty_claims_per_msg"` // claims that found nothing due, per message
	Max          time.Duration `json:"lateness_max_ns"`
	Early        int           `json:"early"`
	Missing      int64         `json:"backlog_after_60s"` // not yet delivered 60 s after the producer stopped (overload, not loss)
	// SharedAfter is (d) measured right after the run, and OfSharedAfter
	// the run's rate as a fraction of it: the load the run was by the
	// host's speed at its end (the rate itself is a fraction of the (d)
	// measured before the runs of its k, which the host's drift moves).
	SharedAfter   float64 `json:"shared_limit_after"`
	OfSharedAfter float64 `json:"of_shared_limit_after"`
}

func (b *bench) steady(ctx context.Context) error {
	for _, k := range b.c.batches {
		near, err := b.nearCeilings(ctx, k)
		if err != nil {
			return err
		}
		// The loads are fractions of (d), the shared-core limit, as the
		// targets are: (c) assumes Redis and RabbitMQ each have the
		// machine to themselves, which no pipeline on these cores can have.
		limit := near.sharedLimit(k)
		say("steady k=%d: limit (d) measured now: %.0f msg/s ((c) %.0f)", k, limit, near.limit(k))
		if limit == 0 {
			limit = near.limit(k)
			say("steady k=%d: no CPU figures for (d); the runs use (c)", k)
		}
		if b.c.fixedLimit > 0 {
			limit = b.c.fixedLimit
			say("steady k=%d: the runs use -limit %.0f msg/s instead", k, limit)
		}
		for _, n := range b.c.scanners {
			for _, load := range b.c.loads {
				s, err := b.steadyRun(ctx, k, n, load, limit*load)
				if err != nil {
					return err
				}
				after, err := b.ceilingsAfter(ctx, k)
				if err != nil {
					return err
				}
				if s.SharedAfter = after.sharedLimit(k); s.SharedAfter > 0 {
					s.OfSharedAfter = s.Rate / s.SharedAfter
				}
				b.res.Steady = append(b.res.Steady, s)
				say("steady k=%d, %d scanner(s), %.0f%% (%.0f/s; %.0f%% of the (d) of %.0f measured right after): dispatch %.0f/s, p50 %s p99 %s max %s, early %d, missing %d",
					k, n, 100*load, s.Rate, 100*s.OfSharedAfter, s.SharedAfter, s.Dispatch, ms(s.P50), ms(s.P99), ms(s.Max), s.Early, s.Missing)
				say("  of which before the claim: p50 <= %s, p99 <= %s; %.2f claims per message (%.2f found nothing); CPU %s",
					ms(s.ClaimP50), ms(s.ClaimP99), s.ClaimsPerMsg, s.EmptyPerMsg, s.CPU)
			}
		}
	}
	return nil
}

const (
	claimLateness = "delayq_claim_lateness_seconds"
	confirmTime   = "delayq_publish_confirm_seconds" // every publish, held ones too
	claimDuration = "delayq_claim_duration_seconds"  // its count: claim calls
	emptyClaims   = "delayq_claims_empty_total"      // claims that found nothing due
)

// steadyRun: an open-loop producer enqueues rate msg/s, each due 1-5 s
// later, for c.steadyFor; the run ends when all are delivered.
func (b *bench) steadyRun(ctx context.Context, k, scanners int, load, rate float64) (steadyResult, error) {
	return b.steadyRunWith(ctx, "steady", k, scanners, load, rate, b.c.steadyFor, nil)
}

// steadyRunWith is steadyRun for runFor, in a namespace named after what,
// with prep (when not nil) run on the namespace before the fleet starts.
func (b *bench) steadyRunWith(ctx context.Context, what string, k, scanners int, load, rate float64, runFor time.Duration,
	prep func(ns string, st *shard.Store) error) (steadyResult, error) {
	ns := b.namespace(what)
	res := steadyResult{Batch: k, Scanners: scanners, Load: load, Rate: rate}
	t := newTally()
	stop, err := b.consume(ctx, ns, t)
	if err != nil {
		return res, err
	}
	defer stop()
	if prep != nil {
		st, err := shard.NewStore(b.rdb, ns)
		if err != nil {
			return res, err
		}
		if err := prep(ns, st); err != nil {
			return res, err
		}
	}
	var extra []string
	if b.c.profileDir != "" {
		extra = append(extra, "DELAYQ_PPROF=true")
	}
	f, err := b.startFleet(ns, scanners, k, shards, extra...)
	if err != nil {
		return res, err
	}
	defer f.stop()
	st, _ := shard.NewStore(b.rdb, ns)
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	var profiles sync.WaitGroup
	defer profiles.Wait()
	// The machine's work in the stationary part of the run (from 5 s,
	// when every delay of 1-5 s is in play, to the producer's end): CPU
	// of every process, and the scanners' claims.
	var w0 window
	start := time.Now()
	sent, enqErr := openLoop(ctx, prod, ns, rate, start, func(el time.Duration) bool {
		if el > runFor {
			return false
		}
		if w0.at.at.IsZero() && el >= 5*time.Second {
			if w0, err = b.workWindow(ctx, f, t); err != nil {
				return false // after the sends under way are done
			}
			if b.c.profileDir != "" {
				name := fmt.Sprintf("steady-k%d-s%d-load%.0f", k, scanners, 100*load)
				profiles.Go(func() { b.profile(ctx, f, name, runFor-el) })
			}
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if enqErr != nil {
		return res, enqErr
	}
	if !w0.at.at.IsZero() {
		w1, err := b.workWindow(ctx, f, t)
		if err != nil {
			return res, err
		}
		if n := int(w1.delivered - w0.delivered); n > 0 {
			res.CPU = w1.at.since(w0.at, n)
			res.ClaimsPerMsg = float64(w1.claims-w0.claims) / float64(n)
			res.EmptyPerMsg = float64(w1.empty-w0.empty) / float64(n)
		}
	}
	t.waitFor(ctx, sent, 60*time.Second) // past that, what is left is a backlog, reported as such
	hs, err := f.scrapeHistograms(ctx, claimLateness)
	if err != nil {
		return res, err
	}
	res.ClaimP50, res.ClaimP99 = hs[claimLateness].quantile(0.5), hs[claimLateness].quantile(0.99)
	t.mu.Lock()
	res.Missing = int64(sent - len(t.seen))
	// Dispatch rate in the stationary window: from 5 s after the producer
	// started (every delay of 1-5 s is in play) to 1 s after it stopped.
	from, to := start.Add(5*time.Second), start.Add(runFor+time.Second)
	if to.Sub(from) >= time.Second {
		n := 0
		for _, at := range t.at {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
		res.Dispatch = float64(n) / to.Sub(from).Seconds()
	} else if span := t.last.Sub(t.first); span > 0 {
		res.Dispatch = float64(len(t.seen)) / span.Seconds()
	}
	res.Early = t.early
	t.mu.Unlock()
	res.P50, res.P99, res.P999, res.Max = t.quantiles()
	return res, nil
}

// openLoop is the benchmarks' open-loop producer: from start, every 10 ms
// it sends what rate says should have been sent by then (each message due
// 1-5 s later), whatever the system under test does, the send itself in a
// goroutine so that it never holds the schedule back. Before each send it
// calls onTick with the time elapsed, and stops when that returns false or
// ctx ends. It returns how many it sent, once every send is done, and the
// last enqueue error.
func openLoop(ctx context.Context, prod *shard.Producer, ns string, rate float64, start time.Time, onTick func(el time.Duration) bool) (int, error) {
	sent := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	var enqErr atomic.Value
	for now := range tick.C {
		el := now.Sub(start)
		if ctx.Err() != nil || !onTick(el) {
			break
		}
		want := int(rate * el.Seconds())
		if want <= sent {
			continue
		}
		msgs := make([]shard.Message, 0, want-sent)
		for i := sent; i < want; i++ {
			delay := time.Second + time.Duration(uint64(i)*2654435761%4000)*time.Millisecond
			msgs = append(msgs, shard.Message{ID: ns + "-" + strconv.Itoa(i), Exchange: exchange, RoutingKey: ns, Body: body, Delay: delay})
		}
		sent = want
		wg.Go(func() {
			if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
				enqErr.Store(err)
			}
		})
	}
	wg.Wait()
	err, _ := enqErr.Load().(error)
	return sent, err
}

// ---- burst ----

type burstResult struct {
	Batch         int           `json:"batch"`
	Scanners      int           `json:"scanners"`
	Messages      int           `json:"messages"`
	Rate          float64       `json:"drain_per_sec"`
	Drain         time.Duration `json:"drain_ns"`
	Saturated     float64       `json:"saturated_near"` // saturated dispatch measured right before
	OfSaturated   float64       `json:"of_saturated"`
	SlowestMicros int64         `json:"slowest_command_us"`
	SlowOver5ms   int           `json:"commands_over_5ms"`
	SlowCommands  []string      `json:"slow_commands,omitempty"` // what they were, e.g. "EVALSHA on ...:due (13.1ms)"
	// Descheduled counts slow entries that were single O(1) commands (the
	// slow log also lists those run inside scripts): their time is the
	// Redis thread waiting for a CPU, not work.
	Descheduled int     `json:"descheduled"`
	Commands    int64   `json:"commands"` // Redis commands run during the burst (fill included), scripts' inner calls not counted
	CPU         *cpuUse `json:"cpu"`
}

func (b *bench) burst(ctx context.Context) error {
	best, _ := b.bestBatch()
	ks := []int{1}
	if best != 1 {
		ks = append(ks, best)
	}
	for _, k := range ks {
		// The saturated rate to compare with, measured right before.
		sat, _, _, err := b.drainBacklog(ctx, "saturated-near", b.c.backlog, k, 1)
		if err != nil {
			return err
		}
		b.rdb.FlushAll(ctx)
		b.rdb.SlowLogReset(ctx)
		calls0, err := b.commandCalls(ctx)
		if err != nil {
			return err
		}
		say("burst: %d messages due at one millisecond, k=%d (saturated dispatch just now: %.0f msg/s) ...", b.c.burst, k, sat)
		rate, drain, cpu, err := b.drainBacklog(ctx, "burst", b.c.burst, k, 1)
		if err != nil {
			return err
		}
		r := burstResult{Batch: k, Scanners: 1, Messages: b.c.burst, Rate: rate, Drain: drain, Saturated: sat, OfSaturated: rate / sat, CPU: cpu}
		calls1, err := b.commandCalls(ctx)
		if err != nil {
			return err
		}
		r.Commands = calls1 - calls0
		logs, err := b.rdb.SlowLogGet(ctx, -1).Result()
		if err != nil {
			return err
		}
		for _, l := range logs {
			if us := l.Duration.Microseconds(); us > r.SlowestMicros {
				r.SlowestMicros = us
			}
			if l.Duration > 5*time.Millisecond && !isFill(l.Args) {
				if len(l.Args) > 0 && !strings.EqualFold(l.Args[0], "evalsha") && !strings.EqualFold(l.Args[0], "eval") {
					r.Descheduled++ // an O(1) command over 5 ms: the Redis thread lost its core
				}
				r.SlowOver5ms++
				if len(r.SlowCommands) < 10 {
					r.SlowCommands = append(r.SlowCommands, fmt.Sprintf("%s (%s)", describe(l.Args), l.Duration))
				}
			}
		}
		b.res.Burst = append(b.res.Burst, r)
		say("burst k=%d: drained %d in %s (%.0f msg/s, %.0f%% of saturated); %d commands over 5 ms",
			k, b.c.burst, drain.Round(time.Millisecond), rate, 100*r.OfSaturated, r.SlowOver5ms)
		b.rdb.FlushAll(ctx)
	}
	return nil
}

// describe names a slow command: the script is known by its first key.
func describe(args []string) string {
	if len(args) >= 4 && strings.EqualFold(args[0], "evalsha") {
		return "EVALSHA on " + args[3]
	}
	return strings.Join(args[:min(3, len(args))], " ")
}

// isFill reports a slow log entry of the benchmark's own housekeeping
// (FLUSHALL), which is not delayq's.
func isFill(args []string) bool {
	return len(args) > 0 && strings.EqualFold(args[0], "flushall")
}

// ---- idle ----

type idleResult struct {
	Shards         int           `json:"shards"`
	Scanners       int           `json:"scanners"`
	Goroutines     int           `json:"goroutines"`
	Duration       time.Duration `json:"duration_ns"`
	CommandsPerSec float64       `json:"redis_commands_per_sec"`
	MaxCPUPercent  float64       `json:"max_scanner_cpu_percent"`
}

func (b *bench) idle(ctx context.Context) error {
	const m, n, goroutines = 64, 3, 32 // the idle fleet the target is set for
	ns := b.namespace("idle")
	f, err := b.startFleetOf(ns, n, 1, m, goroutines)
	if err != nil {
		return err
	}
	defer f.stop()
	say("idle: M=%d, %d scanners x %d goroutines, nothing due, %s ...", m, n, goroutines, b.c.idleFor)
	time.Sleep(5 * time.Second) // start-up rounds are not idle
	calls0, err := b.commandCalls(ctx)
	if err != nil {
		return err
	}
	cpu0 := make([]float64, n)
	for i, p := range f.procs {
		cpu0[i] = cpuSeconds(p.Process.Pid)
	}
	start := time.Now()
	time.Sleep(b.c.idleFor)
	el := time.Since(start)
	calls1, err := b.commandCalls(ctx)
	if err != nil {
		return err
	}
	r := &idleResult{Shards: m, Scanners: n, Goroutines: goroutines, Duration: el.Round(time.Second),
		CommandsPerSec: float64(calls1-calls0-2) / el.Seconds()} // -2: our own INFO calls
	for i, p := range f.procs {
		r.MaxCPUPercent = math.Max(r.MaxCPUPercent, 100*(cpuSeconds(p.Process.Pid)-cpu0[i])/el.Seconds())
	}
	b.res.Idle = r
	say("idle: %.1f Redis commands/s for the fleet (%.2f per shard), scanner CPU up to %.2f%%", r.CommandsPerSec, r.CommandsPerSec/m, r.MaxCPUPercent)
	return nil
}

// window is a snapshot of the work done so far in a steady run.
type window struct {
	at        cpuSample
	claims    uint64 // claim script calls of the scanners
	empty     uint64 // of which found nothing due
	delivered int64  // deliveries the consumer has seen
}

func (b *bench) workWindow(ctx context.Context, f *fleet, t *tally) (window, error) {
	w := window{at: b.sampleCPU(f), delivered: t.count.Load()}
	hs, err := f.scrapeHistograms(ctx, claimDuration, emptyClaims)
	if err != nil {
		return w, err
	}
	w.claims, w.empty = hs[claimDuration].count, hs[emptyClaims].count
	return w, nil
}

// commandCalls sums the calls of every command in INFO commandstats.
func (b *bench) commandCalls(ctx context.Context) (int64, error) {
	info, err := b.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if i := strings.Index(line, "calls="); i >= 0 && strings.HasPrefix(line, "cmdstat_") {
			v := line[i+len("calls="):]
			if j := strings.IndexByte(v, ','); j >= 0 {
				v = v[:j]
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return total, nil
}

// cpuSeconds reads a process's user+system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // clock ticks (USER_HZ = 100 on Linux)
}

// ---- memory ----

type memoryResult struct {
	Messages        int     `json:"messages"`
	BodyBytes       int     `json:"body_bytes"`
	IDBytes         int     `json:"id_bytes"`          // the longest id's length (ids are "<ns>-<n>")
	BytesPerMessage float64 `json:"bytes_per_message"` // INFO memory used_memory delta over the messages
	// From MEMORY USAGE (SAMPLES 0: every element) of every shard's keys,
	// per message: the due ZSET and the msg hash, and the envelope alone
	// (HSTRLEN of a sample of 64), which the hash holds.
	DueBytes      float64 `json:"due_zset_bytes"`
	MsgBytes      float64 `json:"msg_hash_bytes"`
	EnvelopeBytes float64 `json:"envelope_bytes"`
	NearFillRate  float64 `json:"near_fill_msgs_per_s"` // EnqueueBatch of 2,000, four producers
	// The far tier (farmemory.go): realistic bodies and ids, near and far.
	Far *farMemoryResult `json:"far,omitempty"`
}

func (b *bench) memory(ctx context.Context) error {
	b.rdb.FlushAll(ctx)
	before, err := b.usedMemory(ctx)
	if err != nil {
		return err
	}
	say("memory: %d pending messages with %d-byte bodies ...", b.c.memory, bodyBytes)
	ns := b.namespace("memory")
	t0 := time.Now()
	if _, err := b.fill(ctx, ns, b.c.memory, time.Hour, time.Time{}); err != nil {
		return err
	}
	nearRate := float64(b.c.memory) / time.Since(t0).Seconds()
	after, err := b.usedMemory(ctx)
	if err != nil {
		return err
	}
	r := &memoryResult{Messages: b.c.memory, BodyBytes: bodyBytes, IDBytes: len(ns + "-" + strconv.Itoa(b.c.memory-1)),
		BytesPerMessage: float64(after-before) / float64(b.c.memory)}
	var due, msg, env, envs int64
	for i := range shards {
		ks := shard.ShardKeys(ns, i)
		d, err1 := b.rdb.MemoryUsage(ctx, ks.Due, 0).Result()
		m, err2 := b.rdb.MemoryUsage(ctx, ks.Msg, 0).Result()
		ids, err3 := b.rdb.HRandField(ctx, ks.Msg, 64).Result()
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("memory usage of shard %d: %w", i, err)
		}
		due, msg = due+d, msg+m
		for _, id := range ids {
			n, err := b.rdb.HStrLen(ctx, ks.Msg, id).Result()
			if err != nil {
				return fmt.Errorf("memory: envelope of %s in shard %d: %w", id, i, err)
			}
			env, envs = env+n, envs+1
		}
	}
	n := float64(b.c.memory)
	r.DueBytes, r.MsgBytes = float64(due)/n, float64(msg)/n
	if envs > 0 {
		r.EnvelopeBytes = float64(env) / float64(envs)
	}
	r.NearFillRate = nearRate
	b.res.Memory = r
	say("memory: %.0f bytes per pending message (MEMORY USAGE: due ZSET %.0f, msg hash %.0f with a %.0f-byte envelope), enqueued at %.0f/s",
		r.BytesPerMessage, r.DueBytes, r.MsgBytes, r.EnvelopeBytes, nearRate)
	b.rdb.FlushAll(ctx)
	if r.Far, err = b.farMemory(ctx, b.c.memory); err != nil {
		return err
	}
	return nil
}

func (b *bench) usedMemory(ctx context.Context) (int64, error) {
	info, err := b.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

// ---- targets ----

// steadyTargetLoad is the steady load, as a fraction of (d), whose
// lateness is a target (p99 <= 10 ms, max <= 50 ms); memoryOverhead is
// what the layout with lookups by id takes a message besides its body
// and id, measured (cmd/delayq-bench/README.md, Memory).
const (
	steadyTargetLoad = 0.3
	memoryOverhead   = 245
)

func (b *bench) targets() {
	r := b.res
	for _, s := range r.Saturated {
		r.check(fmt.Sprintf("saturated dispatch on shared cores, k=%d", s.Batch), s.OfShared >= 0.85,
			fmt.Sprintf("%.0f%% of limit (d) (%.0f%% of (c)), the median of %d rounds", 100*s.OfShared, 100*s.OfLimit, len(s.Rounds)), ">= 85% of limit (d)")
	}
	early := 0
	for _, s := range r.Steady {
		early += s.Early
		// The target is at 30 % of (d), with every fleet size and k; above
		// that the cores, not a process, set the p99 (README).
		if s.Load == steadyTargetLoad {
			r.check(fmt.Sprintf("lateness at %.0f%% of (d), k=%d, %d scanner(s)", 100*s.Load, s.Batch, s.Scanners),
				s.P99 <= 10*time.Millisecond && s.Max <= 50*time.Millisecond,
				fmt.Sprintf("p99 %s, max %s", ms(s.P99), ms(s.Max)), "p99 <= 10ms, max <= 50ms")
		}

	}
	if f := r.Flow; f != nil {
		if f.Before != "" {
			r.check("flow control, no limit set: saturated dispatch against the build before", f.SaturatedRatio >= 0.95,
				fmt.Sprintf("%.1f%% of it (medians of %d rounds)", 100*f.SaturatedRatio, len(f.SaturatedA)), ">= 95%")
			r.check("flow control, no limit set: steady p99 at 50% of saturated against the build before", f.SteadyP99Ratio <= 1.05,
				fmt.Sprintf("%.1f%% of it", 100*f.SteadyP99Ratio), "<= 105%")
		}
		r.check("a topic limited to half of saturated dispatch", f.OfLimit >= 0.95 && f.OfLimit <= 1.0,
			fmt.Sprintf("%.1f%% of its limit (%.0f of %.0f/s)", 100*f.OfLimit, f.LimitedRate, f.Limit), "95-100% of its limit")
		r.check("an unlimited topic beside it: p99 lateness", f.UnlimitedP99-f.UnlimitedAlone <= 2*time.Millisecond,
			fmt.Sprintf("%s beside, %s alone (medians)", ms(f.UnlimitedP99), ms(f.UnlimitedAlone)), "within 2 ms of the run without it")
		// Informative: the limit's own cost, against the same work with no
		// limit (each round's figures are in the FLOW CONTROL table).
		say("flow: an unlimited topic's p99 (medians): %s beside the limited drain, %s beside the same work unlimited, %s alone",
			ms(f.UnlimitedP99), ms(f.UnlimitedBesideSameLoad), ms(f.UnlimitedAlone))
		early += f.Early
	}
	if sc := r.Schedules; sc != nil && sc.CPU != nil && sc.CPUOneOff != nil {
		r.check(fmt.Sprintf("recurring schedules: CPU per occurrence (%d every %s)", sc.Schedules, sc.Every), sc.CPURatio <= 1.5,
			fmt.Sprintf("%.2fx a one-off message's", sc.CPURatio), "<= 1.5x")
		r.check("recurring schedules: Redis commands per occurrence", sc.CmdsRatio <= 1.5,
			fmt.Sprintf("%.2fx a one-off message's (%.1f and %.1f)", sc.CmdsRatio, sc.Cmds, sc.CmdsOneOff), "<= 1.5x")
		early += sc.Early
	}
	if tr := r.Tracing; tr != nil && tr.OffRatio > 0 {
		r.check("tracing off: saturated dispatch against the build before", tr.OffRatio >= 0.95,
			fmt.Sprintf("%.1f%% of it (medians of %d rounds)", 100*tr.OffRatio, len(tr.OffA)), ">= 95%")
	}
	r.check("no message early, ever", early == 0, fmt.Sprintf("%d early", early), "0")
	for _, bu := range r.Burst {
		r.check(fmt.Sprintf("burst drain, k=%d", bu.Batch), bu.OfSaturated >= 0.8,
			fmt.Sprintf("%.0f%% of saturated", 100*bu.OfSaturated), ">= 80% of saturated dispatch")
		r.check(fmt.Sprintf("burst: no Redis command over 5 ms, k=%d", bu.Batch), bu.SlowOver5ms == 0,
			fmt.Sprintf("%d of %d over 5 ms, %d of them O(1) (slowest %s)", bu.SlowOver5ms, bu.Commands, bu.Descheduled,
				time.Duration(bu.SlowestMicros)*time.Microsecond), "0")
	}
	if i := r.Idle; i != nil {
		r.check("idle Redis commands", i.CommandsPerSec <= float64(i.Shards),
			fmt.Sprintf("%.1f/s for M=%d", i.CommandsPerSec, i.Shards), "<= 1 per shard per second, fleet-wide")
		r.check("idle scanner CPU", i.MaxCPUPercent < 1, fmt.Sprintf("%.2f%%", i.MaxCPUPercent), "< 1% of a core")
	}
	if c := r.Console; c != nil {
		for _, e := range c.Endpoints {
			r.check("console/API with a large backlog: "+e.Path, e.P99 <= 250*time.Millisecond,
				fmt.Sprintf("p99 %s (M=%d, %d pending)", ms(e.P99), c.Shards, c.Pending), "p99 <= 250ms")
		}
	}
	if in := r.Ingress; in != nil {
		r.check("AMQP ingress", in.OfLower >= 0.8, fmt.Sprintf("%.0f%% of the lower ceiling, the median of %d runs (%s)", 100*in.OfLower, len(in.Runs), percents(in.Runs)),
			">= 80% of min(bare consume+ack, bare EnqueueBatch)")
		r.check("AMQP ingress on shared cores", in.OfShared >= 0.8, fmt.Sprintf("%.0f%% of the shared-core limit", 100*in.OfShared),
			">= 80% of (iii) (informative: the target is the lower ceiling)")
	}
	if m := r.Memory; m != nil {
		// The layout keeps lookups by id (README: Memory): no worse than it.
		r.check("memory per pending message", m.BytesPerMessage <= float64(m.BodyBytes+m.IDBytes+memoryOverhead),
			fmt.Sprintf("%.0f bytes", m.BytesPerMessage), fmt.Sprintf("<= body + id + %d = %d", memoryOverhead, m.BodyBytes+m.IDBytes+memoryOverhead))
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// profile saves, for the next d, each scanner's CPU and block profiles and
// Redis's command statistics and latency events (over 1 ms) under
// b.c.profileDir, named after the run. Failures are reported, not fatal:
// the run's figures stand without them.
func (b *bench) profile(ctx context.Context, f *fleet, name string, d time.Duration) {
	secs := max(1, int(d.Seconds()))
	_ = b.rdb.ConfigSet(ctx, "latency-monitor-threshold", "1").Err()
	_ = b.rdb.Do(ctx, "LATENCY", "RESET").Err()
	_ = b.rdb.ConfigResetStat(ctx).Err()
	var wg sync.WaitGroup
	for i, addr := range f.metrics {
		for _, kind := range []string{"profile", "block"} {
			wg.Go(func() {
				url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, secs)
				out := filepath.Join(b.c.profileDir, fmt.Sprintf("%s-p%d-%s.pprof", name, i, map[string]string{"profile": "cpu", "block": "block"}[kind]))
				if err := download(ctx, url, out); err != nil {
					fmt.Fprintf(os.Stderr, "profile %s: %v\n", url, err)
				}
			})
		}
	}
	wg.Wait()
	stats := b.rdb.Info(ctx, "commandstats").Val()
	lat, _ := b.rdb.Do(ctx, "LATENCY", "LATEST").Slice()
	text := fmt.Sprintf("# %s over %d s\n%s\n# LATENCY LATEST (event, time, latest ms, max ms)\n%v\n", name, secs, stats, lat)
	if err := os.WriteFile(filepath.Join(b.c.profileDir, name+"-redis.txt"), []byte(text), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "profile: %v\n", err)
	}
}

// download saves what GET url answers in file.
func download(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// bulkResult is a bulk cancel by id prefix over a backlog.
type bulkResult struct {
	Messages  int     `json:"messages"`  // scheduled when it started
	Matched   int     `json:"matched"`   // what the filter selected (the dry run)
	DryRun    float64 `json:"dry_run_s"` // the dry run's seconds
	Cancel    float64 `json:"cancel_s"`  // the bulk cancel's seconds
	Scanned   int     `json:"scanned"`   // entries the cancel read
	PerSec    float64 `json:"cancelled_per_s"`
	ScanPerS  float64 `json:"scanned_per_s"`
	SlowOver5 int     `json:"slow_over_5ms"` // Redis commands over 5 ms meanwhile
}

// bulk cancels the messages of one id prefix (about 11 % of them) out
// of a backlog of b.c.memory pending messages, after a dry run, and
// reports the rates and the Redis commands over 5 ms meanwhile: a bulk
// job must never block Redis, whatever the backlog.
func (b *bench) bulk(ctx context.Context) error {
	b.rdb.FlushAll(ctx)
	ns := b.namespace("bulk")
	say("bulk: %d pending messages, then a bulk cancel of the ids starting %q ...", b.c.memory, ns+"-1")
	if _, err := b.fill(ctx, ns, b.c.memory, time.Hour, time.Time{}); err != nil {
		return err
	}
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return err
	}
	f := shard.BulkFilter{Prefix: ns + "-1"}
	b.rdb.SlowLogReset(ctx)
	start := time.Now()
	matched, err := st.CountMatching(ctx, shards, f)
	if err != nil {
		return err
	}
	r := &bulkResult{Messages: b.c.memory, Matched: matched, DryRun: time.Since(start).Seconds()}
	start = time.Now()
	p, err := st.BulkCancel(ctx, shards, f, matched, nil)
	if err != nil {
		return err
	}
	r.Cancel, r.Scanned = time.Since(start).Seconds(), p.Scanned
	r.PerSec, r.ScanPerS = float64(p.Done)/r.Cancel, float64(p.Scanned)/r.Cancel
	if p.Done != matched {
		return fmt.Errorf("bulk: cancelled %d, the dry run counted %d", p.Done, matched)
	}
	logs, err := b.rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return err
	}
	for _, l := range logs {
		if l.Duration > 5*time.Millisecond {
			r.SlowOver5++
		}
	}
	b.res.Bulk = r
	say("bulk: dry run %.2f s; cancelled %d of %d in %.2f s (%.0f/s, %.0f entries read/s); %d Redis commands over 5 ms",
		r.DryRun, p.Done, r.Messages, r.Cancel, r.PerSec, r.ScanPerS, r.SlowOver5)
	b.rdb.FlushAll(ctx)
	return nil
}
