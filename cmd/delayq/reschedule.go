package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/delayq/delayq/shard"
)

func rescheduleCommand() command {
	return command{name: "reschedule", args: "(ID | --topic T | --prefix P | --from W | --to W...) (--delay D | --at T) [--dry-run] [--yes]",
		summary: "move a scheduled message, or every one a filter selects", run: runReschedule,
		flags: func() *flag.FlagSet { fs, _, _, _ := rescheduleFlags(); return fs }}
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
	p, done, err := e.producer(ctx, readOnce)
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

func rescheduleFlags() (*flag.FlagSet, *time.Duration, *string, *bulkOpts) {
	fs := flag.NewFlagSet("reschedule", flag.ContinueOnError)
	d := new(time.Duration)
	durationVar(fs, d, "delay", 0, "due after this delay from now (Redis clock), e.g. 90s, 30m or 36h")
	at := fs.String("at", "", "due at this RFC 3339 time")
	o := &bulkOpts{}
	addBulkFlags(fs, o, false)
	return fs, d, at, o
}

// runReschedule: delayq reschedule ID moves one message; with a filter
// (--topic, --prefix, --from, --to) it moves every scheduled message the
// filter selects to one time, as runBulk says (shard.Store.BulkReschedule:
// --delay counts from when the job first starts, and a run killed half way
// and run again goes on to the same time).
func runReschedule(ctx context.Context, e *env, args []string) int {
	fs, delay, at, o := rescheduleFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bulk := o.any()
	if bulk == (len(pos) == 1) || len(pos) > 1 || set["delay"] == set["at"] {
		fmt.Fprintln(e.stderr, "delayq reschedule: give one ID or a filter (--topic, --prefix, --from, --to), and one of --delay or --at")
		return exitUsage
	}
	if !bulk && (o.dryRun || o.yes) {
		fmt.Fprintln(e.stderr, "delayq reschedule: --dry-run and --yes go with a filter")
		return exitUsage
	}
	var when time.Time
	if set["at"] {
		if when, err = parseAt("at", *at); err != nil {
			fmt.Fprintf(e.stderr, "delayq reschedule: %v\n", err)
			return exitUsage
		}
	}
	if bulk {
		f, err := o.filter()
		if err != nil {
			fmt.Fprintf(e.stderr, "delayq reschedule: %v\n", err)
			return exitUsage
		}
		target := " to " + when.UTC().Format(time.RFC3339Nano)
		if !set["at"] {
			target = " to " + delay.String() + " from now"
		}
		_, code := runBulk(ctx, e, o, f, bulkJob{cmd: "reschedule", verb: "reschedule", done: "rescheduled",
			run: func(ctx context.Context, st *shard.Store, n int, f shard.BulkFilter, matched int, progress func(shard.BulkProgress)) (shard.BulkProgress, error) {
				return st.BulkReschedule(ctx, n, f, *delay, when, matched, progress)
			}}, target)
		if code == exitOK && !o.dryRun {
			fmt.Fprintln(e.stdout)
		}
		return code
	}
	p, done, err := e.producer(ctx, readOnce)
	if err != nil {
		return e.fail("reschedule", err)
	}
	defer done()
	var due time.Time
	if set["at"] {
		due, err = p.Reschedule(ctx, pos[0], when)
	} else {
		due, err = p.RescheduleAfter(ctx, pos[0], *delay)
	}
	if err != nil {
		return e.fail("reschedule", err)
	}
	fmt.Fprintf(e.stdout, "rescheduled %s, due %s\n", pos[0], due.UTC().Format(time.RFC3339Nano))
	return exitOK
}
