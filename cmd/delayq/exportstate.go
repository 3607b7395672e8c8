package main

import (
	"bufio"
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/shard"
)

// exportSchedules writes every recurring schedule as the JSON line
// `delayq schedule set --file` reads back, with what it has done
// (shard.AppendScheduleLine), in name order.
func exportSchedules(ctx context.Context, e *env, st *shard.Store, bw *bufio.Writer) int {
	infos, err := st.Schedules(ctx)
	if err != nil {
		return e.fail("export", err)
	}
	var line []byte
	for j := range infos {
		if line, err = shard.AppendScheduleLine(line[:0], &infos[j]); err != nil {
			return e.fail("export", err)
		}
		if _, err := bw.Write(line); err != nil {
			return e.fail("export", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return e.fail("export", err)
	}
	fmt.Fprintf(e.stderr, "delayq export: %d schedules exported; read them back with delayq schedule set --file\n", len(infos))
	return exitOK
}

// exportDead writes every dead message of the first n shards after cur,
// oldest first, as the JSON line `delayq enqueue -f` puts back in the dead
// set (shard.Store.ExportDead). One whose envelope cannot be read is named
// on stderr and left out (exit 1 at the end); a stopped export says the
// cursor to go on from.
func exportDead(ctx context.Context, e *env, st *shard.Store, n int, cur shard.DeadCursor, bw *bufio.Writer) int {
	written, corrupt := 0, 0
	last := cur
	var bar *progress
	if isTerminal(e.stderr) {
		bar = &progress{w: e.stderr, start: time.Now(), noun: "exported"}
	}
	err := st.ExportDead(ctx, n, cur, exportPage, func(x shard.ExportedDead) error {
		if x.Err != nil {
			corrupt++
			if bar != nil {
				bar.done()
			}
			fmt.Fprintf(e.stderr, "delayq export: left out: %v\n", x.Err)
		} else if _, err := bw.Write(x.Line); err != nil {
			return err
		} else {
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
		fmt.Fprintf(e.stderr, "delayq export: stopped after %d dead messages; to go on: delayq export --dead --after '%s'\n", written, last)
		return e.fail("export", err)
	}
	fmt.Fprintf(e.stderr, "delayq export: %d dead messages exported from %d shards; enqueue -f puts them back in the dead set\n", written, n)
	if corrupt > 0 {
		fmt.Fprintf(e.stderr, "delayq export: %d dead messages left out: their envelopes cannot be read (named above)\n", corrupt)
		return exitFail
	}
	return exitOK
}
