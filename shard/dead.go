package shard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dead is one message in a dead set.
type Dead struct {
	ID     string
	Shard  int
	Since  time.Time
	Reason string
}

// DeadList returns up to limit dead messages of shards [0, shards), oldest
// first, with their reasons: the first page of DeadPage.
func (s *Store) DeadList(ctx context.Context, shards, limit int) ([]Dead, error) {
	out, _, _, err := s.DeadPage(ctx, shards, DeadCursor{}, limit)
	return out, err
}

// DeadCursor is where a page of the dead list ended: the time the last
// message died (unix ms) and its id. The zero cursor starts at the oldest.
type DeadCursor struct {
	SinceMs int64
	ID      string
}

// String is the cursor's text form, "<ms>:<id>" ("" for the start).
func (c DeadCursor) String() string {
	if c == (DeadCursor{}) {
		return ""
	}
	return strconv.FormatInt(c.SinceMs, 10) + ":" + c.ID
}

// ParseDeadCursor reads what DeadCursor.String wrote.
func ParseDeadCursor(s string) (DeadCursor, error) {
	if s == "" {
		return DeadCursor{}, nil
	}
	ms, id, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 {
		return DeadCursor{}, invalid("after", "%q is not a cursor of the dead list", s)
	}
	return DeadCursor{SinceMs: n, ID: id}, nil
}

// DeadPage returns the next limit dead messages of shards [0, shards)
// after the cursor, oldest first (by time of death, then id), with their
// reasons, the cursor of the page's end, and whether more may follow.
// It takes three pipelined round trips and reads at most limit messages
// per shard, plus those that died in the cursor's millisecond in that
// shard (so a page never stalls on many deaths at one millisecond).
func (s *Store) DeadPage(ctx context.Context, shards int, after DeadCursor, limit int) ([]Dead, DeadCursor, bool, error) {
	min := "-inf"
	ties := make([]*redis.IntCmd, shards)
	if after != (DeadCursor{}) {
		min = strconv.FormatInt(after.SinceMs, 10)
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range ties {
				ties[i] = p.ZCount(ctx, ShardKeys(s.ns, i).Dead, min, min)
			}
			return nil
		}); err != nil {
			return nil, after, false, fmt.Errorf("page dead messages: %w", err)
		}
	}
	ranges := make([]*redis.ZSliceCmd, shards)
	counts := make([]int64, shards)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range ranges {
			counts[i] = int64(limit)
			if ties[i] != nil {
				counts[i] += ties[i].Val()
			}
			ranges[i] = p.ZRangeByScoreWithScores(ctx, ShardKeys(s.ns, i).Dead, &redis.ZRangeBy{Min: min, Max: "+inf", Count: counts[i]})
		}
		return nil
	}); err != nil {
		return nil, after, false, fmt.Errorf("page dead messages: %w", err)
	}
	var out []Dead
	full := false // a shard may hold more than it gave
	for i, r := range ranges {
		full = full || int64(len(r.Val())) == counts[i]
		for _, z := range r.Val() {
			id, _ := z.Member.(string)
			ms := int64(z.Score)
			if ms < after.SinceMs || ms == after.SinceMs && id <= after.ID {
				continue // on the pages before
			}
			out = append(out, Dead{ID: id, Shard: i, Since: time.UnixMilli(ms)})
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].Since.Equal(out[b].Since) {
			return out[a].Since.Before(out[b].Since)
		}
		return out[a].ID < out[b].ID
	})
	more := len(out) > limit || full
	if len(out) > limit {
		out = out[:limit]
	}
	next := after
	if len(out) > 0 {
		last := out[len(out)-1]
		next = DeadCursor{SinceMs: last.Since.UnixMilli(), ID: last.ID}
	}
	reasons := make([]*redis.StringCmd, len(out))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, d := range out {
			reasons[j] = p.HGet(ctx, ShardKeys(s.ns, d.Shard).Reason, d.ID)
		}
		return nil
	}); err != nil && err != redis.Nil {
		return nil, after, false, fmt.Errorf("read dead reasons: %w", err)
	}
	for j := range out {
		out[j].Reason = reasons[j].Val()
	}
	return out, next, more, nil
}

// DeadIDs returns up to n ids of shard i's dead set that died at or
// before the unix ms before (by the Redis clock; see RedisNow), oldest
// first. Bounding a sweep by the time it started keeps it finite while
// scanners keep dead-lettering.
func (s *Store) DeadIDs(ctx context.Context, i int, beforeMs int64, n int) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, ShardKeys(s.ns, i).Dead, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(beforeMs, 10), Count: int64(n)}).Result()
	if err != nil {
		return nil, fmt.Errorf("list dead messages of shard %d: %w", i, err)
	}
	return ids, nil
}

// RedisNow returns the Redis server's clock in unix ms: the clock of every
// score delayq writes.
func (s *Store) RedisNow(ctx context.Context) (int64, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redis time: %w", err)
	}
	return t.UnixMilli(), nil
}

// Redrive makes a dead message of shard i due now. It returns ErrNotFound
// when the id is not dead there.
func (s *Store) Redrive(ctx context.Context, i int, id string) error {
	ks := ShardKeys(s.ns, i)
	n, err := s.run1(ctx, redriveScript, []string{ks.Dead, ks.Reason, ks.Due, ks.Attempts}, id, s.wake, i).Int()
	switch {
	case err != nil:
		return fmt.Errorf("redrive %q in shard %d: %w", id, i, err)
	case n == 0:
		return fmt.Errorf("redrive %q: not dead: %w", id, ErrNotFound)
	}
	return nil
}

// Purge deletes a dead message of shard i. It returns ErrNotFound when the
// id is not dead there.
func (s *Store) Purge(ctx context.Context, i int, id string) error {
	ks := ShardKeys(s.ns, i)
	n, err := s.run1(ctx, purgeScript, []string{ks.Dead, ks.Reason, ks.Msg, ks.Attempts}, id).Int()
	switch {
	case err != nil:
		return fmt.Errorf("purge %q in shard %d: %w", id, i, err)
	case n == 0:
		return fmt.Errorf("purge %q: not dead: %w", id, ErrNotFound)
	}
	return nil
}

// Redrive sends a dead message again, due now, in whichever shard it is.
func (p *Producer) Redrive(ctx context.Context, id string) error {
	return p.elsewhere(ctx, id, func(i int) error { return p.store.Redrive(ctx, i, id) })
}

// Purge deletes a dead message for good, in whichever shard it is.
func (p *Producer) Purge(ctx context.Context, id string) error {
	return p.elsewhere(ctx, id, func(i int) error { return p.store.Purge(ctx, i, id) })
}
