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
		flags: func() *flag.FlagSet { fs, _ := newClearFlags(); return fs }}
}

// clearFlags are `delayq clear`'s flags.
type clearFlags struct {
	all, dead, yes, dryRun  bool
	topic, prefix, from, to string
}

func newClearFlags() (*flag.FlagSet, *clearFlags) {
	o := &clearFlags{}
	fs := flag.NewFlagSet("clear", flag.ContinueOnError)
	fs.BoolVar(&o.all, "all", false, "every scheduled message of the namespace")
	fs.StringVar(&o.topic, "topic", "", "the scheduled messages of this topic")
	fs.StringVar(&o.prefix, "prefix", "", "the scheduled messages whose id starts with this")
	fs.StringVar(&o.from, "from", "", "the scheduled messages due at or after this: a duration from now (30m, -1h) or an RFC 3339 time")
	fs.StringVar(&o.to, "to", "", "the scheduled messages due at or before this: a duration from now or an RFC 3339 time")
	fs.BoolVar(&o.dead, "dead", false, "with --all: purge the dead sets too")
	fs.BoolVar(&o.dryRun, "dry-run", false, "only count what the filter selects now; change nothing")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	return fs, o
}

// runClear: delayq clear cancels the scheduled messages a filter selects
// (a topic, an id prefix, a due window: all that are given must hold; or
// --all), shard after shard, a page of at most 500 entries and one script
// call per 64 ids at a time (shard.Store.BulkCancel). The count lives in
// Redis: a run that was killed can be run again with the same filter and
// ends with the right total. It counts first and asks for the namespace's
// name, unless --yes; without a terminal to ask on it refuses. It writes
// one audit line with the filter and the count.
func runClear(ctx context.Context, e *env, args []string) int {
	fs, o := newClearFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) > 0 {
		if err == nil {
			fmt.Fprintf(e.stderr, "delayq clear: unexpected arguments %q\n", pos)
		}
		return exitUsage
	}
	f := shard.BulkFilter{Topic: o.topic, Prefix: o.prefix, All: o.all}
	now := time.Now()
	for _, w := range []struct {
		flag, v string
		to      *time.Time
	}{{"from", o.from, &f.From}, {"to", o.to, &f.To}} {
		if w.v == "" {
			continue
		}
		if *w.to, err = shard.ParseWindowEnd(w.flag, w.v, now); err != nil {
			fmt.Fprintf(e.stderr, "delayq clear: --%v\n", err)
			return exitUsage
		}
	}
	if err := f.Validate(); err != nil {
		fmt.Fprintf(e.stderr, "delayq clear: %v (--topic, --prefix, --from, --to, or --all)\n", err)
		return exitUsage
	}
	if o.dead && !o.all {
		fmt.Fprintln(e.stderr, "delayq clear: --dead goes with --all")
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("clear", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("clear", err)
	}
	count, err := st.CountMatching(ctx, n, f)
	if err != nil {
		return e.fail("clear", err)
	}
	what := fmt.Sprintf("%d scheduled messages (%s)", count, f)
	if o.dead {
		what += " and every dead message"
	}
	if o.dryRun {
		fmt.Fprintf(e.stdout, "would cancel %d scheduled messages (%s) of namespace %q\n", count, f, e.cfg.Namespace)
		return exitOK
	}
	if !o.yes {
		if !isTerminal(e.stdin) {
			fmt.Fprintf(e.stderr, "delayq clear: this cancels %s of namespace %q; give --yes (no terminal to ask on)\n", what, e.cfg.Namespace)
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "This cancels %s of namespace %q.\nType the namespace to confirm: ", what, e.cfg.Namespace)
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) || strings.TrimSpace(line) != e.cfg.Namespace {
			fmt.Fprintln(e.stderr, "delayq clear: not confirmed; nothing changed")
			return exitFail
		}
	}
	crash, err := crashPoint()
	if err != nil {
		return e.fail("clear", err)
	}
	var bar *bulkBar
	if isTerminal(e.stderr) {
		bar = &bulkBar{w: e.stderr, start: time.Now(), total: count}
		defer bar.done()
	}
	res, err := st.BulkCancel(ctx, n, f, count, func(p shard.BulkProgress) {
		if bar != nil {
			bar.update(p)
		}
		if crash != nil {
			crash("page")
		}
	})
	e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "bulk cancel"), zap.String("target", f.String()),
		zap.Int("count", res.Cancelled), zap.String("result", resultOf(err)))
	if err != nil {
		fmt.Fprintf(e.stdout, "cancelled %d before the error; run the same command again to go on\n", res.Cancelled)
		return e.fail("clear", err)
	}
	purged := 0
	if o.dead {
		for i := range n {
			p, err := purgeDead(ctx, st, i)
			purged += p
			if err != nil {
				return e.fail("clear", fmt.Errorf("purge the dead set of shard %d: %w", i, err))
			}
		}
	}
	fmt.Fprintf(e.stdout, "cancelled %d", res.Cancelled)
	if res.Before > 0 {
		fmt.Fprintf(e.stdout, " (%d of them by an earlier run of this filter that did not finish)", res.Before)
	}
	if o.dead {
		fmt.Fprintf(e.stdout, ", purged %d dead", purged)
	}
	if res.InFlight > 0 {
		fmt.Fprintf(e.stdout, "; %d in flight could not be cancelled (they are being published)", res.InFlight)
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
