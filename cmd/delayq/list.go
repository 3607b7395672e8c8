package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/delayq/delayq/shard"
)

func listCommand() command {
	return command{name: "list", args: "[--shard N] [--topic T] [--prefix P] [--limit N] [--after CURSOR] [--json]",
		summary: "list scheduled messages, in due order per shard", run: runList,
		flags: func() *flag.FlagSet { fs, _ := newListFlags(); return fs }}
}

// listFlags are `delayq list`'s flags.
type listFlags struct {
	shard         int
	topic, prefix string
	limit         int
	after         string
	json          bool
}

func newListFlags() (*flag.FlagSet, *listFlags) {
	o := &listFlags{}
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.IntVar(&o.shard, "shard", -1, "only this shard (default: every shard)")
	fs.StringVar(&o.topic, "topic", "", "only messages of this topic")
	fs.StringVar(&o.prefix, "prefix", "", "only ids that start with this")
	fs.IntVar(&o.limit, "limit", 100, "most messages to show, 1 to 10000")
	fs.StringVar(&o.after, "after", "", "go on after this cursor (printed at the end of a page)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	return fs, o
}

// listView is one message as `delayq list --json` prints it.
type listView struct {
	ID         string `json:"id"`
	Shard      int    `json:"shard"`
	Due        string `json:"due"`
	Attempts   int    `json:"attempts"`
	Far        bool   `json:"far,omitempty"` // waits in the far-future tier
	Topic      string `json:"topic,omitempty"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
	BodyBytes  int    `json:"body_bytes"`
	Corrupt    string `json:"corrupt,omitempty"`
}

// runList: delayq list [--shard N] [--topic T] [--prefix P] [--limit N] [--after CURSOR] [--json]
// pages through the scheduled messages, shard after shard, each in due
// order; every Redis call reads one page of at most 500.
func runList(ctx context.Context, e *env, args []string) int {
	fs, o := newListFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) > 0 {
		if err == nil {
			fmt.Fprintf(e.stderr, "delayq list: unexpected arguments %q\n", pos)
		}
		return exitUsage
	}
	if o.limit < 1 || o.limit > 10000 {
		fmt.Fprintf(e.stderr, "delayq list: --limit %d: want 1 to 10000\n", o.limit)
		return exitUsage
	}
	after, err := shard.ParseBrowseCursor(o.after)
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq list: --after: %v\n", err)
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("list", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, st)
	if err != nil {
		return e.fail("list", err)
	}
	page, cur, err := st.Browse(ctx, n, shard.BrowseQuery{Shard: o.shard, Topic: o.topic, Prefix: o.prefix,
		After: after, Limit: o.limit})
	var ie *shard.InvalidError
	if errors.As(err, &ie) {
		fmt.Fprintf(e.stderr, "delayq list: --%s %s\n", ie.Field, ie.Reason)
		return exitUsage
	}
	if err != nil {
		return e.fail("list", err)
	}
	views := make([]listView, len(page))
	for i := range page {
		views[i] = viewOf(&page[i])
	}
	next := ""
	if cur != nil {
		next = cur.String()
	}
	if o.json {
		return writeJSON(e, struct {
			Messages []listView `json:"messages"`
			Next     string     `json:"next,omitempty"`
		}{Messages: append([]listView{}, views...), Next: next})
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSHARD\tDUE\tTIER\tATTEMPTS\tDESTINATION\tBYTES")
	for _, v := range views {
		dest := v.Topic
		if dest == "" {
			dest = v.Exchange + " / " + v.RoutingKey
		}
		if v.Corrupt != "" {
			dest = "corrupt: " + v.Corrupt
		}
		tier := "near"
		if v.Far {
			tier = "far"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\n", v.ID, v.Shard, v.Due, tier, v.Attempts, dest, v.BodyBytes)
	}
	_ = tw.Flush()
	if next != "" {
		fmt.Fprintf(e.stdout, "%d shown; more with --after %s\n", len(views), next)
	} else {
		fmt.Fprintf(e.stdout, "%d shown\n", len(views))
	}
	return exitOK
}

func viewOf(l *shard.Listed) listView {
	v := listView{ID: l.ID, Shard: l.Shard, Due: l.Due.UTC().Format(time.RFC3339Nano), Attempts: l.Attempts, Far: l.Far}
	if l.Envelope != nil {
		v.Topic, v.Exchange, v.RoutingKey, v.BodyBytes = l.Envelope.Topic, l.Envelope.Exchange, l.Envelope.RoutingKey, len(l.Envelope.Body)
	} else if l.Corrupt != nil {
		v.Corrupt = l.Corrupt.Error()
	}
	return v
}
