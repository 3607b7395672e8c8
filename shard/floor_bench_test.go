package shard_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// BenchmarkPlacementFloor measures the least Redis CPU a message can cost
// in each layout the far tier could have, against the near enqueue, to
// say what a far enqueue can reach at best (doc.go, "The far-future tier",
// on its enqueue rate). The scripts below do only the writes each layout
// cannot do without, with everything Lua could be spared built by Go:
//
//   - near: HSETNX of the envelope and ZADD of the due time, a message.
//   - far1: the far tier's writes with every message of a call in one
//     bucket: one HMGET of the ids in the msg hash (the dedupe across
//     tiers), HSETNX of each id's index entry, and one RPUSH of the
//     records and one count a bucket.
//   - spread: the same over 30 buckets, as messages with varied delays
//     are: a call writes each of its buckets once.
//   - inbox: the same writes into one list a shard whatever the buckets,
//     and inbox+sort adds a sorter that reads the list back every 2,000
//     records a shard and moves them into their buckets (LRANGE, then one
//     script of an RPUSH and a count a bucket, and LTRIM).
//
// The four run in turn in each iteration (16 shards, 31 messages a call,
// 16-byte ids, 126-byte envelopes, 256 index keys a shard), so that the
// drift of a shared host and of the growing sets falls on all alike; each
// reports its µs of Redis CPU a message. None of them checks tombstones,
// the shard's cap, a bucket's seal, the due time by Redis's clock, or
// keeps the directory: the tier's scripts do, on top of these floors.
// Beside them, in the same turns, the real thing: Producer.EnqueueBatch
// of the same 496 messages near (real-near), far in one bucket
// (real-far1) and far over 60 buckets (real-spread), as ratios to
// real-near.
func BenchmarkPlacementFloor(b *testing.B) {
	shardtest.Require(b, srvErr)
	rdb := srv.Client(b)
	ctx := context.Background()
	for _, s := range []*redis.Script{floorNearScript, floorFarScript, floorSortScript} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	ns := shardtest.Namespace(b)
	const shards, slots, per, buckets, sortEvery = 16, 256, 31, 30, 2000
	modes := []string{"near", "far1", "spread", "inbox"}
	var spent [4]time.Duration
	st, err := shard.NewStore(rdb, ns+"-real")
	if err != nil {
		b.Fatal(err)
	}
	producers := []*shard.Producer{shard.NewProducer(st, fixed(16), shard.ProducerOptions{}),
		shard.NewProducer(farStore(b, rdb, "-real-far1"), fixed(16), shard.ProducerOptions{}),
		shard.NewProducer(farStore(b, rdb, "-real-spread"), fixed(16), shard.ProducerOptions{})}
	var realSpent [3]time.Duration
	batch := make([]shard.Message, shards*per)
	var sorting time.Duration
	inbox := make([][]int, shards) // the bucket of each record in shard s's inbox
	rng := rand.New(rand.NewPCG(1, 2))
	env := make([]byte, 126)
	seq := 0
	b.ResetTimer()
	for range b.N {
		for m, mode := range modes {
			cpu0 := redisCPU(b, rdb)
			pipe := rdb.Pipeline()
			for s := range shards {
				tag := fmt.Sprintf("{%s-%s-%d}", ns, mode, s)
				if mode == "near" {
					args := []any{per}
					for range per {
						args = append(args, fmt.Sprintf("%016x", rng.Uint64()), env)
					}
					floorNearScript.Run(ctx, pipe, []string{tag + "due", tag + "msg", tag + "counters"}, args...)
					continue
				}
				keys := []string{tag + "msg", tag + "meta"}
				args := []any{per}
				for j := range per {
					seq++
					id := fmt.Sprintf("%016x", rng.Uint64())
					h := fnv.New32a()
					h.Write([]byte(id))
					bucket := 1000
					if mode != "far1" {
						bucket += j % buckets
					}
					list, group := tag+"far:"+strconv.Itoa(bucket), strconv.Itoa(bucket)
					if mode == "inbox" {
						// counted into its bucket by the sorter
						list, group = tag+"inbox", "inbox"
						inbox[s] = append(inbox[s], bucket)
					}
					keys = append(keys, tag+"fidx:"+strconv.Itoa(int(h.Sum32()%slots)), list)
					rec := binary.AppendUvarint(nil, uint64(len(id)))
					rec = append(rec, id...)
					rec = binary.AppendUvarint(rec, 12345)
					rec = binary.AppendUvarint(rec, uint64(seq))
					rec = append(rec, env...)
					args = append(args, id, strconv.Itoa(bucket)+":"+strconv.Itoa(seq), rec, group)
				}
				floorFarScript.Run(ctx, pipe, keys, args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			spent[m] += redisCPU(b, rdb) - cpu0
		}
		for k, p := range producers {
			for j := range batch {
				seq++
				batch[j] = shard.Message{ID: fmt.Sprintf("%016x", rng.Uint64()), Topic: "t", Body: env[:100], Delay: time.Hour}
				if k > 0 {
					batch[j].Delay = 24 * time.Hour
				}
				if k == 2 {
					batch[j].Delay += time.Duration(j%60) * 10 * time.Minute
				}
			}
			cpu0 := redisCPU(b, rdb)
			res, err := p.EnqueueBatch(ctx, batch)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			realSpent[k] += redisCPU(b, rdb) - cpu0
		}
		if len(inbox[0]) >= sortEvery {
			cpu0 := redisCPU(b, rdb)
			pipe := rdb.Pipeline()
			for s := range shards {
				pipe.LRange(ctx, fmt.Sprintf("{%s-inbox-%d}inbox", ns, s), 0, int64(len(inbox[s])-1))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			pipe = rdb.Pipeline()
			for s := range shards {
				tag := fmt.Sprintf("{%s-inbox-%d}", ns, s)
				keys := []string{tag + "inbox", tag + "meta"}
				for k := range buckets {
					keys = append(keys, tag+"far:"+strconv.Itoa(1000+k))
				}
				args := []any{len(inbox[s])}
				for _, bucket := range inbox[s] {
					args = append(args, bucket-1000)
				}
				floorSortScript.Run(ctx, pipe, keys, args...)
				inbox[s] = inbox[s][:0]
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			sorting += redisCPU(b, rdb) - cpu0
		}
	}
	n := float64(b.N * shards * per)
	for m, mode := range modes {
		b.ReportMetric(spent[m].Seconds()*1e6/n, mode+"-µs/msg")
	}
	b.ReportMetric((spent[3]+sorting).Seconds()*1e6/n, "inbox+sort-µs/msg")
	b.ReportMetric(realSpent[0].Seconds()*1e6/n, "real-near-µs/msg")
	b.ReportMetric(float64(realSpent[1])/float64(realSpent[0]), "real-far1/near")
	b.ReportMetric(float64(realSpent[2])/float64(realSpent[0]), "real-spread/near")
}

// floorNearScript stores messages near and nothing more.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] counters HASH
//	ARGV[1] n, then for message j from a = 2 + 2*(j-1): ARGV[a] id
//	ARGV[a+1] envelope
//
// Returns the messages created. Complexity: O(n log N).
var floorNearScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local created = 0
for j = 1, n do
  local a = 2 + 2 * (j - 1)
  if redis.call('HSETNX', KEYS[2], ARGV[a], ARGV[a + 1]) == 1 then
    redis.call('ZADD', KEYS[1], string.format('%d', 1800000000000 + j), ARGV[a])
    created = created + 1
  end
end
redis.call('HINCRBY', KEYS[3], 'enqueued', created)
return created
`)

// floorFarScript stores far records built by the caller, each in the list
// it is given, and nothing more.
//
//	KEYS[1] msg HASH   KEYS[2] meta HASH
//	KEYS[1+2j] index HASH of message j   KEYS[2+2j] its LIST
//	ARGV[1] n, then for message j from a = 2 + 4*(j-1): ARGV[a] id
//	ARGV[a+1] index entry   ARGV[a+2] record   ARGV[a+3] its list's name,
//	for the list's count
//
// Returns the messages created. Complexity: O(n) and a list's tail.
var floorFarScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local ids = {}
for j = 1, n do ids[j] = ARGV[2 + 4 * (j - 1)] end
local near = redis.call('HMGET', KEYS[1], unpack(ids))
local push, list, live = {}, {}, {}
local created = 0
for j = 1, n do
  local a = 2 + 4 * (j - 1)
  if not near[j] and redis.call('HSETNX', KEYS[1 + 2 * j], ARGV[a], ARGV[a + 1]) == 1 then
    local b = ARGV[a + 3]
    local p = push[b]
    if not p then
      p = {}
      push[b], list[b], live[b] = p, KEYS[2 + 2 * j], 0
    end
    p[#p + 1] = ARGV[a + 2]
    live[b] = live[b] + 1
    created = created + 1
  end
end
for b, p in pairs(push) do
  redis.call('RPUSH', list[b], unpack(p))
  redis.call('HINCRBY', KEYS[2], 'live:' .. b, live[b])
end
redis.call('HINCRBY', KEYS[2], 'live', created)
return created
`)

// floorSortScript moves the first n records of an inbox into their
// buckets, which the caller read.
//
//	KEYS[1] inbox LIST   KEYS[2] meta HASH   KEYS[3..] the bucket LISTs
//	ARGV[1] n, ARGV[1+j] record j's bucket, as an index into KEYS[3..]
//
// Returns n. Complexity: O(n).
var floorSortScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local recs = redis.call('LRANGE', KEYS[1], 0, n - 1)
local push, live = {}, {}
for j = 1, n do
  local k = tonumber(ARGV[1 + j])
  local p = push[k]
  if not p then
    p = {}
    push[k], live[k] = p, 0
  end
  p[#p + 1] = recs[j]
  live[k] = live[k] + 1
end
for k, p in pairs(push) do
  redis.call('RPUSH', KEYS[3 + k], unpack(p))
  redis.call('HINCRBY', KEYS[2], 'live:' .. k, live[k])
end
redis.call('LTRIM', KEYS[1], n, -1)
return n
`)
