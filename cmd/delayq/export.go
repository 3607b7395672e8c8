package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/delayq/delayq/shard"
)

func exportCommand() command {
	return command{name: "export", args: "[-o FILE] [--after CURSOR] [--schedules | --dead]",
		summary: "every scheduled message as the JSON lines enqueue -f reads back (or the schedules, or the dead)", run: runExport,
		flags: func() *flag.FlagSet { fs, _ := exportFlags(); return fs }}
}

type exportOpts struct {
	out, after      string
	schedules, dead bool
}

func exportFlags() (*flag.FlagSet, *exportOpts) {
	o := &exportOpts{}
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.StringVar(&o.out, "o", "", "write to this file (default: standard output)")
	fs.StringVar(&o.after, "after", "", "go on after this cursor (an export that stopped prints it)")
	fs.BoolVar(&o.schedules, "schedules", false, "the recurring schedules instead, as the lines schedule set --file reads back (with what each has done)")
	fs.BoolVar(&o.dead, "dead", false, "the dead messages instead, as the lines enqueue -f puts back in the dead set")
	return fs, o
}

// exportPage is how many entries one Redis call of the export reads.
const exportPage = 500

// runExport writes every scheduled message, shard after shard, each in
// due order, as JSON lines (shard.AppendLine) that `delayq enqueue -f`
// reads back with their due times, attempts and retry steps. Memory stays
// bounded (a page at a time); on a terminal a progress line shows on
// stderr. An export that stops (an error, Ctrl-C) says the cursor to go on
// from. A message whose envelope cannot be read is named on stderr and
// left out (exit 1 at the end); an occurrence of a recurring schedule is
// left out (delayq schedule exports the schedules).
func runExport(ctx context.Context, e *env, args []string) int {
	fs, o := exportFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq export: %s\nusage: delayq export %s\n", msg, exportCommand().args)
		return exitUsage
	}
	switch {
	case len(pos) > 0:
		return usage(fmt.Sprintf("unexpected argument %q", pos[0]))
	case o.schedules && o.dead:
		return usage("--schedules and --dead are two exports: run one, then the other")
	case o.schedules && o.after != "":
		return usage("--after is for messages and the dead: the schedules are exported whole")
	}
	var cur shard.ExportCursor
	var deadCur shard.DeadCursor
	if o.dead {
		deadCur, err = shard.ParseDeadCursor(o.after)
	} else if !o.schedules {
		cur, err = shard.ParseExportCursor(o.after)
		if err != nil {
			err = &shard.InvalidError{Field: "after", Reason: err.Error()}
		}
	}
	if err != nil {
		return e.fail("export", err)
	}
	if os.Getenv("GOGC") == "" {
		// As for enqueue -f: it allocates for every line and keeps little.
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("export", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("export", err)
	}
	var w io.Writer = e.stdout
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return e.fail("export", err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	switch {
	case o.schedules:
		return exportSchedules(ctx, e, st, bw)
	case o.dead:
		return exportDead(ctx, e, st, n, deadCur, bw)
	}
	var bar *progress
	if isTerminal(e.stderr) {
		bar = &progress{w: e.stderr, start: time.Now(), noun: "exported"}
	}
	written, occurrences, corrupt := 0, 0, 0
	last := cur
	err = st.Export(ctx, n, cur, exportPage, func(x shard.Exported) error {
		switch {
		case errors.Is(x.Err, shard.ErrOccurrence):
			occurrences++
		case x.Err != nil:
			corrupt++
			if bar != nil {
				bar.done()
			}
			fmt.Fprintf(e.stderr, "delayq export: left out: %v\n", x.Err)
		default:
			if _, err := bw.Write(x.Line); err != nil {
				return err
			}
			written++
		}
		last = x.Next
		if bar != nil {
			bar.update(written, 0)
		}
		return nil
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if bar != nil {
		bar.done()
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq export: stopped after %d messages; to go on: delayq export --after '%s'\n", written, last)
		return e.fail("export", err)
	}
	fmt.Fprintf(e.stderr, "delayq export: %d messages exported from %d shards", written, n)
	if occurrences > 0 {
		fmt.Fprintf(e.stderr, "; %d occurrences of recurring schedules left out (their schedules make them)", occurrences)
	}
	fmt.Fprintln(e.stderr)
	if corrupt > 0 {
		fmt.Fprintf(e.stderr, "delayq export: %d messages left out: their envelopes cannot be read (named above)\n", corrupt)
		return exitFail
	}
	return exitOK
}
