package shard

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The due-time profile: how many scheduled messages fall due in each
// bucket of the time ahead (DueProfile), counted by ZCOUNT on each
// shard's due set, never by reading the messages. One script call a
// shard, all shards in one pipelined round trip: at M shards and B
// buckets, M calls and M*B ZCOUNTs of O(log N) each. At M = 256 with
// 10,000,000 pending, 60 minutes take 69 ms (p99 75) and 168 hours 154 ms
// (p99 160) on two shared cores (scripts/bench.sh -only console; one
// topic's: 109 ms, p99 122, and 202 ms, p99 210); serve caches a profile
// 5 s (httpapi).
//
// One topic's profile (TopicProfile) is counted from a bounded sample.
// The due sets do not know topics, and an index of them by topic would
// cost every enqueue, claim and cancel a write whose key the claim script
// cannot name in advance (keys come only through KEYS; a message's topic
// is in its envelope). So each shard's bucket is read whole when it holds
// at most c entries (its count is then exact), or c entries at evenly
// spaced ranks otherwise, whose envelopes give the topic's share of the
// bucket: the estimate is the bucket's exact ZCOUNT times that share,
// summed over the shards (a stratified sample, so no bias from where a
// topic's messages sit). c is chosen so that one profile reads at most
// topicSampleBudget entries; a bucket any shard sampled is marked
// estimated, with how many entries the estimate rests on.
// MaxProfileBuckets is the most buckets one profile has.
const MaxProfileBuckets = 240

// Profile is a due-time profile (DueProfile): Counts[j] scheduled
// messages fall due in [Start + j*Width, Start + (j+1)*Width), after Now
// for the first bucket; Overdue are due at Now or earlier and not yet
// claimed; InFlight are claimed and not yet settled.
type Profile struct {
	Now      time.Time // the Redis clock
	Start    time.Time // the first bucket's start: Now rounded down to Width
	Width    time.Duration
	Counts   []int64
	Overdue  int64
	InFlight int64
}

// dueProfileScript counts a shard's scheduled messages per bucket.
//
//	KEYS[1] due ZSET   KEYS[2] inflight ZSET
//	ARGV[1] bucket width ms   ARGV[2] n, the number of buckets
//
// Returns {now, start, overdue, in flight, count_1, ..., count_n}: start
// is now rounded down to the width; bucket 1 counts (now, start + width),
// bucket j [start + (j-1)*width, start + j*width).
// Complexity: O(n log N).
var dueProfileScript = redis.NewScript(nowMs + `
local w, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local start = now - (now % w)
local out = {now, start, redis.call('ZCOUNT', KEYS[1], '-inf', now), redis.call('ZCARD', KEYS[2])}
for j = 1, n do
  local lo = start + (j - 1) * w
  local lo_arg = lo
  if j == 1 then lo_arg = '(' .. now end
  out[#out + 1] = redis.call('ZCOUNT', KEYS[1], lo_arg, '(' .. (lo + w))
end
return out
`)

// DueProfile counts the scheduled messages of shards 0..m-1 falling due
// in n buckets of width from now on (the Redis clock of the first shard
// that answers), with those overdue and in flight. An error names the
// shard that failed. Far messages (the far-future tier) count in the
// bucket of their far bucket's start (farread.go); a topic's profile does
// not count them yet.
func (s *Store) DueProfile(ctx context.Context, m int, width time.Duration, n int) (Profile, error) {
	switch {
	case width < time.Second:
		return Profile{}, invalid("resolution", "%s is less than a second", width)
	case n < 1 || n > MaxProfileBuckets:
		return Profile{}, invalid("buckets", "%d is not in 1..%d", n, MaxProfileBuckets)
	}
	calls := make([]call, m)
	for i := range calls {
		ks := ShardKeys(s.ns, i)
		calls[i] = call{dueProfileScript, []string{ks.Due, ks.Inflight}, []any{width.Milliseconds(), n}}
	}
	p := Profile{Width: width, Counts: make([]int64, n)}
	for i, c := range s.run(ctx, calls...) {
		v, err := c.Int64Slice()
		if err == nil && len(v) != 4+n {
			err = fmt.Errorf("unexpected reply of %d fields", len(v))
		}
		if err != nil {
			return Profile{}, fmt.Errorf("due profile of shard %d: %w", i, err)
		}
		if p.Now.IsZero() {
			p.Now, p.Start = time.UnixMilli(v[0]), time.UnixMilli(v[1])
		}
		p.Overdue += v[2]
		p.InFlight += v[3]
		for j := range n {
			p.Counts[j] += v[4+j]
		}
	}
	if err := s.addFarProfile(ctx, m, &p); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// topicSampleBudget bounds the entries one topic profile reads, over all
// shards and buckets; maxTopicSample bounds c, the entries a shard's
// bucket is read whole up to (or sampled at).
const (
	topicSampleBudget = 40000
	maxTopicSample    = 64
)

// TopicProfile is a due-time profile of one topic: Profile's counts,
// where a bucket with Sampled[j] > 0 is an estimate from that many
// entries read (0: counted exactly). Overdue includes the topic's
// messages held back by its limit or pause (flow control).
type TopicProfile struct {
	Profile
	Topic   string
	Sampled []int64 // per bucket: entries the estimate rests on; 0 = exact
	// OverdueSampled and InFlightSampled are Sampled for Overdue and
	// InFlight.
	OverdueSampled, InFlightSampled int64
}

// topicProfileScript counts one topic's messages of a shard per bucket,
// reading at most c entries of each bucket.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET   KEYS[4] the topic's held ZSET
//	ARGV[1] bucket width ms   ARGV[2] n, the number of buckets   ARGV[3] topic
//	ARGV[4] c, entries a bucket is read whole up to, or sampled at
//
// Buckets as dueProfileScript's, then overdue (due at now or earlier) and
// in flight. Returns {now, start, then for each of the n + 2 buckets:
// its size k, entries read r, of the topic among them t, held entries h}:
// r = k means counted whole (t exact); else the estimate is k * t / r.
// The topic's held entries (all of the topic) are counted exactly: h. Complexity: O(n c (log N + L)) for envelopes of length L.
var topicProfileScript = redis.NewScript(nowMs + topicOf + `
local w, n, topic, c = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local start = now - (now % w)
local out = {now, start}
local held = redis.call('EXISTS', KEYS[4]) == 1
local function count(key, r0, k)
  if k == 0 then return 0, 0 end
  local ids
  if k <= c then
    ids = redis.call('ZRANGE', key, r0, r0 + k - 1)
  else
    ids = {}
    for i = 0, c - 1 do
      local r = r0 + math.floor((i + 0.5) * k / c)
      ids[#ids + 1] = redis.call('ZRANGE', key, r, r)[1]
    end
  end
  local envs = redis.call('HMGET', KEYS[2], unpack(ids))
  local t = 0
  for i = 1, #ids do
    if topic_of(envs[i]) == topic then t = t + 1 end
  end
  return #ids, t
end
local function bucket(key, lo, hi, r0)
  local k = redis.call('ZCOUNT', key, lo, hi)
  local r, t = count(key, r0, k)
  out[#out + 1] = k
  out[#out + 1] = r
  out[#out + 1] = t
  out[#out + 1] = held and redis.call('ZCOUNT', KEYS[4], lo, hi) or 0
  return k
end
local overdue = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local r0 = overdue
for j = 1, n do
  local lo = start + (j - 1) * w
  local lo_arg = lo
  if j == 1 then lo_arg = '(' .. now end
  r0 = r0 + bucket(KEYS[1], lo_arg, '(' .. (lo + w), r0)
end
bucket(KEYS[1], '-inf', now, 0)
local f = redis.call('ZCARD', KEYS[3])
local r, t = count(KEYS[3], 0, f)
out[#out + 1] = f
out[#out + 1] = r
out[#out + 1] = t
out[#out + 1] = 0
return out
`)

// TopicProfile is DueProfile for the messages of one topic, counted from a
// bounded sample (see the top of this file): exact for the buckets whose
// shards hold few enough entries, an estimate with its sample size for the
// others.
func (s *Store) TopicProfile(ctx context.Context, m int, topic string, width time.Duration, n int) (TopicProfile, error) {
	switch {
	case width < time.Second:
		return TopicProfile{}, invalid("resolution", "%s is less than a second", width)
	case n < 1 || n > MaxProfileBuckets:
		return TopicProfile{}, invalid("buckets", "%d is not in 1..%d", n, MaxProfileBuckets)
	}
	if err := ValidateFlowTopic(topic); err != nil {
		return TopicProfile{}, err
	}
	c := min(maxTopicSample, max(1, topicSampleBudget/(m*(n+2))))
	calls := make([]call, m)
	for i := range calls {
		ks := ShardKeys(s.ns, i)
		calls[i] = call{topicProfileScript, []string{ks.Due, ks.Msg, ks.Inflight, HeldKey(s.ns, i, topic)},
			[]any{width.Milliseconds(), n, topic, c}}
	}
	p := TopicProfile{Topic: topic, Profile: Profile{Width: width, Counts: make([]int64, n)}, Sampled: make([]int64, n)}
	est := make([]float64, n+2)
	sampled := make([]int64, n+2)
	for i, cmd := range s.run(ctx, calls...) {
		v, err := cmd.Int64Slice()
		if err == nil && len(v) != 2+4*(n+2) {
			err = fmt.Errorf("unexpected reply of %d fields", len(v))
		}
		if err != nil {
			return TopicProfile{}, fmt.Errorf("due profile of topic %q, shard %d: %w", topic, i, err)
		}
		if p.Now.IsZero() {
			p.Now, p.Start = time.UnixMilli(v[0]), time.UnixMilli(v[1])
		}
		for j := range n + 2 {
			k, r, t, h := v[2+4*j], v[3+4*j], v[4+4*j], v[5+4*j]
			est[j] += float64(h)
			if r >= k {
				est[j] += float64(t)
				continue
			}
			est[j] += float64(k) * float64(t) / float64(r)
			sampled[j] += r
		}
	}
	round := func(x float64) int64 { return int64(x + 0.5) }
	for j := range n {
		p.Counts[j], p.Sampled[j] = round(est[j]), sampled[j]
	}
	p.Overdue, p.OverdueSampled = round(est[n]), sampled[n]
	p.InFlight, p.InFlightSampled = round(est[n+1]), sampled[n+1]
	if err := s.addFarTopicProfile(ctx, m, &p); err != nil {
		return TopicProfile{}, fmt.Errorf("due profile of topic %q: %w", topic, err)
	}
	return p, nil
}

// Topics returns up to limit of the topics producers have written
// messages under (TopicsKey), sorted: SSCAN pages of 100, so a namespace
// with very many topics costs a bounded read.
func (s *Store) Topics(ctx context.Context, limit int) ([]string, error) {
	var ts []string
	var cursor uint64
	for len(ts) < limit {
		page, next, err := s.rdb.SScan(ctx, TopicsKey(s.ns), cursor, "", 100).Result()
		if err != nil {
			return nil, fmt.Errorf("read topics: %w", err)
		}
		ts = append(ts, page...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.Sort(ts)
	ts = slices.Compact(ts) // SSCAN may return an entry twice
	return ts[:min(len(ts), limit)], nil
}

// RequireKnownTopic returns an *InvalidError naming the field topic when
// KnownTopic says no (or the error of reading it).
func (s *Store) RequireKnownTopic(ctx context.Context, topic string) error {
	known, err := s.KnownTopic(ctx, topic)
	if err == nil && !known {
		err = invalid("topic", "%q: no message was ever written under this topic and it has no flow setting", topic)
	}
	return err
}

// KnownTopic reports whether producers have written messages under topic
// or it has a flow setting (a limit or a pause set before any message).
func (s *Store) KnownTopic(ctx context.Context, topic string) (bool, error) {
	ok, err := s.rdb.SIsMember(ctx, TopicsKey(s.ns), topic).Result()
	if err != nil || ok {
		if err != nil {
			err = fmt.Errorf("read topics: %w", err)
		}
		return ok, err
	}
	_, ok, err = s.Flow(ctx, topic)
	return ok, err
}
