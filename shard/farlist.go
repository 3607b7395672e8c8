package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Walking the far tier in due order: what Browse (delayq list, the
// console's Scheduled page, a bulk job's dry run) and the bulk jobs read.
//
// A far bucket's records are in the order they were placed, not in due
// order, so a walk reads a bucket whole (its raw records, then its blocks,
// decompressed), keeps the records the index still names (one pipelined
// HGET each: a cancelled, replaced or promoted record is garbage until
// the bucket goes) and sorts them by (due, id), the due set's order. A
// shard's walk merges that with the due set's pages: a bucket is read
// only when the walk reaches its start, so a page of near messages reads
// no bucket. Cost: O(the bucket's records) for each page that reaches into
// a bucket; at 100 M far messages over 192 shards and 7 days of
// 10-minute buckets, about 500 records (50 KB compressed) a bucket.
//
// A walk is not a snapshot, as List's is not: a message promoted between
// the read of its bucket and the read of the due set's page that would
// hold it can be listed twice or not at all. The bulk jobs walk the far
// buckets before the due set for that reason: promotion moves messages
// from far to near only, so a message the far walk missed is near when
// the near walk comes.

// eachFarRecord calls fn with each record of bucket b of shard keys fk, the
// raw ones first, then those of the compressed blocks, until fn returns
// false. A block that does not decompress is skipped (promotion counts
// its records out); records that do not decode are skipped (promotion
// dead-letters them).
func (s *Store) eachFarRecord(ctx context.Context, fk farKeys, fs FarSettings, b int64, fn func(FarRecord) bool) error {
	start := b * fs.BucketWidth.Milliseconds()
	each := func(block []byte) bool {
		rs, _ := DecodeFarRecords(block, start)
		for _, r := range rs {
			if !fn(r) {
				return false
			}
		}
		return true
	}
	raw, err := s.rdb.LRange(ctx, fk.bucket(b), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("read far bucket %d: %w", b, err)
	}
	for _, rec := range raw {
		if !each([]byte(rec)) {
			return nil
		}
	}
	blocks, err := s.rdb.LRange(ctx, fk.blocks(b), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("read far bucket %d's blocks: %w", b, err)
	}
	if len(blocks) == 0 {
		return nil
	}
	codec, err := s.farCodec()
	if err != nil {
		return err
	}
	for _, packed := range blocks {
		block, err := codec.Decompress(nil, []byte(packed))
		if err != nil {
			continue
		}
		if !each(block) {
			return nil
		}
	}
	return nil
}

// liveFarRecords returns the records of bucket b of shard i that the index
// still names, in (due, id) order.
func (s *Store) liveFarRecords(ctx context.Context, i int, fs FarSettings, b int64) ([]FarRecord, error) {
	fk := farKeysOf(s.ns, i)
	var recs []FarRecord
	if err := s.eachFarRecord(ctx, fk, fs, b, func(r FarRecord) bool {
		recs = append(recs, r)
		return true
	}); err != nil || len(recs) == 0 {
		return nil, err
	}
	cmds := make([]*redis.StringCmd, len(recs))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, r := range recs {
			cmds[j] = p.HGet(ctx, fk.index(r.ID, fs.IndexSlots), r.ID)
		}
		return nil
	})
	for _, c := range cmds { // each command's own error: a missing entry (redis.Nil) is an answer
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("far bucket %d of shard %d: read its index entries: %w", b, i, err)
		}
	}
	prefix := strconv.FormatInt(b, 10) + ":"
	live := recs[:0]
	for j, r := range recs {
		if cmds[j].Val() == prefix+strconv.FormatUint(r.Seq, 10) {
			live = append(live, r)
		}
	}
	slices.SortFunc(live, func(x, y FarRecord) int {
		return cmp.Or(cmp.Compare(x.DueMs, y.DueMs), cmp.Compare(x.ID, y.ID))
	})
	return live, nil
}

// farBucket is a far bucket as fardir lists it.
type farBucket struct{ b, start int64 }

// farBuckets returns shard i's far buckets that may hold messages due in
// [fromMs, toMs) (toMs 0: open), in order.
func (s *Store) farBuckets(ctx context.Context, i int, fs FarSettings, fromMs, toMs int64) ([]farBucket, error) {
	lo := "(" + strconv.FormatInt(fromMs-fs.BucketWidth.Milliseconds(), 10) // ends after fromMs
	hi := "+inf"
	if toMs > 0 {
		hi = "(" + strconv.FormatInt(toMs, 10)
	}
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, farKeysOf(s.ns, i).dir(), &redis.ZRangeBy{Min: lo, Max: hi}).Result()
	if err != nil {
		return nil, fmt.Errorf("far buckets of shard %d: %w", i, err)
	}
	out := make([]farBucket, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		b, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("far buckets of shard %d: member %q is not a bucket number", i, m)
		}
		out = append(out, farBucket{b: b, start: int64(z.Score)})
	}
	return out, nil
}

// shardWalk yields the scheduled messages of one shard after a cursor in
// (due, id) order: the due set's pages (List) merged with the far
// buckets' live records.
type shardWalk struct {
	s        *Store
	i        int
	from     ListCursor // the walk yields only what comes after this
	nearNext ListCursor // where the next near page starts
	near     []Listed
	nearMore bool
	fs       FarSettings
	buckets  []farBucket // not read yet
	far      []Listed
}

// walkShard starts a walk of shard i after cursor, reading far buckets
// that start before toMs (0: open).
func (s *Store) walkShard(ctx context.Context, i int, after ListCursor, toMs int64) (*shardWalk, error) {
	w := &shardWalk{s: s, i: i, from: after, nearNext: after, nearMore: true}
	fs, on, err := s.farSettings(ctx)
	if err != nil {
		return nil, err
	}
	if on {
		w.fs = fs
		if w.buckets, err = s.farBuckets(ctx, i, fs, after.DueMs, toMs); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// after reports whether (dueMs, id) comes after the cursor c.
func after(c ListCursor, dueMs int64, id string) bool {
	return dueMs > c.DueMs || dueMs == c.DueMs && id > c.ID
}

// next returns the next message, or false at the end of the shard; when
// it needs the due set's next page, it reads n entries (1 to 1000).
func (w *shardWalk) next(ctx context.Context, n int) (Listed, bool, error) {
	if len(w.near) == 0 && w.nearMore {
		page, cur, more, err := w.s.List(ctx, w.i, w.nearNext, min(max(n, 1), maxListPage))
		if err != nil {
			return Listed{}, false, err
		}
		w.near, w.nearNext, w.nearMore = page, cur, more
	}
	// A bucket is read once the walk reaches its start.
	for len(w.far) == 0 && len(w.buckets) > 0 && (len(w.near) == 0 || w.buckets[0].start <= w.near[0].Due.UnixMilli()) {
		fb := w.buckets[0]
		w.buckets = w.buckets[1:]
		recs, err := w.s.liveFarRecords(ctx, w.i, w.fs, fb.b)
		if err != nil {
			return Listed{}, false, err
		}
		for _, r := range recs {
			if !after(w.from, r.DueMs, r.ID) {
				continue
			}
			l := Listed{ID: r.ID, Shard: w.i, Due: time.UnixMilli(r.DueMs), Far: true}
			if env, err := DecodeEnvelope(r.Envelope); err != nil {
				l.Corrupt = err
			} else {
				l.Envelope = &env
			}
			w.far = append(w.far, l)
		}
	}
	switch {
	case len(w.near) == 0 && len(w.far) == 0:
		return Listed{}, false, nil
	case len(w.far) == 0 || len(w.near) > 0 && after(ListCursor{ID: w.near[0].ID, DueMs: w.near[0].Due.UnixMilli()}, w.far[0].Due.UnixMilli(), w.far[0].ID):
		l := w.near[0]
		w.near = w.near[1:]
		return l, true, nil
	default:
		l := w.far[0]
		w.far = w.far[1:]
		return l, true, nil
	}
}
