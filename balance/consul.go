package balance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/zap"

	"github.com/delayq/delayq/shard/backoff"
)

// ErrShardCountUnknown: M has not been read from its source yet and no
// fallback applies. A producer must not guess M.
var ErrShardCountUnknown = errors.New("shard count unknown")

// DefaultConsulKey is the Consul KV key of M for a namespace.
func DefaultConsulKey(ns string) string { return "delayq/" + ns + "/shards" }

// ParseShardCount parses a Consul value of M: a decimal integer in
// [1, MaxShards], surrounding white space allowed.
func ParseShardCount(v string) (int, error) {
	s := strings.TrimSpace(v)
	if s == "" {
		return 0, errors.New("empty value")
	}
	m, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", v)
	}
	if m < 1 || m > MaxShards {
		return 0, fmt.Errorf("%d is outside 1..%d", m, MaxShards)
	}
	return m, nil
}

// ConsulWatcher keeps M from a Consul KV key up to date with blocking
// queries. A bad value (not a number, out of range, empty) or a deleted key
// is logged with the key and value, and the last good M stays in force.
// While Consul is unreachable it keeps the last good M and retries with
// backoff.
type ConsulWatcher struct {
	kv  *api.KV
	key string
	log *zap.Logger

	mu      sync.Mutex
	m       int
	index   uint64 // ModifyIndex of the value m came from
	changed chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewConsulWatcher watches key through client. The caller owns client.
func NewConsulWatcher(client *api.Client, key string, log *zap.Logger) *ConsulWatcher {
	return &ConsulWatcher{kv: client.KV(), key: key, log: log.Named("consul"), changed: make(chan struct{})}
}

// Key returns the watched key.
func (w *ConsulWatcher) Key() string { return w.key }

// Start starts watching the key in a goroutine until Stop, and waits,
// while ctx lasts, for the first answer: ctx bounds that wait, not the
// watch. If the first read fails (logged, like every failure), M stays
// unknown (ShardCount returns ErrShardCountUnknown) until Consul answers;
// the watch is running all the same, so Start returns nil. It fails only
// when called twice.
func (w *ConsulWatcher) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.cancel != nil {
		w.mu.Unlock()
		return errors.New("consul watcher already started")
	}
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.mu.Unlock()
	first := make(chan error, 1)
	w.wg.Go(func() { w.watch(life, first) })
	select {
	case <-first:
	case <-ctx.Done():
		w.log.Warn("consul has not answered yet; M is unknown until it does", zap.String("key", w.key))
	}
	return nil
}

// Stop ends the watch and waits for its goroutine, which ends at once (it
// only waits on the canceled blocking query). Safe to call more than
// once, and without Start.
func (w *ConsulWatcher) Stop(context.Context) error {
	w.mu.Lock()
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.wg.Wait()
	return nil
}

// ShardCount returns the last good M.
func (w *ConsulWatcher) ShardCount() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == 0 {
		return 0, fmt.Errorf("consul key %s: %w", w.key, ErrShardCountUnknown)
	}
	return w.m, nil
}

// ModifyIndex returns the Consul ModifyIndex of the value M came from.
func (w *ConsulWatcher) ModifyIndex() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.index
}

// Changed returns a channel closed at the next change of M.
func (w *ConsulWatcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *ConsulWatcher) watch(ctx context.Context, first chan<- error) {
	report := func(err error) {
		if first != nil {
			first <- err
			first = nil
		}
	}
	var waitIndex uint64
	retry := backoff.New(250*time.Millisecond, 5*time.Second)
	failures := 0
	for ctx.Err() == nil {
		pair, meta, err := w.kv.Get(w.key, (&api.QueryOptions{WaitIndex: waitIndex, WaitTime: 30 * time.Second}).WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures%20 == 0 {
				w.log.Error("consul unreachable; keeping the last good M", zap.String("key", w.key),
					zap.Int("m", w.current()), zap.Int("failures", failures), zap.Error(err))
			}
			report(fmt.Errorf("consul key %s: %w", w.key, err))
			// A restarted Consul starts its indexes over: a blocking query
			// with the old index would wait its full time. Read afresh.
			waitIndex = 0
			_ = retry.Wait(ctx) // an error: stopping, which the loop checks
			continue
		}
		if failures > 0 {
			w.log.Info("consul reachable again", zap.String("key", w.key), zap.Int("failures", failures))
		}
		failures = 0
		retry.Reset()
		switch {
		case meta.LastIndex < waitIndex: // the index went backwards (Consul restarted): start over
			waitIndex = 0
		case meta.LastIndex == waitIndex && waitIndex != 0: // the blocking query timed out: no change
			continue
		default:
			waitIndex = meta.LastIndex
		}
		report(w.apply(pair))
	}
}

// apply takes a new value of the key; it returns an error for the first
// report when the value is unusable.
func (w *ConsulWatcher) apply(pair *api.KVPair) error {
	if pair == nil {
		err := fmt.Errorf("consul key %s does not exist", w.key)
		w.log.Error("consul key missing; keeping the last good M", zap.String("key", w.key), zap.Int("m", w.current()))
		return err
	}
	m, err := ParseShardCount(string(pair.Value))
	if err != nil {
		w.log.Error("bad shard count in consul; keeping the last good M", zap.String("key", w.key),
			zap.String("value", string(pair.Value)), zap.Int("m", w.current()), zap.Error(err))
		return fmt.Errorf("consul key %s = %q: %w", w.key, pair.Value, err)
	}
	w.mu.Lock()
	old := w.m
	w.m, w.index = m, pair.ModifyIndex
	if old != m {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	w.mu.Unlock()
	if old != m {
		w.log.Info("shard count from consul", zap.String("key", w.key), zap.Int("m", m), zap.Int("was", old))
	}
	return nil
}

func (w *ConsulWatcher) current() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m
}

// ErrBadShardCount wraps what ReadShardCount found in a key that is not a
// valid M.
var ErrBadShardCount = errors.New("bad shard count")

// ReadShardCount reads M from key once (no watch), with the key's
// ModifyIndex for a later SetShardCount. A key that is not set gives
// index 0 and an error wrapping ErrShardCountUnknown; a value that is not
// a valid M gives the key's index and an error wrapping ErrBadShardCount.
func ReadShardCount(ctx context.Context, client *api.Client, key string) (m int, index uint64, err error) {
	pair, _, err := client.KV().Get(key, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return 0, 0, fmt.Errorf("read consul key %s: %w", key, err)
	}
	if pair == nil {
		return 0, 0, fmt.Errorf("consul key %s is not set: %w", key, ErrShardCountUnknown)
	}
	if m, err = ParseShardCount(string(pair.Value)); err != nil {
		return 0, pair.ModifyIndex, fmt.Errorf("consul key %s holds %q: %w: %w", key, pair.Value, ErrBadShardCount, err)
	}
	return m, pair.ModifyIndex, nil
}

// SetShardCount writes M to key with a check-and-set: it succeeds only if
// the key still has the ModifyIndex the caller read (0: the key must not
// exist), so two operators cannot race. It returns false when someone else
// changed the key meanwhile.
func SetShardCount(ctx context.Context, client *api.Client, key string, m int, readIndex uint64) (bool, error) {
	if _, err := ParseShardCount(strconv.Itoa(m)); err != nil {
		return false, err
	}
	ok, _, err := client.KV().CAS(&api.KVPair{Key: key, Value: []byte(strconv.Itoa(m)), ModifyIndex: readIndex},
		(&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("write consul key %s: %w", key, err)
	}
	return ok, nil
}
