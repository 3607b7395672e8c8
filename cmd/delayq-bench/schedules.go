package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// ---- schedules: recurring schedules against one-off messages ----

// schedulesResult compares what an occurrence of a recurring schedule
// costs with what a one-off message costs at the same rate: the machine's
// CPU (every process: Redis, RabbitMQ, the scanners, the bench's producer
// and consumer) and Redis commands (INFO commandstats: scripts' inner
// calls included) per message, over the same stationary window.
type schedulesResult struct {
	Schedules   int           `json:"schedules"`
	Every       time.Duration `json:"every_ns"`
	Created     time.Duration `json:"created_in_ns"` // to create them all, 32 clients
	Window      time.Duration `json:"window_ns"`
	Rate        float64       `json:"occurrences_per_sec"`
	Occurrences int64         `json:"occurrences"` // delivered in the window
	OneOffs     int64         `json:"one_offs"`    // delivered in the one-off run's window
	CPU         *cpuUse       `json:"cpu_occurrences"`
	CPUOneOff   *cpuUse       `json:"cpu_one_offs"`
	Cmds        float64       `json:"redis_commands_per_occurrence"`
	CmdsOneOff  float64       `json:"redis_commands_per_one_off"`
	CPURatio    float64       `json:"cpu_ratio"`
	CmdsRatio   float64       `json:"commands_ratio"`
	P50         time.Duration `json:"p50_ns"` // occurrences' lateness at the consumer
	P99         time.Duration `json:"p99_ns"`
	Max         time.Duration `json:"max_ns"`
	OneOffP99   time.Duration `json:"one_off_p99_ns"`
	Early       int           `json:"early"`
}

// schedules creates c.schedules schedules firing every minute, evenly
// spread over it, while two scanners run; measures a window of a minute
// from 5 s after the last was created; then the same rate of one-off
// messages (each due 1-5 s after its enqueue) on a fresh fleet.
func (b *bench) schedules(ctx context.Context) error {
	n := b.c.schedules
	every := time.Minute
	window := time.Minute
	if b.c.quick {
		window = 20 * time.Second
	}
	r := &schedulesResult{Schedules: n, Every: every, Window: window, Rate: float64(n) / every.Seconds()}
	b.res.Schedules = r

	ns := b.namespace("schedules")
	t := newTally()
	stop, err := b.consume(ctx, ns, t)
	if err != nil {
		return err
	}
	defer stop()
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return err
	}
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	msg := shard.Message{Exchange: exchange, RoutingKey: ns, Body: body}
	// The fleet runs while the schedules are created: each one's first
	// occurrence fires on time, as in production.
	f, err := b.startFleet(ns, 2, 1, shards)
	if err != nil {
		return err
	}
	defer f.stop()
	base := time.Now().Truncate(time.Millisecond)
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Go(func() {
			for j := int(next.Add(1)) - 1; j < n && ctx.Err() == nil; j = int(next.Add(1)) - 1 {
				// Evenly over the minute: @every counts from the start.
				start := base.Add(time.Duration(j) * every / time.Duration(n))
				if _, err := prod.UpsertSchedule(ctx, shard.Schedule{Name: "s" + strconv.Itoa(j), Spec: "@every " + every.String(),
					Start: start, Message: msg}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("create the schedules: %w", err)
	}
	r.Created = time.Since(began)
	say("schedules: %d created in %s", n, r.Created.Round(time.Millisecond))
	sleep(ctx, 5*time.Second) // past the creation's own load
	from := time.Now()
	w0, err := b.workWindow(ctx, f, t)
	if err != nil {
		return err
	}
	c0, err := b.commandCalls(ctx)
	if err != nil {
		return err
	}
	sleep(ctx, window)
	w1, err := b.workWindow(ctx, f, t)
	if err != nil {
		return err
	}
	c1, err := b.commandCalls(ctx)
	if err != nil {
		return err
	}
	f.stop()
	r.Occurrences = w1.delivered - w0.delivered
	if r.Occurrences <= 0 {
		return fmt.Errorf("schedules: no occurrence delivered in the window")
	}
	r.CPU = w1.at.since(w0.at, int(r.Occurrences))
	r.Cmds = float64(c1-c0) / float64(r.Occurrences)
	r.P50, r.P99, _, r.Max = t.quantilesBetween(from, w1.at.at)
	t.mu.Lock()
	r.Early = t.early
	t.mu.Unlock()
	say("schedules: %d occurrences in %s (%.0f/s): %.1f µs of CPU and %.1f Redis commands each; lateness p50 %s p99 %s max %s",
		r.Occurrences, window, float64(r.Occurrences)/window.Seconds(), r.CPU.TotalBusy*window.Seconds()*1e6/float64(r.Occurrences),
		r.Cmds, ms(r.P50), ms(r.P99), ms(r.Max))

	// The same rate of one-off messages.
	one, err := b.oneOffRun(ctx, r.Rate, window)
	if err != nil {
		return err
	}
	r.OneOffs, r.CPUOneOff, r.CmdsOneOff, r.OneOffP99 = one.delivered, one.cpu, one.cmds, one.p99
	r.Early += one.early
	r.CPURatio = (r.CPU.TotalBusy / float64(r.Occurrences)) / (r.CPUOneOff.TotalBusy / float64(r.OneOffs))
	r.CmdsRatio = r.Cmds / r.CmdsOneOff
	say("schedules: one-off messages at the same rate: %.1f Redis commands each, p99 %s; occurrence/one-off: CPU %.2f, commands %.2f",
		r.CmdsOneOff, ms(r.OneOffP99), r.CPURatio, r.CmdsRatio)
	return nil
}

type oneOffFigures struct {
	delivered int64
	cpu       *cpuUse
	cmds      float64
	p99       time.Duration
	early     int
}

// oneOffRun enqueues rate one-off messages a second (each due 1-5 s
// later) on two scanners, and measures the window from 6 s on.
func (b *bench) oneOffRun(ctx context.Context, rate float64, span time.Duration) (oneOffFigures, error) {
	var res oneOffFigures
	ns := b.namespace("one-offs")
	t := newTally()
	stop, err := b.consume(ctx, ns, t)
	if err != nil {
		return res, err
	}
	defer stop()
	f, err := b.startFleet(ns, 2, 1, shards)
	if err != nil {
		return res, err
	}
	defer f.stop()
	st, _ := shard.NewStore(b.rdb, ns)
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	var w0, w1 window
	var c0, c1 int64
	sent, enqErr := openLoop(ctx, prod, ns, rate, time.Now(), func(el time.Duration) bool {
		if w0.at.at.IsZero() && el >= 6*time.Second {
			if w0, err = b.workWindow(ctx, f, t); err == nil {
				c0, err = b.commandCalls(ctx)
			}
			if err != nil {
				return false
			}
		}
		if el >= 6*time.Second+span {
			if w1, err = b.workWindow(ctx, f, t); err == nil {
				c1, err = b.commandCalls(ctx)
			}
			return false
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if enqErr != nil {
		return res, enqErr
	}
	res.delivered = w1.delivered - w0.delivered
	if res.delivered <= 0 {
		return res, fmt.Errorf("one-offs: none delivered in the window")
	}
	res.cpu = w1.at.since(w0.at, int(res.delivered))
	res.cmds = float64(c1-c0) / float64(res.delivered)
	t.waitFor(ctx, sent, 30*time.Second)
	_, res.p99, _, _ = t.quantiles()
	t.mu.Lock()
	res.early = t.early
	t.mu.Unlock()
	return res, nil
}
