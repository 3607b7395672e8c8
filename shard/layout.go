package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	// Used are the shard counts messages may have been written under,
	// ascending: an id can be in shard Of(id, u) of any of them.
	Used []int
}

// RaiseLayout records that m shards are in use (index: the Consul
// ModifyIndex m came with, 0 if it did not come from Consul) and returns
// the layout after the update. The high-water mark never goes down here.
func (s *Store) RaiseLayout(ctx context.Context, m int, index uint64) (Layout, error) {
	return s.raiseLayout(ctx, m, index, 0)
}

// PinLayout raises the layout to m, as RaiseLayout does, and pins m for
// ttl (by the Redis clock): until the pin expires, or a later pin of m
// renews it, SetHighWater refuses to lower the mark below m. A producer
// pins the M it writes under, so that whatever M it was given, every shard
// it writes to is covered by the scanners.
func (s *Store) PinLayout(ctx context.Context, m int, ttl time.Duration) (Layout, error) {
	if ttl < time.Millisecond {
		return Layout{}, fmt.Errorf("pin layout: ttl %s is under 1ms", ttl)
	}
	return s.raiseLayout(ctx, m, 0, ttl.Milliseconds())
}

func (s *Store) raiseLayout(ctx context.Context, m int, index uint64, pinMs int64) (Layout, error) {
	if m < 1 {
		return Layout{}, fmt.Errorf("record layout: shard count %d < 1", m)
	}
	v, err := s.run1(ctx, raiseLayoutScript, []string{LayoutKey(s.ns)}, m, index, pinMs).Slice()
	if err != nil {
		return Layout{}, fmt.Errorf("record layout: %w", err)
	}
	return parseLayout(v)
}

// ReadLayout returns the recorded layout (all zero when none was recorded).
func (s *Store) ReadLayout(ctx context.Context) (Layout, error) {
	v, err := s.run1(ctx, readLayoutScript, []string{LayoutKey(s.ns)}).Slice()
	if err != nil {
		return Layout{}, fmt.Errorf("read layout: %w", err)
	}
	return parseLayout(v)
}

func parseLayout(v []any) (Layout, error) {
	if len(v) < 4 {
		return Layout{}, fmt.Errorf("layout: unexpected reply of %d fields", len(v))
	}
	r := reply{v: v, what: "layout reply"}
	l := Layout{HighWater: int(r.int(0)), MaxEver: int(r.int(1)), M: int(r.int(2)), MIndex: uint64(r.int(3))}
	for j := 4; j < len(v); j++ {
		l.Used = append(l.Used, int(r.int(j)))
	}
	slices.Sort(l.Used)
	if r.err != nil {
		return Layout{}, fmt.Errorf("layout: %w", r.err)
	}
	return l, nil
}

// ShardNodes returns, for a Redis Cluster, the address of the master that
// holds each of the shards, by shard index; nil for a single server. It
// reads go-redis's cached slot map (refreshed when it is stale).
func (s *Store) ShardNodes(ctx context.Context, shards []int) (map[int]string, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	out := make(map[int]string, len(shards))
	for _, i := range shards {
		node, err := cc.MasterForKey(ctx, ShardKeys(s.ns, i).Due)
		if err != nil {
			return nil, fmt.Errorf("node of shard %d: %w", i, err)
		}
		out[i] = node.Options().Addr
	}
	return out, nil
}

// ScanIDs returns a page of the ids of every message of shard i
// (scheduled, in flight or dead), about count of them, and the cursor of
// the next page; next "0" ends the scan. Start with cursor "0".
func (s *Store) ScanIDs(ctx context.Context, i int, cursor string, count int) (ids []string, next string, err error) {
	v, err := s.run1(ctx, scanIDsScript, []string{ShardKeys(s.ns, i).Msg}, cursor, count).StringSlice()
	if err != nil {
		return nil, cursor, fmt.Errorf("scan ids of shard %d: %w", i, err)
	}
	if len(v) == 0 {
		return nil, cursor, fmt.Errorf("scan ids of shard %d: empty reply", i)
	}
	return v[1:], v[0], nil
}

// SettleLayout forgets every M but m (Layout.Used), after a sweep that
// started at startMs (Redis clock) found every message in shard Of(id, m).
// It reports false, changing nothing, when another M was recorded or
// pinned at or after startMs: sweep again.
func (s *Store) SettleLayout(ctx context.Context, m int, startMs int64) (bool, error) {
	n, err := s.run1(ctx, settleLayoutScript, []string{LayoutKey(s.ns)}, m, startMs).Int()
	if err != nil {
		return false, fmt.Errorf("settle layout at M %d: %w", m, err)
	}
	return n == 1, nil
}

// ErrPinned: SetHighWater would lower the mark below an M that a producer
// pinned (PinLayout) and may still write under.
var ErrPinned = errors.New("a producer pinned a larger shard count")

// SetHighWater moves the high-water mark from old to new, if it is still
// old; it reports whether it did. Lowering it below a pinned M fails with
// ErrPinned.
func (s *Store) SetHighWater(ctx context.Context, old, new int) (bool, error) {
	n, err := s.run1(ctx, setHighWaterScript, []string{LayoutKey(s.ns)}, old, new).Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("set high-water mark %d -> %d: %w", old, new, err)
	case n == -1:
		return false, fmt.Errorf("set high-water mark %d -> %d: %w", old, new, ErrPinned)
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
// skip (messages stay in the shard they were written to when M changes, so
// after a resize an id can be in another shard).
func (s *Store) locateElsewhere(ctx context.Context, id string, skip, upTo int) (int, bool, error) {
	var in []int
	for i := range upTo {
		if i != skip {
			in = append(in, i)
		}
	}
	found, err := s.locateEach(ctx, []string{id}, [][]int{in})
	if err != nil {
		return 0, false, err
	}
	return found[0], found[0] >= 0, nil
}

// locateEach looks for each of ids in the shards in[j] (for ids[j]), in
// one pipeline of HEXISTS. It returns for each id the first of its shards
// that holds it (scheduled, in flight, dead, or waiting far: its far
// index names it), or -1.
func (s *Store) locateEach(ctx context.Context, ids []string, in [][]int) ([]int, error) {
	found := make([]int, len(ids))
	n := 0
	for j := range found {
		found[j] = -1
		n += len(in[j])
	}
	if n == 0 {
		return found, nil
	}
	fs, far, err := s.farSettings(ctx)
	if err != nil {
		return nil, fmt.Errorf("locate %d ids: %w", len(ids), err)
	}
	cmds := make([]*redis.BoolCmd, 0, n)
	farCmds := make([]*redis.BoolCmd, 0, n) // with the far tier on: in its index
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, id := range ids {
			for _, i := range in[j] {
				cmds = append(cmds, p.HExists(ctx, ShardKeys(s.ns, i).Msg, id))
				if far {
					farCmds = append(farCmds, p.HExists(ctx, farKeysOf(s.ns, i).index(id, fs.IndexSlots), id))
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("locate %d ids: %w", len(ids), err)
	}
	n = 0
	for j := range ids {
		for _, i := range in[j] {
			if (cmds[n].Val() || far && farCmds[n].Val()) && found[j] < 0 {
				found[j] = i
			}
			n++
		}
	}
	return found, nil
}
