package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// The far tier's memory, with what the issue that asked for it measures:
// 100-byte JSON bodies of an order event (random values and a random hex
// reference, as scripts/memory-layouts.sh makes them) and ids of 16 random
// hex digits, due at random over 60 buckets of 10 minutes a day ahead.
// The same messages are measured near (due an hour ahead, the far tier
// off) and far (the tier on, every block compressed), each as the
// used_memory delta over the messages, with their enqueue rate and, far,
// the compaction's rate.

type farMemoryResult struct {
	Messages        int     `json:"messages"`
	NearBytes       float64 `json:"near_bytes_per_message"`
	NearFillRate    float64 `json:"near_fill_msgs_per_s"`
	NearRedisUs     float64 `json:"near_fill_redis_us_per_msg"` // Redis CPU a message enqueued
	NearBenchUs     float64 `json:"near_fill_bench_us_per_msg"` // the producers' CPU a message
	FarRedisUs      float64 `json:"far_fill_redis_us_per_msg"`
	FarBenchUs      float64 `json:"far_fill_bench_us_per_msg"`
	FarRawBytes     float64 `json:"far_raw_bytes_per_message"` // before compaction
	FarBytes        float64 `json:"far_bytes_per_message"`     // after
	FarFillRate     float64 `json:"far_fill_msgs_per_s"`
	CompactRate     float64 `json:"compact_msgs_per_s"` // one compactor, all shards in turn
	CompactedBlocks int     `json:"compacted_blocks"`
}

// jsonBody is message i's body: 100 bytes of JSON.
func jsonBody(r *rand.Rand, i int) []byte {
	raw := fmt.Sprintf(`{"order":"o%09d","user":%d,"event":"cancel_unpaid","cents":%d,"cur":"EUR","ref":"`, i, r.IntN(100_000_000), 100+r.IntN(99_900))
	for len(raw) < 98 {
		raw += strconv.FormatUint(r.Uint64()&0xf, 16)
	}
	return []byte(raw[:98] + `"}`)
}

func (b *bench) farMemory(ctx context.Context, n int) (*farMemoryResult, error) {
	r := &farMemoryResult{Messages: n}
	var err error
	c0 := b.sampleCPU(nil)
	if r.NearBytes, r.NearFillRate, _, err = b.fillJSON(ctx, "nearjson", n, false); err != nil {
		return nil, err
	}
	c1 := b.sampleCPU(nil)
	r.NearRedisUs, r.NearBenchUs = (c1.sec["redis"]-c0.sec["redis"])*1e6/float64(n), (c1.sec["bench"]-c0.sec["bench"])*1e6/float64(n)
	say("memory: %d messages of 100-byte JSON, 16-hex-digit ids, near: %.0f bytes a message, enqueued at %.0f/s (redis %.1f µs, producers %.1f µs a message)",
		n, r.NearBytes, r.NearFillRate, r.NearRedisUs, r.NearBenchUs)
	b.rdb.FlushAll(ctx)
	before, err := b.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	var st *shard.Store
	c0 = b.sampleCPU(nil)
	if r.FarRawBytes, r.FarFillRate, st, err = b.fillJSON(ctx, "farjson", n, true); err != nil {
		return nil, err
	}
	c1 = b.sampleCPU(nil)
	r.FarRedisUs, r.FarBenchUs = (c1.sec["redis"]-c0.sec["redis"])*1e6/float64(n), (c1.sec["bench"]-c0.sec["bench"])*1e6/float64(n)
	t0 := time.Now()
	for i := range shards {
		for {
			k, err := st.CompactFar(ctx, i, 64)
			if err != nil {
				return nil, err
			}
			if k == 0 {
				break
			}
			r.CompactedBlocks += k
		}
	}
	r.CompactRate = float64(r.CompactedBlocks*256) / time.Since(t0).Seconds()
	after, err := b.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	r.FarBytes = float64(after-before) / float64(n)
	say("memory: the same far: %.0f bytes a message raw, %.0f compressed (%d blocks at %.0f records/s); enqueued at %.0f/s (redis %.1f µs, producers %.1f µs a message)",
		r.FarRawBytes, r.FarBytes, r.CompactedBlocks, r.CompactRate, r.FarFillRate, r.FarRedisUs, r.FarBenchUs)
	b.rdb.FlushAll(ctx)
	return r, nil
}

// fillJSON enqueues n messages of JSON bodies into namespace name (far:
// with the far tier on, due a day ahead) and returns the used_memory
// delta a message, the enqueue rate and the namespace's store.
func (b *bench) fillJSON(ctx context.Context, name string, n int, far bool) (float64, float64, *shard.Store, error) {
	before, err := b.usedMemory(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	ns := b.namespace(name)
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return 0, 0, nil, err
	}
	if far {
		if err := st.EnableFar(ctx, shard.FarSettings{Since: 1}); err != nil {
			return 0, 0, nil, err
		}
	}
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	base := time.Now().Add(24 * time.Hour)
	const batch = 2000
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, 4)
	t0 := time.Now()
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				start := int(next.Add(batch)) - batch
				if start >= n {
					return
				}
				msgs := make([]shard.Message, 0, batch)
				for i := start; i < min(n, start+batch); i++ {
					m := shard.Message{ID: fmt.Sprintf("%016x", r.Uint64()), Exchange: exchange, RoutingKey: ns, Body: jsonBody(r, i)}
					if far {
						m.At = base.Add(time.Duration(r.Int64N(int64(10 * time.Hour))))
					} else {
						m.Delay = time.Hour
					}
					msgs = append(msgs, m)
				}
				res, err := prod.EnqueueBatch(ctx, msgs)
				for _, x := range res {
					if err == nil && x.Err != nil {
						err = x.Err
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	rate := float64(n) / time.Since(t0).Seconds()
	select {
	case err := <-errs:
		return 0, 0, nil, err
	default:
	}
	after, err := b.usedMemory(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	return float64(after-before) / float64(n), rate, st, nil
}
