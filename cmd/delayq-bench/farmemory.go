package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
	// Cancel by id (Producer.Cancel, four callers at once) of a sample of
	// the messages, with all n pending: near, and far after compaction.
	NearCancel cancelLatency `json:"near_cancel"`
	FarCancel  cancelLatency `json:"far_cancel"`
}

// cancelLatency is what cancelling a sample of pending messages by id took.
type cancelLatency struct {
	Cancels       int           `json:"cancels"`
	P50, P99, Max time.Duration `json:"-"`
	P99Ms         float64       `json:"p99_ms"`
}

func (c cancelLatency) String() string {
	return fmt.Sprintf("%d cancels by id, p50 %s, p99 %s, max %s", c.Cancels, ms(c.P50), ms(c.P99), ms(c.Max))
}

// cancelSample cancels each of ids by id, four at a time, and reports the
// calls' latency; every id must have been pending.
func cancelSample(ctx context.Context, prod *shard.Producer, ids []string) (cancelLatency, error) {
	took := make([]time.Duration, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				j := int(next.Add(1)) - 1
				if j >= len(ids) {
					return
				}
				t0 := time.Now()
				if err := prod.Cancel(ctx, ids[j]); err != nil {
					errs <- fmt.Errorf("cancel %q: %w", ids[j], err)
					return
				}
				took[j] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return cancelLatency{}, err
	default:
	}
	slices.Sort(took)
	c := cancelLatency{Cancels: len(took)}
	if len(took) > 0 {
		c.P50, c.P99, c.Max = took[len(took)/2], took[len(took)*99/100], took[len(took)-1]
	}
	c.P99Ms = float64(c.P99) / float64(time.Millisecond)
	return c, nil
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
	near, err := b.fillJSON(ctx, "nearjson", n, false)
	if err != nil {
		return nil, err
	}
	r.NearBytes, r.NearFillRate = near.bytes, near.rate
	c1 := b.sampleCPU(nil)
	r.NearRedisUs, r.NearBenchUs = (c1.sec["redis"]-c0.sec["redis"])*1e6/float64(n), (c1.sec["bench"]-c0.sec["bench"])*1e6/float64(n)
	say("memory: %d messages of 100-byte JSON, 16-hex-digit ids, near: %.0f bytes a message, enqueued at %.0f/s (redis %.1f µs, producers %.1f µs a message)",
		n, r.NearBytes, r.NearFillRate, r.NearRedisUs, r.NearBenchUs)
	if r.NearCancel, err = cancelSample(ctx, near.prod, near.sample); err != nil {
		return nil, err
	}
	say("memory: near, %s", r.NearCancel)
	b.rdb.FlushAll(ctx)
	before, err := b.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	c0 = b.sampleCPU(nil)
	far, err := b.fillJSON(ctx, "farjson", n, true)
	if err != nil {
		return nil, err
	}
	st := far.store
	r.FarRawBytes, r.FarFillRate = far.bytes, far.rate
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
	if r.FarCancel, err = cancelSample(ctx, far.prod, far.sample); err != nil {
		return nil, err
	}
	say("memory: far, %s", r.FarCancel)
	b.rdb.FlushAll(ctx)
	return r, nil
}

// jsonFill is what fillJSON filled: the used_memory delta a message, the
// enqueue rate, the namespace's store and producer, and the ids of up to
// cancelSampleSize of the messages, spread over them.
type jsonFill struct {
	bytes, rate float64
	store       *shard.Store
	prod        *shard.Producer
	sample      []string
}

const cancelSampleSize = 10_000

// fillJSON enqueues n messages of JSON bodies into namespace name (far:
// with the far tier on, due a day ahead).
func (b *bench) fillJSON(ctx context.Context, name string, n int, far bool) (jsonFill, error) {
	before, err := b.usedMemory(ctx)
	if err != nil {
		return jsonFill{}, err
	}
	ns := b.namespace(name)
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return jsonFill{}, err
	}
	if far {
		if err := st.EnableFar(ctx, shard.FarSettings{Since: 1}); err != nil {
			return jsonFill{}, err
		}
	}
	stride := max(1, n/cancelSampleSize)
	var sampleMu sync.Mutex
	var sample []string
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
					if i%stride == 0 {
						sampleMu.Lock()
						sample = append(sample, m.ID)
						sampleMu.Unlock()
					}
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
		return jsonFill{}, err
	default:
	}
	after, err := b.usedMemory(ctx)
	if err != nil {
		return jsonFill{}, err
	}
	return jsonFill{bytes: float64(after-before) / float64(n), rate: rate, store: st, prod: prod, sample: sample}, nil
}
