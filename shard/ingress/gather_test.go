package ingress

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestGatherFillsWhileTheWriterIsBusy: a batch the writer cannot take yet
// keeps taking deliveries (up to its capacity) instead of waiting closed,
// and the writer gets everything in order.
func TestGatherFillsWhileTheWriterIsBusy(t *testing.T) {
	// A linger of 1 ns is over before the next delivery comes: what a batch
	// takes after its first delivery, it takes because the writer is busy.
	in := &Ingress{opts: Options{Linger: time.Nanosecond}}
	deliveries := make(chan amqp.Delivery, 100)
	free := make(chan []amqp.Delivery, 2)
	for range 2 {
		free <- make([]amqp.Delivery, 0, 8)
	}
	full := make(chan []amqp.Delivery)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.gather(ctx, deliveries, free, full) }()

	send := func(from, to uint64) {
		for tag := from; tag < to; tag++ {
			deliveries <- amqp.Delivery{DeliveryTag: tag}
		}
	}
	// The writer is busy (nobody receives from full): the first batch takes
	// what comes meanwhile.
	send(1, 3)
	waitLen(t, deliveries, 0)
	send(3, 6)
	waitLen(t, deliveries, 0)
	first := <-full
	if got := tags(first); len(got) != 5 || got[0] != 1 || got[4] != 5 {
		t.Fatalf("first batch %v, want deliveries 1-5", got)
	}
	// A full batch goes as it is; the rest starts the next one.
	send(6, 20)
	waitLen(t, deliveries, 6)
	second := <-full
	if got := tags(second); len(got) != 8 || got[0] != 6 || got[7] != 13 {
		t.Fatalf("second batch %v, want deliveries 6-13 (capacity 8)", got)
	}
	free <- first[:0]
	waitLen(t, deliveries, 0)
	third := <-full
	if got := tags(third); len(got) != 6 || got[0] != 14 || got[5] != 19 {
		t.Fatalf("third batch %v, want deliveries 14-19", got)
	}
	free <- second[:0]
	close(deliveries)
	if err := <-done; err == nil {
		t.Fatal("gather returned nil after the deliveries closed, want an error")
	}
}

func tags(b []amqp.Delivery) []uint64 {
	out := make([]uint64, len(b))
	for i, d := range b {
		out[i] = d.DeliveryTag
	}
	return out
}

// waitLen waits until gather has taken all but n queued deliveries.
func waitLen(t *testing.T, c chan amqp.Delivery, n int) {
	t.Helper()
	shardtest.WaitFor(t, 5*time.Second, func() bool { return len(c) <= n },
		func() string { return fmt.Sprintf("%d deliveries queued, want %d", len(c), n) })
}
