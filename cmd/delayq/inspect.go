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

// inspectView is inspect's output.
type inspectView struct {
	ID        string      `json:"id"`
	Shard     int         `json:"shard"`
	State     shard.State `json:"state"`
	At        string      `json:"at,omitempty"`
	Scheduled string      `json:"scheduled,omitempty"`
	Attempts  int         `json:"attempts"`
	// Attempt is the x-delayq-attempt of the delivery under way (in
	// flight) or of the next one (scheduled); 0 when unknown or dead.
	Attempt     int            `json:"attempt,omitempty"`
	Reason      string         `json:"reason,omitempty"`
	Topic       string         `json:"topic,omitempty"`
	Exchange    string         `json:"exchange,omitempty"`
	RoutingKey  string         `json:"routing_key,omitempty"`
	ContentType string         `json:"content_type,omitempty"`
	Properties  map[string]any `json:"properties,omitempty"`
	// Headers are typed: see shard.ParseJSONValue for the form.
	Headers   map[string]any `json:"headers,omitempty"`
	BodyBytes int            `json:"body_bytes"`
	Corrupt   string         `json:"corrupt,omitempty"`
	// text renders Headers for the table view.
	text map[string]string
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
	p, done, err := e.producer(ctx)
	if err != nil {
		return e.fail("inspect", err)
	}
	defer done()
	info, err := p.Inspect(ctx, pos[0])
	if err != nil {
		return e.fail("inspect", err)
	}
	v := inspectView{ID: info.ID, Shard: info.Shard, State: info.State, Attempts: info.Attempts, Reason: info.Reason}
	if !info.At.IsZero() {
		v.At = info.At.UTC().Format(time.RFC3339Nano)
	}
	if !info.Scheduled.IsZero() {
		v.Scheduled = info.Scheduled.UTC().Format(time.RFC3339Nano)
	}
	if info.State == shard.StateScheduled || info.State == shard.StateInFlight {
		v.Attempt = info.Attempts + 1
	}
	if env := info.Envelope; env != nil {
		v.Topic, v.Exchange, v.RoutingKey, v.ContentType, v.BodyBytes = env.Topic, env.Exchange, env.RoutingKey, env.ContentType, len(env.Body)
		v.Properties = httpapi.PropertiesOf(env.Properties)
		if len(env.Headers) > 0 {
			v.Headers, v.text = map[string]any{}, map[string]string{}
			for _, h := range env.Headers {
				v.Headers[h.Key] = shard.JSONValue(h.Value)
				v.text[h.Key] = shard.FormatValue(h.Value)
			}
		}
	}
	if info.Corrupt != nil {
		v.Corrupt = info.Corrupt.Error()
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
	row("reason", v.Reason)
	row("topic", v.Topic)
	row("exchange", v.Exchange)
	row("routing key", v.RoutingKey)
	row("content type", v.ContentType)
	for _, k := range slices.Sorted(maps.Keys(v.Properties)) {
		row(strings.ReplaceAll(k, "_", " "), fmt.Sprint(v.Properties[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(v.text)) {
		row("header "+k, v.text[k])
	}
	if info.Envelope != nil {
		row("body", fmt.Sprintf("%d bytes", v.BodyBytes))
	}
	row("corrupt", v.Corrupt)
	_ = tw.Flush()
	return code
}
