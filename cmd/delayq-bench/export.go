package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ---- export: delayq export and enqueue -f of what it wrote ----

// exportResult is, Rounds times, the messages a second of `delayq export`
// of -backlog pending messages (100-byte bodies, due in an hour) into a
// file, and of `delayq enqueue -f` of that file into another namespace:
// each the whole command, process start included.
type exportResult struct {
	Export []float64 `json:"export_per_sec"`
	Import []float64 `json:"import_per_sec"`
}

func (b *bench) export(ctx context.Context) error {
	r := &exportResult{}
	b.res.Export = r
	n := b.c.backlog
	dir, err := os.MkdirTemp("", "delayq-bench-export")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := func(ns string, args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, b.c.delayq, args...)
		cmd.Env = append(os.Environ(), "DELAYQ_REDIS_ADDRS="+b.rs.Addr, "DELAYQ_NAMESPACE="+ns,
			fmt.Sprintf("DELAYQ_SHARDS=%d", shards), "DELAYQ_LOG_LEVEL=error")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("delayq %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return time.Since(start), nil
	}
	for round := range b.c.rounds {
		from, to := b.namespace("export-from"), b.namespace("export-to")
		if _, err := b.fill(ctx, from, n, time.Hour, time.Time{}); err != nil {
			return err
		}
		file := filepath.Join(dir, fmt.Sprintf("round-%d.jsonl", round))
		out, err := run(from, "export", "-o", file)
		if err != nil {
			return err
		}
		in, err := run(to, "enqueue", "-f", file)
		if err != nil {
			return err
		}
		r.Export, r.Import = append(r.Export, float64(n)/out.Seconds()), append(r.Import, float64(n)/in.Seconds())
		say("export: round %d, %d messages: export %.0f msg/s, enqueue -f of it %.0f msg/s", round+1, n, r.Export[round], r.Import[round])
	}
	say("export: medians: export %.0f msg/s, enqueue -f %.0f msg/s", median(r.Export), median(r.Import))
	return nil
}
