package shard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// Cancel order 42 if it is still unpaid in 30 minutes; the customer pays,
// so the cancellation is cancelled.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // your Redis
	defer rdb.Close()

	store, err := shard.NewStore(rdb, "example")
	if err != nil {
		panic(err)
	}
	// M = 16 shards; with Consul, pass the balance watcher instead.
	prod := shard.NewProducer(store, balance.Static(16), shard.ProducerOptions{})

	_, err = prod.Enqueue(ctx, shard.Message{
		ID:          "order-42-cancel", // also the AMQP message_id consumers dedupe on
		Topic:       "order.cancel",    // the scanners' route table maps it to an exchange
		ContentType: "application/json",
		Body:        []byte(`{"order":42}`),
		Delay:       30 * time.Minute,
	})
	if err != nil {
		panic(err)
	}
	_, err = prod.Enqueue(ctx, shard.Message{ID: "order-42-cancel", Topic: "order.cancel", Delay: time.Hour})
	fmt.Println("again:", errors.Is(err, shard.ErrDuplicate))

	info, _ := prod.Inspect(ctx, "order-42-cancel")
	fmt.Println(info.State, info.Envelope.Topic)

	// Paid: the cancellation is not needed any more.
	if err := prod.Cancel(ctx, "order-42-cancel"); err != nil {
		panic(err)
	}
	info, _ = prod.Inspect(ctx, "order-42-cancel")
	fmt.Println(info.State)
	// Output:
	// again: true
	// scheduled order.cancel
	// unknown
}

// Publish to an explicit exchange and routing key at a fixed time.
func ExampleProducer_EnqueueBatch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	store, _ := shard.NewStore(rdb, "example-batch")
	prod := shard.NewProducer(store, balance.Static(16), shard.ProducerOptions{})

	trialEnd := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	res, err := prod.EnqueueBatch(ctx, []shard.Message{
		{ID: "trial-end-user-7", Exchange: "", RoutingKey: "trial-reminders", At: trialEnd},
		{ID: "trial-end-user-8", Exchange: "", RoutingKey: "trial-reminders", At: trialEnd},
		{ID: "", RoutingKey: "trial-reminders", At: trialEnd}, // invalid: no id
	})
	if err != nil {
		panic(err) // Redis itself failed
	}
	for _, r := range res {
		if r.Err != nil {
			fmt.Println("rejected:", r.Err)
			continue
		}
		fmt.Println(r.ID, r.Due.UTC().Format(time.RFC3339))
	}
	// Output:
	// trial-end-user-7 2030-01-01T09:00:00Z
	// trial-end-user-8 2030-01-01T09:00:00Z
	// rejected: enqueue "": invalid id: empty
}

// When the fleet is behind, release a two-factor code before anything
// else, and a campaign's backlog at a third of the rest's pace.
func ExampleStore_SetClass() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	store, _ := shard.NewStore(rdb, "example-classes")

	for _, c := range []shard.Class{
		{Name: "urgent", Topics: []string{"auth.*"}, Strict: true},
		{Name: "campaigns", Topics: []string{"campaign.*"}, Weight: 1},
		{Name: shard.DefaultClass, Weight: 3}, // every topic no other class names
	} {
		set, err := store.SetClass(ctx, c, "example")
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s\n", set.Name, set)
	}
	// A topic belongs to one class.
	_, err := store.SetClass(ctx, shard.Class{Name: "otp", Topics: []string{"auth.otp"}, Weight: 5}, "example")
	fmt.Println(errors.Is(err, shard.ErrOverlap))
	// Output:
	// urgent: strict, topics auth.*
	// campaigns: weight 1, topics campaign.*
	// default: weight 3
	// true
}
