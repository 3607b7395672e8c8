package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestFarOperationsRacingPromotion: 10,000 far messages, and while their
// buckets are promoted (promoters on every shard, in a loop, two at a
// time) a third of them are cancelled, a third upserted with a new body
// and a third rescheduled a second later. Each operation has one right
// answer whichever side of the promotion it lands on (shard/doc.go): a
// cancel succeeds and the message is gone; an upsert succeeds and one
// copy remains, with the new body; a reschedule succeeds and one copy
// remains, due when the reschedule said. At the end every bucket is
// promoted, nothing is far, nothing is dead, and the due sets hold exactly
// the upserted and rescheduled messages, once each.
func TestFarOperationsRacingPromotion(t *testing.T) {
	const n, m = 10_000, 2
	b := setup(t, m)
	must(t, b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: 2 * time.Second, BucketWidth: 250 * time.Millisecond, IndexSlots: 64, Since: 1}))
	prod := shard.NewProducer(b.store, fixed(m), shard.ProducerOptions{})
	id := func(j int) string { return fmt.Sprintf("race-%05d", j) }
	start := time.Now().Add(4 * time.Second)
	var msgs []shard.Message
	for j := range n {
		msgs = append(msgs, shard.Message{ID: id(j), Topic: "t", Body: []byte("v1"), At: start.Add(time.Duration(j%1000) * time.Millisecond)})
	}
	res, err := prod.EnqueueBatch(b.ctx, msgs)
	must(t, err)
	for _, r := range res {
		must(t, r.Err)
	}
	st, err := b.store.Stats(b.ctx, m)
	must(t, err)
	if st[0].Far+st[1].Far < n/2 {
		t.Fatalf("only %d of %d placed far: the race is not a race", st[0].Far+st[1].Far, n)
	}
	ctx, stop := context.WithCancel(b.ctx)
	var promoters sync.WaitGroup
	var promoted atomic.Int64
	for range 2 {
		promoters.Add(1)
		go func() {
			defer promoters.Done()
			for ctx.Err() == nil {
				for i := range m {
					p, err := b.store.PromoteDue(ctx, i, 4)
					if err != nil && ctx.Err() == nil {
						t.Errorf("promote shard %d: %v", i, err)
						return
					}
					promoted.Add(int64(p.Moved))
				}
			}
		}()
	}

	// The operations start once the first bucket is promoted, and meet the
	// promotion of the others (they come within the horizon one after the
	// other, for a second).
	shardtest.WaitFor(t, 10*time.Second, func() bool { return promoted.Load() > 0 },
		func() string { return "no bucket was promoted" })
	before := promoted.Load()
	order := rand.Perm(n)
	dueOf := make([]int64, n) // a reschedule's answer
	var ops sync.WaitGroup
	const workers = 8
	for w := range workers {
		ops.Add(1)
		go func() {
			defer ops.Done()
			for k := w; k < n; k += workers {
				j := order[k]
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				var err error
				switch j % 3 {
				case 0:
					err = prod.Cancel(b.ctx, id(j))
				case 1:
					_, err = prod.Upsert(b.ctx, shard.Message{ID: id(j), Topic: "t", Body: []byte("v2"), At: msgs[j].At})
				case 2:
					var due time.Time
					due, err = prod.Reschedule(b.ctx, id(j), msgs[j].At.Add(time.Second))
					dueOf[j] = due.UnixMilli()
				}
				if err != nil {
					t.Errorf("%s (op %d): %v", id(j), j%3, err)
				}
			}
		}()
	}
	ops.Wait()
	during := promoted.Load() - before
	if t.Failed() {
		stop()
		promoters.Wait()
		return
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		st, err := b.store.Stats(b.ctx, m)
		return err == nil && st[0].Far+st[1].Far == 0
	}, func() string { st, _ := b.store.Stats(b.ctx, m); return fmt.Sprintf("still far: %+v", st) })
	stop()
	promoters.Wait()
	if during == 0 {
		t.Fatal("the promotion was over before the operations began: the race is not a race")
	}
	t.Logf("%d promoted while the operations ran, %d in all", during, promoted.Load())

	st, err = b.store.Stats(b.ctx, m)
	must(t, err)
	if got, want := st[0].Scheduled+st[1].Scheduled, int64(n-(n+2)/3); got != want || st[0].Dead+st[1].Dead != 0 {
		t.Fatalf("after promotion: %+v; want %d scheduled, none dead", st, want)
	}
	for j := range n {
		ks := shard.ShardKeys(b.store.Namespace(), shard.Of(id(j), m))
		score, err := b.rdb.ZScore(b.ctx, ks.Due, id(j)).Result()
		switch j % 3 {
		case 0:
			if err == nil {
				t.Fatalf("%s was cancelled, and is due at %v", id(j), score)
			}
		case 1:
			raw, err2 := b.rdb.HGet(b.ctx, ks.Msg, id(j)).Bytes()
			env, err3 := shard.DecodeEnvelope(raw)
			if err != nil || err2 != nil || err3 != nil || string(env.Body) != "v2" || int64(score) != msgs[j].At.UnixMilli() {
				t.Fatalf("%s was upserted: due %v (%v), body %q (%v %v)", id(j), score, err, env.Body, err2, err3)
			}
		case 2:
			if err != nil || int64(score) != dueOf[j] || dueOf[j] != msgs[j].At.Add(time.Second).UnixMilli() {
				t.Fatalf("%s was rescheduled to %d: due %v (%v)", id(j), dueOf[j], score, err)
			}
		}
	}
}
