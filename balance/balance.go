package balance

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
)

// Source reports the shard layout. Implementations are safe for concurrent
// use and answer from memory (no I/O).
type Source interface {
	// ShardCount returns M, the number of shards new messages hash onto,
	// or an error when it is not known.
	ShardCount() (int, error)
	// HighWater returns the number of shards scanners must cover: at least
	// M, more while shards of a larger, older M may still hold messages.
	HighWater() (int, error)
}

var (
	_ Source             = Static(1)
	_ shard.ShardCounter = Static(1)
)

// Static is a fixed M (DELAYQ_SHARDS).
type Static int

// NewStatic validates m.
func NewStatic(m int) (Static, error) {
	if m < 1 || m > MaxShards {
		return 0, fmt.Errorf("shard count %d: want 1..%d", m, MaxShards)
	}
	return Static(m), nil
}

// MaxShards is the largest M accepted.
const MaxShards = 4096

// ShardCount returns M.
func (s Static) ShardCount() (int, error) { return int(s), nil }

// HighWater returns M.
func (s Static) HighWater() (int, error) { return int(s), nil }

// Cursor hands out shards from the namespace's shared INCR counter.
type Cursor struct {
	rdb redis.UniversalClient
	key string
	src Source
	// local stands in for the shared counter while Redis refuses its INCR
	// at maxmemory: the scanners must go on claiming and acking, which
	// is what frees memory.
	local atomic.Uint64
}

// NewCursor returns a cursor over the shards src reports.
func NewCursor(rdb redis.UniversalClient, ns string, src Source) *Cursor {
	return &Cursor{rdb: rdb, key: shard.CursorKey(ns), src: src}
}

// Next returns the shard to visit next and the number of shards covered.
func (c *Cursor) Next(ctx context.Context) (shardIndex, covered int, err error) {
	hw, err := c.src.HighWater()
	if err != nil {
		return 0, 0, fmt.Errorf("next shard: %w", err)
	}
	n, err := c.rdb.Incr(ctx, c.key).Result()
	if shard.IsRedisFull(err) {
		return int(c.local.Add(1) % uint64(hw)), hw, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("next shard: %w", err)
	}
	return int(uint64(n) % uint64(hw)), hw, nil
}
