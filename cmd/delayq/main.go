package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/router"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
)

func main() {
	// Only main knows about signals; everything below takes a context.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and something failed
	exitUsage = 2 // bad flags or configuration
)

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, e *env, args []string) int
}

var commands = []command{
	{"scan", "", "run a scanner worker until SIGINT/SIGTERM", runScan},
	{"enqueue", "--id ID (--topic T | --exchange X [--routing-key K]) (--delay D | --at T) | -f FILE", "schedule messages", runEnqueue},
	{"cancel", "ID... | -f FILE", "cancel scheduled messages", runCancel},
	{"list", "[--shard N] [--topic T] [--prefix P] [--limit N] [--after CURSOR] [--json]", "list scheduled messages, in due order per shard", runList},
	{"clear", "--all [--dead] | --topic T | --prefix P [--yes]", "cancel scheduled messages in bulk, after a confirmation", runClear},
	{"reschedule", "ID (--delay D | --at T)", "move a scheduled message", runReschedule},
	{"inspect", "ID", "show where a message is", runInspect},
	{"stats", "[--json] [--watch [--interval D]]", "per-shard counts", runStats},
	{"shards", "[set M]", "show M, its source and the high-water mark; set M in Consul", runShards},
	{"dead", "list [--limit N] | show ID | redrive ID...|--all | purge ID...|--all", "see why messages are dead; send them again or delete them", runDead},
}

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	cfg            Config
	log            *zap.Logger
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		for _, a := range args[1:] {
			if a == "-h" || a == "--help" || a == "-help" {
				fmt.Fprintf(stdout, "usage: delayq %s %s\n\n%s.\n", c.name, c.args, c.summary)
				if fs := flagsOf(c.name); fs != nil {
					fmt.Fprintln(stdout, "\nFlags:")
					fs.SetOutput(stdout)
					fs.PrintDefaults()
				}
				printEnv(stdout)
				return exitOK
			}
		}
		cfg, err := loadConfig()
		if err != nil {
			fmt.Fprintf(stderr, "delayq %s: %v\n", c.name, err)
			return exitUsage
		}
		log, err := newLogger(cfg, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "delayq %s: %v\n", c.name, err)
			return exitUsage
		}
		defer func() { _ = log.Sync() }()
		return c.run(ctx, &env{stdin: stdin, stdout: stdout, stderr: stderr, cfg: cfg, log: log}, args[1:])
	}
	fmt.Fprintf(stderr, "delayq: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "delayq schedules messages in Redis and publishes them to RabbitMQ when they fall due.")
	fmt.Fprintln(w, "\nusage: delayq <command> [arguments]   (delayq <command> -h for details)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	printEnv(w)
}

// flagsOf returns a command's flag set, for -h; nil when it has none.
func flagsOf(name string) *flag.FlagSet {
	switch name {
	case "enqueue":
		fs, _ := enqueueFlags()
		return fs
	case "reschedule":
		fs, _, _ := rescheduleFlags()
		return fs
	case "stats", "shards":
		fs, _ := statsFlags()
		return fs
	case "dead":
		fs, _, _ := deadListFlags()
		return fs
	case "inspect":
		fs, _ := inspectFlags()
		return fs
	case "list":
		fs, _ := newListFlags()
		return fs
	case "clear":
		fs, _ := newClearFlags()
		return fs
	case "cancel":
		fs, _ := cancelFlags()
		return fs
	}
	return nil
}

// parse parses flags that may come before, between or after positional
// arguments (delayq reschedule ID --delay 5s) and returns the positionals.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// connect opens Redis and the store, failing fast when Redis is down.
func (e *env) connect(ctx context.Context) (redis.UniversalClient, *shard.Store, error) {
	rdb, err := newRedis(e.cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := pingRedis(ctx, rdb, e.cfg); err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	st, err := shard.NewStore(rdb, e.cfg.Namespace)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return rdb, st, nil
}

// layout returns the shard layout: M from Consul (watched) when
// DELAYQ_CONSUL_ADDR is set, else DELAYQ_SHARDS; the high-water mark from
// Redis. A scanner (scanner=true) falls back to the M mirrored in Redis or
// DELAYQ_SHARDS when Consul is unreachable, and says so loudly; a producer
// uses the mirror or refuses to guess. stop releases what it started.
func (e *env) layout(ctx context.Context, st *shard.Store, scanner bool) (l *balance.Layout, consul *api.Client, stop func(), err error) {
	var counter balance.Counter = balance.Static(e.cfg.Shards)
	var watcher *balance.ConsulWatcher
	consul, err = newConsul(e.cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if consul != nil {
		watcher = balance.NewConsulWatcher(consul, e.cfg.consulKey(), e.log)
		if werr := watcher.Start(ctx, 5*time.Second); werr != nil {
			e.log.Error("M not read from consul; see the source of M below", zap.Error(werr))
		}
		counter = watcher
	}
	opts := balance.LayoutOptions{Drain: scanner, Log: e.log}
	if scanner {
		opts.Fallback = e.cfg.Shards
	}
	l = balance.NewLayout(counter, st, opts)
	stop = func() {
		l.Stop()
		if watcher != nil {
			watcher.Stop()
		}
	}
	if err := l.Start(ctx); err != nil {
		stop()
		return nil, nil, nil, err
	}
	if m, src, err := l.Current(); err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("shard count: %w (consul key %s)", err, e.cfg.consulKey())
	} else if src != "consul" && src != "static" {
		e.log.Error("consul unreachable: using a cached shard count", zap.Int("m", m), zap.String("source", src))
	}
	return l, consul, stop, nil
}

func (e *env) producer(ctx context.Context) (*shard.Producer, func(), error) {
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	l, _, stop, err := e.layout(ctx, st, false)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	p := shard.NewProducer(st, l, shard.ProducerOptions{MaxBody: e.cfg.MaxBody, MaxPending: e.cfg.MaxPending})
	return p, func() { stop(); _ = rdb.Close() }, nil
}

func (e *env) fail(cmd string, err error) int {
	fmt.Fprintf(e.stderr, "delayq %s: %v\n", cmd, err)
	return exitFail
}

// runScan runs a scanner until ctx ends (SIGINT/SIGTERM), then shuts down:
// scanner (stop claiming, settle what is in flight), publisher, Redis.
// scanGCPercent is the scanner's GOGC unless the environment sets one.
const scanGCPercent = 400

func runScan(ctx context.Context, e *env, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "delayq scan: unexpected arguments %q\n", args)
		return exitUsage
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
	host, _ := os.Hostname()
	var amqpTLS *tls.Config
	if strings.HasPrefix(c.AMQPURL, "amqps://") {
		if amqpTLS, err = tlsFiles(envPrefix+"_AMQP_TLS", c.AMQPTLSCA, c.AMQPTLSCert, c.AMQPTLSKey); err != nil {
			return e.fail("scan", err)
		}
	}
	pub, err := publisher.New(publisher.Options{URL: c.AMQPURL, TLS: amqpTLS, ConnectionName: "delayq-scanner " + host}, e.log)
	if err != nil {
		return e.fail("scan", err)
	}
	pub.Start(context.Background())
	defer func() {
		if err := pub.Close(); err != nil {
			e.log.Warn("closing publisher", zap.Error(err))
		}
	}()
	// A refused login is a configuration error: fail now rather than run
	// half connected. An unreachable broker is an outage: run, not ready.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = pub.WaitConnected(wctx)
	cancel()
	switch {
	case errors.Is(err, publisher.ErrAccessRefused):
		return e.fail("scan", fmt.Errorf("RabbitMQ %s: %w (check the user and password of %s_AMQP_URL)",
			publisher.Redact(c.AMQPURL), err, envPrefix))
	case errors.Is(err, publisher.ErrTLS):
		return e.fail("scan", fmt.Errorf("RabbitMQ %s: %w (check %s_AMQP_TLS_CA and the URL's host)",
			publisher.Redact(c.AMQPURL), err, envPrefix))
	}
	layout, consul, stopLayout, err := e.layout(ctx, st, true)
	if err != nil {
		return e.fail("scan", err)
	}
	defer stopLayout()
	var ops *opsServer
	var metrics *scanner.Metrics
	if c.MetricsAddr != "off" {
		if ops, metrics, err = newOps(c.MetricsAddr, rdb, st, layout, pub, e.log); err != nil {
			return e.fail("scan", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = ops.Close(cctx)
		}()
	}
	sc, err := scanner.New(c.scannerConfig(), scanner.Deps{
		Store: st, Shards: layout, Cursor: balance.NewCursor(rdb, c.Namespace, layout),
		Routes: routes, Publisher: pub, Log: e.log, Metrics: metrics,
	})
	if err != nil {
		return e.fail("scan", err)
	}
	if err := sc.Start(ctx); err != nil {
		return e.fail("scan", err)
	}
	var reg *balance.Registration
	if consul != nil {
		if reg, err = balance.Register(ctx, consul, c.Namespace, e.log); err != nil {
			e.log.Error("not registered in consul; scanning anyway", zap.Error(err))
		}
	}
	if ops != nil {
		ops.Serve()
	}
	e.log.Info("delayq scan running", zap.Strings("redis", c.RedisAddrs), zap.String("amqp", publisher.Redact(c.AMQPURL)),
		zap.String("layout", layout.Describe()), zap.Int("routes", routes.Len()))
	<-ctx.Done()
	// Shutdown order: settle in-flight messages, leave the fleet, then the
	// deferred closes: layout and Consul watch, publisher, Redis.
	e.log.Info("shutting down", zap.Duration("timeout", c.ShutdownTimeout))
	if ops != nil {
		ops.Stopping() // readiness fails first, so the load balancer looks elsewhere
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := sc.Stop(sctx); err != nil {
		e.log.Warn("shutdown incomplete", zap.Error(err))
	}
	if reg != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(dctx); err != nil {
			e.log.Warn("leaving the consul catalog", zap.Error(err))
		}
	}
	return exitOK
}

// headerFlag collects repeated --header k=v.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }
func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	h[k] = val
	return nil
}

type enqueueOpts struct {
	id, topic, exchange, routingKey, contentType, body, bodyFile, at, file string
	delay                                                                  time.Duration
	headers                                                                headerFlag
	upsert                                                                 bool
	batch                                                                  int
}

func enqueueFlags() (*flag.FlagSet, *enqueueOpts) {
	o := &enqueueOpts{headers: headerFlag{}}
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.StringVar(&o.id, "id", "", "message id (business key), 1-256 bytes")
	fs.StringVar(&o.topic, "topic", "", "topic, resolved by the scanners' route table")
	fs.StringVar(&o.exchange, "exchange", "", "explicit exchange (\"\" = default exchange)")
	fs.StringVar(&o.routingKey, "routing-key", "", "routing key for --exchange")
	fs.DurationVar(&o.delay, "delay", 0, "publish after this delay (Redis clock), e.g. 90s")
	fs.StringVar(&o.at, "at", "", "publish at this RFC 3339 time")
	fs.Var(o.headers, "header", "AMQP header key=value (repeatable)")
	fs.StringVar(&o.contentType, "content-type", "", "AMQP content type")
	fs.StringVar(&o.body, "body", "", "message body text")
	fs.StringVar(&o.bodyFile, "body-file", "", "read the body from this file")
	fs.BoolVar(&o.upsert, "upsert", false, "replace a scheduled or dead message with the same id")
	fs.StringVar(&o.file, "f", "", "JSON Lines file of messages ('-' = stdin)")
	fs.IntVar(&o.batch, "batch", 500, "with -f: messages per pipelined batch")
	return fs, o
}

func runEnqueue(ctx context.Context, e *env, args []string) int {
	fs, o := enqueueFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) > 0 {
		if err == nil {
			fmt.Fprintf(e.stderr, "delayq enqueue: unexpected arguments %q\n", pos)
		}
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.file != "" {
		// The messages, and every field of them, come from the file.
		for _, f := range []string{"id", "topic", "exchange", "routing-key", "delay", "at", "header", "content-type", "body", "body-file"} {
			if set[f] {
				fmt.Fprintf(e.stderr, "delayq enqueue: --%s does not go with -f: each line of the file gives its own fields\n", f)
				return exitUsage
			}
		}
		if o.batch < 1 || o.batch > 10000 {
			fmt.Fprintf(e.stderr, "delayq enqueue: --batch %d: want 1 to 10000\n", o.batch)
			return exitUsage
		}
		return enqueueFile(ctx, e, o)
	}
	if set["batch"] {
		fmt.Fprintln(e.stderr, "delayq enqueue: --batch goes with -f only")
		return exitUsage
	}
	m := shard.Message{ID: o.id, Topic: o.topic, Exchange: o.exchange, RoutingKey: o.routingKey,
		Headers: o.headers, ContentType: o.contentType, Body: []byte(o.body), Delay: o.delay}
	switch {
	case set["delay"] && set["at"]:
		fmt.Fprintln(e.stderr, "delayq enqueue: give --delay or --at, not both")
		return exitUsage
	case !set["delay"] && !set["at"]:
		fmt.Fprintln(e.stderr, "delayq enqueue: give --delay or --at")
		return exitUsage
	case set["body"] && set["body-file"]:
		fmt.Fprintln(e.stderr, "delayq enqueue: give --body or --body-file, not both")
		return exitUsage
	}
	if set["at"] {
		if m.At, err = time.Parse(time.RFC3339Nano, o.at); err != nil {
			fmt.Fprintf(e.stderr, "delayq enqueue: --at: %v\n", err)
			return exitUsage
		}
	}
	if set["body-file"] {
		if m.Body, err = os.ReadFile(o.bodyFile); err != nil {
			return e.fail("enqueue", err)
		}
	}
	p, done, err := e.producer(ctx)
	if err != nil {
		return e.fail("enqueue", err)
	}
	defer done()
	enq := p.Enqueue
	if o.upsert {
		enq = p.Upsert
	}
	s, err := enq(ctx, m)
	if err != nil {
		return e.fail("enqueue", err)
	}
	fmt.Fprintf(e.stdout, "enqueued %s to shard %d, due %s\n", s.ID, s.Shard, s.Due.UTC().Format(time.RFC3339Nano))
	return exitOK
}

// enqueueFile streams a JSON Lines file in pipelined batches. Bad lines are
// reported with their number and skipped; the rest are enqueued.
func enqueueFile(ctx context.Context, e *env, o *enqueueOpts) int {
	var r io.Reader = e.stdin
	var size int64
	if o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return e.fail("enqueue", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		r = f
	}
	counted := &countingReader{r: r}
	r = counted
	var prog *progress // only on a terminal: quiet when piped
	if isTerminal(e.stderr) {
		prog = &progress{w: e.stderr, start: time.Now(), total: size}
		defer prog.done()
	}
	p, done, err := e.producer(ctx)
	if err != nil {
		return e.fail("enqueue", err)
	}
	defer done()
	var enqueued, duplicates, rejected, full, failed, inFlight int
	var msgs []shard.Message
	var lines []int
	enqueueBatch := p.EnqueueBatch
	if o.upsert {
		enqueueBatch = p.UpsertBatch
	}
	flush := func() error {
		if len(msgs) == 0 {
			return nil
		}
		res, err := enqueueBatch(ctx, msgs)
		for i, r := range res {
			switch {
			case r.Err == nil:
				enqueued++
			case errors.Is(r.Err, shard.ErrInFlight):
				inFlight++
				fmt.Fprintf(e.stderr, "line %d: %v\n", lines[i], r.Err)
			case errors.Is(r.Err, shard.ErrDuplicate):
				duplicates++
				fmt.Fprintf(e.stderr, "line %d: %v\n", lines[i], r.Err)
			case errors.Is(r.Err, shard.ErrInvalid):
				rejected++
				fmt.Fprintf(e.stderr, "line %d: %v\n", lines[i], r.Err)
			case errors.Is(r.Err, shard.ErrCapacity):
				full++
				fmt.Fprintf(e.stderr, "line %d: %v\n", lines[i], r.Err)
			default: // Redis failed: not the line's fault; err says why
				failed++
			}
		}
		msgs, lines = msgs[:0], lines[:0]
		if prog != nil {
			prog.update(enqueued, counted.n.Load())
		}
		return err
	}
	summary := func() {
		fmt.Fprintf(e.stdout, "enqueued %d, duplicates %d, rejected %d", enqueued, duplicates, rejected)
		if full > 0 {
			fmt.Fprintf(e.stdout, ", refused at capacity %d", full)
		}
		if inFlight > 0 {
			fmt.Fprintf(e.stdout, ", not replaced because in flight %d", inFlight)
		}
		if failed > 0 {
			fmt.Fprintf(e.stdout, ", not enqueued because Redis failed %d", failed)
		}
		fmt.Fprintln(e.stdout)
	}
	lr := shard.NewLineReader(r, e.cfg.MaxBody)
	for {
		m, line, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var le *shard.LineError
		if errors.As(err, &le) {
			rejected++
			fmt.Fprintf(e.stderr, "%v\n", le)
			continue
		}
		if err != nil {
			ferr := flush()
			summary()
			return e.fail("enqueue", errors.Join(fmt.Errorf("reading %s after line %d: %w", o.file, line, err), ferr))
		}
		msgs, lines = append(msgs, m), append(lines, line)
		if len(msgs) >= o.batch {
			if err := flush(); err != nil {
				summary()
				return e.fail("enqueue", err)
			}
		}
	}
	if err := flush(); err != nil {
		summary()
		return e.fail("enqueue", err)
	}
	summary()
	if rejected > 0 || full > 0 || inFlight > 0 {
		return exitFail
	}
	return exitOK
}

func cancelFlags() (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	return fs, fs.String("f", "", "file of ids, one a line ('-' = stdin)")
}

// runCancel: delayq cancel ID... | -f FILE. The ids go to Redis in
// batches of 1,000, one script call per shard and 64 ids.
func runCancel(ctx context.Context, e *env, args []string) int {
	fs, file := cancelFlags()
	ids, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	switch {
	case *file != "" && len(ids) > 0:
		fmt.Fprintln(e.stderr, "delayq cancel: give IDs or -f FILE, not both")
		return exitUsage
	case *file == "" && len(ids) == 0:
		fmt.Fprintln(e.stderr, "delayq cancel: give at least one ID, or -f FILE")
		return exitUsage
	}
	var in *bufio.Scanner
	if *file != "" {
		r := e.stdin
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return e.fail("cancel", err)
			}
			defer f.Close()
			r = f
		}
		in = bufio.NewScanner(r)
		in.Buffer(make([]byte, 64<<10), 64<<10)
	}
	p, done, err := e.producer(ctx)
	if err != nil {
		return e.fail("cancel", err)
	}
	defer done()
	code, cancelled := exitOK, 0
	flush := func(batch []string) error {
		errs, err := p.CancelBatch(ctx, batch)
		if err != nil {
			return err
		}
		for j, id := range batch {
			if errs[j] != nil {
				code = e.fail("cancel", errs[j])
				continue
			}
			cancelled++
			if in == nil {
				fmt.Fprintf(e.stdout, "cancelled %s\n", id)
			}
		}
		return nil
	}
	if in == nil {
		if err := flush(ids); err != nil {
			return e.fail("cancel", err)
		}
		return code
	}
	var batch []string
	for in.Scan() {
		if id := strings.TrimSpace(in.Text()); id != "" {
			if batch = append(batch, id); len(batch) == 1000 {
				if err := flush(batch); err != nil {
					return e.fail("cancel", err)
				}
				batch = batch[:0]
			}
		}
	}
	if err := in.Err(); err != nil {
		return e.fail("cancel", fmt.Errorf("reading %s: %w", *file, err))
	}
	if err := flush(batch); err != nil {
		return e.fail("cancel", err)
	}
	fmt.Fprintf(e.stdout, "cancelled %d\n", cancelled)
	return code
}

func rescheduleFlags() (*flag.FlagSet, *time.Duration, *string) {
	fs := flag.NewFlagSet("reschedule", flag.ContinueOnError)
	d := fs.Duration("delay", 0, "due after this delay from now (Redis clock)")
	at := fs.String("at", "", "due at this RFC 3339 time")
	return fs, d, at
}

func runReschedule(ctx context.Context, e *env, args []string) int {
	fs, delay, at := rescheduleFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if len(pos) != 1 || set["delay"] == set["at"] {
		fmt.Fprintln(e.stderr, "delayq reschedule: give one ID and one of --delay or --at")
		return exitUsage
	}
	p, done, err := e.producer(ctx)
	if err != nil {
		return e.fail("reschedule", err)
	}
	defer done()
	var due time.Time
	if set["at"] {
		t, perr := time.Parse(time.RFC3339Nano, *at)
		if perr != nil {
			fmt.Fprintf(e.stderr, "delayq reschedule: --at: %v\n", perr)
			return exitUsage
		}
		due, err = p.Reschedule(ctx, pos[0], t)
	} else {
		due, err = p.RescheduleAfter(ctx, pos[0], *delay)
	}
	if err != nil {
		return e.fail("reschedule", err)
	}
	fmt.Fprintf(e.stdout, "rescheduled %s, due %s\n", pos[0], due.UTC().Format(time.RFC3339Nano))
	return exitOK
}

func inspectFlags() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	return fs, fs.Bool("json", false, "print JSON")
}

// inspectView is inspect's output.
type inspectView struct {
	ID          string            `json:"id"`
	Shard       int               `json:"shard"`
	State       shard.State       `json:"state"`
	At          string            `json:"at,omitempty"`
	Attempts    int               `json:"attempts"`
	Reason      string            `json:"reason,omitempty"`
	Topic       string            `json:"topic,omitempty"`
	Exchange    string            `json:"exchange,omitempty"`
	RoutingKey  string            `json:"routing_key,omitempty"`
	ContentType string            `json:"content_type,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	BodyBytes   int               `json:"body_bytes"`
	Corrupt     string            `json:"corrupt,omitempty"`
}

func runInspect(ctx context.Context, e *env, args []string) int {
	fs, asJSON := inspectFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) != 1 {
		if err == nil {
			fmt.Fprintln(e.stderr, "delayq inspect: give one ID")
		}
		return exitUsage
	}
	p, done, err := e.producer(ctx)
	if err != nil {
		return e.fail("inspect", err)
	}
	defer done()
	info, err := p.Inspect(ctx, pos[0])
	if err != nil {
		return e.fail("inspect", err)
	}
	v := inspectView{ID: info.ID, Shard: info.Shard, State: info.State, Attempts: info.Attempts, Reason: info.Reason}
	if !info.At.IsZero() {
		v.At = info.At.UTC().Format(time.RFC3339Nano)
	}
	if env := info.Envelope; env != nil {
		v.Topic, v.Exchange, v.RoutingKey, v.ContentType, v.BodyBytes = env.Topic, env.Exchange, env.RoutingKey, env.ContentType, len(env.Body)
		if len(env.Headers) > 0 {
			v.Headers = map[string]string{}
			for _, h := range env.Headers {
				v.Headers[h.Key] = h.Value
			}
		}
	}
	if info.Corrupt != nil {
		v.Corrupt = info.Corrupt.Error()
	}
	if *asJSON {
		return writeJSON(e, v)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	row := func(k, val string) {
		if val != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, val)
		}
	}
	row("id", v.ID)
	row("shard", fmt.Sprint(v.Shard))
	row("state", string(v.State))
	switch info.State {
	case shard.StateScheduled:
		row("due", v.At)
	case shard.StateInFlight:
		row("lease until", v.At)
	case shard.StateDead:
		row("dead since", v.At)
	}
	row("attempts", fmt.Sprint(v.Attempts))
	row("reason", v.Reason)
	row("topic", v.Topic)
	row("exchange", v.Exchange)
	row("routing key", v.RoutingKey)
	row("content type", v.ContentType)
	keys := make([]string, 0, len(v.Headers))
	for k := range v.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("header "+k, v.Headers[k])
	}
	if info.Envelope != nil {
		row("body", fmt.Sprintf("%d bytes", v.BodyBytes))
	}
	row("corrupt", v.Corrupt)
	_ = tw.Flush()
	return exitOK
}

func writeJSON(e *env, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return e.fail("json", err)
	}
	return exitOK
}

func statsFlags() (*flag.FlagSet, *bool) {
	fs, asJSON, _, _ := watchFlags()
	return fs, asJSON
}

func watchFlags() (*flag.FlagSet, *bool, *bool, *time.Duration) {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (with --watch: one object per line)")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	every := fs.Duration("interval", 2*time.Second, "with --watch: time between refreshes")
	return fs, asJSON, watch, every
}

// shardView is one row of stats.
type shardView struct {
	Shard            int     `json:"shard"`
	Node             string  `json:"node,omitempty"` // the cluster master holding the shard
	Scheduled        int64   `json:"scheduled"`
	DueNow           int64   `json:"due_now"`
	InFlight         int64   `json:"in_flight"`
	Dead             int64   `json:"dead"`
	NextDue          string  `json:"next_due,omitempty"`
	OldestOverdueSec float64 `json:"oldest_overdue_seconds"`
}

type statsView struct {
	Namespace string           `json:"namespace"`
	Shards    []shardView      `json:"shards"`
	Total     shardView        `json:"total"`
	Fleet     []balance.Member `json:"fleet,omitempty"` // scanners registered in Consul
}

func runStats(ctx context.Context, e *env, args []string) int {
	fs, asJSON, watch, every := watchFlags()
	if pos, err := parse(fs, args, e.stderr); err != nil || len(pos) > 0 || *every <= 0 {
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("stats", err)
	}
	defer rdb.Close()
	consul, err := newConsul(e.cfg)
	if err != nil {
		return e.fail("stats", err)
	}
	tty := isTerminal(e.stdout)
	for {
		n, err := e.shardsToShow(ctx, st)
		if err != nil {
			return e.fail("stats", err)
		}
		v, err := e.stats(ctx, st, n)
		if err != nil {
			return e.fail("stats", err)
		}
		if consul != nil {
			if v.Fleet, err = balance.Fleet(ctx, consul, e.cfg.Namespace); err != nil {
				return e.fail("stats", err)
			}
		}
		switch {
		case *asJSON && *watch:
			if err := json.NewEncoder(e.stdout).Encode(v); err != nil {
				return e.fail("stats", err)
			}
		case *asJSON:
			return writeJSON(e, v)
		default:
			if *watch && tty {
				fmt.Fprint(e.stdout, "\033[H\033[2J") // clear the screen, cursor home
			}
			if *watch {
				fmt.Fprintf(e.stdout, "%s  (every %s, Ctrl-C to stop)\n", time.Now().Format("15:04:05"), *every)
			}
			printStats(e, v)
			if consul != nil {
				printFleet(e, v.Fleet)
			}
		}
		if !*watch {
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
		if !tty && !*asJSON {
			fmt.Fprintln(e.stdout)
		}
	}
}

func printFleet(e *env, fleet []balance.Member) {
	fmt.Fprintf(e.stdout, "fleet: %d scanner(s) registered in consul\n", len(fleet))
	for _, f := range fleet {
		fmt.Fprintf(e.stdout, "  %s  host %s pid %s  %s\n", f.ID, f.Host, f.PID, f.Status)
	}
}

// stats counts shards [0, n).
func (e *env) stats(ctx context.Context, st *shard.Store, n int) (statsView, error) {
	all, err := st.Stats(ctx, n)
	if err != nil {
		return statsView{}, err
	}
	v := statsView{Namespace: e.cfg.Namespace, Total: shardView{Shard: -1}}
	var nextMs int64 = -1
	for _, s := range all {
		row := shardView{Shard: s.Shard, Scheduled: s.Scheduled, DueNow: s.DueNow, InFlight: s.InFlight, Dead: s.Dead,
			OldestOverdueSec: s.OldestOverdue().Seconds()}
		if s.HeadMs >= 0 {
			row.NextDue = time.UnixMilli(s.HeadMs).UTC().Format(time.RFC3339Nano)
			if nextMs < 0 || s.HeadMs < nextMs {
				nextMs = s.HeadMs
			}
		}
		v.Shards = append(v.Shards, row)
		t := &v.Total
		t.Scheduled += row.Scheduled
		t.DueNow += row.DueNow
		t.InFlight += row.InFlight
		t.Dead += row.Dead
		t.OldestOverdueSec = max(t.OldestOverdueSec, row.OldestOverdueSec)
	}
	if nextMs >= 0 {
		v.Total.NextDue = time.UnixMilli(nextMs).UTC().Format(time.RFC3339Nano)
	}
	shards := make([]int, len(v.Shards))
	for i, r := range v.Shards {
		shards[i] = r.Shard
	}
	nodes, err := st.ShardNodes(ctx, shards)
	if err != nil {
		return v, err
	}
	for i := range v.Shards {
		v.Shards[i].Node = nodes[v.Shards[i].Shard]
	}
	return v, nil
}

func printStats(e *env, v statsView) {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(e.stdout, "namespace %s, %d shards\n", v.Namespace, len(v.Shards))
	fmt.Fprintln(tw, "shard\tscheduled\tdue now\tin flight\tdead\toldest overdue\tnext due\tnode\t")
	for _, r := range append(v.Shards, v.Total) {
		name := fmt.Sprint(r.Shard)
		if r.Shard < 0 {
			name = "total"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, r.Scheduled, r.DueNow, r.InFlight, r.Dead,
			(time.Duration(r.OldestOverdueSec * float64(time.Second))).Round(time.Millisecond), orDash(r.NextDue), orDash(r.Node))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
