package main

import (
	"context"
	"fmt"

	"github.com/delayq/delayq/shard"
)

// exportSchedules writes every recurring schedule as the JSON line
// `delayq schedule set --file` reads back, with what it has done
// (shard.AppendScheduleLine), in name order.
func exportSchedules(ctx context.Context, e *env, st *shard.Store, out *exportSink) int {
	infos, err := st.Schedules(ctx)
	if err != nil {
		return e.fail("export", err)
	}
	var line []byte
	for j := range infos {
		if line, err = shard.AppendScheduleLine(line[:0], &infos[j]); err != nil {
			break
		}
		if err = out.line(line, nil); err != nil {
			break
		}
	}
	if err := out.finish(err); err != nil {
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
func exportDead(ctx context.Context, e *env, st *shard.Store, n int, cur shard.DeadCursor, out *exportSink) int {
	last := cur
	err := st.ExportDead(ctx, n, cur, exportPage, func(x shard.ExportedDead) error {
		if err := out.line(x.Line, x.Err); err != nil {
			return err // the cursor stays before it
		}
		last = x.Next
		return nil
	})
	if err = out.finish(err); err != nil {
		fmt.Fprintf(e.stderr, "delayq export: stopped after %d dead messages; to go on: delayq export --dead --after '%s'\n", out.written, last)
		return e.fail("export", err)
	}
	fmt.Fprintf(e.stderr, "delayq export: %d dead messages exported from %d shards; enqueue -f puts them back in the dead set\n", out.written, n)
	if out.corrupt > 0 {
		fmt.Fprintf(e.stderr, "delayq export: %d dead messages left out: their envelopes cannot be read (named above)\n", out.corrupt)
		return exitFail
	}
	return exitOK
}
