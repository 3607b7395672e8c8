package shard_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// benchStore returns a store in a fresh namespace with n messages due now
// in shard 0 of 1.
func benchStore(b *testing.B, n int) (*shard.Store, *shard.Producer) {
	return benchStoreM(b, n, 1)
}

// benchStoreM is benchStore over m shards.
func benchStoreM(b *testing.B, n, m int) (*shard.Store, *shard.Producer) {
	b.Helper()
	shardtest.Require(b, srvErr)
	st, err := shard.NewStore(srv.Client(b), shardtest.Namespace(b))
	if err != nil {
		b.Fatal(err)
	}
	prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
	body := make([]byte, 100)
	for start := 0; start < n; start += 1000 {
		msgs := make([]shard.Message, 0, 1000)
		for i := start; i < min(n, start+1000); i++ {
			msgs = append(msgs, shard.Message{ID: "m" + strconv.Itoa(i), Topic: "t", Body: body})
		}
		if _, err := prod.EnqueueBatch(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	return st, prod
}

// BenchmarkClaim: one claim call (one round trip) per op, messages per
// second reported; run with -benchmem. The claim script's cost over k is
// the point: batch=100 moves 100 messages per round trip.
func BenchmarkClaim(b *testing.B) {
	for _, k := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch=%d", k), func(b *testing.B) {
			st, _ := benchStore(b, b.N*k+k)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := st.Claim(ctx, 0, k, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*k)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkClaimAndAck: a claim of k and the ack of what it claimed, the
// Redis work of one dispatched batch. Unlike BenchmarkClaim, the in-flight
// bookkeeping stays as small as a scanner's, so its per-message cost is
// not inflated by sets that only grow.
func BenchmarkClaimAndAck(b *testing.B) {
	for _, k := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch=%d", k), func(b *testing.B) {
			st, _ := benchStore(b, b.N*k+k)
			ctx := context.Background()
			leases := make([]shard.Lease, 0, k)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				r, err := st.Claim(ctx, 0, k, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				leases = leases[:0]
				for _, m := range r.Msgs {
					leases = append(leases, m.Lease)
				}
				if n, err := st.Ack(ctx, 0, leases...); err != nil || n != len(leases) {
					b.Fatalf("ack: %d of %d, %v", n, len(leases), err)
				}
			}
			b.ReportMetric(float64(b.N*k)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkClaimSteady: claims of up to k that find two messages due in
// a shard holding many more due later, the shape of a steady load's claims
// (two or three messages each at a few thousand a second), sent as a
// scanner sends them: one pipelined round trip of claims on 64 shards. Each
// op first enqueues two due messages into every shard, then claims; only
// the claims' share of Redis's own CPU is counted (INFO cpu around them),
// reported per claim. receipts=true claims as a scanner does, for a
// Claimant (each claim writes its receipt: receipts.go).
func BenchmarkClaimSteady(b *testing.B) {
	const m, due, later = 64, 2, 200
	for _, c := range []struct {
		k                 int
		receipts, classes bool
	}{{1, false, false}, {1, true, false}, {8, false, false}, {8, true, false}, {32, false, false}, {32, true, false},
		{8, true, true}} {
		k := c.k
		var claimant *shard.Claimant
		if c.receipts {
			claimant = shard.NewClaimant()
		}
		name := fmt.Sprintf("batch=%d/receipts=%v", k, c.receipts)
		if c.classes {
			// Release classes set, nothing late: what the claim of a
			// namespace with classes pays while the fleet keeps up (at
			// k = 8 only: at k = 1 this load, two due a shard and one
			// claimed, builds a backlog, and the shards fall behind).
			name += "/classes"
		}
		b.Run(name, func(b *testing.B) {
			shardtest.Require(b, srvErr)
			rdb := srv.Client(b)
			st, err := shard.NewStore(rdb, shardtest.Namespace(b))
			if err != nil {
				b.Fatal(err)
			}
			prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
			ctx := context.Background()
			body := make([]byte, 100)
			var plan *shard.ClassPlan
			if c.classes {
				for j := range 4 {
					cl := shard.Class{Name: fmt.Sprintf("c%d", j), Weight: j + 1}
					for p := range 4 {
						cl.Topics = append(cl.Topics, fmt.Sprintf("team%d.kind%d.*", j, p))
					}
					if _, err := st.SetClass(ctx, cl, "bench"); err != nil {
						b.Fatal(err)
					}
				}
				classes, err := st.Classes(ctx)
				if err != nil {
					b.Fatal(err)
				}
				plan = shard.NewClassPlan(classes)
			}
			// Ids are placed on shards by their hash: keep enqueueing until
			// every shard holds at least later messages due in an hour.
			for i, n := 0, make([]int, m); slices.Min(n) < later; i += 1000 {
				msgs := make([]shard.Message, 1000)
				for j := range msgs {
					msgs[j] = shard.Message{ID: "later" + strconv.Itoa(i+j), Topic: "t", Body: body, Delay: time.Hour}
				}
				res, err := prod.EnqueueBatch(ctx, msgs)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					n[r.Shard]++
				}
			}
			// Two due ids per shard for each op, found by hashing in turn.
			perShard := make([][]string, m)
			ids := make([][]string, b.N)
			for op, seq := 0, 0; op < b.N; op++ {
				for i := range perShard {
					perShard[i] = perShard[i][:0]
				}
				for left := m * due; left > 0; seq++ {
					id := fmt.Sprintf("now%d", seq)
					if i := shard.Of(id, m); len(perShard[i]) < due {
						perShard[i] = append(perShard[i], id)
						ids[op] = append(ids[op], id)
						left--
					}
				}
			}
			shards := make([]int, m)
			for i := range shards {
				shards[i] = i
			}
			msgs := make([]shard.Message, m*due)
			var claimsCPU time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for op := range b.N {
				for j, id := range ids[op] {
					msgs[j] = shard.Message{ID: id, Topic: "t", Body: body, At: time.Now().Add(-100 * time.Millisecond)}
				}
				if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
					b.Fatal(err)
				}
				cpu0 := redisCPU(b, rdb)
				res, errs := st.ClaimFair(ctx, claimant, shards, k, time.Hour, nil, plan)
				claimsCPU += redisCPU(b, rdb) - cpu0
				for j, r := range res {
					if errs[j] != nil || len(r.Msgs) != min(k, due) {
						b.Fatalf("shard %d: claimed %d, want %d (%v)", j, len(r.Msgs), min(k, due), errs[j])
					}
				}
			}
			b.ReportMetric(float64(claimsCPU)/float64(b.N*m)/1e3, "redis-µs/claim")
		})
	}
}

// BenchmarkClaimParallel: many clients claiming at once, as a scanner's
// goroutines do.
func BenchmarkClaimParallel(b *testing.B) {
	st, _ := benchStore(b, 200_000)
	ctx := context.Background()
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.Claim(ctx, 0, 1, time.Hour); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkEnqueue(b *testing.B) {
	rdb := srv.Client(b)
	st, err := shard.NewStore(rdb, shardtest.Namespace(b))
	shardtest.Require(b, srvErr)
	if err != nil {
		b.Fatal(err)
	}
	prod := shard.NewProducer(st, fixed(16), shard.ProducerOptions{})
	body := make([]byte, 100)
	ctx := context.Background()
	seq := 0 // ids stay unique over the runs the harness makes with growing b.N
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := redisCPU(b, rdb)
		for range b.N {
			seq++
			if _, err := prod.Enqueue(ctx, shard.Message{ID: "s" + strconv.Itoa(seq), Topic: "t", Body: body, Delay: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(redisCPU(b, rdb)-cpu0)/float64(b.N)/1e3, "redis-µs/msg")
	})
	// 64 messages over 16 shards, 4 to a script call: the shape of a
	// producer that sends what it has every few milliseconds (the
	// benchmark's steady load), where each call's own cost counts.
	// far=true: the namespace's far tier is on and the messages are due a
	// day ahead, so each goes to its far bucket (farPlaceManyScript). Each
	// far row has a namespace of its own, so that rows compare at the same
	// index population (a listpack's lookups grow with its entries).
	// spread=true: due over 60 buckets of 10 minutes, as messages with
	// varied delays a day out are (the worst case: a bucket's writes are
	// shared by fewer messages); false: all in one bucket, as messages
	// with one delay are.
	// quota=true: the messages are a scope's with a quota (one too large
	// to refuse), in a namespace of their own: a reservation and a settle
	// a batch, and the tags (quota.go).
	for _, c := range []struct {
		n                  int
		far, spread, quota bool
	}{{64, false, false, false}, {64, true, false, false}, {500, false, false, false}, {500, true, false, false}, {500, true, true, false},
		{64, false, false, true}, {500, false, false, true}} {
		n, prod, delay := c.n, prod, time.Hour
		if c.far {
			prod, delay = shard.NewProducer(farStore(b, rdb, fmt.Sprintf("-far%d-%v", n, c.spread)), fixed(16), shard.ProducerOptions{}), 24*time.Hour
		}
		name := fmt.Sprintf("batch=%d/far=%v/spread=%v", n, c.far, c.spread)
		if c.quota {
			qs, err := shard.NewStore(rdb, shardtest.Namespace(b)+fmt.Sprintf("-quota%d", n))
			if err != nil {
				b.Fatal(err)
			}
			if err := qs.SetQuota(ctx, shard.Quota{Scope: "team", Rules: "topic=t", MaxPending: 1 << 40}); err != nil {
				b.Fatal(err)
			}
			prod, name = shard.NewProducer(qs, fixed(16), shard.ProducerOptions{}), fmt.Sprintf("batch=%d/quota", n)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			msgs := make([]shard.Message, n)
			cpu0 := redisCPU(b, rdb)
			for range b.N {
				seq++
				for j := range msgs {
					msgs[j] = shard.Message{ID: fmt.Sprintf("b%d-%d", seq, j), Topic: "t", Body: body, Delay: delay}
					if c.spread {
						msgs[j].Delay += time.Duration(j%60) * 10 * time.Minute
					}
				}
				res, err := prod.EnqueueBatch(ctx, msgs)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(redisCPU(b, rdb)-cpu0)/float64(b.N*n)/1e3, "redis-µs/msg")
		})
	}
}

// redisCPU is the CPU time the Redis server has used so far (INFO cpu:
// used_cpu_sys + used_cpu_user), for a per-message cost that the
// benchmark's own client does not blur.
// farStore is a Store of a new namespace with the far tier on at once,
// with 256 index slots a shard: the benchmark's 100,000 messages or so
// fill them as a namespace of millions fills the default 4,096 (at the
// default, nearly every placement here would create an index key).
func farStore(b *testing.B, rdb *redis.Client, suffix string) *shard.Store {
	st, err := shard.NewStore(rdb, shardtest.Namespace(b)+suffix)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.EnableFar(context.Background(), shard.FarSettings{Since: 1, IndexSlots: 256}); err != nil {
		b.Fatal(err)
	}
	return st
}

func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkAck: acks of k leases a call, as the scanners send them (each
// with its lateness, counted for the fleet's rates).
func BenchmarkAck(b *testing.B) {
	for _, k := range []int{1, 8, 100} {
		b.Run(fmt.Sprintf("batch=%d", k), func(b *testing.B) {
			st, _ := benchStore(b, b.N*k)
			rdb := srv.Client(b)
			ctx := context.Background()
			claims := make([]map[int][]shard.Confirmed, 0, b.N)
			for range b.N {
				r, err := st.Claim(ctx, 0, k, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				ls := make([]shard.Confirmed, len(r.Msgs))
				for i, m := range r.Msgs {
					ls[i] = shard.Confirmed{Lease: m.Lease, Late: time.Duration(i%3) * 20 * time.Millisecond}
				}
				claims = append(claims, map[int][]shard.Confirmed{0: ls})
			}
			b.ReportAllocs()
			cpu0 := redisCPU(b, rdb)
			b.ResetTimer()
			for _, ls := range claims {
				if _, err := st.AckShards(ctx, ls); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*k)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(redisCPU(b, rdb)-cpu0)/float64(b.N*k)/1e3, "redis-µs/msg")
		})
	}
	// A flush of a steady load: a few leases in each of 16 shards, as a
	// scanner's 10 ms of acks at a few thousand messages a second.
	const m, per = 16, 4
	b.Run(fmt.Sprintf("shards=%d,per-shard=%d", m, per), func(b *testing.B) {
		st, _ := benchStoreM(b, b.N*m*per*2, m)
		rdb := srv.Client(b)
		ctx := context.Background()
		flushes := make([]map[int][]shard.Confirmed, 0, b.N)
		for range b.N {
			f := map[int][]shard.Confirmed{}
			for i := range m {
				r, err := st.Claim(ctx, i, per, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range r.Msgs {
					f[i] = append(f[i], shard.Confirmed{Lease: c.Lease, Late: 3 * time.Millisecond})
				}
			}
			flushes = append(flushes, f)
		}
		b.ReportAllocs()
		cpu0 := redisCPU(b, rdb)
		b.ResetTimer()
		n := 0
		for _, f := range flushes {
			k, err := st.AckShards(ctx, f)
			if err != nil {
				b.Fatal(err)
			}
			n += k
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(redisCPU(b, rdb)-cpu0)/float64(n)/1e3, "redis-µs/msg")
	})
}

// BenchmarkPromote: what promoting a far bucket of 10,000 messages
// (100-byte bodies) costs, its raw records or its compressed blocks: the
// scanner's time (decoding, the round trips) and Redis's CPU, a message.
// Each op places the bucket beyond the horizon, then widens the horizon
// so that the bucket is within it, and times PromoteDue alone.
func BenchmarkPromote(b *testing.B) {
	rdb := srv.Client(b)
	shardtest.Require(b, srvErr)
	ctx := context.Background()
	const n = 10_000
	body := make([]byte, 100)
	for _, compact := range []bool{false, true} {
		b.Run(fmt.Sprintf("compacted=%v", compact), func(b *testing.B) {
			var redisTime, wall time.Duration
			for it := range b.N {
				ns := fmt.Sprintf("%s-%v-%d", shardtest.Namespace(b), compact, it)
				st, err := shard.NewStore(rdb, ns)
				if err != nil {
					b.Fatal(err)
				}
				if err := st.EnableFar(ctx, shard.FarSettings{Horizon: time.Minute, BucketWidth: time.Minute, Since: 1}); err != nil {
					b.Fatal(err)
				}
				prod := shard.NewProducer(st, fixed(1), shard.ProducerOptions{})
				start := time.Now().Add(10 * time.Minute).Truncate(time.Minute)
				for lo := 0; lo < n; lo += 1000 {
					msgs := make([]shard.Message, 0, 1000)
					for j := lo; j < lo+1000; j++ {
						msgs = append(msgs, shard.Message{ID: fmt.Sprintf("p%d", j), Topic: "t", Body: body, At: start.Add(time.Duration(j) * time.Millisecond)})
					}
					if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
						b.Fatal(err)
					}
				}
				if compact {
					if k, err := st.CompactFar(ctx, 0, 100); err != nil || k == 0 {
						b.Fatalf("compact: %d blocks, %v", k, err)
					}
				}
				// A new Store reads the widened horizon at once.
				wide, err := shard.NewStore(rdb, ns)
				if err != nil {
					b.Fatal(err)
				}
				if err := wide.EnableFar(ctx, shard.FarSettings{Horizon: time.Hour, BucketWidth: time.Minute}); err != nil {
					b.Fatal(err)
				}
				cpu0, t0 := redisCPU(b, rdb), time.Now()
				p, err := wide.PromoteDue(ctx, 0, 10)
				wall += time.Since(t0)
				redisTime += redisCPU(b, rdb) - cpu0
				if err != nil || p.Moved != n {
					b.Fatalf("promoted %+v, %v; want %d moved", p, err, n)
				}
			}
			b.ReportMetric(float64(wall.Microseconds())/float64(b.N*n), "wall-µs/msg")
			b.ReportMetric(float64(redisTime.Microseconds())/float64(b.N*n), "redis-µs/msg")
		})
	}
}

// BenchmarkQuotaSweep: the maintenance's sweep of the tags of a quota'd
// scope's 100,000 messages over 16 shards, none of them gone: what a
// pass costs Redis a tag (the sweep's steady cost), and how many tags a
// round of quotaSweepBudget gets through.
func BenchmarkQuotaSweep(b *testing.B) {
	shardtest.Require(b, srvErr)
	rdb := srv.Client(b)
	ctx := context.Background()
	st, err := shard.NewStore(rdb, shardtest.Namespace(b))
	if err != nil {
		b.Fatal(err)
	}
	if err := st.SetQuota(ctx, shard.Quota{Scope: "team", Rules: "topic=t", MaxPending: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	prod := shard.NewProducer(st, fixed(16), shard.ProducerOptions{})
	const n = 100_000
	msgs := make([]shard.Message, 500)
	for k := 0; k < n; k += len(msgs) {
		for j := range msgs {
			msgs[j] = shard.Message{ID: fmt.Sprintf("q%d", k+j), Topic: "t", Body: []byte("x"), Delay: time.Hour}
		}
		if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu0 := redisCPU(b, rdb)
	rounds := 0
	for range b.N {
		if err := rdb.Del(ctx, "delayq:{"+st.Namespace()+"}:quotacursor").Err(); err != nil {
			b.Fatal(err)
		}
		for { // one pass: every shard through its tags
			if err := rdb.Del(ctx, "delayq:{"+st.Namespace()+"}:quotalease").Err(); err != nil {
				b.Fatal(err)
			}
			if _, err := st.MaintainQuotas(ctx, 16, time.Hour); err != nil {
				b.Fatal(err)
			}
			rounds++
			if left, _ := rdb.HGet(ctx, "delayq:{"+st.Namespace()+"}:quotacursor", "15:at").Int64(); left > 0 {
				all := true
				for i := range 16 {
					if at, _ := rdb.HGet(ctx, "delayq:{"+st.Namespace()+"}:quotacursor", fmt.Sprintf("%d:at", i)).Int64(); at == 0 {
						all = false
					}
				}
				if all {
					break
				}
			}
		}
	}
	b.ReportMetric(float64(redisCPU(b, rdb)-cpu0)/float64(b.N*n)/1e3, "redis-µs/tag")
	b.ReportMetric(float64(n*b.N)/float64(rounds), "tags/round")
}
