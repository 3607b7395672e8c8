package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // the IANA zones of recurring schedules, the same on every machine and image

	"github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/ingress"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "scan" {
		if err := execWithSysmonBackoff(); err != nil {
			fmt.Fprintf(os.Stderr, "delayq scan: running without GODEBUG=%s: %v\n", scanSchedtrace, err)
		}
	}
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

// command is one subcommand. Each is defined in its own file
// (xxxCommand), with the flag set its run parses, so that its help shows
// exactly the flags it takes.
type command struct {
	name, args, summary string
	// flags returns a fresh flag set as run parses it, for the help; nil
	// when the command takes no flags.
	flags func() *flag.FlagSet
	run   func(ctx context.Context, e *env, args []string) int
}

// commands lists the subcommands in the order the help shows them.
func commands() []command {
	return []command{
		scanCommand(), enqueueCommand(), cancelCommand(), listCommand(), clearCommand(), rescheduleCommand(),
		inspectCommand(), statsCommand(), flowCommand(), classCommand(), exportCommand(), moveCommand(), quotaCommand(), scheduleCommand(), shardsCommand(), farCommand(), deadCommand(), serveCommand(),
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	cfg            Config
	log            *zap.Logger
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			usage(stdout)
			return exitOK
		}
		c, ok := lookup(args[1])
		if !ok {
			fmt.Fprintf(stderr, "delayq help: unknown command %q; see 'delayq help'\n", args[1])
			return exitUsage
		}
		commandHelp(stdout, c)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "delayq: unknown command %q; see 'delayq help'\n", args[0])
		return exitUsage
	}
	for _, a := range args[1:] {
		if a == "-h" || a == "--help" || a == "-help" {
			commandHelp(stdout, c)
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
	// go-redis logs (reconnects, pool trouble) through its one package
	// logger; send them through zap in the configured format.
	redis.SetLogger(redisLogger{log.Named("redis").Sugar()})
	return c.run(ctx, &env{stdin: stdin, stdout: stdout, stderr: stderr, cfg: cfg, log: log}, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "delayq schedules messages in Redis and publishes them to RabbitMQ when they fall due.")
	fmt.Fprintln(w, "\nusage: delayq <command> [arguments]   (delayq help <command> for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-11s %s\n", "version", "print the version and the VCS revision it was built from")
	fmt.Fprintf(w, "  %-11s %s\n", "help", "this text, or help <command> for one command")
	printEnv(w)
}

// commandHelp prints one command's usage, flags and the environment.
func commandHelp(w io.Writer, c command) {
	fmt.Fprintf(w, "usage: delayq %s %s\n\n%s.\n", c.name, c.args, c.summary)
	if c.flags != nil {
		fmt.Fprintln(w, "\nFlags:")
		fs := c.flags()
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	printEnv(w)
}

// parse parses flags that may come before, between or after positional
// arguments (delayq reschedule ID --delay 5s) and returns the positionals.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, "see 'delayq help %s'\n", strings.Fields(fs.Name())[0]) }
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
	if e.cfg.RedisWait > 0 {
		st = st.WithReplicas(e.cfg.RedisWait, e.cfg.RedisWaitFor)
	}
	return rdb, st, nil
}

// How a process learns M from Consul.
const (
	readOnce  = iota // a one-shot command: one plain read
	watch            // a long-lived producer: a blocking-query watch
	watchScan        // a scanner: a watch, and its Layout drains retired shards
)

// layout starts what tells M and the high-water mark (a Consul watch or a
// single read when configured, and the Layout over it), adding them to
// ps, which the caller stops. A scanner's Layout also drains retired
// shards and settles.
//
// A one-shot command reads the key once: a watch's blocking query would
// stay open on the Consul agent for up to its wait time after the process
// exits, and an agent refuses a client address more than
// http_max_conns_per_client (200) connections, so a script running the
// CLI in a loop would lock the fleet on that host out of Consul.
func (e *env) layout(ctx context.Context, st *shard.Store, ps *parts, how int) (*balance.Layout, *api.Client, error) {
	var counter balance.Counter = balance.Static(e.cfg.Shards)
	consul, err := newConsul(e.cfg)
	if err != nil {
		return nil, nil, err
	}
	if consul != nil && how == readOnce {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, _, err := balance.ReadShardCount(rctx, consul, e.cfg.consulKey())
		cancel()
		counter = balance.Static(m)
		if err != nil { // the Layout falls back to the mirror in Redis, and says so
			e.log.Warn("reading M from consul", zap.Error(err))
			counter = balance.CounterFunc(func() (int, error) { return 0, err })
		}
	}
	if consul != nil && how != readOnce {
		watcher := balance.NewConsulWatcher(consul, e.cfg.consulKey(), e.log)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := ps.start(wctx, "consul watch", watcher)
		cancel()
		if err != nil {
			return nil, nil, err
		}
		counter = watcher
	}
	scanner := how == watchScan
	opts := balance.LayoutOptions{Drain: scanner, Log: e.log}
	if scanner {
		opts.Fallback = e.cfg.Shards
	}
	l := balance.NewLayout(counter, st, opts)
	if err := ps.start(ctx, "shard layout", l); err != nil {
		return nil, nil, err
	}
	if m, src, err := l.Current(); err != nil {
		return nil, nil, fmt.Errorf("shard count: %w (consul key %s)", err, e.cfg.consulKey())
	} else if src != "consul" && src != "static" {
		e.log.Error("consul unreachable: using a cached shard count", zap.Int("m", m), zap.String("source", src))
	}
	return l, consul, nil
}

// producer returns a Producer for a command, and what stops it. how is
// readOnce or watch (see layout).
func (e *env) producer(ctx context.Context, how int) (*shard.Producer, func(), error) {
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	ps := &parts{}
	stop := func() {
		if err := ps.stop(context.WithoutCancel(ctx)); err != nil {
			e.log.Warn("shutting down", zap.Error(err))
		}
		_ = rdb.Close()
	}
	l, _, err := e.layout(ctx, st, ps, how)
	if err != nil {
		stop()
		return nil, nil, err
	}
	crash, err := crashPoint()
	if err != nil {
		stop()
		return nil, nil, err
	}
	opts := shard.ProducerOptions{MaxBody: e.cfg.MaxBody, MaxPending: e.cfg.MaxPending, AllowEviction: e.cfg.RedisAllowEviction}
	if crash != nil {
		opts.AtStep = func(step string) { crash(ingress.Step(step)) }
	}
	p := shard.NewProducer(st, l, opts)
	return p, stop, nil
}

// fail reports err and returns the exit code: 2 (usage) when the input
// given on the command line breaks a rule (shard.ErrInvalid), else 1.
func (e *env) fail(cmd string, err error) int {
	if errors.Is(err, shard.ErrUnsafeRedis) {
		err = fmt.Errorf("%w (or set %s_REDIS_ALLOW_EVICTION=true to accept losing messages)", err, envPrefix)
	}
	fmt.Fprintf(e.stderr, "delayq %s: %v\n", cmd, err)
	if errors.Is(err, shard.ErrInvalid) {
		return exitUsage
	}
	return exitFail
}

func writeJSON(e *env, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return e.fail("json", err)
	}
	return exitOK
}

// redisLogger is go-redis's logger interface over zap.
type redisLogger struct{ log *zap.SugaredLogger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.log.Warnf(format, v...)
}
