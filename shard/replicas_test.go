package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestWithReplicasNeedsTheReplicas: on a server without replicas, a store
// that waits for one reports ErrNotReplicated for acknowledged writes
// (the write is done), while reads and claims are unaffected; a store
// that waits for none behaves as before.
func TestWithReplicasNeedsTheReplicas(t *testing.T) {
	shardtest.Require(t, srvErr)
	ctx := context.Background()
	st, err := shard.NewStore(srv.Client(t), shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	waiting := st.WithReplicas(1, 20*time.Millisecond)
	prod := shard.NewProducer(waiting, fixed(4), shard.ProducerOptions{})
	_, err = prod.Enqueue(ctx, shard.Message{ID: "w-1", Topic: "t", Delay: time.Hour})
	if !errors.Is(err, shard.ErrNotReplicated) {
		t.Fatalf("enqueue without a replica: %v, want ErrNotReplicated", err)
	}
	// The write itself happened (it can be read), but it stays
	// unconfirmed: a retry is not acknowledged either while no replica
	// confirms; with one, it would report ErrDuplicate.
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "w-1", Topic: "t", Delay: time.Hour}); !errors.Is(err, shard.ErrNotReplicated) {
		t.Errorf("retried enqueue: %v, want ErrNotReplicated", err)
	}
	if info, err := prod.Inspect(ctx, "w-1"); err != nil || info.State != shard.StateScheduled {
		t.Errorf("inspect: %+v %v", info, err)
	}
	if err := prod.Cancel(ctx, "w-1"); !errors.Is(err, shard.ErrNotReplicated) {
		t.Errorf("cancel: %v, want ErrNotReplicated", err)
	}
	plain := shard.NewProducer(st.WithReplicas(0, time.Second), fixed(4), shard.ProducerOptions{})
	if _, err := plain.Enqueue(ctx, shard.Message{ID: "w-2", Topic: "t", Delay: time.Hour}); err != nil {
		t.Errorf("enqueue without waiting: %v", err)
	}
}
