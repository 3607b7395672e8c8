package shard

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// call is one script call: the script, its keys and its arguments.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// run is how every script runs: the calls go to Redis in one pipeline
// (one round trip) by EVALSHA. Calls that Redis refused with NOSCRIPT
// (its script cache was flushed: a restart, SCRIPT FLUSH) did not run, so
// run loads every script and sends just those again, once. It returns one
// command per call, each with its own result or error; a call refused
// twice carries the NOSCRIPT error.
func (s *Store) run(ctx context.Context, calls ...call) []*redis.Cmd {
	cmds := s.send(ctx, calls)
	var again []int
	for j, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, j)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	if err := s.Load(ctx); err != nil {
		for _, j := range again {
			cmds[j].SetErr(err)
		}
		return cmds
	}
	retry := make([]call, len(again))
	for k, j := range again {
		retry[k] = calls[j]
	}
	for k, c := range s.send(ctx, retry) {
		cmds[again[k]] = c
	}
	return cmds
}

// send pipelines calls by EVALSHA. One call goes without a pipeline.
func (s *Store) send(ctx context.Context, calls []call) []*redis.Cmd {
	if len(calls) == 1 {
		c := calls[0]
		return []*redis.Cmd{c.script.EvalSha(ctx, s.rdb, c.keys, c.args...)}
	}
	cmds := make([]*redis.Cmd, len(calls))
	// Pipelined's own error is the first failed command's; each command
	// carries its own, which the callers look at.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, c := range calls {
			cmds[j] = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	return cmds
}

// run1 runs one call (see run).
func (s *Store) run1(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, call{script: script, keys: keys, args: args})[0]
}

// isNoScript reports whether err is Redis's NOSCRIPT (script cache flushed,
// e.g. after a restart): the command did not run and can be retried.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Load loads every script into Redis's script cache. run does it by itself
// when Redis has lost them; calling it at start makes the first calls
// cheaper.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("load scripts: %w", err)
		}
	}
	return nil
}
