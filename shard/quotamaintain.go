package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// QuotaRound is what one maintenance round of the quotas did.
type QuotaRound struct {
	Ran     bool // false: another process ran this second's round, or no quota was ever set
	Swept   int  // tags whose message was gone, counted out
	Applied int  // shards' removals applied to counts
	Settled int  // expired reservations settled from what the shards stored
}

// MaintainQuotas runs the fleet's quota maintenance (quota.go, "The
// design") over shards 0..shards-1, when no other process has run it in
// the last interval (a lease: SET NX PX): the sweep of the tags (pages
// of quotaSweepPage a shard, while quotaSweepBudget lasts), the removals
// applied to the counts, the expired reservations settled, and the old
// quotaheld entries deleted. Every step is safe to run twice or to stop
// at any line. A namespace where no quota was ever set costs one EXISTS.
func (s *Store) MaintainQuotas(ctx context.Context, shards int, interval time.Duration) (QuotaRound, error) {
	var round QuotaRound
	if n, err := s.rdb.Exists(ctx, quotaKey(s.ns)).Result(); err != nil || n == 0 {
		return round, wrapQuotaErr("look for quotas", err)
	}
	ok, err := s.rdb.SetNX(ctx, quotaLeaseKey(s.ns), "1", interval).Result()
	if err != nil || !ok {
		return round, wrapQuotaErr("take the quota maintenance lease", err)
	}
	round.Ran = true
	defs, err := s.rdb.HGetAll(ctx, quotaDefsKey(s.ns)).Result()
	if err != nil {
		return round, wrapQuotaErr("read quotas", err)
	}
	qs, corrupt := parseQuotaDefs(defs) // the others are kept, and the error returned at the end
	if round.Swept, err = s.sweepQuotaTags(ctx, shards, quotaSweepPasses*interval); err != nil {
		return round, err
	}
	if round.Applied, err = s.applyQuotaOut(ctx, shards, qs); err != nil {
		return round, err
	}
	if round.Settled, err = s.settleExpired(ctx, shards); err != nil {
		return round, err
	}
	return round, errors.Join(s.dropOldHeld(ctx, shards), corrupt)
}

func wrapQuotaErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("quota maintenance: %s: %w", what, err)
}

// sweepQuotaTags goes on with each shard's sweep of its scopeof tags
// where the last round left it (quotacursor: "<i>" the shard's cursor,
// "<i>:at" when its next pass may start, unix ms), a page a shard at a
// time, while quotaSweepBudget lasts or until every shard is through. A
// shard through its tags starts again once every from its last start.
func (s *Store) sweepQuotaTags(ctx context.Context, shards int, every time.Duration) (int, error) {
	fs, farOn, err := s.farSettings(ctx)
	if err != nil {
		return 0, wrapQuotaErr("read the far settings", err)
	}
	start, gone := time.Now(), 0
	done := make([]bool, shards)
	cursors, err := s.rdb.HGetAll(ctx, quotaCursorKey(s.ns)).Result()
	if err != nil {
		return gone, wrapQuotaErr("read the sweep cursors", err)
	}
	for i := range shards {
		at, _ := strconv.ParseInt(cursors[strconv.Itoa(i)+":at"], 10, 64)
		done[i] = at > start.UnixMilli()
	}
	for pass := 0; containsFalse(done) && time.Since(start) < quotaSweepBudget; pass++ {
		if pass > 0 {
			if cursors, err = s.rdb.HGetAll(ctx, quotaCursorKey(s.ns)).Result(); err != nil {
				return gone, wrapQuotaErr("read the sweep cursors", err)
			}
		}
		scans := make([]*redis.ScanCmd, shards)
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range shards {
				if !done[i] {
					cur, _ := strconv.ParseUint(cursors[strconv.Itoa(i)], 10, 64)
					scans[i] = p.HScan(ctx, quotaShardKey(s.ns, i, "scopeof"), cur, "", quotaSweepPage)
				}
			}
			return nil
		})
		var calls []call
		next := map[string]any{}
		for i, sc := range scans {
			if sc == nil {
				continue
			}
			kv, cur, err := sc.Result()
			if err != nil {
				return gone, wrapQuotaErr(fmt.Sprintf("scan shard %d's tags", i), err)
			}
			next[strconv.Itoa(i)] = cur
			if cur == 0 {
				done[i] = true
				next[strconv.Itoa(i)+":at"] = start.Add(every).UnixMilli()
			}
			if len(kv) == 0 {
				continue
			}
			keys := []string{ShardKeys(s.ns, i).Msg, quotaShardKey(s.ns, i, "scopeof"), quotaShardKey(s.ns, i, "quotaout")}
			args := []any{len(kv) / 2}
			if farOn {
				keys = append(keys, farKeysOf(s.ns, i).dir())
			}
			for j := 0; j+1 < len(kv); j += 2 {
				if farOn {
					keys = append(keys, farKeysOf(s.ns, i).index(kv[j], fs.IndexSlots))
				}
				args = append(args, kv[j], kv[j+1])
			}
			calls = append(calls, call{quotaSweepScript, keys, args})
		}
		var errs []error
		for _, c := range s.run(ctx, calls...) {
			n, err := c.Int()
			gone += n
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return gone, wrapQuotaErr("sweep tags", err)
		}
		if len(next) > 0 {
			if err := s.rdb.HSet(ctx, quotaCursorKey(s.ns), next).Err(); err != nil {
				return gone, wrapQuotaErr("save the sweep cursors", err)
			}
		}
	}
	return gone, nil
}

func containsFalse(b []bool) bool {
	for _, v := range b {
		if !v {
			return true
		}
	}
	return false
}

// applyQuotaOut applies each shard's quotaout (and quotain, what the
// adoption counted in) to the counts of the current generations; fields
// of other generations are deleted.
func (s *Store) applyQuotaOut(ctx context.Context, shards int, qs []Quota) (int, error) {
	n := 0
	for _, kind := range []string{"out", "in"} {
		k, err := s.applyQuotaShards(ctx, shards, qs, kind)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// applyQuotaShards applies the shards' quota<kind> HASHes.
func (s *Store) applyQuotaShards(ctx context.Context, shards int, qs []Quota, kind string) (int, error) {
	key := "quota" + kind
	outs := make([]*redis.MapStringStringCmd, shards)
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			outs[i] = p.HGetAll(ctx, quotaShardKey(s.ns, i, key))
		}
		return nil
	})
	current := map[string]Quota{}
	for _, q := range qs {
		current[q.Scope+":"+strconv.FormatInt(q.Gen, 10)] = q
	}
	byTag := map[string][]any{}
	stale := map[int][]string{}
	for i, c := range outs {
		m, err := c.Result()
		if err != nil {
			return 0, wrapQuotaErr(fmt.Sprintf("read shard %d's quota%s", i, kind), err)
		}
		for tag, v := range m {
			if _, ok := current[tag]; ok {
				byTag[tag] = append(byTag[tag], i, v)
			} else {
				stale[i] = append(stale[i], tag)
			}
		}
	}
	var calls []call
	for tag, pairs := range byTag {
		q := current[tag]
		calls = append(calls, call{quotaApplyScript, []string{quotaKey(s.ns), quotaAppliedKey(s.ns, q.Scope)},
			append([]any{q.Scope, q.Gen, kind}, pairs...)})
	}
	applied := 0
	var errs []error
	for j, c := range s.run(ctx, calls...) {
		errs = append(errs, c.Err())
		if c.Err() == nil {
			applied += len(calls[j].args[3:]) / 2
		}
	}
	for i, tags := range stale {
		errs = append(errs, s.rdb.HDel(ctx, quotaShardKey(s.ns, i, key), tags...).Err())
	}
	return applied, wrapQuotaErr("apply removals", errors.Join(errs...))
}

// settleExpired settles the reservations whose deadline passed
// quotaClockSkew ago, from what the shards' quotaheld say they stored.
func (s *Store) settleExpired(ctx context.Context, shards int) (int, error) {
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, wrapQuotaErr("read the Redis clock", err)
	}
	max := strconv.FormatInt(now.Add(-quotaClockSkew).UnixMilli(), 10)
	members, err := s.rdb.ZRangeByScore(ctx, quotaResKey(s.ns), &redis.ZRangeBy{Min: "-inf", Max: max, Count: 256}).Result()
	if err != nil || len(members) == 0 {
		return 0, wrapQuotaErr("read expired reservations", err)
	}
	type expired struct {
		scope, gen, member, id string
		granted                string
	}
	var ex []expired
	var ids []string
	for _, m := range members {
		f := strings.Split(m, "|")
		sg := strings.SplitN(f[0], ":", 2)
		if len(f) != 3 || len(sg) != 2 {
			// Not a reservation this version writes: drop it, it counts nothing.
			if err := s.rdb.ZRem(ctx, quotaResKey(s.ns), m).Err(); err != nil {
				return 0, wrapQuotaErr("drop a malformed reservation", err)
			}
			continue
		}
		ex = append(ex, expired{sg[0], sg[1], m, f[1], f[2]})
		ids = append(ids, f[1])
	}
	if len(ex) == 0 {
		return 0, nil
	}
	helds := make([]*redis.SliceCmd, shards)
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			helds[i] = p.HMGet(ctx, quotaShardKey(s.ns, i, "quotaheld"), ids...)
		}
		return nil
	})
	stored := make([]int64, len(ex))
	for i, c := range helds {
		v, err := c.Result()
		if err != nil {
			return 0, wrapQuotaErr(fmt.Sprintf("read shard %d's stores", i), err)
		}
		for j, x := range v {
			if x != nil {
				n, _ := strconv.ParseInt(fmt.Sprint(x), 10, 64)
				stored[j] += n
			}
		}
	}
	calls := make([]call, len(ex))
	for j, e := range ex {
		calls[j] = call{quotaSettleScript, []string{quotaKey(s.ns), quotaResKey(s.ns)},
			[]any{e.scope, e.gen, e.member, e.granted, stored[j]}}
	}
	settled := 0
	var errs []error
	for _, c := range s.run(ctx, calls...) {
		n, err := c.Int()
		settled += n
		errs = append(errs, err)
	}
	return settled, wrapQuotaErr("settle expired reservations", errors.Join(errs...))
}

// dropOldHeld deletes the quotaheld entries of reservations settled and
// older than quotaHeldKept (the id starts with its producer's unix ms).
func (s *Store) dropOldHeld(ctx context.Context, shards int) error {
	open, err := s.rdb.ZRange(ctx, quotaResKey(s.ns), 0, -1).Result()
	if err != nil {
		return wrapQuotaErr("read reservations", err)
	}
	outstanding := map[string]bool{}
	for _, m := range open {
		if f := strings.Split(m, "|"); len(f) == 3 {
			outstanding[f[1]] = true
		}
	}
	keys := make([]*redis.StringSliceCmd, shards)
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			keys[i] = p.HKeys(ctx, quotaShardKey(s.ns, i, "quotaheld"))
		}
		return nil
	})
	old := time.Now().Add(-quotaHeldKept).UnixMilli()
	var errs []error
	for i, c := range keys {
		ids, err := c.Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var drop []string
		for _, id := range ids {
			ms, err := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64)
			if err != nil || (ms < old && !outstanding[id]) {
				drop = append(drop, id)
			}
		}
		if len(drop) > 0 {
			errs = append(errs, s.rdb.HDel(ctx, quotaShardKey(s.ns, i, "quotaheld"), drop...).Err())
		}
	}
	return wrapQuotaErr("drop settled reservations' records", errors.Join(errs...))
}
