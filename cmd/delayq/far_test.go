package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// TestFarPromotionSurvivesKills: 200,000 messages wait in the far tier
// (a horizon of 3 s and buckets of 0.5 s: hours compressed into seconds),
// due 9-19 s ahead, so that promotion runs for about ten seconds while
// one of two scanners is SIGKILLed again and again. Every message
// arrives, none before its due time, each with the due time it was given,
// and a second delivery is only ever a redelivery (attempt > 1): a
// promotion cut short and done again never makes two copies.
func TestFarPromotionSurvivesKills(t *testing.T) {
	const n = 200_000
	w := newWorld(t, 8, "DELAYQ_LEASE=2s", "DELAYQ_GOROUTINES=16")
	w.consume()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	must(t, store.EnableFar(context.Background(), shard.FarSettings{Horizon: 3 * time.Second, BucketWidth: 500 * time.Millisecond, IndexSlots: 256, Since: 1}))
	prod := shard.NewProducer(store, balance.Static(8), shard.ProducerOptions{})
	start := time.Now().Add(9 * time.Second) // placing 200,000 far takes about 4 s here
	ids := make([]string, 0, n)
	due := make(map[string]int64, n)
	for from := 0; from < n; from += 5000 {
		msgs := make([]shard.Message, 0, 5000)
		for i := from; i < from+5000; i++ {
			msgs = append(msgs, shard.Message{ID: fmt.Sprintf("far-%d", i), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"),
				At: start.Add(time.Duration(rand.Int64N(int64(10 * time.Second))))})
		}
		res, err := prod.EnqueueBatch(context.Background(), msgs)
		must(t, err)
		for _, r := range res {
			must(t, r.Err)
			ids, due[r.ID] = append(ids, r.ID), r.Due.UnixMilli()
		}
	}
	if time.Now().After(start.Add(-3 * time.Second)) {
		t.Fatalf("enqueueing %d far messages took until %s before the first is due: too slow to test promotion", n, time.Until(start))
	}
	far := 0
	for i := range 8 {
		v, _ := rdb.HGet(context.Background(), shard.FarMetaKeyOf(w.ns, i), "live").Int()
		far += v
	}
	if far < n*9/10 {
		t.Fatalf("%d of %d messages due 5-15 s ahead placed far (due 9-19 s ahead); want nearly all", far, n)
	}
	steady := w.scan()
	victim := w.scan()
	kills := 0
	for time.Now().Before(start.Add(9 * time.Second)) {
		time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond) // random moments, by design
		victim.kill()
		kills++
		victim = w.scan()
	}
	dups := w.waitDelivered(ids, 120*time.Second)
	w.mu.Lock()
	twice := 0
	for _, id := range ids {
		firsts := 0
		for _, r := range w.got[id] {
			if r.dueMs != due[id] {
				t.Errorf("%s delivered as due %d, enqueued due %d", id, r.dueMs, due[id])
			}
			if r.attempt == 1 {
				firsts++
			}
		}
		if firsts > 1 {
			twice++
		}
	}
	w.mu.Unlock()
	if twice > 0 {
		t.Errorf("%d messages delivered twice as first deliveries: promoted twice", twice)
	}
	t.Logf("%d far messages, %d SIGKILLs during promotion; %d duplicates, all redeliveries", n, kills, dups)
	if err := steady.term(30 * time.Second); err != nil {
		t.Errorf("steady scanner: %v", err)
	}
}
