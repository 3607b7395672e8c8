package shard

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Compaction of far buckets: how far records come to cost a fraction of
// their size (doc.go, "The far-future tier", has the measurements that
// chose zstd at its fastest level and blocks of 256).
//
// Placement appends raw records; when a bucket has a block's worth of raw
// records (the length RPUSH answers), it goes on the shard's compaction list
// (farcompact ZSET). Any process (each does its own shards, scanner's
// far.go) takes the first farBlockRecords raw records of such a bucket,
// compresses them in Go into one zstd frame, and farCompactScript swaps
// them for the block, in one call, unless the bucket was sealed or its
// head changed meanwhile (then nothing is written, and the next round
// tries again). Cancelled and replaced records are compressed with the
// rest: promotion skips them as it skips raw ones.
//
// Promotion reads a sealed bucket's blocks first, then its raw records.
// A block that does not decompress costs its records: their ids cannot be
// read, so promotion cannot find them (they are counted, in
// Promotion.Unread, and their index entries die with the bucket). Only a
// corrupted Redis value does that, which would cost near messages too.

// farBlockRecords is how many records a compressed block holds;
// farCompactPerRound the most blocks CompactFar makes a call.
const (
	farBlockRecords    = 256
	farCompactPerRound = 16
)

// farCodecs are the Store's compressor, made at first use and shared by
// its copies.
type farCodecs struct {
	once  sync.Once
	codec *FarCodec
	err   error
}

func (s *Store) farCodec() (*FarCodec, error) {
	s.far.codecs.once.Do(func() { s.far.codecs.codec, s.far.codecs.err = NewFarCodec() })
	return s.far.codecs.codec, s.far.codecs.err
}

// CompactFar compresses up to max blocks of the buckets of shard i on its
// compaction list whose start is beyond the horizon and a bucket, and
// returns how many blocks it wrote. It does nothing with the tier off.
func (s *Store) CompactFar(ctx context.Context, i, max int) (int, error) {
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return 0, err
	}
	codec, err := s.farCodec()
	if err != nil {
		return 0, err
	}
	fk := farKeysOf(s.ns, i)
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("compact shard %d: %w", i, err)
	}
	from := now.Add(fs.Horizon + fs.BucketWidth).UnixMilli()
	bs, err := s.rdb.ZRangeByScore(ctx, fk.compact(), &redis.ZRangeBy{Min: strconv.FormatInt(from, 10), Max: "+inf", Count: int64(max)}).Result()
	if err != nil {
		return 0, fmt.Errorf("compact shard %d: %w", i, err)
	}
	done := 0
	for _, m := range bs {
		b, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return done, fmt.Errorf("compact shard %d: bucket %q in %s is not a number", i, m, fk.compact())
		}
		for done < max {
			raw, err := s.rdb.LRange(ctx, fk.bucket(b), 0, farBlockRecords-1).Result()
			if err != nil {
				return done, fmt.Errorf("compact shard %d bucket %d: %w", i, b, err)
			}
			if len(raw) < farBlockRecords {
				break
			}
			var block []byte
			for _, r := range raw {
				block = append(block, r...)
			}
			packed := codec.Compress(nil, block)
			ok, err := s.run1(ctx, farCompactScript, []string{fk.bucket(b), fk.blocks(b), fk.meta(), fk.compact()},
				b, len(raw), raw[0], raw[len(raw)-1], packed, farBlockRecords).Int()
			if err != nil {
				return done, fmt.Errorf("compact shard %d bucket %d: %w", i, b, err)
			}
			if ok == 0 {
				break // sealed, or compacted by another process
			}
			done++
		}
	}
	return done, nil
}

// farBlocksPage is how many compressed blocks promotion reads at once.
const farBlocksPage = 8

// promoteBlocks promotes the records of sealed bucket b's compressed
// blocks, a block at a time.
func (s *Store) promoteBlocks(ctx context.Context, i int, fs FarSettings, b, start int64, renew func(), p *Promotion) error {
	fk := farKeysOf(s.ns, i)
	total, err := s.rdb.LLen(ctx, fk.blocks(b)).Result()
	if err != nil || total == 0 {
		return err
	}
	codec, err := s.farCodec()
	if err != nil {
		return err
	}
	for off := int64(0); off < total; off += farBlocksPage {
		page, err := s.rdb.LRange(ctx, fk.blocks(b), off, off+farBlocksPage-1).Result()
		if err != nil {
			return err
		}
		for _, packed := range page {
			block, err := codec.Decompress(nil, []byte(packed))
			if err != nil {
				continue // its records cannot be found: the drop counts them out (Promotion.Unread)
			}
			if err := s.promoteRecords(ctx, i, fs, b, start, splitRecords(block), p); err != nil {
				return err
			}
		}
		renew()
	}
	return nil
}

// splitRecords cuts a block into its records, each with its length, as
// the raw list holds them; what follows a length that cannot be read is
// one last piece (promoteRecords reports it).
func splitRecords(block []byte) []string {
	var out []string
	for off := 0; off < len(block); {
		n, w := binary.Uvarint(block[off:])
		if w <= 0 || n > uint64(len(block)-off-w) {
			return append(out, string(block[off:]))
		}
		out = append(out, string(block[off:off+w+int(n)]))
		off += w + int(n)
	}
	return out
}
