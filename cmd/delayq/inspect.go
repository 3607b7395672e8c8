package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

func inspectCommand() command {
	return command{name: "inspect", args: "ID [--json]", summary: "show where a message is", run: runInspect,
		flags: func() *flag.FlagSet { fs, _ := inspectFlags(); return fs }}
}

func inspectFlags() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	return fs, fs.Bool("json", false, "print JSON")
}

// inspectView is inspect's output: the API's view of a message without
// its body, plus the attempt a consumer sees and the body's size.
type inspectView struct {
	httpapi.Message
	// Attempt is the x-delayq-attempt of the delivery under way (in
	// flight) or of the next one (scheduled); 0 when unknown or dead.
	Attempt   int `json:"attempt,omitempty"`
	BodyBytes int `json:"body_bytes"`
}

func runInspect(ctx context.Context, e *env, args []string) int {
	fs, asJSON := inspectFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) != 1 {
		if err == nil {
			fmt.Fprintln(e.stderr, "delayq inspect: give one ID")
		}
		return exitUsage
	}
	p, done, err := e.producer(ctx, readOnce)
	if err != nil {
		return e.fail("inspect", err)
	}
	defer done()
	info, err := p.Inspect(ctx, pos[0])
	if err != nil {
		return e.fail("inspect", err)
	}
	v := inspectView{Message: httpapi.MessageOf(info)}
	v.Body, v.BodyBase64 = nil, nil
	if info.State == shard.StateScheduled || info.State == shard.StateInFlight {
		v.Attempt = info.Attempts + 1
	}
	if info.Envelope != nil {
		v.BodyBytes = len(info.Envelope.Body)
	}
	code := exitOK
	if info.State == shard.StateUnknown {
		// Not scheduled, in flight or dead: never enqueued, already
		// delivered, or cancelled. An answer, but not the one asked for.
		fmt.Fprintf(e.stderr, "delayq inspect: %q is unknown (never enqueued, delivered, or cancelled)\n", v.ID)
		code = exitFail
	}
	if *asJSON {
		if c := writeJSON(e, v); c != exitOK {
			return c
		}
		return code
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	row := func(k, val string) {
		if val != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, val)
		}
	}
	row("id", v.ID)
	row("shard", fmt.Sprint(v.Shard))
	row("state", string(v.State))
	switch info.State {
	case shard.StateScheduled:
		row("due", v.At)
		if v.Far {
			row("tier", "far (promoted into the due set once its bucket is within the horizon: delayq far)")
		}
	case shard.StateInFlight:
		row("lease until", v.At)
	case shard.StateDead:
		row("dead since", v.At)
	}
	if v.Scheduled != "" && v.Scheduled != v.At {
		row("scheduled for", v.Scheduled)
	}
	row("attempts", fmt.Sprint(v.Attempts))
	if v.Attempt > 0 {
		label := "next attempt"
		if info.State == shard.StateInFlight {
			label = "attempt"
		}
		row(label, fmt.Sprintf("%d (the x-delayq-attempt a consumer sees)", v.Attempt))
	}
	row("expires at", v.ExpiresAt)
	if v.MaxLatenessMs > 0 {
		row("max lateness", (time.Duration(v.MaxLatenessMs) * time.Millisecond).String())
	}
	row("reason", v.Reason)
	row("topic", v.Topic)
	row("exchange", v.Exchange)
	row("routing key", v.RoutingKey)
	row("content type", v.ContentType)
	for _, k := range slices.Sorted(maps.Keys(v.Properties)) {
		row(strings.ReplaceAll(k, "_", " "), fmt.Sprint(v.Properties[k]))
	}
	if env := info.Envelope; env != nil {
		for _, h := range env.Headers { // sorted by key
			row("header "+h.Key, shard.FormatValue(h.Value))
		}
	}
	if info.Envelope != nil {
		row("body", fmt.Sprintf("%d bytes", v.BodyBytes))
	}
	row("corrupt", v.Corrupt)
	_ = tw.Flush()
	return code
}
