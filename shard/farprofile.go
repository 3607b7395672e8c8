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

// The due profile of far messages. The namespace's profile counts each
// far bucket's live count (farmeta live:<b>) in the profile bucket its
// start falls in: exact, two round trips whatever the population. A
// topic's profile estimates, as it does for the due set (profile.go), but
// from far buckets rather than ranks: for each profile bucket, up to
// farTopicBuckets of the far buckets counted in it (the largest) are
// sampled, maxTopicSample records each (the raw records at the head of
// the bucket, else its first compressed block), and the topic's share of
// the records read is applied to the profile bucket's far count. Records
// a cancel or replace left behind are read as if live: the share is of
// what the bucket holds. One more round trip; at most n × farTopicBuckets
// × maxTopicSample records read (168 hours: 86,016).

// farTopicBuckets is how many far buckets a topic's profile samples per
// profile bucket.
const farTopicBuckets = 8

// farProfileBucket is a far bucket counted in profile bucket k.
type farProfileBucket struct {
	shard int
	b     int64
	k     int
	live  int64
}

// farProfileBuckets returns the far buckets of shards [0, m) that start
// in p's window, with their live counts (nil with the tier off).
func (s *Store) farProfileBuckets(ctx context.Context, m int, p *Profile) ([]farProfileBucket, error) {
	_, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return nil, err
	}
	from, to := p.Start.UnixMilli(), p.Start.Add(time.Duration(len(p.Counts))*p.Width).UnixMilli()
	dirs := make([]*redis.ZSliceCmd, m)
	if _, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i := range dirs {
			dirs[i] = pl.ZRangeByScoreWithScores(ctx, farKeysOf(s.ns, i).dir(), &redis.ZRangeBy{
				Min: strconv.FormatInt(from, 10), Max: "(" + strconv.FormatInt(to, 10)})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("far profile: %w", err)
	}
	counts := make([]*redis.SliceCmd, m)
	var out []farProfileBucket
	if _, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, d := range dirs {
			zs := d.Val()
			if len(zs) == 0 {
				continue
			}
			fields := make([]string, len(zs))
			for j, z := range zs {
				fields[j] = "live:" + fmt.Sprint(z.Member)
				b, _ := strconv.ParseInt(fmt.Sprint(z.Member), 10, 64)
				k := int((int64(z.Score) - from) / p.Width.Milliseconds())
				out = append(out, farProfileBucket{shard: i, b: b, k: k})
			}
			counts[i] = pl.HMGet(ctx, farKeysOf(s.ns, i).meta(), fields...)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("far profile: %w", err)
	}
	next := map[int]int{} // shard -> its next field in counts
	kept := out[:0]
	for _, fb := range out {
		v := counts[fb.shard].Val()
		j := next[fb.shard]
		next[fb.shard]++
		str, _ := v[j].(string)
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil || n <= 0 || fb.k < 0 || fb.k >= len(p.Counts) {
			continue
		}
		fb.live = n
		kept = append(kept, fb)
	}
	return kept, nil
}

// addFarProfile adds to p the far messages of shards [0, m), each far
// bucket's live count in the profile bucket its start falls in (a far
// bucket wider than the profile's is counted whole at its start).
func (s *Store) addFarProfile(ctx context.Context, m int, p *Profile) error {
	fbs, err := s.farProfileBuckets(ctx, m, p)
	for _, fb := range fbs {
		p.Counts[fb.k] += fb.live
	}
	return err
}

// addFarTopicProfile adds to p its topic's estimated share of the far
// messages of shards [0, m) (see the top of farprofile.go).
func (s *Store) addFarTopicProfile(ctx context.Context, m int, p *TopicProfile) error {
	fbs, err := s.farProfileBuckets(ctx, m, &p.Profile)
	if err != nil || len(fbs) == 0 {
		return err
	}
	fs, _, err := s.farSettings(ctx)
	if err != nil {
		return err
	}
	total := make([]int64, len(p.Counts))
	var pick []farProfileBucket
	perK := map[int][]farProfileBucket{}
	for _, fb := range fbs {
		total[fb.k] += fb.live
		perK[fb.k] = append(perK[fb.k], fb)
	}
	for _, list := range perK {
		// the largest first: where most of the count is
		slices.SortFunc(list, func(x, y farProfileBucket) int { return cmp.Compare(y.live, x.live) })
		pick = append(pick, list[:min(len(list), farTopicBuckets)]...)
	}
	raws := make([]*redis.StringSliceCmd, len(pick))
	heads := make([]*redis.StringCmd, len(pick))
	_, _ = s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for j, fb := range pick {
			fk := farKeysOf(s.ns, fb.shard)
			raws[j] = pl.LRange(ctx, fk.bucket(fb.b), 0, maxTopicSample-1)
			heads[j] = pl.LIndex(ctx, fk.blocks(fb.b), 0)
		}
		return nil
	})
	for j := range pick { // each command's own error: no block (redis.Nil) is an answer
		for _, err := range []error{raws[j].Err(), heads[j].Err()} {
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("far profile of topic %q: %w", p.Topic, err)
			}
		}
	}
	var codec *FarCodec
	read, match := make([]int64, len(p.Counts)), make([]int64, len(p.Counts))
	for j, fb := range pick {
		start := fb.b * fs.BucketWidth.Milliseconds()
		var recs []FarRecord
		for _, raw := range raws[j].Val() {
			rs, _ := DecodeFarRecords([]byte(raw), start)
			recs = append(recs, rs...)
		}
		if len(recs) < maxTopicSample && heads[j].Val() != "" {
			if codec == nil {
				if codec, err = s.farCodec(); err != nil {
					return err
				}
			}
			if block, err := codec.Decompress(nil, []byte(heads[j].Val())); err == nil {
				rs, _ := DecodeFarRecords(block, start)
				recs = append(recs, rs[:min(len(rs), maxTopicSample-len(recs))]...)
			}
		}
		for _, r := range recs {
			read[fb.k]++
			if env, err := DecodeEnvelope(r.Envelope); err == nil && env.Topic == p.Topic {
				match[fb.k]++
			}
		}
	}
	for k := range p.Counts {
		if read[k] == 0 {
			continue
		}
		p.Counts[k] += int64(float64(total[k])*float64(match[k])/float64(read[k]) + 0.5)
		p.Sampled[k] += read[k]
	}
	return nil
}
