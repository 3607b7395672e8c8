package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"strings"

	"github.com/delayq/delayq/shard"
)

func clearCommand() command {
	return command{name: "clear", args: "--all [--dead] | --topic T | --prefix P [--yes]",
		summary: "cancel scheduled messages in bulk, after a confirmation", run: runClear,
		flags: func() *flag.FlagSet { fs, _ := newClearFlags(); return fs }}
}

// clearFlags are `delayq clear`'s flags.
type clearFlags struct {
	all, dead, yes bool
	topic, prefix  string
}

func newClearFlags() (*flag.FlagSet, *clearFlags) {
	o := &clearFlags{}
	fs := flag.NewFlagSet("clear", flag.ContinueOnError)
	fs.BoolVar(&o.all, "all", false, "every scheduled message of the namespace")
	fs.StringVar(&o.topic, "topic", "", "the scheduled messages of this topic")
	fs.StringVar(&o.prefix, "prefix", "", "the scheduled messages whose id starts with this")
	fs.BoolVar(&o.dead, "dead", false, "with --all: purge the dead sets too")
	fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation")
	return fs, o
}

// runClear: delayq clear (--all | --topic T | --prefix P) [--dead] [--yes]
// cancels scheduled messages in bulk, shard after shard, a page of 500 and
// one script call per 64 ids at a time. It asks for the namespace's name
// first, unless --yes is given; without a terminal to ask on it refuses.
func runClear(ctx context.Context, e *env, args []string) int {
	fs, o := newClearFlags()
	all, topic, prefix, dead, yes := &o.all, &o.topic, &o.prefix, &o.dead, &o.yes
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) > 0 {
		if err == nil {
			fmt.Fprintf(e.stderr, "delayq clear: unexpected arguments %q\n", pos)
		}
		return exitUsage
	}
	chosen := 0
	for _, on := range []bool{*all, *topic != "", *prefix != ""} {
		if on {
			chosen++
		}
	}
	switch {
	case chosen != 1:
		fmt.Fprintln(e.stderr, "delayq clear: give exactly one of --all, --topic T, --prefix P")
		return exitUsage
	case *dead && !*all:
		fmt.Fprintln(e.stderr, "delayq clear: --dead goes with --all")
		return exitUsage
	}
	what := "every scheduled message"
	match := func(*shard.Listed) bool { return true }
	switch {
	case *topic != "":
		what = fmt.Sprintf("the scheduled messages of topic %q", *topic)
		match = func(l *shard.Listed) bool { return l.Envelope != nil && l.Envelope.Topic == *topic }
	case *prefix != "":
		what = fmt.Sprintf("the scheduled messages whose id starts with %q", *prefix)
		match = func(l *shard.Listed) bool { return strings.HasPrefix(l.ID, *prefix) }
	case *dead:
		what = "every scheduled and every dead message"
	}
	if !*yes {
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
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("clear", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("clear", err)
	}
	var cancelled, inFlight, purged int
	for i := range n {
		c, f, err := st.ClearShard(ctx, i, match)
		cancelled, inFlight = cancelled+c, inFlight+f
		if err != nil {
			fmt.Fprintf(e.stdout, "cancelled %d before the error\n", cancelled)
			return e.fail("clear", fmt.Errorf("shard %d: %w", i, err))
		}
		if *dead {
			p, err := purgeDead(ctx, st, i)
			purged += p
			if err != nil {
				return e.fail("clear", fmt.Errorf("purge the dead set of shard %d: %w", i, err))
			}
		}
	}
	fmt.Fprintf(e.stdout, "cancelled %d", cancelled)
	if *dead {
		fmt.Fprintf(e.stdout, ", purged %d dead", purged)
	}
	if inFlight > 0 {
		fmt.Fprintf(e.stdout, "; %d in flight could not be cancelled (they are being published)", inFlight)
	}
	fmt.Fprintln(e.stdout)
	return exitOK
}

// purgeDead deletes what was dead in shard i when it started.
func purgeDead(ctx context.Context, st *shard.Store, i int) (int, error) {
	start, err := st.RedisNow(ctx)
	if err != nil {
		return 0, err
	}
	return eachDead(ctx, st, i, start, st.Purge)
}
