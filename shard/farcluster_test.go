package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestFarTierOnCluster: on a real 3-master Redis Cluster every far script
// stays in its shard's slot (fardir, farmeta, the buckets and the index
// keys share the {ns:i} hash tag): placement in batches, compaction,
// listing, bulk and batch cancels, the status read across the masters,
// and promotion into the due sets, with every message at its due time.
func TestFarTierOnCluster(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	st, err := shard.NewStore(rdb, "farcluster")
	must(t, err)
	must(t, st.EnableFar(ctx, shard.FarSettings{Horizon: 2 * time.Second, BucketWidth: 500 * time.Millisecond, IndexSlots: 16, Since: 1}))
	const m, n = 16, 6000
	prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
	// Far enough that the buckets stay beyond the horizon and a bucket
	// (where compaction works) however slow the placement is on a busy box.
	start := time.Now().Add(8 * time.Second).Truncate(500 * time.Millisecond).Add(500 * time.Millisecond)
	due := map[string]int64{}
	var msgs []shard.Message
	for j := range n {
		at := start.Add(time.Duration(j%400) * time.Millisecond)
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("c-%04d", j), Topic: "t", Body: []byte("x"), At: at})
		due[msgs[j].ID] = at.UnixMilli()
	}
	res, err := prod.EnqueueBatch(ctx, msgs)
	must(t, err)
	for _, r := range res {
		must(t, r.Err)
	}
	blocks := 0
	for i := range m {
		k, err := st.CompactFar(ctx, i, 10)
		must(t, err)
		blocks += k
	}
	status, err := st.FarStatus(ctx, m)
	must(t, err)
	if status.Far != n || status.Buckets != m || blocks == 0 {
		t.Fatalf("far status %+v, %d blocks compacted; want %d far in %d buckets, some compacted", status, blocks, n, m)
	}
	if info, err := prod.Inspect(ctx, "c-0042"); err != nil || !info.Far || info.At.UnixMilli() != due["c-0042"] {
		t.Fatalf("inspect: %+v, %v", info, err)
	}
	if k, err := st.CountMatching(ctx, m, shard.BulkFilter{Prefix: "c-1"}); err != nil || k != 1000 {
		t.Fatalf("count c-1*: %d, %v; want 1000", k, err)
	}
	p, err := st.BulkCancel(ctx, m, shard.BulkFilter{Prefix: "c-1"}, 0, nil)
	if err != nil || p.Done != 1000 {
		t.Fatalf("bulk cancel c-1*: %+v, %v", p, err)
	}
	errs, err := prod.CancelBatch(ctx, []string{"c-0001", "c-0002", "c-2000"})
	must(t, err)
	for _, e := range errs {
		must(t, e)
	}
	for _, id := range []string{"c-0001", "c-0002", "c-2000"} {
		delete(due, id)
	}
	for id := range due {
		if strings.HasPrefix(id, "c-1") {
			delete(due, id)
		}
	}
	shardtest.WaitFor(t, 25*time.Second, func() bool {
		for i := range m {
			if _, err := st.PromoteDue(ctx, i, 10); err != nil {
				t.Fatal(err)
			}
		}
		status, err := st.FarStatus(ctx, m)
		return err == nil && status.Far == 0 && status.Buckets == 0
	}, func() string { s, _ := st.FarStatus(ctx, m); return fmt.Sprintf("not promoted: %+v", s) })
	got := 0
	for i := range m {
		zs, err := rdb.ZRangeWithScores(ctx, shard.ShardKeys("farcluster", i).Due, 0, -1).Result()
		must(t, err)
		for _, z := range zs {
			id := z.Member.(string)
			if want, ok := due[id]; !ok || int64(z.Score) != want || shard.Of(id, m) != i {
				t.Fatalf("shard %d holds %s due %v; want %v (%v) in shard %d", i, id, z.Score, want, ok, shard.Of(id, m))
			}
			got++
		}
	}
	if got != len(due) {
		t.Fatalf("%d in the due sets after promotion, want %d", got, len(due))
	}
}

// TestFarPromotionWithRedisFull: Redis at its maxmemory while far buckets
// come due. Promotion needs memory (a near message costs more than a far
// one), so it is refused with ErrRedisFull and the messages wait far; no
// message is lost or doubled at any point, and once memory is freed every
// message is promoted, due at its time.
func TestFarPromotionWithRedisFull(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	own, err := shardtest.StartRedis(shardtest.RedisOptions{Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	rdb := own.Client(t)
	ctx := context.Background()
	st, err := shard.NewStore(rdb, "farfull")
	must(t, err)
	must(t, st.EnableFar(ctx, shard.FarSettings{Horizon: 2 * time.Second, BucketWidth: 500 * time.Millisecond, IndexSlots: 16, Since: 1}))
	const m, n = 4, 3000
	prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
	start := time.Now().Add(3 * time.Second)
	due := map[string]int64{}
	var msgs []shard.Message
	for j := range n {
		at := start.Add(time.Duration(j%1000) * time.Millisecond)
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("full-%04d", j), Topic: "t", Body: []byte(strings.Repeat("b", 100)), At: at})
		due[msgs[j].ID] = at.UnixMilli()
	}
	res, err := prod.EnqueueBatch(ctx, msgs)
	must(t, err)
	for _, r := range res {
		must(t, r.Err)
	}
	// Fill Redis to its limit.
	pad := strings.Repeat("p", 4096)
	for k := 0; ; k++ {
		if err := rdb.Set(ctx, fmt.Sprintf("pad:%d", k), pad, 0).Err(); err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatal(err)
			}
			break
		}
	}
	counted := func() int64 {
		s, err := st.Stats(ctx, m)
		must(t, err)
		var far, near int64
		for _, x := range s {
			far, near = far+x.Far, near+x.Scheduled
		}
		if far+near != n {
			t.Fatalf("%d far + %d near, want %d: a message lost or doubled", far, near, n)
		}
		return far
	}
	full := 0
	deadline := time.Now().Add(4 * time.Second) // every bucket within the horizon by then
	for time.Now().Before(deadline) {
		for i := range m {
			if _, err := st.PromoteDue(ctx, i, 10); errors.Is(err, shard.ErrRedisFull) {
				full++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		counted()
		time.Sleep(50 * time.Millisecond)
	}
	if full == 0 {
		t.Fatal("promotion at maxmemory never said Redis is full")
	}
	t.Logf("promotion refused for Redis full %d times; %d still far", full, counted())
	iter := rdb.Scan(ctx, 0, "pad:*", 1000).Iterator()
	for iter.Next(ctx) {
		must(t, rdb.Del(ctx, iter.Val()).Err())
	}
	must(t, iter.Err())
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		for i := range m {
			if _, err := st.PromoteDue(ctx, i, 10); err != nil {
				t.Fatal(err)
			}
		}
		return counted() == 0
	}, func() string { return "far messages not promoted once memory was freed" })
	for i := range m {
		zs, err := rdb.ZRangeWithScores(ctx, shard.ShardKeys("farfull", i).Due, 0, -1).Result()
		must(t, err)
		for _, z := range zs {
			if id := z.Member.(string); int64(z.Score) != due[id] {
				t.Fatalf("%s due at %v, want %d", id, z.Score, due[id])
			}
		}
	}
}
