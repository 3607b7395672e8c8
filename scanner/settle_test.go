package scanner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestSwallowedWarningsAreReported: warnings swallowed within a period are
// reported when it ends, with their count and the latest error, though no
// warning of their kind comes after them; stop reports what is left.
func TestSwallowedWarningsAreReported(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	r := &rateLimited{log: zap.New(core), every: 50 * time.Millisecond}
	r.warn("ack", errors.New("first"))
	r.warn("ack", errors.New("second"))
	r.warn("ack", errors.New("third"))
	r.warn("claim", errors.New("other kind"))
	shardtest.WaitFor(t, 5*time.Second, func() bool { return logs.FilterMessage("ack (repeated)").Len() == 1 },
		func() string { return "no report of the swallowed warnings" })
	rep := logs.FilterMessage("ack (repeated)").All()[0].ContextMap()
	if rep["times"] != int64(2) || rep["latest"] != "third" {
		t.Errorf("report %v, want times 2, latest third", rep)
	}
	if n := logs.FilterMessage("claim").Len(); n != 1 {
		t.Errorf("%d lines of another kind, want 1", n)
	}
	// A new warning just after the report is swallowed again (the report
	// started a period) and reported at stop.
	r.warn("ack", errors.New("fourth"))
	r.stop()
	if got := logs.FilterMessage("ack (repeated)").Len(); got != 2 {
		t.Errorf("%d reports after stop, want 2", got)
	}
	r.warn("ack", errors.New("after stop")) // no timer after stop: logged at once
	if n := logs.FilterMessage("ack").Len(); n != 2 {
		t.Errorf("%d lines of the warning itself after stop, want 2 (the first and the one after stop)", n)
	}
	r.stop()
}

// TestFailedAcksAreSentAgain: acks that fail while Redis is down are kept
// and sent again once it answers, so the confirmed messages are not
// published a second time when their leases expire.
func TestFailedAcksAreSentAgain(t *testing.T) {
	own, err := shardtest.StartRedis(shardtest.RedisOptions{AOF: true})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	rdb := redis.NewClient(&redis.Options{Addr: own.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, shardtest.Namespace(t))
	shardtest.Require(t, err)
	ctx := context.Background()
	prod := shard.NewProducer(store, balance.Static(2), shard.ProducerOptions{})
	for _, id := range []string{"a", "b", "c"} {
		if _, err := prod.Enqueue(ctx, shard.Message{ID: id, Exchange: "x", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var leases []shard.Claimed
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		res, errs := store.ClaimShards(ctx, []int{0, 1}, 10, time.Minute)
		for j := range res {
			if errs[j] != nil {
				t.Fatal(errs[j])
			}
			leases = append(leases, res[j].Msgs...)
		}
		return len(leases) == 3
	}, func() string { return "never claimed all three" })

	core, logs := observer.New(zap.WarnLevel)
	metrics := NewMetrics(prometheus.NewRegistry())
	warn := &rateLimited{log: zap.New(core), every: time.Hour}
	a := newAckBatcher(store, metrics, warn.warn)
	life, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { a.run(life, ctx); close(done) }()
	defer func() { stop(); <-done }()

	own.Kill()
	for _, c := range leases {
		a.add(shard.Of(c.ID, 2), shard.Confirmed{Lease: c.Lease})
	}
	shardtest.WaitFor(t, 10*time.Second, a.retrying, func() string { return "the failed acks are not kept for a retry" })
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		for _, c := range leases {
			if info, err := store.Inspect(ctx, shard.Of(c.ID, 2), c.ID); err != nil || info.State != shard.StateUnknown {
				return false
			}
		}
		return true
	}
	shardtest.WaitFor(t, 20*time.Second, gone, func() string { return "the acks were never sent again: the messages are still leased" })
	if n := metrics.counts().LostLeases; n != 0 {
		t.Errorf("%d lost leases, want 0", n)
	}
	if logs.FilterMessage("ack after confirm failed; sending it again until Redis answers").Len() == 0 {
		t.Error("the failed ack was not logged")
	}
}
