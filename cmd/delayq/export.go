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
	out := newExportSink(e, w)
	switch {
	case o.schedules:
		return exportSchedules(ctx, e, st, out)
	case o.dead:
		return exportDead(ctx, e, st, n, deadCur, out)
	}
	occurrences := 0
	last := cur
	err = st.Export(ctx, n, cur, exportPage, func(x shard.Exported) error {
		if errors.Is(x.Err, shard.ErrOccurrence) {
			occurrences++
		} else if err := out.line(x.Line, x.Err); err != nil {
			return err // the cursor stays before it
		}
		last = x.Next
		return nil
	})
	if err = out.finish(err); err != nil {
		fmt.Fprintf(e.stderr, "delayq export: stopped after %d messages; to go on: delayq export --after '%s'\n", out.written, last)
		return e.fail("export", err)
	}
	fmt.Fprintf(e.stderr, "delayq export: %d messages exported from %d shards", out.written, n)
	if occurrences > 0 {
		fmt.Fprintf(e.stderr, "; %d occurrences of recurring schedules left out (their schedules make them)", occurrences)
	}
	fmt.Fprintln(e.stderr)
	if out.corrupt > 0 {
		fmt.Fprintf(e.stderr, "delayq export: %d messages left out: their envelopes cannot be read (named above)\n", out.corrupt)
		return exitFail
	}
	return exitOK
}

// exportSink writes an export's lines through a buffer, with a progress
// line on a terminal, and names on stderr what it leaves out.
type exportSink struct {
	e                *env
	bw               *bufio.Writer
	bar              *progress
	written, corrupt int
}

func newExportSink(e *env, w io.Writer) *exportSink {
	s := &exportSink{e: e, bw: bufio.NewWriterSize(w, 256<<10)}
	if isTerminal(e.stderr) {
		s.bar = &progress{w: e.stderr, start: time.Now(), noun: "exported"}
	}
	return s
}

// line writes one line, or names why a message has none (left out).
func (s *exportSink) line(line []byte, why error) error {
	if why != nil {
		s.corrupt++
		if s.bar != nil {
			s.bar.done()
		}
		fmt.Fprintf(s.e.stderr, "delayq export: left out: %v\n", why)
		return nil
	}
	if _, err := s.bw.Write(line); err != nil {
		return err
	}
	s.written++
	if s.bar != nil {
		s.bar.update(s.written, 0)
	}
	return nil
}

// finish flushes what is buffered and ends the progress line; it returns
// err, the walk's, or else the flush's.
func (s *exportSink) finish(err error) error {
	if ferr := s.bw.Flush(); err == nil {
		err = ferr
	}
	if s.bar != nil {
		s.bar.done()
	}
	return err
}
