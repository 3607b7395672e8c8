package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

func statsCommand() command {
	return command{name: "stats", args: "[--json] [--watch [--interval D]] | --due [--topic T] [--json]", summary: "per-shard counts; what falls due in the next hour",
		run: runStats, flags: func() *flag.FlagSet { fs, _, _, _, _, _ := statsFlags(); return fs }}
}

func statsFlags() (*flag.FlagSet, *bool, *bool, *time.Duration, *bool, *string) {
	fs, asJSON, watch, every := watchFlags()
	due := fs.Bool("due", false, "what falls due per minute over the next hour (a sparkline and the busy minutes)")
	topic := fs.String("topic", "", "with --due: only this topic's messages (counted from a bounded sample where many)")
	return fs, asJSON, watch, every, due, topic
}

func watchFlags() (*flag.FlagSet, *bool, *bool, *time.Duration) {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (with --watch: one object per line)")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	every := new(time.Duration)
	durationVar(fs, every, "interval", 2*time.Second, "with --watch: time between refreshes")
	return fs, asJSON, watch, every
}

// statsView is the API's stats (so that stats --json and GET /v1/stats say
// the same), with the fleet.
type statsView struct {
	httpapi.Stats
	Fleet []balance.Member `json:"fleet,omitempty"` // scanners registered in Consul
}

func runStats(ctx context.Context, e *env, args []string) int {
	fs, asJSON, watch, every, due, topic := statsFlags()
	pos, err := parse(fs, args, e.stderr)
	switch {
	case err != nil:
		return exitUsage
	case len(pos) > 0:
		fmt.Fprintf(e.stderr, "delayq stats: unexpected arguments %q\n", pos)
		return exitUsage
	case *every <= 0:
		fmt.Fprintf(e.stderr, "delayq stats: --interval %s: want more than 0\n", *every)
		return exitUsage
	case *topic != "" && !*due:
		fmt.Fprintln(e.stderr, "delayq stats: --topic goes with --due")
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("stats", err)
	}
	defer rdb.Close()
	if *due {
		if *watch {
			fmt.Fprintln(e.stderr, "delayq stats: --due goes without --watch")
			return exitUsage
		}
		return e.dueProfile(ctx, st, *topic, *asJSON)
	}
	consul, err := newConsul(e.cfg)
	if err != nil {
		return e.fail("stats", err)
	}
	tty := isTerminal(e.stdout)
	for {
		n, err := e.shardsToShow(ctx, st, consul)
		if err != nil {
			return e.fail("stats", err)
		}
		v, err := e.stats(ctx, st, n)
		if err != nil {
			return e.fail("stats", err)
		}
		if consul != nil {
			if v.Fleet, err = balance.Fleet(ctx, consul, e.cfg.Namespace); err != nil {
				return e.fail("stats", err)
			}
		}
		switch {
		case *asJSON && *watch:
			if err := json.NewEncoder(e.stdout).Encode(v); err != nil {
				return e.fail("stats", err)
			}
		case *asJSON:
			return writeJSON(e, v)
		default:
			if *watch && tty {
				fmt.Fprint(e.stdout, "\033[H\033[2J") // clear the screen, cursor home
			}
			if *watch {
				fmt.Fprintf(e.stdout, "%s  (every %s, Ctrl-C to stop)\n", time.Now().Format("15:04:05"), *every)
			}
			printStats(e, v)
			if consul != nil {
				printFleet(e, v.Fleet)
			}
		}
		if !*watch {
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
		if !tty && !*asJSON {
			fmt.Fprintln(e.stdout)
		}
	}
}

func printFleet(e *env, fleet []balance.Member) {
	fmt.Fprintf(e.stdout, "fleet: %d scanner(s) registered in consul\n", len(fleet))
	for _, f := range fleet {
		fmt.Fprintf(e.stdout, "  %s  host %s pid %s  %s\n", f.ID, f.Host, f.PID, f.Status)
	}
}

// stats counts shards [0, n).
func (e *env) stats(ctx context.Context, st *shard.Store, n int) (statsView, error) {
	all, err := st.Stats(ctx, n)
	if err != nil {
		return statsView{}, err
	}
	v := statsView{Stats: httpapi.Summarize(e.cfg.Namespace, all)}
	shards := make([]int, len(v.Shards))
	for i, r := range v.Shards {
		shards[i] = r.Shard
	}
	nodes, err := st.ShardNodes(ctx, shards)
	if err != nil {
		return v, err
	}
	for i := range v.Shards {
		v.Shards[i].Node = nodes[v.Shards[i].Shard]
	}
	servers, err := st.RedisServers(ctx)
	if err != nil {
		return v, err
	}
	v.Redis = httpapi.RedisStatsOf(servers)
	sts, err := st.FlowStatuses(ctx, n)
	if sts == nil && err != nil {
		return v, err
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq stats: %v\n", err)
	}
	for _, s := range sts {
		v.Flows = append(v.Flows, httpapi.FlowOf(s))
	}
	if v.Classes, err = e.classViews(ctx, st, n); err != nil {
		return v, err
	}
	r, err := st.Rates(ctx, httpapi.DefaultRatesWindow)
	if err != nil {
		return v, err
	}
	rates := httpapi.RatesOf(r)
	v.Rates = &rates
	return v, nil
}

func printStats(e *env, v statsView) {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(e.stdout, "namespace %s, %d shards\n", v.Namespace, len(v.Shards))
	fmt.Fprintln(tw, "shard\tscheduled\tdue now\tin flight\tdead\toldest overdue\tnext due\tnode\t")
	for _, r := range append(v.Shards, v.Total) {
		name := fmt.Sprint(r.Shard)
		if r.Shard < 0 {
			name = "total"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, r.Scheduled, r.DueNow, r.InFlight, r.Dead,
			(time.Duration(r.OldestOverdueSec * float64(time.Second))).Round(time.Millisecond), orDash(r.NextDue), orDash(r.Node))
	}
	_ = tw.Flush()
	if r := v.Rates; r != nil && len(r.Points) > 0 {
		late := "none published"
		if r.LatenessP99Ms != nil {
			late = fmt.Sprintf("<= %dms", *r.LatenessP99Ms)
			if r.LatenessP99Over {
				late = fmt.Sprintf("> %dms", *r.LatenessP99Ms)
			}
		}
		fmt.Fprintf(e.stdout, "fleet, last %s: %.1f enqueued/s, %.1f published/s, %.1f dead/s, lateness p99 %s\n",
			time.Duration(r.SampledSeconds*float64(time.Second)).Round(time.Second), r.EnqueuedPerSecond, r.PublishedPerSecond,
			r.DeadPerSecond, late)
	}
	for _, r := range v.Redis {
		fmt.Fprintf(e.stdout, "redis %s: %s\n", r.Master, redisLine(r))
	}
	for _, c := range v.Classes {
		fmt.Fprintf(e.stdout, "class %s: %s; %d in its backlog", c.Name, c.Summary, c.Backlog)
		if c.Backlog > 0 {
			fmt.Fprintf(e.stdout, ", the oldest for %s", time.Duration(c.OldestSec*float64(time.Second)).Round(time.Millisecond))
		}
		fmt.Fprintf(e.stdout, "; %.1f released/s\n", c.ReleasedPerSec)
	}
	for _, f := range v.Flows {
		fmt.Fprintf(e.stdout, "flow %s: %s; %d held back", f.Topic, f.Summary, f.Held)
		if f.Held > 0 {
			fmt.Fprintf(e.stdout, ", the oldest for %s", time.Duration(f.OldestSec*float64(time.Second)).Round(time.Millisecond))
		}
		fmt.Fprintln(e.stdout)
	}
}

// redisLine says what matters of a master: its memory against the limit,
// its policy and its persistence, and FULL when it refuses new messages.
func redisLine(r httpapi.RedisStats) string {
	if r.Policy == "" {
		return "settings unknown (INFO not allowed)"
	}
	s := fmt.Sprintf("used %s, policy %s, persistence %s", r.Memory(), r.Policy, r.Persistence)
	switch r.Status() {
	case "full":
		s += "  FULL: new messages are refused until deliveries free memory"
	case "unsafe":
		s += "  UNSAFE: the policy can evict scheduled messages"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dueProfile prints what falls due per minute over the next hour, of the
// namespace or of topic.
func (e *env) dueProfile(ctx context.Context, st *shard.Store, topic string, asJSON bool) int {
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("stats", err)
	}
	var v httpapi.DueProfile
	if topic == "" {
		p, err := st.DueProfile(ctx, n, time.Minute, 60)
		if err != nil {
			return e.fail("stats", err)
		}
		v = httpapi.ProfileOf(p, "minute")
	} else {
		if err := st.RequireKnownTopic(ctx, topic); err != nil {
			return e.fail("stats", err)
		}
		p, err := st.TopicProfile(ctx, n, topic, time.Minute, 60)
		if err != nil {
			return e.fail("stats", err)
		}
		v = httpapi.TopicProfileOf(p, "minute")
	}
	if asJSON {
		return writeJSON(e, v)
	}
	of := ""
	if topic != "" {
		of = " of topic " + topic
	}
	fmt.Fprintf(e.stdout, "falling due%s in the next hour: %d, at most %d in one minute; %d overdue, %d in flight\n",
		of, v.Total, v.Max, v.Overdue, v.InFlight)
	levels := []rune(" ▁▂▃▄▅▆▇█")
	var line strings.Builder
	for _, b := range v.Buckets {
		l := 0
		if v.Max > 0 && b.Count > 0 {
			l = 1 + int(float64(len(levels)-2)*float64(b.Count)/float64(v.Max))
		}
		line.WriteRune(levels[l])
	}
	fmt.Fprintf(e.stdout, "now |%s| +60m\n", line.String())
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "minute (UTC)\tdue\t")
	sampled := false
	for _, b := range v.Buckets {
		switch {
		case b.Count > 0 && b.Sampled > 0:
			fmt.Fprintf(tw, "%s\t~%d\t(estimated from %d read)\n", b.From[:16], b.Count, b.Sampled)
			sampled = true
		case b.Count > 0:
			fmt.Fprintf(tw, "%s\t%d\t\n", b.From[:16], b.Count)
		}
	}
	if sampled {
		fmt.Fprintln(tw, "~: the topic's share of a busy minute, from messages read at even spacing in each shard")
	}
	_ = tw.Flush()
	return exitOK
}
