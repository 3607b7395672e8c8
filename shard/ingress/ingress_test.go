package ingress_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/ingress"
	"github.com/delayq/delayq/shard/shardtest"
)

var (
	redisSrv  *shardtest.Redis
	rabbit    *publishertest.Rabbit
	serverErr error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if redisSrv, serverErr = shardtest.StartRedis(shardtest.RedisOptions{}); serverErr == nil {
		defer redisSrv.Close()
		if rabbit, serverErr = publishertest.StartRabbit(); serverErr == nil {
			defer rabbit.Close()
		}
	}
	return m.Run()
}

// ingressSetup is a store and producer of a namespace of the test's own
// on the shared Redis (4 shards), and a channel to the shared RabbitMQ
// with a durable queue "in-<namespace>" declared.
func ingressSetup(t *testing.T) (*shard.Store, *shard.Producer, *amqp.Channel, string) {
	t.Helper()
	shardtest.Require(t, serverErr)
	ns := shardtest.Namespace(t)
	st, err := shard.NewStore(redisSrv.Client(t), ns)
	if err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(st, balance.Static(4), shard.ProducerOptions{})
	conn, err := amqp.Dial(rabbit.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := "in-" + ns
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return st, prod, ch, queue
}

// TestIngressStoresThenAcks runs the ingress in this process (under the
// race detector in scripts/test.sh) against real servers: every message
// of a flowing load, some in batches and some alone, ends up stored in
// Redis with its properties, and the queue is left empty; Stop returns.
func TestIngressStoresThenAcks(t *testing.T) {
	ctx := context.Background()
	st, prod, ch, queue := ingressSetup(t)
	in, err := ingress.New(ingress.Options{URLs: []string{rabbit.URL}, Routes: []ingress.Route{{Queue: queue, Exchange: "target"}},
		Prefetch: 64}, prod, zaptest.NewLogger(t), ingress.NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("m-%d", i), CorrelationId: "c", Priority: 2, Body: []byte("x"),
			Headers: amqp.Table{"x-delay": int32(3600_000), "n": int64(i)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	stored := func() int64 {
		st, err := st.Stats(ctx, 4)
		if err != nil {
			return -1
		}
		var n int64
		for _, s := range st {
			n += s.Scheduled
		}
		return n
	}
	// The queue's ready count says nothing of deliveries held unacked:
	// wait for Redis to hold them all.
	shardtest.WaitFor(t, 30*time.Second, func() bool { return stored() == n },
		func() string { return fmt.Sprintf("%d of %d stored", stored(), n) })
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	// Acked means stored: every id is scheduled, as published.
	for i := range n {
		info, err := prod.Inspect(ctx, fmt.Sprintf("m-%d", i))
		if err != nil || info.State != shard.StateScheduled || info.Envelope == nil {
			t.Fatalf("m-%d: %+v %v", i, info, err)
		}
		e := info.Envelope
		if e.Exchange != "target" || e.Properties.CorrelationID != "c" || e.Properties.Priority != 2 ||
			len(e.Headers) != 1 || e.Headers[0].Value != int64(i) {
			t.Fatalf("m-%d stored as %+v", i, e)
		}
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil || q.Messages != 0 || q.Consumers != 0 {
		t.Errorf("after Stop: %+v %v, want an empty queue without consumers", q, err)
	}
}

// TestIngressHoldsOverQuota: messages a scope's quota refuses are held
// unacked (and retried), never dead-lettered nor dropped: once the quota
// is raised they are stored and acked, and the queue is left empty.
func TestIngressHoldsOverQuota(t *testing.T) {
	ctx := context.Background()
	st, prod, ch, queue := ingressSetup(t)
	if err := st.SetQuota(ctx, shard.Quota{Scope: "billing", Rules: "exchange=target", MaxPending: 5}); err != nil {
		t.Fatal(err)
	}
	in, err := ingress.New(ingress.Options{URLs: []string{rabbit.URL}, Routes: []ingress.Route{{Queue: queue, Exchange: "target"}},
		Prefetch: 64, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, prod, zaptest.NewLogger(t), ingress.NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId: fmt.Sprintf("m-%d", i), Body: []byte("x"), Headers: amqp.Table{"x-delay": int32(3600_000)}}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() int64 {
		sts, err := st.Stats(ctx, 4)
		if err != nil {
			return -1
		}
		var n int64
		for _, s := range sts {
			n += s.Scheduled
		}
		return n
	}
	refused := func() int64 {
		qs, err := st.Quotas(ctx)
		if err != nil || len(qs) != 1 {
			return -1
		}
		return qs[0].Refused
	}
	// Five stored; the other three refused again and again, held.
	shardtest.WaitFor(t, 30*time.Second, func() bool { return stored() == 5 && refused() >= 9 },
		func() string { return fmt.Sprintf("%d stored, %d refusals", stored(), refused()) })
	if err := st.SetQuota(ctx, shard.Quota{Scope: "billing", Rules: "exchange=target", MaxPending: 100}); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool { return stored() == n },
		func() string { return fmt.Sprintf("%d of %d stored once the quota was raised", stored(), n) })
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Errorf("after Stop: %+v %v, want an empty queue", q, err)
	}
}
