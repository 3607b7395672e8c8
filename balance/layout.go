package balance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

// Counter gives M: Static, or a *ConsulWatcher.
type Counter interface {
	ShardCount() (int, error)
}

// CounterFunc adapts a function to Counter.
type CounterFunc func() (int, error)

// ShardCount calls f.
func (f CounterFunc) ShardCount() (int, error) { return f() }

// LayoutOptions configure a Layout. Zero fields take the defaults.
type LayoutOptions struct {
	// Drain makes this Layout lower the high-water mark once retired
	// shards are empty (scanners); producers only ever raise it.
	Drain bool
	// Fallback is M to use when the counter does not know M and Redis has
	// no mirror of it (scanners: DELAYQ_SHARDS). 0 = no fallback (producers
	// must not guess).
	Fallback int
	// Refresh is how often the layout is re-read and M recorded. Default 2s.
	Refresh time.Duration
	// DrainCheck is how often a draining Layout looks at the shards above
	// M. Default 10s.
	DrainCheck time.Duration
	// Grace is how long M must have stayed the same before the mark may
	// come down, so producers that learn M late have written what they
	// will write. Default 30s.
	Grace time.Duration
	// SettleEvery is how often a draining Layout, while the namespace
	// records more than one M (shard.Layout.Used), sweeps every message to
	// see whether all of them are where the current M puts them; when they
	// are, it forgets the other Ms, and producers stop looking for ids in
	// the shards of those Ms. Default 1m.
	SettleEvery time.Duration
	Log         *zap.Logger
}

// Layout is the Source scanners and producers use: M from a Counter, and
// the high-water mark recorded in Redis (shard.Layout).
//
// Every Layout records the M it uses in Redis, raising the high-water mark
// to it, so scanners cover every shard that any producer writes to. A
// draining Layout (a scanner) lowers the mark when M has stayed smaller for
// Grace and the shards in [M, mark) hold nothing; it also looks at every
// shard below the largest M ever recorded and raises the mark again if a
// late producer wrote there, so no message is ever stranded.
type Layout struct {
	counter Counter
	store   *shard.Store
	opts    LayoutOptions
	log     *zap.Logger

	hwm    atomic.Int64
	mirror atomic.Int64 // M last read from Consul by anyone, as recorded in Redis

	mu        sync.Mutex
	lastM     int
	mSince    time.Time
	lastDrain time.Time
	used      []int // shard.Layout.Used as of the last Refresh

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewLayout returns a Layout over counter and store.
func NewLayout(counter Counter, store *shard.Store, opts LayoutOptions) *Layout {
	if opts.Refresh <= 0 {
		opts.Refresh = 2 * time.Second
	}
	if opts.DrainCheck <= 0 {
		opts.DrainCheck = 10 * time.Second
	}
	if opts.Grace <= 0 {
		opts.Grace = 30 * time.Second
	}
	if opts.SettleEvery <= 0 {
		opts.SettleEvery = time.Minute
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &Layout{counter: counter, store: store, opts: opts, log: opts.Log.Named("layout")}
}

// Start records the layout once, then keeps it fresh in a goroutine (every
// Refresh, and at once when a ConsulWatcher reports a change) until Stop.
// A draining Layout also runs its settle sweeps (SettleEvery) in a second
// goroutine.
func (l *Layout) Start(ctx context.Context) error {
	if err := l.Refresh(ctx); err != nil {
		return err
	}
	// The loops live until Stop, not as long as the caller's ctx.
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if l.opts.Drain {
		l.wg.Go(func() {
			everyTick(ctx, l.opts.SettleEvery, func() {
				if _, err := l.Settle(ctx); err != nil && ctx.Err() == nil {
					l.log.Warn("sweep for messages of an older M; trying again later", zap.Error(err))
				}
			})
		})
	}
	l.wg.Go(func() {
		t := time.NewTicker(l.opts.Refresh)
		defer t.Stop()
		for {
			var changed <-chan struct{}
			if w, ok := l.counter.(*ConsulWatcher); ok {
				changed = w.Changed()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-changed:
			}
			if err := l.Refresh(ctx); err != nil && ctx.Err() == nil {
				l.log.Warn("refresh shard layout; keeping the last one", zap.Error(err))
			}
		}
	})
	return nil
}

// Stop ends the refresh and settle goroutines and waits for them (they end
// at once: a refresh or a sweep page is one bounded Redis call). Safe to
// call more than once, and without Start.
func (l *Layout) Stop(context.Context) error {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
	return nil
}

// ShardCount returns M: the counter's, else the M last read from Consul as
// mirrored in Redis, else the fallback, else ErrShardCountUnknown.
func (l *Layout) ShardCount() (int, error) {
	m, _, err := l.Current()
	return m, err
}

// Current returns M and where it came from: "consul", "static", "redis
// mirror (consul unreachable)" or "fallback (consul unreachable)".
func (l *Layout) Current() (int, string, error) {
	m, err := l.counter.ShardCount()
	if err == nil {
		if _, ok := l.counter.(*ConsulWatcher); ok {
			return m, "consul", nil
		}
		return m, "static", nil
	}
	if mm := l.mirror.Load(); mm > 0 {
		return int(mm), "redis mirror (consul unreachable)", nil
	}
	if l.opts.Fallback > 0 {
		return l.opts.Fallback, "fallback (consul unreachable)", nil
	}
	return 0, "", err
}

// HighWater returns how many shards scanners must cover: at least M.
func (l *Layout) HighWater() (int, error) {
	m, err := l.ShardCount()
	if err != nil {
		return 0, err
	}
	return max(m, int(l.hwm.Load())), nil
}

// Refresh records M in Redis and re-reads the layout; a draining Layout
// also checks retired shards. Start calls it periodically.
func (l *Layout) Refresh(ctx context.Context) error {
	m, _, err := l.Current()
	var lay shard.Layout
	if err != nil {
		// M unknown: only learn what Redis has.
		if lay, err = l.store.ReadLayout(ctx); err != nil {
			return err
		}
	} else {
		var index uint64
		if w, ok := l.counter.(*ConsulWatcher); ok {
			if _, werr := w.ShardCount(); werr == nil {
				index = w.ModifyIndex()
			}
		}
		lay, err = l.store.RaiseLayout(ctx, m, index)
		if shard.IsRedisFull(err) {
			// Redis at maxmemory refuses the record, but the scanners
			// must run (their acks free memory): read it, and cover m.
			if lay, err = l.store.ReadLayout(ctx); err == nil {
				lay.HighWater = max(lay.HighWater, m)
			}
		}
		if err != nil {
			return err
		}
	}
	l.mirror.Store(int64(lay.M))
	l.hwm.Store(int64(lay.HighWater))
	l.mu.Lock()
	l.used = lay.Used
	l.mu.Unlock()
	if m == 0 {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	if m != l.lastM {
		l.lastM, l.mSince = m, now
	}
	stableFor := now.Sub(l.mSince)
	due := l.opts.Drain && lay.MaxEver > m && now.Sub(l.lastDrain) >= l.opts.DrainCheck
	if due {
		l.lastDrain = now
	}
	l.mu.Unlock()
	if due {
		return l.drain(ctx, m, lay, stableFor)
	}
	return nil
}

// drain moves the mark to just above the highest occupied shard at or
// above M: down once M has been stable for Grace, up at once.
func (l *Layout) drain(ctx context.Context, m int, lay shard.Layout, stableFor time.Duration) error {
	occ, err := l.store.Occupied(ctx, m, lay.MaxEver)
	if err != nil {
		return err
	}
	top := m
	for i, o := range occ {
		if o {
			top = m + i + 1
		}
	}
	raise := top > lay.HighWater
	if !raise && (top == lay.HighWater || stableFor < l.opts.Grace) {
		return nil
	}
	ok, err := l.store.SetHighWater(ctx, lay.HighWater, top)
	if errors.Is(err, shard.ErrPinned) {
		// A producer still writes under a larger M: its shards stay
		// covered until its pin expires.
		l.log.Debug("retired shards are empty, but a producer pinned a larger M; keeping the mark",
			zap.Int("m", m), zap.Int("high_water", lay.HighWater))
		return nil
	}
	if err != nil || !ok {
		return err
	}
	l.hwm.Store(int64(top))
	if raise {
		l.log.Warn("messages found above the high-water mark (a producer wrote with an old M); covering them again",
			zap.Int("shard", top-1), zap.Int("from", lay.HighWater), zap.Int("to", top))
	} else {
		l.log.Info("retired shards are empty; lowered the high-water mark",
			zap.Int("m", m), zap.Int("from", lay.HighWater), zap.Int("to", top))
	}
	return nil
}

// settlePage is how many ids one call of a settle sweep reads.
const settlePage = 500

// Settle sweeps every message of every shard below the high-water mark,
// a page of ids at a time, when the layout records another M than the
// current one. If every message is in the shard the current M puts it in,
// it has the layout forget the other Ms (shard.Store.SettleLayout), so
// producers stop looking for ids in those Ms' shards. The sweep stops at
// the first message in another shard: those leave as they fall due, and a
// later sweep tries again. It reports whether the layout is settled (one
// M). The sweep reads ids only, about settlePage per Redis call.
func (l *Layout) Settle(ctx context.Context) (bool, error) {
	m, err := l.ShardCount()
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	used := l.used
	l.mu.Unlock()
	if len(used) == 0 || len(used) == 1 && used[0] == m {
		return true, nil
	}
	start, err := l.store.RedisNow(ctx)
	if err != nil {
		return false, err
	}
	hw, err := l.HighWater()
	if err != nil {
		return false, err
	}
	for i := range hw {
		cursor := "0"
		for {
			ids, next, err := l.store.ScanIDs(ctx, i, cursor, settlePage)
			if err != nil {
				return false, err
			}
			for _, id := range ids {
				if shard.Of(id, m) != i {
					l.log.Debug("messages written under an older M remain; producers keep looking for ids in its shards",
						zap.Int("m", m), zap.Ints("used", used), zap.Int("shard", i))
					return false, nil
				}
			}
			if next == "0" {
				break
			}
			cursor = next
		}
	}
	ok, err := l.store.SettleLayout(ctx, m, start)
	if err != nil || !ok {
		return false, err
	}
	l.mu.Lock()
	l.used = []int{m}
	l.mu.Unlock()
	l.log.Info("every message is in the shard M puts it in; producers stop looking in older shard layouts",
		zap.Int("m", m), zap.Ints("forgot", used))
	return true, nil
}

// Describe is what `delayq shards` prints.
func (l *Layout) Describe() string {
	m, src, err := l.Current()
	if err != nil {
		return fmt.Sprintf("M unknown (%v)", err)
	}
	hw, _ := l.HighWater()
	return fmt.Sprintf("M %d (%s), high-water mark %d", m, src, hw)
}
