package main_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestSentinelFailover: scanners given Redis Sentinel follow the master:
// it is SIGKILLed under a flowing load; the replica is promoted and every
// acknowledged message is delivered, none early.
func TestSentinelFailover(t *testing.T) {
	shardtest.Require(t, serverErr)
	s, err := shardtest.StartSentinel()
	shardtest.Require(t, err)
	t.Cleanup(s.Close)
	w := newWorld(t, 8, "DELAYQ_REDIS_ADDRS="+strings.Join(s.Addrs, ","), "DELAYQ_REDIS_SENTINEL_MASTER="+s.MasterName)
	w.consume()
	w.scan()
	w.scan()
	in, ids := w.jsonl(3000, 8*time.Second, "sf")
	if out, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, e)
	}
	w.waitSome(600, 30*time.Second)
	before := w.count()
	killed := time.Now()
	s.Master.Kill()
	shardtest.WaitFor(t, 60*time.Second, func() bool { return w.count() > before+100 },
		func() string { return fmt.Sprintf("deliveries did not resume after the failover: %d", w.count()) })
	resumed := time.Since(killed)
	dups := w.waitDelivered(ids, 90*time.Second)
	t.Logf("master killed with %d of 3000 delivered: deliveries resumed after %s; %d duplicates",
		before, resumed.Round(time.Millisecond), dups)
	// The settings delayq reads are the promoted master's.
	if out, _, _ := w.delayq("", "stats"); !strings.Contains(out, "redis "+s.Replica.Addr+": used") {
		t.Errorf("stats after the failover does not name the new master %s:\n%s", s.Replica.Addr, out)
	}
}

// TestSentinelFailoverLosesOnlyUnreplicatedWrites: replication to the
// replica is cut off, more messages are enqueued, and the master dies;
// the replica, promoted, lacks what came after the cut. Without
// WithReplicas those enqueues were acknowledged and are lost; with
// WithReplicas(1) they return ErrNotReplicated instead, so no
// acknowledged enqueue is lost.
func TestSentinelFailoverLosesOnlyUnreplicatedWrites(t *testing.T) {
	shardtest.Require(t, serverErr)
	t.Parallel()
	for _, replicas := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait=%d", replicas), func(t *testing.T) {
			s, err := shardtest.StartSentinel()
			shardtest.Require(t, err)
			t.Cleanup(s.Close)
			ctx := context.Background()
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs})
			t.Cleanup(func() { _ = rdb.Close() })
			st, err := shard.NewStore(rdb, shardtest.Namespace(t))
			must(t, err)
			if replicas > 0 {
				st = st.WithReplicas(replicas, 300*time.Millisecond)
			}
			prod := shard.NewProducer(st, balance.Static(4), shard.ProducerOptions{})
			var acked []string
			refused := 0
			batch := func(prefix string) {
				msgs := make([]shard.Message, 20)
				for i := range msgs {
					msgs[i] = shard.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Topic: "t", Delay: time.Hour}
				}
				res, _ := prod.EnqueueBatch(ctx, msgs)
				for _, r := range res {
					switch {
					case r.Err == nil:
						acked = append(acked, r.ID)
					case errors.Is(r.Err, shard.ErrNotReplicated):
						refused++
					default:
						t.Fatalf("enqueue %s: %v", r.ID, r.Err)
					}
				}
			}
			for i := range 10 {
				batch(fmt.Sprintf("before%d", i))
			}
			must(t, s.CutReplication(ctx))
			for i := range 5 {
				batch(fmt.Sprintf("after%d", i))
			}
			s.Master.Kill()
			// Wait for the promoted replica to take writes.
			shardtest.WaitFor(t, 60*time.Second, func() bool {
				c, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return rdb.Set(c, "delayq-test-probe", "1", 0).Err() == nil
			}, func() string { return "no master took writes after the failover" })
			lost := 0
			for _, id := range acked {
				info, err := prod.Inspect(ctx, id)
				if err != nil || info.State != shard.StateScheduled {
					lost++
				}
			}
			t.Logf("WAIT for %d replicas: %d enqueues acknowledged, %d refused as not replicated, %d acknowledged ones lost in the failover",
				replicas, len(acked), refused, lost)
			if replicas > 0 && lost > 0 {
				t.Errorf("%d acknowledged enqueues lost while waiting for a replica", lost)
			}
			if replicas == 0 && lost == 0 {
				t.Errorf("without WAIT no acknowledged enqueue was lost: the test did not cut replication off")
			}
		})
	}
}
