package shard

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Layout is the namespace's shard layout as recorded in Redis.
type Layout struct {
	// HighWater is how many shards scanners must cover: at least every M in
	// use, more while shards of a larger, older M may hold messages.
	HighWater int
	// MaxEver is the largest M ever recorded: no message can be in a shard
	// at or above it.
	MaxEver int
	// M and MIndex mirror the last M read from Consul and its ModifyIndex
	// (0, 0 when none was recorded).
	M      int
	MIndex uint64
}

// RaiseLayout records that m shards are in use (index: the Consul
// ModifyIndex m came with, 0 if it did not come from Consul) and returns
// the layout after the update. The high-water mark never goes down here.
func (s *Store) RaiseLayout(ctx context.Context, m int, index uint64) (Layout, error) {
	v, err := raiseLayoutScript.Run(ctx, s.rdb, []string{LayoutKey(s.ns)}, m, index).Slice()
	if err != nil {
		return Layout{}, fmt.Errorf("record layout: %w", err)
	}
	if len(v) != 4 {
		return Layout{}, fmt.Errorf("record layout: unexpected reply of %d fields", len(v))
	}
	r := reply{v: v, what: "layout reply"}
	l := Layout{HighWater: int(r.int(0)), MaxEver: int(r.int(1)), M: int(r.int(2)), MIndex: uint64(r.int(3))}
	if r.err != nil {
		return Layout{}, fmt.Errorf("record layout: %w", r.err)
	}
	return l, nil
}

// ReadLayout returns the recorded layout (all zero when none was recorded).
func (s *Store) ReadLayout(ctx context.Context) (Layout, error) {
	v, err := s.rdb.HMGet(ctx, LayoutKey(s.ns), "hwm", "maxever", "m", "m_index").Result()
	if err != nil {
		return Layout{}, fmt.Errorf("read layout: %w", err)
	}
	var n [4]int64
	for i, x := range v {
		if x == nil {
			continue
		}
		if _, err := fmt.Sscan(x.(string), &n[i]); err != nil {
			return Layout{}, fmt.Errorf("read layout: field %d is %q: %w", i, x, err)
		}
	}
	return Layout{HighWater: int(n[0]), MaxEver: int(n[1]), M: int(n[2]), MIndex: uint64(n[3])}, nil
}

// SetHighWater moves the high-water mark from old to new, if it is still
// old; it reports whether it did.
func (s *Store) SetHighWater(ctx context.Context, old, new int) (bool, error) {
	n, err := setHighWaterScript.Run(ctx, s.rdb, []string{LayoutKey(s.ns)}, old, new).Int()
	if err != nil {
		return false, fmt.Errorf("set high-water mark %d -> %d: %w", old, new, err)
	}
	return n == 1, nil
}

// Occupied returns, for each shard in [from, to), whether it holds any
// message (scheduled, in flight or dead), in one pipeline.
func (s *Store) Occupied(ctx context.Context, from, to int) ([]bool, error) {
	if to <= from {
		return nil, nil
	}
	cmds := make([]*redis.IntCmd, 0, 3*(to-from))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := from; i < to; i++ {
			ks := ShardKeys(s.ns, i)
			cmds = append(cmds, p.Exists(ctx, ks.Due), p.Exists(ctx, ks.Inflight), p.Exists(ctx, ks.Dead))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check shards %d..%d: %w", from, to-1, err)
	}
	out := make([]bool, to-from)
	for j, c := range cmds {
		if c.Val() > 0 {
			out[j/3] = true
		}
	}
	return out, nil
}

// locateElsewhere looks for message id in every shard below upTo except
// skip, in one pipeline (messages stay in the shard they were written to
// when M changes, so after a resize an id can be in another shard).
func (s *Store) locateElsewhere(ctx context.Context, id string, skip, upTo int) (int, bool, error) {
	if upTo <= 1 {
		return 0, false, nil
	}
	cmds := make([]*redis.BoolCmd, upTo)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range upTo {
			if i != skip {
				cmds[i] = p.HExists(ctx, ShardKeys(s.ns, i).Msg, id)
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("locate %q: %w", id, err)
	}
	for i, c := range cmds {
		if c != nil && c.Val() {
			return i, true, nil
		}
	}
	return 0, false, nil
}
