package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

func flowCommand() command {
	return command{name: "flow", args: "[--json] | limit TOPIC RATE [--burst N] | pause TOPIC [--until W] | resume TOPIC",
		summary: "per-topic release limits and pauses, for the whole fleet", run: runFlow,
		flags: func() *flag.FlagSet { fs, _, _, _ := flowFlags(); return fs }}
}

func flowFlags() (fs *flag.FlagSet, asJSON *bool, burst *int, until *string) {
	fs = flag.NewFlagSet("flow", flag.ContinueOnError)
	asJSON = fs.Bool("json", false, "print JSON")
	burst = fs.Int("burst", 0, "limit: how many more than RATE one second may release (after a quiet spell)")
	until = fs.String("until", "", "pause: when the pause ends by itself, a duration from now (10m) or an RFC 3339 time; default: until resumed")
	return fs, asJSON, burst, until
}

// runFlow lists the flows, or changes one: a change writes an audit line.
// RATE is messages a second (200, 0.5, 200/s, 30/m, 100/h; 0 or none
// removes the limit).
func runFlow(ctx context.Context, e *env, args []string) int {
	fs, asJSON, burst, until := flowFlags()
	rateArg := ""
	if len(args) >= 3 && args[0] == "limit" { // RATE is taken literally, so that -5 is a bad rate, not a flag
		rateArg = args[2]
		args = append(args[:2:2], args[3:]...)
	}
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	if rateArg != "" {
		pos = append(pos, rateArg)
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq flow: %s\nusage: delayq flow %s\n", msg, flowCommand().args)
		return exitUsage
	}
	op := "list"
	if len(pos) > 0 {
		op = pos[0]
	}
	want := map[string]int{"list": 1, "limit": 3, "pause": 2, "resume": 2}
	n, ok := want[op]
	switch {
	case !ok:
		return usage(fmt.Sprintf("unknown subcommand %q", op))
	case op == "list" && len(pos) > 0 || op != "list" && len(pos) != n:
		return usage(fmt.Sprintf("%s takes %d argument(s)", op, n-1))
	case *until != "" && op != "pause":
		return usage("--until goes with pause")
	case *burst != 0 && op != "limit":
		return usage("--burst goes with limit")
	}
	var rate float64
	var end time.Time
	switch op {
	case "limit":
		if rate, err = shard.ParseRate(pos[2]); err == nil {
			err = shard.ValidateLimit(rate, *burst)
		}
	case "pause":
		if *until != "" {
			end, err = shard.ParseWindowEnd("until", *until, time.Now())
		}
	}
	if err == nil && op != "list" {
		err = shard.ValidateFlowTopic(pos[1])
	}
	if err != nil {
		return e.fail("flow", err)
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("flow", err)
	}
	defer rdb.Close()
	if op == "list" {
		return e.listFlows(ctx, st, *asJSON)
	}
	topic, source := pos[1], "cli"
	var f shard.Flow
	switch op {
	case "limit":
		f, err = st.SetLimit(ctx, topic, rate, *burst, source)
	case "pause":
		f, err = st.Pause(ctx, topic, end, source)
	case "resume":
		f, err = st.Resume(ctx, topic, source)
	}
	target := topic
	if err == nil {
		target += ": " + f.String()
	}
	e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "flow "+op), zap.String("target", target),
		zap.String("result", resultOf(err)))
	if err != nil {
		return e.fail("flow", err)
	}
	if *asJSON {
		return writeJSON(e, httpapi.FlowOf(shard.FlowStatus{Flow: f, OldestMs: -1, NowMs: time.Now().UnixMilli()}))
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", topic, f)
	return exitOK
}

// listFlows prints every flow with what it holds back.
func (e *env) listFlows(ctx context.Context, st *shard.Store, asJSON bool) int {
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("flow", err)
	}
	sts, err := st.FlowStatuses(ctx, n)
	if sts == nil && err != nil {
		return e.fail("flow", err)
	}
	if err != nil { // some values unreadable: show the others, say which
		fmt.Fprintf(e.stderr, "delayq flow: %v\n", err)
	}
	if asJSON {
		out := make([]httpapi.Flow, len(sts))
		for j, s := range sts {
			out[j] = httpapi.FlowOf(s)
		}
		return writeJSON(e, out)
	}
	if len(sts) == 0 {
		fmt.Fprintln(e.stdout, "no topic is limited or paused")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "topic\tflow\theld back\toldest held\tchanged by\t")
	for _, s := range sts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", s.Topic, s, strconv.FormatInt(s.Held, 10),
			s.HeldFor().Round(time.Millisecond), s.Source)
	}
	_ = tw.Flush()
	return exitOK
}
