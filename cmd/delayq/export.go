package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/delayq/delayq/shard"
)

func exportCommand() command {
	return command{name: "export", args: "[-o FILE] [--after CURSOR]",
		summary: "every scheduled message as the JSON lines enqueue -f reads back", run: runExport,
		flags: func() *flag.FlagSet { fs, _, _ := exportFlags(); return fs }}
}

func exportFlags() (fs *flag.FlagSet, out, after *string) {
	fs = flag.NewFlagSet("export", flag.ContinueOnError)
	out = fs.String("o", "", "write to this file (default: standard output)")
	after = fs.String("after", "", "go on after this cursor (an export that stopped prints it)")
	return fs, out, after
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
	fs, out, after := exportFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "delayq export: unexpected argument %q\nusage: delayq export %s\n", pos[0], exportCommand().args)
		return exitUsage
	}
	cur, err := shard.ParseExportCursor(*after)
	if err != nil {
		return e.fail("export", &shard.InvalidError{Field: "after", Reason: err.Error()})
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
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return e.fail("export", err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 256<<10)
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
