package scanner_test

import (
	"context"
	"errors"
	"log"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard"
)

// A downstream consumer: delayq delivers at least once, so the consumer
// dedupes on message_id (here in memory; a real one uses its database, for
// example a unique key on the processed id), and a failed message with a
// retry schedule goes back to delayq for its next step.
func Example_consumer() {
	ctx := context.Background()
	var prod *shard.Producer // shard.NewProducer(...), as in package shard's example
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	deliveries, err := ch.Consume("order-cancel", "", false, false, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	done := map[string]bool{} // message ids already processed
	process := func(body []byte) error { return errors.New("upstream answered 503") }

	for d := range deliveries {
		mu.Lock()
		seen := done[d.MessageId]
		mu.Unlock()
		if seen { // a redelivery (x-delayq-attempt > 1) of something already done
			_ = d.Ack(false)
			continue
		}
		if err := process(d.Body); err != nil {
			// Next step of the message's retry schedule, or the dead set
			// once it is exhausted. On error, nack: RabbitMQ redelivers.
			if _, rerr := prod.Retry(ctx, shard.Delivery{MessageID: d.MessageId, Exchange: d.Exchange,
				RoutingKey: d.RoutingKey, Headers: d.Headers, ContentType: d.ContentType, Body: d.Body}, err.Error()); rerr != nil {
				_ = d.Nack(false, true)
				continue
			}
		} else {
			mu.Lock()
			done[d.MessageId] = true
			mu.Unlock()
		}
		_ = d.Ack(false)
	}
}
