package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// ingressResult is the AMQP ingress scenario: n messages already in an
// ingress queue, scheduled an hour ahead by one `delayq scan`, compared
// with two ceilings measured in the same run over the same messages: a
// bare amqp091-go consumer that acks them (same prefetch, one multiple
// ack per batch it finds ready) and bare EnqueueBatch from one goroutine in
// batches of the same size.
type ingressResult struct {
	Messages        int     `json:"messages"`
	Prefetch        int     `json:"prefetch"`
	Rate            float64 `json:"msgs_per_sec"`
	ConsumeAck      float64 `json:"bare_consume_ack_per_sec"`
	ConsumeAckCPU   *cpuUse `json:"bare_consume_ack_cpu"`
	EnqueueBatch    float64 `json:"bare_enqueue_batch_per_sec"`
	EnqueueBatchCPU *cpuUse `json:"bare_enqueue_batch_cpu"`
	OfLower         float64 `json:"of_lower_ceiling"`
	// Shared is the shared-core limit: the cores divided by the CPU per
	// message of the two ceilings together, which the ingress has to do
	// both of on the same cores.
	Shared   float64 `json:"shared_limit"`
	OfShared float64 `json:"of_shared_limit"`
	CPU      *cpuUse `json:"cpu"`
	// MeanBatch is the messages per batch the ingress wrote to Redis.
	MeanBatch float64 `json:"mean_batch"`
	// Runs is every run's OfLower; the result is the median run's. The
	// broker has two levels of speed for a queue drained by one consumer,
	// hit at random per run (cmd/delayq-bench/README.md), so one run is a
	// draw between them.
	Runs []float64 `json:"of_lower_ceiling_runs,omitempty"`
}

// ingressRuns is how many times the ingress scenario runs (the median
// decides), -quick runs it once.
const ingressRuns = 5

// ingressPrefetch is the ingress's default prefetch (DELAYQ_INGRESS_PREFETCH),
// given to the ingress and to ceiling (i) alike; ingressBatch is the
// largest batch the ingress writes (half of it), ceiling (ii)'s batch.
const (
	ingressPrefetch = 2048
	ingressBatch    = ingressPrefetch / 2
)

func (b *bench) ingress(ctx context.Context) error {
	runs := ingressRuns
	if b.c.quick {
		runs = 1
	}
	var all []*ingressResult
	var each []float64 // in the order they ran
	for j := range runs {
		r, err := b.ingressRun(ctx)
		if err != nil {
			return err
		}
		say("ingress, run %d of %d: %.0f%% of the lower ceiling", j+1, runs, 100*r.OfLower)
		all, each = append(all, r), append(each, r.OfLower)
	}
	slices.SortFunc(all, func(x, y *ingressResult) int { return cmp.Compare(x.OfLower, y.OfLower) })
	med := all[len(all)/2]
	med.Runs = each
	b.res.Ingress = med
	return nil
}

// ingressRun is one run of the ingress scenario with its ceilings.
func (b *bench) ingressRun(ctx context.Context) (*ingressResult, error) {
	n := b.c.ceilingMsgs / 2
	consumeAck, consumeCPU, err := b.bareConsumeAck(ctx, n)
	if err != nil {
		return nil, err
	}
	say("ceiling (i): bare amqp091-go consume + multiple ack, prefetch %d: %.0f msg/s; CPU %s", ingressPrefetch, consumeAck, consumeCPU)
	cpu0 := b.sampleCPU(nil)
	enqueue, err := b.bareEnqueueBatch(ctx, n)
	if err != nil {
		return nil, err
	}
	enqueueCPU := b.sampleCPU(nil).since(cpu0, n)
	say("ceiling (ii): bare EnqueueBatch, one goroutine, batches of %d: %.0f msg/s; CPU %s", ingressBatch, enqueue, enqueueCPU)
	ns := b.namespace("ingress")
	queue := "ingress-" + ns
	if err := b.publishTo(ctx, queue, n, "in"); err != nil {
		return nil, err
	}
	f, err := b.ingressFleet(ns, queue)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	// Time from the first scheduled message to the last, read from the
	// shards' counters in Redis.
	var first time.Time
	var c0 float64
	cpu0 = b.sampleCPU(f)
	deadline := time.Now().Add(time.Duration(n/200+60) * time.Second)
	for {
		v, err := b.stored(ctx, ns)
		if err == nil && v > 0 && first.IsZero() {
			first, c0 = time.Now(), v
			cpu0 = b.sampleCPU(f)
		}
		if err == nil && int(v) >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("ingress: %v of %d scheduled (%v)", v, n, err)
		}
		sleep(ctx, 20*time.Millisecond)
	}
	took := time.Since(first)
	cpu := b.sampleCPU(f).since(cpu0, n-int(c0))
	// How many batches the ingress wrote for the n messages: the size of
	// its gathers, which sets the broker's acks and Redis's calls per
	// message.
	batches := uint64(0)
	if hs, err := f.scrapeHistograms(ctx, "delayq_ingress_batch_size"); err != nil {
		say("ingress: batch sizes not read: %v", err)
	} else {
		batches = hs["delayq_ingress_batch_size"].count
	}
	f.stop()
	// Ceiling (i) again after the run; the higher of the two counts (the
	// broker's speed drifts over a run).
	if again, againCPU, err := b.bareConsumeAck(ctx, n); err == nil && again > consumeAck {
		consumeAck, consumeCPU = again, againCPU
		say("ceiling (i) again: %.0f msg/s; CPU %s", again, againCPU)
	}
	r := &ingressResult{Messages: n, Prefetch: ingressPrefetch, Rate: (float64(n) - c0) / took.Seconds(),
		ConsumeAck: consumeAck, ConsumeAckCPU: consumeCPU, EnqueueBatch: enqueue, EnqueueBatchCPU: enqueueCPU, CPU: cpu}
	r.OfLower = r.Rate / math.Min(consumeAck, enqueue)
	if us := consumeCPU.usTotal() + enqueueCPU.usTotal(); us > 0 {
		r.Shared = float64(runtime.NumCPU()) * 1e6 / us
		r.OfShared = r.Rate / r.Shared
	}
	if batches > 0 {
		r.MeanBatch = float64(n) / float64(batches)
	}
	say("ingress: %.0f msg/s (%.0f%% of the lower ceiling, %.0f%% of the shared-core limit %.0f), %.0f messages a batch; CPU %s",
		r.Rate, 100*r.OfLower, 100*r.OfShared, r.Shared, r.MeanBatch, r.CPU)
	b.rdb.FlushAll(ctx)
	return r, nil
}

// ingressFleet starts one scanner consuming queue.
func (b *bench) ingressFleet(ns, queue string) (*fleet, error) {
	return b.startFleetOf(ns, 1, 1, shards, 8, "DELAYQ_INGRESS="+queue+"="+exchange,
		"DELAYQ_INGRESS_PREFETCH="+strconv.Itoa(ingressPrefetch))
}

// publishTo declares a durable queue and fills it with n persistent
// messages as a plugin user would publish them (x-delay of an hour, a
// message_id, a string header, a 100-byte body), confirmed.
func (b *bench) publishTo(ctx context.Context, queue string, n int, prefix string) error {
	conn, err := amqp.Dial(b.rabbit.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 512))
	outstanding := 0
	for i := range n {
		for outstanding >= 512 {
			<-confirms
			outstanding--
		}
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: prefix + "-" + strconv.Itoa(i), Body: body,
			Headers: amqp.Table{"x-delay": int32(3600_000), "tenant": "acme"}}); err != nil {
			return err
		}
		outstanding++
	}
	for ; outstanding > 0; outstanding-- {
		<-confirms
	}
	return nil
}

// bareConsumeAck is ceiling (i): consume n messages with prefetch
// ingressPrefetch, acking what is ready with one multiple ack. The CPU is
// that of the consumption alone, not of filling the queue.
func (b *bench) bareConsumeAck(ctx context.Context, n int) (float64, *cpuUse, error) {
	queue := "ceiling-consume-" + b.namespace("ack")
	if err := b.publishTo(ctx, queue, n, "c"); err != nil {
		return 0, nil, err
	}
	conn, err := amqp.Dial(b.rabbit.URL)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, nil, err
	}
	if err := ch.Qos(ingressPrefetch, 0, false); err != nil {
		return 0, nil, err
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, nil, err
	}
	cpu0 := b.sampleCPU(nil)
	start := time.Now()
	for got := 0; got < n; {
		d := <-ds
		got++
		last := d.DeliveryTag
	drain:
		for got < n {
			select {
			case d := <-ds:
				got++
				last = d.DeliveryTag
			default:
				break drain
			}
		}
		if err := ch.Ack(last, true); err != nil {
			return 0, nil, err
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	_, _ = ch.QueueDelete(queue, false, false, false)
	return rate, b.sampleCPU(nil).since(cpu0, n), nil
}

// bareEnqueueBatch is ceiling (ii): the same messages written by one
// goroutine with EnqueueBatch in batches of ingressBatch.
func (b *bench) bareEnqueueBatch(ctx context.Context, n int) (float64, error) {
	ns := b.namespace("ceiling-enqueue")
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return 0, err
	}
	defer b.rdb.FlushAll(ctx)
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	msgs := make([]shard.Message, 0, ingressBatch)
	start := time.Now()
	for i := 0; i < n; i += ingressBatch {
		msgs = msgs[:0]
		for j := i; j < min(i+ingressBatch, n); j++ {
			msgs = append(msgs, shard.Message{ID: "e-" + strconv.Itoa(j), Exchange: exchange, RoutingKey: ns,
				Headers: amqp.Table{"tenant": "acme"}, Body: body, Delay: time.Hour})
		}
		res, err := prod.EnqueueBatch(ctx, msgs)
		if err != nil {
			return 0, err
		}
		for _, r := range res {
			if r.Err != nil {
				return 0, r.Err
			}
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// stored reads how many messages the enqueue scripts have created in
// namespace ns, from the shards' counters in Redis: 16 HGETs in one round
// trip, tens of microseconds of Redis a read. Not the scanner's /metrics
// nor Store.Stats: a scrape costs the scanner about 3.4 ms and Redis 1.5
// ms of CPU (the shard collector runs the stats script on every shard),
// which read every 20 ms is a sixth of the box's two cores that the bare
// ceilings do not pay.
func (b *bench) stored(ctx context.Context, ns string) (float64, error) {
	cmds := make([]*redis.StringCmd, shards)
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGet(ctx, shard.ShardKeys(ns, i).Counters, "enqueued")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("reading the shards' enqueued counters: %w", err)
	}
	var sum int64
	for _, c := range cmds {
		v, err := c.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("reading the shards' enqueued counters: %w", err)
		}
		sum += v
	}
	return float64(sum), nil
}
