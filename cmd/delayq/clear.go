package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

func clearCommand() command {
	return command{name: "clear", args: "(--topic T | --prefix P | --from W | --to W)... | --all [--dead] [--dry-run] [--yes]",
		summary: "cancel scheduled messages in bulk, by filter, after a confirmation", run: runClear,
		flags: func() *flag.FlagSet { fs, _, _ := newClearFlags(); return fs }}
}

// bulkOpts are the flags of a bulk job (delayq clear, delayq reschedule
// by filter): the filter, a dry run, and the confirmation.
type bulkOpts struct {
	all, yes, dryRun        bool
	topic, prefix, from, to string
}

// addBulkFlags adds the filter flags to fs (--all only where withAll).
func addBulkFlags(fs *flag.FlagSet, o *bulkOpts, withAll bool) {
	if withAll {
		fs.BoolVar(&o.all, "all", false, "every scheduled message of the namespace")
	}
	fs.StringVar(&o.topic, "topic", "", "the scheduled messages of this topic")
	fs.StringVar(&o.prefix, "prefix", "", "the scheduled messages whose id starts with this")
	fs.StringVar(&o.from, "from", "", "the scheduled messages due at or after this: a duration from now (30m, -1h) or an RFC 3339 time")
	fs.StringVar(&o.to, "to", "", "the scheduled messages due before this (the window is [from, to)): a duration from now or an RFC 3339 time")
	fs.BoolVar(&o.dryRun, "dry-run", false, "only count what the filter selects now; change nothing")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
}

// any reports whether a filter flag was given.
func (o *bulkOpts) any() bool {
	return o.all || o.topic != "" || o.prefix != "" || o.from != "" || o.to != ""
}

// filter builds and checks the filter; the error names the flag.
func (o *bulkOpts) filter() (shard.BulkFilter, error) {
	f := shard.BulkFilter{Topic: o.topic, Prefix: o.prefix, All: o.all}
	now := time.Now()
	for _, w := range []struct {
		flag, v string
		to      *time.Time
	}{{"from", o.from, &f.From}, {"to", o.to, &f.To}} {
		if w.v == "" {
			continue
		}
		t, err := shard.ParseWindowEnd(w.flag, w.v, now)
		if err != nil {
			return f, fmt.Errorf("--%w", err)
		}
		*w.to = t
	}
	if err := f.Validate(); err != nil {
		return f, fmt.Errorf("%w (--topic, --prefix, --from, --to, or --all)", err)
	}
	return f, nil
}

// bulkJob is one bulk job of the CLI: what it does to each message, for
// people (a verb and its participle), and how it runs.
type bulkJob struct {
	cmd, verb, done string // "clear", "cancel", "cancelled"
	run             func(ctx context.Context, st *shard.Store, n int, f shard.BulkFilter, matched int, progress func(shard.BulkProgress)) (shard.BulkProgress, error)
}

// runBulk counts what f selects, stops there on a dry run, asks for the
// namespace's name (unless --yes; without a terminal to ask on it
// refuses), runs the job with a progress bar on a terminal, writes one
// audit line, and prints the total. The job's count lives in Redis, so a
// run killed half way and run again ends with the right total.
func runBulk(ctx context.Context, e *env, o *bulkOpts, f shard.BulkFilter, j bulkJob, extra string) (shard.BulkProgress, int) {
	var res shard.BulkProgress
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return res, e.fail(j.cmd, err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return res, e.fail(j.cmd, err)
	}
	count, err := st.CountMatching(ctx, n, f)
	if err != nil {
		return res, e.fail(j.cmd, err)
	}
	what := fmt.Sprintf("%d scheduled messages (%s)%s", count, f, extra)
	if o.dryRun {
		fmt.Fprintf(e.stdout, "would %s %s of namespace %q\n", j.verb, what, e.cfg.Namespace)
		return res, exitOK
	}
	if !o.yes {
		if !isTerminal(e.stdin) {
			fmt.Fprintf(e.stderr, "delayq %s: this would %s %s of namespace %q; give --yes (no terminal to ask on)\n", j.cmd, j.verb, what, e.cfg.Namespace)
			return res, exitUsage
		}
		fmt.Fprintf(e.stderr, "This will %s %s of namespace %q.\nType the namespace to confirm: ", j.verb, what, e.cfg.Namespace)
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) || strings.TrimSpace(line) != e.cfg.Namespace {
			fmt.Fprintf(e.stderr, "delayq %s: not confirmed; nothing changed\n", j.cmd)
			return res, exitFail
		}
	}
	crash, err := crashPoint()
	if err != nil {
		return res, e.fail(j.cmd, err)
	}
	var bar *bulkBar
	if isTerminal(e.stderr) {
		bar = &bulkBar{w: e.stderr, start: time.Now(), total: count, done: j.done}
		defer bar.clear()
	}
	res, err = j.run(ctx, st, n, f, count, func(p shard.BulkProgress) {
		if bar != nil {
			bar.update(p)
		}
		if crash != nil {
			crash("page")
		}
	})
	e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "bulk "+j.verb), zap.String("target", f.String()+extra),
		zap.Int("count", res.Done), zap.String("result", resultOf(err)))
	if err != nil {
		fmt.Fprintf(e.stdout, "%s %d before the error; run the same command again to go on\n", j.done, res.Done)
		return res, e.fail(j.cmd, err)
	}
	fmt.Fprintf(e.stdout, "%s %d", j.done, res.Done)
	if res.Before > 0 {
		fmt.Fprintf(e.stdout, " (%d of them by an earlier run of this job that did not finish)", res.Before)
	}
	if res.InFlight > 0 {
		fmt.Fprintf(e.stdout, "; %d in flight could not be %s (they are being published)", res.InFlight, j.done)
	}
	return res, exitOK
}

func newClearFlags() (*flag.FlagSet, *bulkOpts, *bool) {
	o := &bulkOpts{}
	fs := flag.NewFlagSet("clear", flag.ContinueOnError)
	addBulkFlags(fs, o, true)
	dead := fs.Bool("dead", false, "with --all: purge the dead sets too")
	return fs, o, dead
}

// runClear: delayq clear cancels the scheduled messages a filter selects
// (a topic, an id prefix, a due window: all that are given must hold; or
// --all), shard after shard, a page of at most 500 entries and one script
// call per 64 ids at a time (shard.Store.BulkCancel), as runBulk says.
func runClear(ctx context.Context, e *env, args []string) int {
	fs, o, dead := newClearFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) > 0 {
		if err == nil {
			fmt.Fprintf(e.stderr, "delayq clear: unexpected arguments %q\n", pos)
		}
		return exitUsage
	}
	f, err := o.filter()
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq clear: %v\n", err)
		return exitUsage
	}
	if *dead && !o.all {
		fmt.Fprintln(e.stderr, "delayq clear: --dead goes with --all")
		return exitUsage
	}
	extra := ""
	if *dead {
		extra = " and every dead message"
	}
	_, code := runBulk(ctx, e, o, f, bulkJob{cmd: "clear", verb: "cancel", done: "cancelled",
		run: func(ctx context.Context, st *shard.Store, n int, f shard.BulkFilter, matched int, progress func(shard.BulkProgress)) (shard.BulkProgress, error) {
			return st.BulkCancel(ctx, n, f, matched, progress)
		}}, extra)
	if code != exitOK || o.dryRun {
		return code
	}
	if *dead {
		rdb, st, err := e.connect(ctx)
		if err != nil {
			return e.fail("clear", err)
		}
		defer rdb.Close()
		n, err := e.allShards(ctx, st)
		if err != nil {
			return e.fail("clear", err)
		}
		purged := 0
		for i := range n {
			p, err := purgeDead(ctx, st, i)
			purged += p
			if err != nil {
				return e.fail("clear", fmt.Errorf("purge the dead set of shard %d: %w", i, err))
			}
		}
		fmt.Fprintf(e.stdout, ", purged %d dead", purged)
	}
	fmt.Fprintln(e.stdout)
	return exitOK
}

func resultOf(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// purgeDead deletes what was dead in shard i when it started.
func purgeDead(ctx context.Context, st *shard.Store, i int) (int, error) {
	start, err := st.RedisNow(ctx)
	if err != nil {
		return 0, err
	}
	return eachDead(ctx, st, i, start, st.Purge)
}
