// Command delayq-demo shows delayq working end to end on one machine:
// it starts Redis and RabbitMQ on loopback (temporary directories, free
// ports), runs a small fleet of `delayq scan` processes, schedules "cancel
// order N" messages 1-10 s ahead (cancelling and rescheduling some), consumes
// them like a downstream service would, and prints how on time they arrive.
// It stops everything it started when it ends or is interrupted.
//
// Run it through scripts/demo.sh, which builds both binaries.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/balance/consultest"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

func main() {
	delayqBin := flag.String("delayq", "bin/delayq", "path of the delayq binary")
	orders := flag.Int("orders", 300, "number of orders to schedule")
	scanners := flag.Int("scanners", 3, "number of scanner processes")
	shards := flag.Int("shards", 4, "M, the number of shards at the start")
	resize := flag.String("resize", "16,2", "with Consul: M values to switch to during the run, comma-separated")
	noConsul := flag.Bool("no-consul", false, "run without Consul (M fixed by DELAYQ_SHARDS)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var steps []int
	for _, f := range strings.Split(*resize, ",") {
		if m, err := balance.ParseShardCount(f); err == nil {
			steps = append(steps, m)
		}
	}
	err := run(ctx, *delayqBin, *orders, *scanners, *shards, !*noConsul, steps)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayq-demo:", err)
		os.Exit(1)
	}
}

const (
	exchange   = "demo.orders"
	queue      = "demo.order-cancel"
	routingKey = "order.cancel.unpaid"
	topic      = "order.cancel"
)

func run(ctx context.Context, delayqBin string, orders, nScanners, m int, withConsul bool, steps []int) error {
	if _, err := os.Stat(delayqBin); err != nil {
		return fmt.Errorf("delayq binary: %w (build it with: go build -o bin/delayq ./cmd/delayq)", err)
	}
	dir, err := os.MkdirTemp("", "delayq-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	say("starting Redis and RabbitMQ on 127.0.0.1 (temporary directories, free ports) ...")
	// With the settings delayq asks for (README, Redis settings): an
	// append-only file fsynced on every write, and noeviction (Redis's
	// default), so the scanners start without a warning.
	rs, err := shardtest.StartRedis(shardtest.RedisOptions{AOF: true})
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer rs.Close()
	rabbit, err := publishertest.StartRabbit()
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer rabbit.Close()
	say("redis %s, rabbitmq %s", rs.Addr, hostPort(rabbit.URL))
	var cs *consultest.Consul
	if withConsul {
		if cs, err = consultest.StartConsul(); err != nil {
			return fmt.Errorf("consul: %w (scripts/install-consul.sh builds it; or run with -no-consul)", err)
		}
		defer cs.Close()
		if _, err := balance.SetShardCount(ctx, cs.Client(), balance.DefaultConsulKey("demo"), m, 0); err != nil {
			return err
		}
		say("consul %s: M = %d in key %s", cs.Addr, m, balance.DefaultConsulKey("demo"))
	}

	deliveries, closeAMQP, err := declareAndConsume(rabbit.URL)
	if err != nil {
		return err
	}
	defer closeAMQP()

	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(fmt.Sprintf("routes:\n  %s: {exchange: %s, routing_key: %s}\n", topic, exchange, routingKey)), 0o600); err != nil {
		return err
	}
	env := append(os.Environ(),
		"DELAYQ_REDIS_ADDRS="+rs.Addr, "DELAYQ_AMQP_URL="+rabbit.URL, "DELAYQ_NAMESPACE=demo",
		fmt.Sprintf("DELAYQ_SHARDS=%d", m), "DELAYQ_ROUTES_FILE="+routes, "DELAYQ_GOROUTINES=8",
		"DELAYQ_LOG_FORMAT=console", "DELAYQ_LOG_LEVEL=warn", "DELAYQ_METRICS_ADDR=off")
	if cs != nil {
		env = append(env, "DELAYQ_CONSUL_ADDR="+cs.Addr)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	var procs []*exec.Cmd
	for i := range nScanners {
		cmd := exec.Command(delayqBin, "scan")
		cmd.Env = env
		w := &prefixWriter{prefix: fmt.Sprintf("[scanner %d] ", i+1), mu: &logMu, w: &logs}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start scanner: %w", err)
		}
		procs = append(procs, cmd)
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
		logMu.Lock()
		if logs.Len() > 0 {
			say("scanner warnings:\n%s", logs.String())
		}
		logMu.Unlock()
	}()
	say("%d scanner processes running (delayq scan), M = %d shards", nScanners, m)

	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	store, err := shard.NewStore(rdb, "demo")
	if err != nil {
		return err
	}
	var counter balance.Counter = balance.Static(m)
	if cs != nil {
		w := balance.NewConsulWatcher(cs.Client(), balance.DefaultConsulKey("demo"), zap.NewNop())
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Start(wctx)
		cancel()
		if err != nil {
			return err
		}
		defer func() { _ = w.Stop(context.Background()) }()
		counter = w
	}
	layout := balance.NewLayout(counter, store, balance.LayoutOptions{})
	if err := layout.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = layout.Stop(context.Background()) }()
	prod := shard.NewProducer(store, layout, shard.ProducerOptions{})

	// Schedule: order N is cancelled 1-10 s from now unless paid.
	msgs := make([]shard.Message, orders)
	for i := range msgs {
		msgs[i] = shard.Message{
			ID: fmt.Sprintf("order-%d-cancel", i), Topic: topic, ContentType: "application/json",
			Body:    []byte(fmt.Sprintf(`{"order":%d,"action":"cancel-unpaid"}`, i)),
			Headers: amqp.Table{"tenant": "demo"},
			Delay:   time.Second + time.Duration(rand.Int64N(int64(9*time.Second))),
		}
	}
	res, err := prod.EnqueueBatch(ctx, msgs)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	expect := map[string]bool{}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
		expect[r.ID] = true
	}
	// Some customers pay: cancel their cancellation. Some get more time.
	cancelled, rescheduled := 0, 0
	for i := 0; i < orders; i += 10 {
		id := fmt.Sprintf("order-%d-cancel", i)
		if err := prod.Cancel(ctx, id); err != nil && !errors.Is(err, shard.ErrInFlight) {
			return err
		} else if err == nil {
			delete(expect, id)
			cancelled++
		}
		id = fmt.Sprintf("order-%d-cancel", i+5)
		if i+5 < orders {
			if _, err := prod.RescheduleAfter(ctx, id, 3*time.Second+time.Duration(rand.Int64N(int64(5*time.Second)))); err == nil {
				rescheduled++
			}
		}
	}
	say("scheduled %d orders 1-10 s ahead; cancelled %d (paid), rescheduled %d (more time)", orders, cancelled, rescheduled)
	say("consuming %s ...", queue)

	if cs != nil && len(steps) > 0 {
		go resizeLive(ctx, cs, layout, steps)
	}
	return watch(ctx, deliveries, expect, cancelled)
}

// resizeLive changes M in Consul every 3 s while messages flow, the way an
// operator would with `delayq shards set M`.
func resizeLive(ctx context.Context, cs *consultest.Consul, layout *balance.Layout, steps []int) {
	key := balance.DefaultConsulKey("demo")
	for _, m := range steps {
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
		pair, _, err := cs.Client().KV().Get(key, nil)
		if err != nil || pair == nil {
			say("resize: cannot read %s: %v", key, err)
			return
		}
		if ok, err := balance.SetShardCount(ctx, cs.Client(), key, m, pair.ModifyIndex); !ok || err != nil {
			say("resize to %d failed: %v", m, err)
			return
		}
		say("resize: M = %s -> %d in consul (messages stay in their shards; scanners cover the high-water mark)", pair.Value, m)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if n, err := layout.ShardCount(); err == nil && n == m {
				break
			}
		}
		say("layout now: %s", layout.Describe())
	}
}

// hostPort strips the scheme and credentials of an AMQP URL for display.
func hostPort(u string) string { return u[len("amqp://guest:guest@"):] }

func declareAndConsume(url string) (<-chan amqp.Delivery, func(), error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil)
	}
	if err == nil {
		_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	}
	if err == nil {
		err = ch.QueueBind(queue, routingKey, exchange, false, nil)
	}
	var d <-chan amqp.Delivery
	if err == nil {
		d, err = ch.Consume(queue, "demo-consumer", true, false, false, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("declare demo topology: %w", err)
	}
	return d, func() { _ = conn.Close() }, nil
}

// watch prints a live summary until every expected order arrived (plus a
// grace second to show that cancelled ones never do).
func watch(ctx context.Context, d <-chan amqp.Delivery, expect map[string]bool, cancelled int) error {
	start := time.Now()
	seen := map[string]bool{}
	var late []time.Duration
	early, unexpected, dups := 0, 0, 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var doneAt time.Time
	timeout := time.After(60 * time.Second)
	line := func(final bool) {
		s := slices.Clone(late)
		slices.Sort(s)
		q := func(p float64) time.Duration {
			if len(s) == 0 {
				return 0
			}
			return s[min(len(s)-1, int(p*float64(len(s))))].Round(100 * time.Microsecond)
		}
		onTime := 0
		for _, l := range s {
			if l <= 100*time.Millisecond {
				onTime++
			}
		}
		prefix := fmt.Sprintf("t=%2.0fs", time.Since(start).Seconds())
		if final {
			prefix = "final"
		}
		say("%s  delivered %d/%d  on time (<=100ms) %d  lateness p50 %s p99 %s max %s  early %d  cancelled %d (never delivered: %d)  duplicates %d",
			prefix, len(seen), len(expect), onTime, q(0.5), q(0.99), q(1), early, cancelled, cancelled-unexpected, dups)
	}
	for {
		select {
		case <-ctx.Done():
			line(true)
			return nil
		case <-timeout:
			line(true)
			return fmt.Errorf("only %d of %d orders arrived within 60 s", len(seen), len(expect))
		case <-tick.C:
			line(false)
			if !doneAt.IsZero() && time.Since(doneAt) > time.Second {
				line(true)
				if early > 0 || unexpected > 0 {
					return fmt.Errorf("%d early and %d cancelled deliveries", early, unexpected)
				}
				say("every order arrived on its due time or after it, never before; cancelled orders never arrived")
				return nil
			}
		case msg, ok := <-d:
			if !ok {
				return errors.New("consumer channel closed")
			}
			now := time.Now()
			due, _ := msg.Headers[shard.HeaderDueMs].(int64)
			switch {
			case !expect[msg.MessageId]:
				unexpected++
			case seen[msg.MessageId]:
				dups++
			default:
				seen[msg.MessageId] = true
				l := now.Sub(time.UnixMilli(due))
				if now.UnixMilli() < due {
					early++
				}
				late = append(late, l)
			}
			if len(seen) == len(expect) && doneAt.IsZero() {
				doneAt = now
			}
		}
	}
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// prefixWriter collects a scanner's log lines under a prefix.
type prefixWriter struct {
	prefix string
	mu     *sync.Mutex
	w      *bytes.Buffer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if len(l) > 0 {
			p.w.WriteString(p.prefix)
			p.w.Write(l)
		}
	}
	return len(b), nil
}
