package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

func farCommand() command {
	return command{name: "far", args: "[--json] | on [--horizon D] [--width D] [--slots N] | off",
		summary: "the far-future tier: what waits there; turn it on (every scanner upgraded first) or off", run: runFar,
		flags: func() *flag.FlagSet { fs, _ := farFlags(); return fs }}
}

// farOpts are the flags of delayq far.
type farOpts struct {
	asJSON         bool
	horizon, width time.Duration
	slots          int
}

func farFlags() (*flag.FlagSet, *farOpts) {
	o := &farOpts{}
	fs := flag.NewFlagSet("far", flag.ContinueOnError)
	fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	fs.DurationVar(&o.horizon, "horizon", 0, "on: messages due later than this go far (default 1h, or the horizon set)")
	fs.DurationVar(&o.width, "width", 0, "on: the far buckets' width, fixed once set (default 10m)")
	fs.IntVar(&o.slots, "slots", 0, "on: the id index's keys per shard, fixed once set (default 4096)")
	return fs, o
}

// runFar shows the far tier, or turns it on or off: a change writes an
// audit line.
func runFar(ctx context.Context, e *env, args []string) int {
	fs, o := farFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	op := "show"
	if len(pos) > 0 {
		op = pos[0]
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq far: %s\nusage: delayq far %s\n", msg, farCommand().args)
		return exitUsage
	}
	switch {
	case op != "show" && op != "on" && op != "off":
		return usage(fmt.Sprintf("unknown subcommand %q", op))
	case len(pos) > 1 || op == "show" && len(pos) > 0:
		return usage(fmt.Sprintf("unexpected arguments %q", pos[1:]))
	case op != "on" && (o.horizon != 0 || o.width != 0 || o.slots != 0):
		return usage("--horizon, --width and --slots go with on")
	case o.horizon < 0 || o.width < 0 || o.slots < 0:
		return usage("--horizon, --width and --slots must be positive")
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("far", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("far", err)
	}
	if op != "show" {
		if op == "on" {
			err = st.TurnFarOn(ctx, shard.FarSettings{Horizon: o.horizon, BucketWidth: o.width, IndexSlots: o.slots})
		} else {
			err = st.TurnFarOff(ctx)
		}
		e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "far "+op), zap.String("target", "far tier"),
			zap.String("result", resultOf(err)))
		if err != nil {
			return e.fail("far", err)
		}
	}
	status, err := st.FarStatus(ctx, n)
	if err != nil {
		return e.fail("far", err)
	}
	if o.asJSON {
		return writeJSON(e, httpapi.FarOf(status))
	}
	v := httpapi.FarOf(status)
	switch {
	case !status.On:
		fmt.Fprintln(e.stdout, "far tier: off (never turned on); every message waits in the due set")
	case !status.Placing:
		fmt.Fprintf(e.stdout, "far tier: turned off; %d messages still far, promoted by the scanners now\n", status.Far)
	default:
		fmt.Fprintf(e.stdout, "far tier: on; messages due more than %s ahead wait far, in buckets of %s (%d index keys a shard)\n",
			status.Settings.Horizon, status.Settings.BucketWidth, status.Settings.IndexSlots)
	}
	if status.On {
		fmt.Fprintf(e.stdout, "far now: %d messages in %d buckets", status.Far, status.Buckets)
		if v.NextBucket != "" {
			fmt.Fprintf(e.stdout, "; the earliest bucket starts %s", v.NextBucket)
		}
		fmt.Fprintln(e.stdout)
	}
	fmt.Fprintf(e.stdout, "scanners: %d live", len(status.Scanners))
	if len(status.Older) > 0 {
		fmt.Fprintf(e.stdout, ", %d of a version without the far tier: %v", len(status.Older), status.Older)
	}
	fmt.Fprintln(e.stdout)
	return exitOK
}
