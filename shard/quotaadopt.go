package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard/scope"
)

// The adoption of a new quota (quota.go, "The design"): a quota counts
// what its producers store once they know it, and what the scope held
// before is counted in by an adoption pass, a bulk job over the
// namespace (bulk.go) with the scope as its filter. It walks each
// shard's far tier, due set and held sets, and tags each of the scope's
// messages not tagged yet, counting it in the shard's quotain in the
// same call (quotaAdoptScript); the maintenance adds quotain to the count
// as it takes quotaout off. A message enqueued, delivered or cancelled
// meanwhile is counted once either way: the tag says whether it is
// counted. One process adopts at a time (a lease, renewed after each
// page); one that dies leaves the rest to the next, whose walk passes
// over what is tagged already. Until the pass ends the team may store up
// to what it held besides its quota, and the quota shows adopting.
// Messages in flight or dead when the pass walks by are not adopted (in
// flight: about to leave; dead: until purged).

// quotaAdoptLease is how long an adopter's lease lasts between its pages.
const quotaAdoptLease = 30 * time.Second

// quotaAdoptedScript marks a quota's adoption done, while its generation
// is the one adopted.
//
//	KEYS[1] quota HASH   ARGV[1] scope   ARGV[2] generation
//
// Returns 1 marked, 0 the quota changed generation meanwhile.
// Complexity: O(1).
var quotaAdoptedScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'gen:' .. ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'adopted:' .. ARGV[1], ARGV[2])
return 1
`)

// AdoptQuotas runs the adoption of every quota whose scope's held
// messages are not counted yet, over shards [0, shards), when no other
// process runs it (a lease). It returns how many messages it counted in.
func (s *Store) AdoptQuotas(ctx context.Context, shards int) (int, error) {
	qs, err := s.Quotas(ctx)
	if err != nil && !errors.Is(err, ErrCorruptQuota) { // the maintenance reports a corrupt one
		return 0, err
	}
	total := 0
	for _, q := range qs {
		if !q.Adopting {
			continue
		}
		ok, err := s.rdb.SetNX(ctx, quotaAdoptLeaseKey(s.ns), q.Scope, quotaAdoptLease).Result()
		if err != nil || !ok {
			return total, wrapQuotaErr("take the adoption lease", err)
		}
		n, err := s.adopt(ctx, shards, q.Quota)
		total += n
		_ = s.rdb.Del(context.WithoutCancel(ctx), quotaAdoptLeaseKey(s.ns)).Err() // else it expires
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func quotaAdoptLeaseKey(ns string) string { return "delayq:{" + ns + "}:quotaadopt" }

// adopt runs q's adoption job to its end and marks it done.
func (s *Store) adopt(ctx context.Context, shards int, q Quota) (int, error) {
	sc, err := parseQuotaScope(q.Scope, q.Rules)
	if err != nil {
		return 0, err
	}
	tag := q.Scope + ":" + strconv.FormatInt(q.Gen, 10)
	job := "quota-adopt-" + q.Scope + "-" + strconv.FormatInt(q.Gen, 10)
	f := BulkFilter{All: true, Within: []*scope.Scope{sc}}
	// A renewal that fails lets the lease expire: another process then
	// goes on, passing over what is tagged already.
	renew := func(BulkProgress) { _ = s.rdb.PExpire(ctx, quotaAdoptLeaseKey(s.ns), quotaAdoptLease).Err() }
	p, err := s.bulkRun(ctx, shards, f, job, 0, []any{"action", "adopt"}, renew,
		func(ctx context.Context, i int, job string, fs FarSettings, recs []farHeld) ([]int64, error) {
			fk := farKeysOf(s.ns, i)
			var calls []call
			for lo := 0; lo < len(recs); lo += maxCancelMany {
				part := recs[lo:min(lo+maxCancelMany, len(recs))]
				keys := append(s.adoptKeys(i, job), fk.dir())
				args := []any{tag, bulkTTL.Milliseconds(), "far"}
				for _, r := range part {
					keys, args = append(keys, fk.index(r.ID, fs.IndexSlots)), append(args, r.ID, r.entry)
				}
				calls = append(calls, call{quotaAdoptScript, keys, args})
			}
			var out []int64
			for _, cmd := range s.run(ctx, calls...) {
				v, err := cmd.Int64Slice()
				if err != nil {
					return out, fmt.Errorf("quota adoption of far messages in shard %d: %w", i, err)
				}
				out = append(out, v...)
			}
			return out, nil
		},
		func(ctx context.Context, i int, job, _ string, ids []string) ([]int64, error) {
			return s.bulkShard(ctx, i, quotaAdoptScript, s.adoptKeys(i, job), []any{tag, bulkTTL.Milliseconds(), "near"}, ids)
		})
	if err != nil {
		return p.Done - p.Before, fmt.Errorf("quota adoption of %s: %w", q.Scope, err)
	}
	if err := s.run1(ctx, quotaAdoptedScript, []string{quotaKey(s.ns)}, q.Scope, q.Gen).Err(); err != nil {
		return p.Done - p.Before, fmt.Errorf("quota adoption of %s: mark it done: %w", q.Scope, err)
	}
	return p.Done - p.Before, nil
}

// adoptKeys are quotaAdoptScript's first keys for shard i and job.
func (s *Store) adoptKeys(i int, job string) []string {
	return []string{ShardKeys(s.ns, i).Msg, quotaShardKey(s.ns, i, "scopeof"), quotaShardKey(s.ns, i, "quotain"), BulkKey(s.ns, i, job)}
}
