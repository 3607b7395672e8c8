package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/hashicorp/consul/api"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

func shardsCommand() command {
	return command{name: "shards", args: "[--json] | set M", summary: "show M, its source and the high-water mark; set M in Consul",
		run: runShards, flags: func() *flag.FlagSet { fs, _ := shardsFlags(); return fs }}
}

// shardsView is `delayq shards --json`.
type shardsView struct {
	M         int              `json:"m"`
	Source    string           `json:"source"`
	Key       string           `json:"consul_key,omitempty"`
	HighWater int              `json:"high_water"`
	MaxEver   int              `json:"max_ever"`
	Fleet     []balance.Member `json:"fleet,omitempty"`
	Stats     statsView        `json:"stats"`
}

// currentM reads M from its source without recording anything: Consul's
// key when configured, else DELAYQ_SHARDS. It returns the Consul
// ModifyIndex for a later check-and-set (0 when the key does not exist).
func (e *env) currentM(ctx context.Context, consul *api.Client) (m int, source string, index uint64, err error) {
	if consul == nil {
		return e.cfg.Shards, "static (DELAYQ_SHARDS)", 0, nil
	}
	m, index, err = balance.ReadShardCount(ctx, consul, e.cfg.consulKey())
	switch {
	case errors.Is(err, balance.ErrShardCountUnknown), errors.Is(err, balance.ErrBadShardCount):
		return 0, err.Error(), index, nil // a state to show, not a failure to read
	case err != nil:
		return 0, "", 0, err
	}
	return m, "consul " + e.cfg.consulKey(), index, nil
}

func runShards(ctx context.Context, e *env, args []string) int {
	consul, err := newConsul(e.cfg)
	if err != nil {
		return e.fail("shards", err)
	}
	if len(args) > 0 && args[0] == "set" {
		// M is taken literally, so that "set -3" is a bad M, not a flag.
		if len(args) != 2 {
			fmt.Fprintln(e.stderr, "delayq shards set: usage: delayq shards set M")
			return exitUsage
		}
		return setShards(ctx, e, consul, args[1])
	}
	fs, asJSON := shardsFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintln(e.stderr, "delayq shards: usage: delayq shards [--json] | delayq shards set M")
		return exitUsage
	}
	rdb, st, err := e.connect(ctx)
	if err != nil {
		return e.fail("shards", err)
	}
	defer rdb.Close()
	m, src, _, err := e.currentM(ctx, consul)
	if err != nil {
		return e.fail("shards", err)
	}
	lay, err := st.ReadLayout(ctx)
	if err != nil {
		return e.fail("shards", err)
	}
	v := shardsView{M: m, Source: src, HighWater: max(lay.HighWater, m), MaxEver: max(lay.MaxEver, m)}
	if consul != nil {
		v.Key = e.cfg.consulKey()
		if v.Fleet, err = balance.Fleet(ctx, consul, e.cfg.Namespace); err != nil {
			return e.fail("shards", err)
		}
	}
	if v.Stats, err = e.stats(ctx, st, v.HighWater); err != nil {
		return e.fail("shards", err)
	}
	if *asJSON {
		return writeJSON(e, v)
	}
	fmt.Fprintf(e.stdout, "M %d from %s\nhigh-water mark %d (scanners cover shards 0..%d), largest M ever %d\n",
		v.M, v.Source, v.HighWater, v.HighWater-1, v.MaxEver)
	if consul != nil {
		printFleet(e, v.Fleet)
	}
	printStats(e, v.Stats)
	return exitOK
}

// setShards writes M to Consul with a check-and-set against the value it
// read, so two operators cannot race.
func setShards(ctx context.Context, e *env, consul *api.Client, arg string) int {
	if consul == nil {
		fmt.Fprintf(e.stderr, "delayq shards set: needs Consul (%s_CONSUL_ADDR); without it M is %s_SHARDS\n", envPrefix, envPrefix)
		return exitUsage
	}
	m, err := balance.ParseShardCount(arg)
	if err != nil {
		fmt.Fprintf(e.stderr, "delayq shards set: M %s\n", err)
		return exitUsage
	}
	old, _, index, err := e.currentM(ctx, consul)
	if err != nil {
		return e.fail("shards set", err)
	}
	ok, err := balance.SetShardCount(ctx, consul, e.cfg.consulKey(), m, index)
	if err != nil {
		return e.fail("shards set", err)
	}
	if !ok {
		now, _, _, _ := e.currentM(ctx, consul)
		return e.fail("shards set", fmt.Errorf("someone else changed %s meanwhile (now %d); check and run again", e.cfg.consulKey(), now))
	}
	from := "unset"
	if old > 0 {
		from = strconv.Itoa(old)
	}
	fmt.Fprintf(e.stdout, "M %s -> %d in consul %s\n", from, m, e.cfg.consulKey())
	return exitOK
}

// shardsToShow is how many shards stats covers: every shard that may hold
// a message (the recorded high-water mark, at least the configured M).
// consul is the command's Consul client, nil without Consul.
func (e *env) shardsToShow(ctx context.Context, st *shard.Store, consul *api.Client) (int, error) {
	m, _, _, err := e.currentM(ctx, consul)
	if err != nil {
		return 0, err
	}
	lay, err := st.ReadLayout(ctx)
	if err != nil {
		return 0, err
	}
	return max(m, lay.HighWater, 1), nil
}

func shardsFlags() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("shards", flag.ContinueOnError)
	return fs, fs.Bool("json", false, "print JSON")
}

// allShards is shardsToShow for a one-shot command, with a Consul client
// of its own when Consul is configured.
func (e *env) allShards(ctx context.Context, st *shard.Store) (int, error) {
	consul, err := newConsul(e.cfg)
	if err != nil {
		return 0, err
	}
	return e.shardsToShow(ctx, st, consul)
}
