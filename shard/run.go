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

// sentOnce are the scripts the Redis client never sends a second time
// after a connection error (see noRetry): the claims.
var sentOnce = map[*redis.Script]bool{claimScript: true, claimHoldScript: true, claimFairScript: true}

// run is how every script runs: the calls go to Redis in one pipeline
// (one round trip) by EVALSHA. Calls that Redis refused with NOSCRIPT
// (its script cache was flushed: a restart, SCRIPT FLUSH) did not run, so
// run sends just those again, once, by EVAL with the script's body, which
// also puts the script back in the cache. EVAL needs no cache, so a flush
// between the two round trips cannot refuse them again. Calls that Redis
// refused at its memory limit get an error wrapping ErrRedisFull. It
// returns one command per call, each with its own result or error.
func (s *Store) run(ctx context.Context, calls ...call) []*redis.Cmd {
	cmds := s.send(ctx, calls, false)
	var again []int
	for j, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, j)
		}
	}
	if len(again) > 0 {
		retry := make([]call, len(again))
		for k, j := range again {
			retry[k] = calls[j]
		}
		for k, c := range s.send(ctx, retry, true) {
			cmds[again[k]] = c
		}
	}
	var full error // Redis at maxmemory refused these calls: say so once
	for _, c := range cmds {
		if isOutOfMemory(c.Err()) {
			if full == nil {
				full = s.redisFull(ctx, c.Err())
			}
			c.SetErr(full)
		}
	}
	return cmds
}

// send pipelines calls by EVALSHA, or by EVAL with the body when eval is
// set. One call goes without a pipeline, unless it must wait for replicas:
// WAIT counts the replicas that have the writes of its own connection, so
// it follows the calls in their pipeline.
func (s *Store) send(ctx context.Context, calls []call, eval bool) []*redis.Cmd {
	one := func(c processor, cl call) *redis.Cmd {
		var sc redis.Scripter = c
		if sentOnce[cl.script] {
			sc = noRetry{c}
		}
		if eval {
			return cl.script.Eval(ctx, sc, cl.keys, cl.args...)
		}
		return cl.script.EvalSha(ctx, sc, cl.keys, cl.args...)
	}
	wait := false
	if s.replicas > 0 {
		for _, c := range calls {
			wait = wait || acknowledged[c.script]
		}
	}
	if len(calls) == 1 && !wait {
		return []*redis.Cmd{one(s.rdb, calls[0])}
	}
	cmds := make([]*redis.Cmd, len(calls))
	var waitCmd *redis.Cmd
	// Pipelined's own error is the first failed command's; each command
	// carries its own, which the callers look at.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, c := range calls {
			cmds[j] = one(p, c)
		}
		if wait {
			waitCmd = p.Do(ctx, "WAIT", s.replicas, s.replicaTimeout.Milliseconds())
		}
		return nil
	})
	if wait {
		s.checkReplicated(calls, cmds, waitCmd)
	}
	return cmds
}

// checkReplicated turns the result of each acknowledged write into
// ErrNotReplicated when WAIT counted fewer replicas than asked for.
func (s *Store) checkReplicated(calls []call, cmds []*redis.Cmd, waitCmd *redis.Cmd) {
	got, err := waitCmd.Int()
	if err == nil && got >= s.replicas {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, got, s.replicas, s.replicaTimeout)
	} else {
		err = fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	}
	for j, c := range calls {
		if acknowledged[c.script] && cmds[j].Err() == nil {
			cmds[j].SetErr(err)
		}
	}
}

// acknowledged are the scripts whose success a caller is told of (an
// enqueue, cancel, reschedule, retry, redrive, purge or the ack of a
// delivery): with WithReplicas they wait for the replicas. Claims,
// releases and dead-lettering do not: losing one of those in a failover
// brings a message back (a duplicate), never loses one.
var acknowledged = map[*redis.Script]bool{
	enqueueScript: true, enqueueManyScript: true, ackScript: true, cancelScript: true, cancelManyScript: true,
	rescheduleScript: true, redriveScript: true, purgeScript: true, retryScript: true,
	enqueueQuotaScript: true, enqueueManyQuotaScript: true, ackQuotaScript: true, restoreDeadScript: true,
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

// Load loads every script into Redis's script cache, so that the first
// calls go by EVALSHA at once (run recovers by itself when Redis has lost
// them).
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("load scripts: %w", err)
		}
	}
	return nil
}

// processor is what a call is sent through: the client or a pipeline.
type processor interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// noRetry sends script calls as commands the Redis client never sends a
// second time. go-redis sends a command again after a connection error,
// and a call that ran before the connection broke would then run twice:
// for a claim, the first run's messages stay leased with no one to
// publish them (receipts.go). Only Eval and EvalSha, what Script uses to
// run, are sent this way; the rest goes as usual.
type noRetry struct{ processor }

func (n noRetry) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return n.eval(ctx, "eval", script, keys, args)
}

func (n noRetry) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return n.eval(ctx, "evalsha", sha1, keys, args)
}

// eval builds the command as go-redis does (name, body or digest, the
// number of keys, the keys, the arguments; the first key at 3 for Redis
// Cluster's routing) and sends it wrapped in onceCmd.
func (n noRetry) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = n.Process(ctx, onceCmd{cmd}) // the error is the command's
	return cmd
}

// onceCmd is a command go-redis does not send again after a failure
// (go-redis's Cmder.NoRetry, also honoured by pipelines and Redis Cluster).
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

func (c onceCmd) Clone() redis.Cmder { return onceCmd{c.Cmd.Clone().(*redis.Cmd)} }
