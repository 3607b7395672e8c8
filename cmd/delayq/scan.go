package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/router"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/ingress"
	"go.uber.org/zap"
)

func scanCommand() command {
	return command{name: "scan", summary: "run a scanner worker until SIGINT/SIGTERM", run: runScan}
}

// runScan runs a scanner until ctx ends (SIGINT/SIGTERM), then shuts down:
// scanner (stop claiming, settle what is in flight), publisher, Redis.
// scanGCPercent is the scanner's GOGC unless the environment sets one.
const scanGCPercent = 400

// scanProcs is the scanner's GOMAXPROCS unless the environment sets one.
//
// A scan process is a pipeline of goroutines that hand each message to
// one another several times (worker, claimer, flusher, the AMQP reader,
// confirm listener, settler, ack batcher) and spends most of its time
// waiting on Redis and the broker: 15-35 µs of CPU a message, under half a
// core at the benchmark's saturated rates. With more than one P, each
// hand-off to a goroutine while another P is idle wakes a second OS thread
// to look for work, which on shared cores costs a context switch and a
// wait in the run queue for nothing. On the 2-core benchmark box (steady
// loads at half the shared-core limit, interleaved runs against two Ps)
// one P put the scanners on a CPU 18-31 % fewer times a message, made them
// wait in the run queue 20-40 % less and spend 5-15 % less CPU; with the
// yielding publish gather (publisher.flushConn) p50 lateness fell in every
// run and saturated dispatch rose by 3-6 points of that limit
// (cmd/delayq-bench/README.md). A process that needs more than a
// core is better split into more processes (the fleet scales out);
// GOMAXPROCS overrides this.
const scanProcs = 1

// scanSchedtrace is the GODEBUG setting `delayq scan` runs with unless
// GODEBUG sets schedtrace itself (schedtrace=0 turns this off). It is kept
// for its side effect on the Go runtime's sysmon thread: without it,
// sysmon parks whenever every P is idle, the first syscall after that
// wakes it (runtime/proc.go, entersyscall), and it then polls every 20 µs
// until the process is idle again. A scanner at a steady load is idle and
// busy again thousands of times a second, so sysmon ran about as often as
// all of its other threads together: 7,900 times a second and 82 ms of CPU
// (a quarter of the process's) at 2,000 msg/s on the 2-core benchmark box.
// With schedtrace set, sysmon never parks and backs off from 20 µs to
// 10 ms while it finds nothing to do, so it runs about 100 times a second,
// busy or idle. Against the default, three scanners at a steady 2,000 and
// 6,000 msg/s (k = 8, `delayq-bench -only steady -scanners 3 -loads
// 0.1,0.3 -limit 20000 -scanner-env GODEBUG=…`, two interleaved pairs):
// the scanners' thread runs 18,000-21,000 → 5,000 a second and their CPU
// 23-25 % lower at 2,000 msg/s; at 6,000 msg/s CPU 8-11 % lower and p99
// 39.3 / 34.4 → 18.7 / 25.8 ms. The price: sysmon notices a goroutine
// stuck in a blocking syscall, or running for over 10 ms, up to 10 ms
// later (a scanner makes no blocking syscalls on its message path), and
// the scheduler trace it is named for is printed every 2^31-1 ms (24.8
// days; once at start on a host up longer than that).
const scanSchedtrace = "schedtrace=2147483647"

// execWithSysmonBackoff re-executes this process (same PID, arguments and
// environment) with scanSchedtrace added to GODEBUG, which the runtime
// reads only at start. It returns nil without doing anything on other
// systems than Linux or when GODEBUG already sets schedtrace (so the new
// image does not loop), and an error when the exec failed; on success it
// does not return.
func execWithSysmonBackoff() error {
	if runtime.GOOS != "linux" {
		return nil
	}
	godebug := os.Getenv("GODEBUG")
	for f := range strings.SplitSeq(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(f), "schedtrace=") {
			return nil
		}
	}
	if godebug != "" {
		godebug += ","
	}
	env := []string{"GODEBUG=" + godebug + scanSchedtrace}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, env)
}

func runScan(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "delayq scan: unexpected arguments %q\n", args)
		return exitUsage
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(scanProcs)
	}
	if os.Getenv("GOGC") == "" {
		// A scanner's heap is small and short-lived (a few MB of messages
		// in flight): collecting it 4x less often costs little memory and
		// saves a few percent of CPU per message. GOGC overrides it.
		debug.SetGCPercent(scanGCPercent)
	}
	c := e.cfg
	if err := c.validateScan(); err != nil {
		fmt.Fprintf(e.stderr, "delayq scan: %v\n", err)
		return exitUsage
	}
	var routes *router.Table
	var err error
	if c.RoutesFile != "" {
		routes, err = router.Load(c.RoutesFile, c.DefaultExchange)
	} else {
		routes, err = router.New(c.DefaultExchange, nil)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq scan: %v\n", err)
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("scan", err)
	}
	defer rdb.Close()
	redisProblems, err := e.checkRedis(ctx, st)
	if err != nil {
		return e.fail("scan", err)
	}
	if err := e.applyRouteLimits(ctx, st, routes); err != nil {
		return e.fail("scan", err)
	}
	if err := e.applyRouteClasses(ctx, st, routes); err != nil {
		return e.fail("scan", err)
	}
	host, _ := os.Hostname()
	var amqpTLS *tls.Config
	if c.amqpTLS() {
		if amqpTLS, err = tlsFiles(envPrefix+"_AMQP_TLS", c.AMQPTLSCA, c.AMQPTLSCert, c.AMQPTLSKey); err != nil {
			return e.fail("scan", err)
		}
	}
	pub, err := publisher.New(publisher.Options{URLs: c.amqpURLs(), TLS: amqpTLS, ConnectionName: "delayq-scanner " + host,
		Gather: c.PublishGather}, e.log)
	if err != nil {
		return e.fail("scan", err)
	}
	// Every long-lived part goes on this list as it starts; at shutdown
	// they stop in reverse: readiness off, out of the Consul catalog, the
	// ingress (a Redis write under way finishes and is acked; the broker
	// keeps the rest), the scanner settles what it claimed, the ops listener, the layout and
	// the Consul watch, the publisher, tracing (flushes the spans in hand),
	// the Redis settings watch. Redis closes last (deferred above).
	ps := &parts{}
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
		defer cancel()
		return ps.stop(sctx)
	}
	defer func() { // after an early return; a second stop does nothing
		if err := stop(); err != nil {
			e.log.Warn("shutdown incomplete", zap.Error(err))
		}
	}()
	// SIGTERM while starting is a shutdown, not a failure.
	startFailed := func(err error) int {
		if ctx.Err() != nil {
			e.log.Info("stopped while starting", zap.Error(err))
			return exitOK
		}
		return e.fail("scan", err)
	}
	if err := ps.start(ctx, "redis settings watch", newRedisWatch(st, c.RedisAllowEviction, c.RedisCheckEvery, redisProblems, e.log)); err != nil {
		return e.fail("scan", err)
	}
	if err := ps.start(ctx, "rates sampler", newRateSampler(st, c.RatesEvery, e.log)); err != nil {
		return e.fail("scan", err)
	}
	tr := &tracer{service: "delayq-scanner"}
	if err := ps.start(ctx, "tracing", tr); err != nil {
		return e.fail("scan", err)
	}
	if err := ps.start(ctx, "publisher", pub); err != nil {
		return e.fail("scan", err)
	}
	// A refused login is a configuration error: fail now rather than run
	// half connected. An unreachable broker is an outage: run, not ready.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = pub.WaitConnected(wctx)
	cancel()
	switch {
	case errors.Is(err, publisher.ErrAccessRefused):
		return e.fail("scan", fmt.Errorf("RabbitMQ %s: %w (check the user and password of %s_AMQP_URL)",
			c.amqpNodes(), err, envPrefix))
	case errors.Is(err, publisher.ErrTLS):
		return e.fail("scan", fmt.Errorf("RabbitMQ %s: %w (check %s_AMQP_TLS_CA and the URL's host)",
			c.amqpNodes(), err, envPrefix))
	}
	layout, consul, err := e.layout(ctx, st, ps, watchScan)
	if err != nil {
		return startFailed(err)
	}
	var ops *opsServer
	var metrics *scanner.Metrics
	if c.MetricsAddr != "off" {
		if ops, metrics, err = newOps(c.MetricsAddr, c.Pprof, rdb, st, layout, pub, e.log); err != nil {
			return startFailed(err)
		}
		if err := ps.start(ctx, "ops listener", ops); err != nil {
			return startFailed(err)
		}
	}
	crash, err := crashPoint()
	if err != nil {
		return startFailed(err)
	}
	scopes, err := c.scopes() // validated at start (validateScan)
	if err != nil {
		return startFailed(err)
	}
	if err := st.ApplyScopeQuotas(ctx, scopes); err != nil {
		return startFailed(err)
	}
	deps := scanner.Deps{
		Store: st, Shards: layout, Cursor: balance.NewCursor(rdb, c.Namespace, layout),
		Routes: routes, Publisher: pub, Log: e.log, Metrics: metrics, Tracer: tr.t, Scopes: scopes,
	}
	if crash != nil {
		deps.AtStep = func(step string) { crash(ingress.Step(step)) }
	}
	sc, err := scanner.New(c.scannerConfig(), deps)
	if err != nil {
		return startFailed(err)
	}
	if err := ps.start(ctx, "scanner", sc); err != nil {
		return startFailed(err)
	}
	if routes, _ := c.ingressRoutes(); len(routes) > 0 {
		var im *ingress.Metrics
		if ops != nil {
			im = ingress.NewMetrics(ops.reg)
		}
		prod := shard.NewProducer(st, layout, shard.ProducerOptions{MaxBody: c.MaxBody, MaxPending: c.MaxPending,
			AllowEviction: c.RedisAllowEviction})
		in, err := ingress.New(ingress.Options{URLs: c.amqpURLs(), TLS: amqpTLS, ConnectionName: "delayq-ingress " + host,
			Routes: routes, Prefetch: c.IngressPrefetch, MaxBody: c.MaxBody, AtStep: crash, CancelWindow: c.ingressCancelWindow(),
			ExchangeExists: pub.ExchangeExists}, prod, e.log, im)
		if err != nil {
			return startFailed(err)
		}
		if err := ps.start(ctx, "ingress", in); err != nil {
			return startFailed(err)
		}
	}
	if consul != nil {
		if err := ps.start(ctx, "consul registration", balance.NewRegistration(consul, c.Namespace, e.log)); err != nil {
			e.log.Error("not registered in consul; scanning anyway", zap.Error(err))
		}
	}
	if ops != nil {
		// Ready once everything has started; stopped first, so readiness
		// fails before anything else stops.
		_ = ps.start(ctx, "readiness", partFuncs{
			start: func(context.Context) error { ops.Started(); return nil },
			stop:  func(context.Context) error { ops.Stopping(); return nil },
		})
	}
	e.log.Info("delayq scan running", zap.Strings("redis", c.RedisAddrs), zap.String("amqp", c.amqpNodes()),
		zap.String("layout", layout.Describe()), zap.Int("routes", routes.Len()), zap.String("ingress", c.Ingress))
	<-ctx.Done()
	e.log.Info("shutting down", zap.Duration("timeout", c.ShutdownTimeout))
	if err := stop(); err != nil {
		e.log.Warn("shutdown incomplete", zap.Error(err))
	}
	return exitOK
}

// applyRouteLimits stores the routes file's release limits in Redis, where
// every scanner of the namespace obeys them: a route's rate and burst
// replace a limit that came from a routes file (or set one where there was
// none); a limit changed at runtime stays, with a warning; a limit a routes
// file set for a route that no longer has one is removed. Each change is
// an audit line. Scanners started with different files (a rollout) leave
// the last one's limits.
func (e *env) applyRouteLimits(ctx context.Context, st *shard.Store, routes *router.Table) error {
	flows, err := st.Flows(ctx)
	if err != nil && flows == nil {
		return fmt.Errorf("routes file limits: %w", err)
	}
	if err != nil { // an unreadable flow: its topic counts as having none
		e.log.Warn("routes file limits: flows left out", zap.Error(err))
	}
	have := map[string]shard.Flow{}
	for _, f := range flows {
		have[f.Topic] = f
	}
	rs := routes.Routes()
	topics := slices.Sorted(maps.Keys(rs))
	for _, topic := range topics {
		d := rs[topic]
		old, ok := have[topic]
		switch {
		case d.Rate == 0 && (!ok || old.Source != "routes" || !old.Limited()):
			continue // no limit in the file, none from a file in Redis
		case ok && old.Source == "routes" && old.Rate == d.Rate && old.Burst == d.Burst:
			continue // as the file says already
		}
		f, changed, err := st.SetRoutesLimit(ctx, topic, d.Rate, d.Burst)
		if err != nil {
			return fmt.Errorf("routes file %s: route %q: %w", e.cfg.RoutesFile, topic, err)
		}
		if changed {
			httpapi.Audit(e.log, "routes", e.cfg.RoutesFile, "flow limit", topic+": "+f.String(), nil)
		} else {
			e.log.Warn("the routes file's limit is not applied: the topic's limit was changed at runtime; delayq flow limit changes it",
				zap.String("topic", topic), zap.Float64("routes_rate", d.Rate), zap.Int("routes_burst", d.Burst),
				zap.String("flow", f.String()), zap.String("changed_by", f.Source))
		}
	}
	return nil
}
