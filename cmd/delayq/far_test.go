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
// each enqueued 4-14 s before it is due, while one of two scanners is
// SIGKILLed again and again, from the first enqueue until the last
// bucket is promoted. Every message arrives, none before its due time,
// each with the due time it was given, and a second delivery is only ever
// a redelivery (attempt > 1): a promotion cut short and done again never
// makes two copies.
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
	steady := w.scan()
	victim := w.scan()

	// The producer, in its own goroutine: batches of 5,000, each due 4-14
	// s after it is sent, so that each is far when placed however slow
	// the box is.
	type placed struct {
		ids  []string
		due  map[string]int64
		last int64
		err  error
	}
	done := make(chan placed, 1)
	go func() {
		p := placed{due: make(map[string]int64, n)}
		defer func() { done <- p }()
		for from := 0; from < n; from += 5000 {
			at := time.Now().Add(4 * time.Second)
			msgs := make([]shard.Message, 0, 5000)
			for i := from; i < from+5000; i++ {
				msgs = append(msgs, shard.Message{ID: fmt.Sprintf("far-%d", i), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"),
					At: at.Add(time.Duration(rand.Int64N(int64(10 * time.Second))))})
			}
			res, err := prod.EnqueueBatch(context.Background(), msgs)
			for _, r := range res {
				if err == nil {
					err = r.Err
				}
				p.ids, p.due[r.ID], p.last = append(p.ids, r.ID), r.Due.UnixMilli(), max(p.last, r.Due.UnixMilli())
			}
			if p.err = err; err != nil {
				return
			}
		}
	}()
	// Kill until a second before the last message is due; meanwhile watch
	// how many wait far (placed and not yet promoted) at most.
	kills, peak := 0, int64(0)
	var p placed
	for got := false; !got || time.Now().Before(time.UnixMilli(p.last).Add(-time.Second)); {
		select {
		case p = <-done:
			got = true
			must(t, p.err)
		case <-time.After(time.Duration(300+rand.IntN(400)) * time.Millisecond): // random moments, by design
			victim.kill()
			kills++
			victim = w.scan()
		}
		var live int64
		for i := range 8 {
			v, _ := rdb.HGet(context.Background(), shard.FarMetaKeyOf(w.ns, i), "live").Int64()
			live += v
		}
		peak = max(peak, live)
	}
	if peak < n/4 {
		t.Fatalf("at most %d of %d messages waited far at once; want a good share of them", peak, n)
	}
	dups := w.waitDelivered(p.ids, 180*time.Second)
	w.mu.Lock()
	twice := 0
	for _, id := range p.ids {
		firsts := 0
		for _, r := range w.got[id] {
			if r.dueMs != p.due[id] {
				t.Errorf("%s delivered as due %d, enqueued due %d", id, r.dueMs, p.due[id])
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
	t.Logf("%d messages (up to %d far at once), %d SIGKILLs during placement and promotion; %d duplicates, all redeliveries", n, peak, kills, dups)
	if err := steady.term(30 * time.Second); err != nil {
		t.Errorf("steady scanner: %v", err)
	}
}
