package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

// checkRedis reads every Redis master's settings at start (scan, serve):
// it logs each warning (no persistence, little memory headroom, settings
// it may not read) and refuses a maxmemory-policy that can evict scheduled
// messages, naming the master, the setting and the fix, unless
// DELAYQ_REDIS_ALLOW_EVICTION accepts it. It returns the verdict's lines
// for the watch that follows.
func (e *env) checkRedis(ctx context.Context, st *shard.Store) ([]string, error) {
	servers, err := st.RedisServers(ctx)
	if err != nil {
		return nil, err
	}
	warnings, err := shard.CheckRedis(servers, e.cfg.RedisAllowEviction)
	if err != nil {
		return nil, err // e.fail adds how to accept it
	}
	for _, w := range warnings {
		e.log.Warn("redis settings: "+w, zap.String("check", "redis settings"))
	}
	return warnings, nil
}

// redisWatch reads the masters' settings again every period while the
// process runs, so that a failover to a master with other settings, a
// CONFIG SET or a filling memory is logged when it happens: a problem
// that appears is an error line (a scanner cannot refuse to run any more;
// the gauges and alerts say it too), one that goes away an info line.
type redisWatch struct {
	st     *shard.Store
	allow  bool
	period time.Duration
	log    *zap.Logger
	seen   []string // the problems of the last read

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRedisWatch(st *shard.Store, allow bool, period time.Duration, seen []string, log *zap.Logger) *redisWatch {
	return &redisWatch{st: st, allow: allow, period: period, log: log, seen: seen}
}

// Start launches the watch's goroutine.
func (w *redisWatch) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Go(func() {
		t := time.NewTicker(w.period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.check(ctx)
			}
		}
	})
	return nil
}

// Stop ends the goroutine and waits for it.
func (w *redisWatch) Stop(context.Context) error {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
	return nil
}

func (w *redisWatch) check(ctx context.Context) {
	servers, err := w.st.RedisServers(ctx)
	if err != nil {
		return // Redis unreachable: the scanner's own errors say so
	}
	now, err := shard.CheckRedis(servers, w.allow)
	if err != nil {
		now = append([]string{err.Error()}, now...)
	}
	for _, p := range now {
		if !slices.Contains(w.seen, p) {
			w.log.Error("redis settings changed: "+p, zap.String("check", "redis settings"))
		}
	}
	for _, p := range w.seen {
		if !slices.Contains(now, p) {
			w.log.Info("redis settings: no longer "+p, zap.String("check", "redis settings"))
		}
	}
	w.seen = now
}
