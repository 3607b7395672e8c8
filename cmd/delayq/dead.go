package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/shard"
)

func deadCommand() command {
	return command{name: "dead", args: "list [--limit N] [--json] | show ID | redrive ID...|--all | purge ID...|--all",
		summary: "see why messages are dead; send them again or delete them", run: runDead,
		flags: func() *flag.FlagSet { fs, _, _ := deadListFlags(); return fs }}
}

// runDead: delayq dead list [--limit N] [--json] | show ID | redrive ID...|--all | purge ID...|--all
func runDead(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "delayq dead: usage: delayq dead list|show ID|redrive ID...|--all|purge ID...|--all")
		return exitUsage
	}
	switch args[0] {
	case "list":
		return deadList(ctx, e, args[1:])
	case "show":
		return runInspect(ctx, e, args[1:])
	case "redrive", "purge":
		return deadEach(ctx, e, args[0], args[1:])
	}
	fmt.Fprintf(e.stderr, "delayq dead: unknown action %q (list, show, redrive, purge)\n", args[0])
	return exitUsage
}

func deadListFlags() (*flag.FlagSet, *int, *bool) {
	fs := flag.NewFlagSet("dead list", flag.ContinueOnError)
	return fs, fs.Int("limit", 100, "most messages to list, oldest first"), fs.Bool("json", false, "print JSON")
}

type deadView struct {
	ID     string `json:"id"`
	Shard  int    `json:"shard"`
	Since  string `json:"since"`
	Reason string `json:"reason"`
}

func deadList(ctx context.Context, e *env, args []string) int {
	fs, limit, asJSON := deadListFlags()
	if pos, err := parse(fs, args, e.stderr); err != nil || len(pos) > 0 || *limit < 1 {
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("dead list", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("dead list", err)
	}
	list, err := st.DeadList(ctx, n, *limit)
	if err != nil {
		return e.fail("dead list", err)
	}
	views := make([]deadView, len(list))
	for i, d := range list {
		views[i] = deadView{ID: d.ID, Shard: d.Shard, Since: d.Since.UTC().Format(time.RFC3339Nano), Reason: d.Reason}
	}
	if *asJSON {
		return writeJSON(e, views)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSHARD\tDEAD SINCE\tREASON")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.ID, v.Shard, v.Since, v.Reason)
	}
	_ = tw.Flush()
	fmt.Fprintf(e.stdout, "%d dead message(s) shown (--limit %d)\n", len(views), *limit)
	return exitOK
}

// deadEach redrives or purges the given ids, or every dead message.
func deadEach(ctx context.Context, e *env, action string, args []string) int {
	all := len(args) == 1 && args[0] == "--all"
	if len(args) == 0 || (!all && contains(args, "--all")) {
		fmt.Fprintf(e.stderr, "delayq dead %s: give IDs or --all\n", action)
		return exitUsage
	}
	p, done, err := e.producer(ctx, readOnce)
	if err != nil {
		return e.fail("dead "+action, err)
	}
	defer done()
	op, past := p.Redrive, "redriven"
	if action == "purge" {
		op, past = p.Purge, "purged"
	}
	if !all {
		code := exitOK
		for _, id := range args {
			if err := op(ctx, id); err != nil {
				code = e.fail("dead "+action, err)
				continue
			}
			fmt.Fprintf(e.stdout, "%s %s\n", past, id)
		}
		return code
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("dead "+action, err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("dead "+action, err)
	}
	// Only what was dead when the sweep started: a redriven message that
	// dies again meanwhile (its route is still broken) is left for the next
	// sweep, so the sweep ends.
	start, err := st.RedisNow(ctx)
	if err != nil {
		return e.fail("dead "+action, err)
	}
	each := st.Redrive
	if action == "purge" {
		each = st.Purge
	}
	total := 0
	for i := range n {
		done, err := eachDead(ctx, st, i, start, each)
		total += done
		if err != nil {
			return e.fail("dead "+action, fmt.Errorf("after %d: %w", total, err))
		}
	}
	fmt.Fprintf(e.stdout, "%s %d dead message(s)\n", past, total)
	return exitOK
}

// eachDead applies op (Redrive or Purge) to every message of shard i's
// dead set that died at or before startMs, 100 at a time, and returns how
// many it did. An id gone meanwhile counts as done.
func eachDead(ctx context.Context, st *shard.Store, i int, startMs int64, op func(context.Context, int, string) error) (int, error) {
	n := 0
	for {
		ids, err := st.DeadIDs(ctx, i, startMs, 100)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		for _, id := range ids {
			if err := op(ctx, i, id); err != nil && !errors.Is(err, shard.ErrNotFound) {
				return n, err
			}
			n++
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
