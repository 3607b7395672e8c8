package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func rescheduleCommand() command {
	return command{name: "reschedule", args: "ID (--delay D | --at T)", summary: "move a scheduled message", run: runReschedule,
		flags: func() *flag.FlagSet { fs, _, _ := rescheduleFlags(); return fs }}
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
	d := new(time.Duration)
	durationVar(fs, d, "delay", 0, "due after this delay from now (Redis clock), e.g. 90s, 30m or 36h")
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
		t, perr := parseAt("at", *at)
		if perr != nil {
			fmt.Fprintf(e.stderr, "delayq reschedule: %v\n", perr)
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
