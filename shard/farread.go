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

// Reading the far tier: a far message seen by Inspect, and far messages
// counted by Stats. Inspect finds the record through the index and reads
// its bucket (the raw records, then the blocks, decompressed), which is
// O(the bucket's records): bounded by the bucket's width, and paid only
// for an id the near tier does not hold.

// inspectFar looks for id in shard i's far tier: found, it is scheduled,
// with its record's due time and envelope (Info.Far set).
func (s *Store) inspectFar(ctx context.Context, i int, id string, info *Info) (bool, error) {
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return false, err
	}
	fk := farKeysOf(s.ns, i)
	v, err := s.rdb.HGet(ctx, fk.index(id, fs.IndexSlots), id).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	bs, qs, ok := strings.Cut(v, ":")
	b, err1 := strconv.ParseInt(bs, 10, 64)
	q, err2 := strconv.ParseUint(qs, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return false, fmt.Errorf("far index entry of %q in shard %d: %q is not <bucket>:<sequence>", id, i, v)
	}
	if err := s.rdb.ZScore(ctx, fk.dir(), bs).Err(); errors.Is(err, redis.Nil) {
		return false, nil // its bucket is gone: the entry is stale (far_live)
	} else if err != nil {
		return false, err
	}
	r, found, err := s.findFarRecord(ctx, fk, fs, b, id, q)
	if err != nil || !found {
		return false, err
	}
	info.State, info.Far, info.farEntry, info.farEnvelope = StateScheduled, true, v, r.Envelope
	info.At, info.Scheduled = time.UnixMilli(r.DueMs), time.UnixMilli(r.DueMs)
	if env, err := DecodeEnvelope(r.Envelope); err != nil {
		info.Corrupt = err
	} else {
		info.Envelope = &env
	}
	return true, nil
}

// findFarRecord reads bucket b until it finds id's record of sequence q.
func (s *Store) findFarRecord(ctx context.Context, fk farKeys, fs FarSettings, b int64, id string, q uint64) (FarRecord, bool, error) {
	var found FarRecord
	ok := false
	err := s.eachFarRecord(ctx, fk, fs, b, func(r FarRecord) bool {
		found, ok = r, r.ID == id && r.Seq == q
		return !ok
	})
	return found, ok, err
}

// farCounts returns, for shards [0, m), how many messages wait far (nil
// with the tier off).
func (s *Store) farCounts(ctx context.Context, m int) ([]int64, error) {
	_, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return nil, err
	}
	cmds := make([]*redis.StringCmd, m)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGet(ctx, farKeysOf(s.ns, i).meta(), "live")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("far counts: %w", err)
	}
	out := make([]int64, m)
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("far count of shard %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

// rescheduleFar moves a far message of shard i to a new due time (mode and
// ms as Reschedule takes them): it reads the record, then runs
// farRescheduleScript, which acts only if the record is still the live
// one. When it is not (promoted, replaced meanwhile), it looks again, a
// few times; a message promoted meanwhile is near, where Reschedule's own
// call finds it next time. It reports whether the message was far.
func (s *Store) rescheduleFar(ctx context.Context, i int, id, mode string, ms int64) (int64, bool, error) {
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return 0, false, err
	}
	fk, ks := farKeysOf(s.ns, i), ShardKeys(s.ns, i)
	for range 3 {
		var info Info
		found, err := s.inspectFar(ctx, i, id, &info)
		if err != nil || !found {
			return 0, false, err
		}
		due := ms
		if mode == "delay" {
			due += time.Now().UnixMilli()
		}
		b := due / fs.BucketWidth.Milliseconds()
		v, err := s.run1(ctx, farRescheduleScript, []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters, ks.Cancelled,
			fk.index(id, fs.IndexSlots), fk.dir(), fk.meta(), fk.bucket(b), fk.compact()},
			id, info.farEntry, info.farEnvelope, mode, ms, b, fs.BucketWidth.Milliseconds(), fs.Horizon.Milliseconds(), fs.Since,
			farBlockRecords, s.wake, i).Int64Slice()
		if err != nil {
			return 0, false, err
		}
		if len(v) == 2 && v[0] == 1 {
			return v[1], true, nil
		}
	}
	return 0, false, nil
}
