package main_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// ingressSetup is one test's ingress on the shared broker: producers
// publish to inExchange (fanout) → inQueue, which delayq consumes and
// whose dead-letter exchange sends rejected messages to dlq. Messages go,
// when due, to the world's exchange (w.exchange) → target queue (key rk).
type ingressSetup struct {
	w          *world
	inExchange string
	inQueue    string
	dlq        string
	target     string // queue bound to w.exchange with key "rk"
	env        string // DELAYQ_INGRESS=...
	ch         *amqp.Channel
	confirms   chan amqp.Confirmation
	mu         sync.Mutex
}

func newIngress(t *testing.T, w *world) *ingressSetup {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	s := &ingressSetup{w: w, inExchange: "in-" + w.ns, inQueue: "inq-" + w.ns, dlq: "dlq-" + w.ns, target: "tq-" + w.ns, ch: ch}
	dlx := "dlx-" + w.ns
	must(t, ch.ExchangeDeclare(s.inExchange, "fanout", true, false, false, false, nil))
	must(t, ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil))
	must(t, ch.ExchangeDeclare(w.exchange, "direct", true, false, false, false, nil))
	for q, args := range map[string]amqp.Table{
		s.inQueue: {"x-queue-type": "quorum", "x-dead-letter-exchange": dlx},
		s.dlq:     nil, s.target: nil,
	} {
		_, err := ch.QueueDeclare(q, true, false, false, false, args)
		must(t, err)
	}
	must(t, ch.QueueBind(s.inQueue, "", s.inExchange, false, nil))
	must(t, ch.QueueBind(s.dlq, "", dlx, false, nil))
	must(t, ch.QueueBind(s.target, "rk", w.exchange, false, nil))
	must(t, ch.Confirm(false))
	s.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	s.env = "DELAYQ_INGRESS=" + s.inQueue + "=" + w.exchange
	return s
}

// publish publishes p to the ingress exchange with routing key rk and
// waits for the broker's confirm.
func (s *ingressSetup) publish(t testing.TB, p amqp.Publishing) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.ch.PublishWithContext(ctx, s.inExchange, "rk", false, false, p); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if c := <-s.confirms; !c.Ack {
		t.Fatalf("publish %s: nacked", p.MessageId)
	}
}

// collect consumes queue until n messages arrived or within passed.
func collect(t *testing.T, queue string, n int, within time.Duration) []amqp.Delivery {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	must(t, err)
	var got []amqp.Delivery
	deadline := time.After(within)
	for len(got) < n {
		select {
		case d := <-ds:
			got = append(got, d)
		case <-deadline:
			return got
		}
	}
	return got
}

// TestIngressFidelity: a message published with every AMQP property and
// a header of every AMQP type reaches the consumer as published: body,
// routing key, each property, each header with its type, minus x-delay,
// plus x-delayq-due-ms and x-delayq-attempt; not before its delay. A
// per-message x-delayq-exchange sends one to another exchange.
func TestIngressFidelity(t *testing.T) {
	w := newWorld(t, 4)
	s := newIngress(t, w)
	other := "ex2-" + w.ns
	must(t, s.ch.ExchangeDeclare(other, "direct", true, false, false, false, nil))
	otherQ := "tq2-" + w.ns
	_, err := s.ch.QueueDeclare(otherQ, true, false, false, false, nil)
	must(t, err)
	must(t, s.ch.QueueBind(otherQ, "rk", other, false, nil))
	w.scan(s.env)

	headers := amqp.Table{
		"string": "café", "bool": true, "int8": int8(-8), "uint8": uint8(200), "int16": int16(-1600),
		"uint16": uint16(60000), "int32": int32(-320000), "uint32": uint32(4000000000), "int64": int64(math.MinInt64),
		"float32": float32(1.5), "float64": 2.25, "decimal": amqp.Decimal{Scale: 2, Value: -1234},
		"timestamp": time.Unix(1700000000, 0), "bytes": []byte{0, 1, 0xff}, "void": nil,
		"table": amqp.Table{"nested": amqp.Table{"deep": "x"}, "n": int32(1)},
		"array": []any{"a", int32(1), []any{true}, amqp.Table{"k": int64(2)}},
	}
	pub := amqp.Publishing{
		MessageId: "fid-1", ContentType: "application/json", ContentEncoding: "gzip", CorrelationId: "corr-1",
		ReplyTo: "replies", Expiration: "600000", Type: "order.cancel", AppId: "shop", Priority: 5,
		DeliveryMode: amqp.Transient, Timestamp: time.Unix(1600000000, 0), Body: []byte(`{"order":42}`),
		Headers: amqp.Table{"x-delay": int32(400)},
	}
	for k, v := range headers {
		pub.Headers[k] = v
	}
	sent := time.Now()
	s.publish(t, pub)
	s.publish(t, amqp.Publishing{MessageId: "fid-2", Body: []byte("elsewhere"),
		Headers: amqp.Table{"x-delay": "100", "x-delayq-exchange": other}})

	got := collect(t, s.target, 1, 30*time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d messages at the target", len(got))
	}
	d := got[0]
	if early := time.Until(sent.Add(400 * time.Millisecond)); early > 0 {
		t.Errorf("delivered %s early", early)
	}
	if d.MessageId != "fid-1" || d.RoutingKey != "rk" || d.Exchange != w.exchange || string(d.Body) != `{"order":42}` {
		t.Errorf("delivery %s %s %s %q", d.MessageId, d.Exchange, d.RoutingKey, d.Body)
	}
	props := [][3]any{
		{"content_type", d.ContentType, pub.ContentType}, {"content_encoding", d.ContentEncoding, pub.ContentEncoding},
		{"correlation_id", d.CorrelationId, pub.CorrelationId}, {"reply_to", d.ReplyTo, pub.ReplyTo},
		{"expiration", d.Expiration, pub.Expiration}, {"type", d.Type, pub.Type}, {"app_id", d.AppId, pub.AppId},
		{"priority", d.Priority, pub.Priority}, {"delivery_mode", d.DeliveryMode, pub.DeliveryMode},
		{"timestamp", d.Timestamp.Unix(), pub.Timestamp.Unix()},
	}
	for _, p := range props {
		if !reflect.DeepEqual(p[1], p[2]) {
			t.Errorf("%s: got %#v, want %#v", p[0], p[1], p[2])
		}
	}
	for k, want := range headers {
		gotV := d.Headers[k]
		if tm, ok := want.(time.Time); ok {
			if g, ok := gotV.(time.Time); !ok || g.Unix() != tm.Unix() {
				t.Errorf("header %s: got %#v, want %v", k, gotV, tm)
			}
			continue
		}
		if !reflect.DeepEqual(gotV, want) {
			t.Errorf("header %s: got %#v (%T), want %#v (%T)", k, gotV, gotV, want, want)
		}
	}
	if _, ok := d.Headers["x-delay"]; ok {
		t.Error("x-delay was published")
	}
	if due, ok := d.Headers[shard.HeaderDueMs].(int64); !ok || due < sent.UnixMilli()+400-50 {
		t.Errorf("x-delayq-due-ms %#v, want about %d", d.Headers[shard.HeaderDueMs], sent.UnixMilli()+400)
	}
	if a := d.Headers[shard.HeaderAttempt]; a != int32(1) {
		t.Errorf("x-delayq-attempt %#v", a)
	}
	if len(d.Headers) != len(headers)+2 {
		t.Errorf("%d headers, want %d: %v", len(d.Headers), len(headers)+2, d.Headers)
	}
	if o := collect(t, otherQ, 1, 30*time.Second); len(o) != 1 || o[0].MessageId != "fid-2" {
		t.Errorf("x-delayq-exchange: got %v at %s", o, otherQ)
	}
}

// TestIngressRejectsBadInputToDeadLetters: each kind of bad input goes to
// the queue's dead-letter exchange, logged with its id and reason and
// counted by reason, while the good messages around it are delivered.
func TestIngressRejectsBadInputToDeadLetters(t *testing.T) {
	w := newWorld(t, 4, "DELAYQ_MAX_BODY=1000")
	s := newIngress(t, w)
	p := w.scan(s.env)
	bad := map[string]struct {
		pub    amqp.Publishing
		reason string
	}{
		"bad-delay":   {amqp.Publishing{Headers: amqp.Table{"x-delay": "soon"}}, "bad_delay"},
		"bad-range":   {amqp.Publishing{Headers: amqp.Table{"x-delay": int64(math.MaxInt64)}}, "bad_delay"},
		"bad-body":    {amqp.Publishing{Body: make([]byte, 1001)}, "body_too_large"},
		"bad-target":  {amqp.Publishing{Headers: amqp.Table{"x-delayq-exchange": "no-such-" + w.ns}}, "bad_target"},
		"bad-control": {amqp.Publishing{Headers: amqp.Table{"x-delayq-delay": int32(5)}}, "bad_control"},
		"bad-header":  {amqp.Publishing{Headers: amqp.Table{"deep": deepTable(shard.MaxHeaderDepth + 1)}}, "bad_header"},
		"bad-retry":   {amqp.Publishing{Headers: amqp.Table{"x-delayq-retry": "15s,never"}}, "bad_retry"},
		"bad\x01id":   {amqp.Publishing{}, "bad_id"},
	}
	var ids []string
	for id := range bad {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var good []string
	for i, id := range ids {
		g := fmt.Sprintf("good-%d", i)
		good = append(good, g)
		s.publish(t, amqp.Publishing{MessageId: g, Headers: amqp.Table{"x-delay": int32(50)}})
		b := bad[id].pub
		b.MessageId = id
		s.publish(t, b)
	}
	got := collect(t, s.target, len(good), 30*time.Second)
	var gotIDs []string
	for _, d := range got {
		gotIDs = append(gotIDs, d.MessageId)
	}
	sort.Strings(gotIDs)
	sort.Strings(good)
	if !reflect.DeepEqual(gotIDs, good) {
		t.Errorf("delivered %v, want %v", gotIDs, good)
	}
	dead := collect(t, s.dlq, len(bad), 30*time.Second)
	var deadIDs []string
	for _, d := range dead {
		deadIDs = append(deadIDs, d.MessageId)
	}
	sort.Strings(deadIDs)
	if !reflect.DeepEqual(deadIDs, ids) {
		t.Errorf("dead-lettered %q, want %q", deadIDs, ids)
	}
	metrics := p.scrape(t)
	for id, b := range bad {
		if !strings.Contains(p.log.String(), "reason="+b.reason) && !strings.Contains(p.log.String(), `"reason": "`+b.reason) {
			t.Errorf("%q: no log line with reason %s", id, b.reason)
		}
		line := fmt.Sprintf(`delayq_ingress_rejected_total{queue=%q,reason=%q}`, s.inQueue, b.reason)
		if !strings.Contains(metrics, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// TestIngressDuplicatesAndCancel: a message_id published twice is
// scheduled once (the second is acked and counted); a cancel over AMQP
// removes a scheduled message.
func TestIngressDuplicatesAndCancel(t *testing.T) {
	w := newWorld(t, 4)
	s := newIngress(t, w)
	p := w.scan(s.env)
	s.publish(t, amqp.Publishing{MessageId: "dup", Body: []byte("first"), Headers: amqp.Table{"x-delay": int32(300)}})
	s.publish(t, amqp.Publishing{MessageId: "dup", Body: []byte("second"), Headers: amqp.Table{"x-delay": int32(300)}})
	s.publish(t, amqp.Publishing{MessageId: "cancel-me", Headers: amqp.Table{"x-delay": int32(2000)}})
	s.publish(t, amqp.Publishing{MessageId: "cancel-me", Headers: amqp.Table{"x-delayq-cancel": true}})
	s.publish(t, amqp.Publishing{MessageId: "after", Headers: amqp.Table{"x-delay": int32(2500)}})
	got := collect(t, s.target, 3, 10*time.Second)
	var ids []string
	for _, d := range got {
		ids = append(ids, d.MessageId+"="+string(d.Body))
	}
	if len(got) != 2 || ids[0] != "dup=first" || got[1].MessageId != "after" {
		t.Errorf("delivered %v, want dup=first then after (cancel-me cancelled, dup once)", ids)
	}
	m := p.scrape(t)
	for _, want := range []string{
		fmt.Sprintf(`delayq_ingress_messages_total{outcome="duplicate",queue=%q} 1`, s.inQueue),
		fmt.Sprintf(`delayq_ingress_messages_total{outcome="cancelled",queue=%q} 1`, s.inQueue),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestIngressRetryOverAMQP: a consumer in any language asks for the next
// step of a retry schedule the producer declared in x-delayq-retry, by
// publishing the delivery back with x-delayq-retry-cause; after the last
// step the message is in the dead set with the cause.
func TestIngressRetryOverAMQP(t *testing.T) {
	w := newWorld(t, 4)
	s := newIngress(t, w)
	w.scan(s.env)
	s.publish(t, amqp.Publishing{MessageId: "flaky", Body: []byte("work"), CorrelationId: "c-9",
		Headers: amqp.Table{"x-delay": int32(50), "x-delayq-retry": "300ms,300ms", "tenant": "acme"}})
	for step := 0; step <= 2; step++ {
		got := collect(t, s.target, 1, 20*time.Second)
		if len(got) != 1 {
			t.Fatalf("step %d: nothing delivered", step)
		}
		d := got[0]
		if d.Headers[shard.HeaderRetryStep] != fmt.Sprint(step) || d.Headers["tenant"] != "acme" || d.CorrelationId != "c-9" {
			t.Fatalf("step %d: delivered %v %s", step, d.Headers, d.CorrelationId)
		}
		back := amqp.Publishing{MessageId: d.MessageId, Body: d.Body, CorrelationId: d.CorrelationId, Headers: d.Headers}
		back.Headers["x-delayq-retry-cause"] = fmt.Sprintf("failed at step %d", step)
		s.publish(t, back)
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		out, _, _ := w.delayq("", "inspect", "flaky")
		return strings.Contains(out, "dead") && strings.Contains(out, "failed at step 2")
	}, func() string { out, e, _ := w.delayq("", "inspect", "flaky"); return out + e })
}

// scrape returns the scanner's /metrics page.
func (p *proc) scrape(t *testing.T) string {
	t.Helper()
	_, body := get("http://" + p.metrics + "/metrics")
	return body
}

// deepTable is a table nested n deep.
func deepTable(n int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range n - 1 {
		t = amqp.Table{"in": t}
	}
	return t
}

// flow publishes n messages to the ingress, 50 every 50 ms, each due
// after delay, on a connection of its own, waiting for the broker's
// confirms. It returns their ids and a channel closed when all are
// confirmed.
func (s *ingressSetup) flow(t *testing.T, n int, prefix string, delay time.Duration) ([]string, chan struct{}) {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for start := 0; start < n; start += 50 {
			var dcs []*amqp.DeferredConfirmation
			for _, id := range ids[start:min(start+50, n)] {
				dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), s.inExchange, "rk", false, false,
					amqp.Publishing{MessageId: id, Body: []byte(id), Headers: amqp.Table{"x-delay": int32(delay.Milliseconds())}})
				if err != nil {
					t.Errorf("publish %s: %v", id, err)
					return
				}
				dcs = append(dcs, dc)
			}
			for _, dc := range dcs {
				if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
					t.Errorf("publish not confirmed: %v", err)
					return
				}
			}
			<-tick.C
		}
	}()
	return ids, done
}

// TestIngressSurvivesKillAtEachStep: under a flowing load, the consuming
// process is SIGKILLed at each step of the ingress path (deliveries
// taken, Redis written but not acked, acked); a new process takes over
// and every message is delivered. After the kill between store and ack,
// the broker's redeliveries are acked as duplicates.
func TestIngressSurvivesKillAtEachStep(t *testing.T) {
	for _, step := range []string{"received", "stored", "acked"} {
		t.Run(step, func(t *testing.T) {
			w := newWorld(t, 8)
			s := newIngress(t, w)
			w.consume()
			ids, done := s.flow(t, 1500, step, 200*time.Millisecond)
			first := w.scan(s.env, "DELAYQ_TEST_KILL_AT="+step+":5")
			select {
			case err := <-first.done:
				first.done <- err
				if err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("the first process ended with %v, want SIGKILL at %s", err, step)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("the first process was never killed at %s:\n%s", step, first.log.String())
			}
			second := w.scan(s.env)
			<-done
			dups := w.waitDelivered(ids, 90*time.Second)
			m := second.scrape(t)
			v, _ := metricValue(m, "delayq_ingress_messages_total", `outcome="duplicate"`)
			t.Logf("killed at %s: %d duplicate deliveries, %v ingress duplicates acked", step, dups, v)
			if step == "stored" && v == 0 {
				t.Errorf("after a kill between store and ack, no redelivery was counted as a duplicate")
			}
		})
	}
}

// TestIngressHoldsWhileRedisIsDown: Redis stops under ingress load; the
// ingress stops acking and consuming (the messages wait in the queue),
// then resumes by itself when Redis is back; every message is delivered.
func TestIngressHoldsWhileRedisIsDown(t *testing.T) {
	r, err := shardtest.StartRedis(shardtest.RedisOptions{AOF: true})
	shardtest.Require(t, err)
	t.Cleanup(r.Close)
	w := newWorld(t, 8, "DELAYQ_REDIS_ADDRS="+r.Addr)
	s := newIngress(t, w)
	w.consume()
	p := w.scan(s.env, "DELAYQ_INGRESS_PREFETCH=256")
	ids, done := s.flow(t, 2000, "rd", 100*time.Millisecond)
	w.waitSome(300, 30*time.Second)
	r.Kill()
	shardtest.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(p.log.String(), "holding them unacked") },
		func() string { return "no log line says the ingress holds messages\n" + p.log.String() })
	// Consumption stops: what is published meanwhile waits in the ingress
	// queue (all but the prefetch window, held unacked).
	scheduled := func() int {
		v, _ := metricValue(p.scrape(t), "delayq_ingress_messages_total", `outcome="scheduled"`)
		return int(v)
	}
	stored := scheduled()
	<-done
	delivered := w.count()
	q, err := s.ch.QueueDeclarePassive(s.inQueue, true, false, false, false,
		amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx-" + w.ns})
	must(t, err)
	if now := scheduled(); now != stored || q.Messages < len(ids)-stored-256 {
		t.Errorf("with Redis down: %d stored then %d, %d ready in the ingress queue of %d: the ingress kept consuming",
			stored, now, q.Messages, len(ids))
	}
	must(t, r.Start())
	w.waitDelivered(ids, 90*time.Second)
	t.Logf("Redis down: %d stored, %d delivered, %d waiting in the ingress queue", stored, delivered, q.Messages)
}

// burst publishes n messages due at once to the ingress, as fast as the
// broker confirms them, and returns their ids.
func (s *ingressSetup) burst(t *testing.T, n int, prefix string) []string {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	ids := make([]string, n)
	dcs := make([]*amqp.DeferredConfirmation, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		dcs[i], err = ch.PublishWithDeferredConfirmWithContext(context.Background(), s.inExchange, "rk", false, false,
			amqp.Publishing{MessageId: ids[i], Body: []byte(ids[i]), Headers: amqp.Table{"x-delay": int32(0)}})
		must(t, err)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
	return ids
}

// lastArrival is when the last of ids was first delivered.
func (w *world) lastArrival(ids []string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, id := range ids {
		if rs := w.got[id]; len(rs) > 0 && rs[0].at.After(last) {
			last = rs[0].at
		}
	}
	return last
}

// TestIngressSurvivesKillsDuringBurst: 20,000 messages all due at once sit
// in the ingress queue; the consuming process is SIGKILLed between store
// and ack twice while it drains them (and publishes the due ones), and a
// third process finishes. Every message is delivered, none early, and the
// last one within seconds of the last kill (the 2 s lease brings back what
// a dead process had claimed).
func TestIngressSurvivesKillsDuringBurst(t *testing.T) {
	w := newWorld(t, 8, "DELAYQ_LEASE=2s")
	s := newIngress(t, w)
	w.consume()
	ids := s.burst(t, 20000, "bk")
	var lastKill time.Time
	for _, at := range []string{"stored:4", "stored:6"} {
		p := w.scan(s.env, "DELAYQ_TEST_KILL_AT="+at)
		select {
		case err := <-p.done:
			p.done <- err
			if err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("the process ended with %v, want SIGKILL at %s:\n%s", err, at, p.log.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the process was never killed at %s:\n%s", at, p.log.String())
		}
		lastKill = time.Now()
	}
	delivered := w.count()
	p := w.scan(s.env)
	dups := w.waitDelivered(ids, 120*time.Second)
	last := w.lastArrival(ids).Sub(lastKill)
	v, _ := metricValue(p.scrape(t), "delayq_ingress_messages_total", `outcome="duplicate"`)
	t.Logf("%d delivered before the last kill; the last of 20,000 arrived %s after it; %d duplicate deliveries, %v ingress duplicates acked",
		delivered, last.Round(time.Millisecond), dups, v)
	if last > 30*time.Second {
		t.Errorf("the last message arrived %s after the last kill, want within 30 s", last)
	}
	if v == 0 {
		t.Error("no redelivery after a kill between store and ack was counted as a duplicate")
	}
}

// TestIngressDropsBrokerHeaders: a message the quorum ingress queue
// redelivers carries x-delivery-count, and one that was dead-lettered on
// its way carries x-death and x-first/last-death-*: the classic target
// queue's consumer sees none of them (it would take a first delivery for
// a retry). Header names keep their case: X-Delay is not the delay.
func TestIngressDropsBrokerHeaders(t *testing.T) {
	w := newWorld(t, 4)
	s := newIngress(t, w)
	s.publish(t, amqp.Publishing{MessageId: "redelivered", Headers: amqp.Table{"x-delay": int32(100), "kind": "k"}})
	// Deliver it once and give it back: the queue counts the delivery.
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	ch, err := conn.Channel()
	must(t, err)
	ds, err := ch.Consume(s.inQueue, "", false, false, false, false, nil)
	must(t, err)
	for range 2 {
		d := <-ds
		must(t, d.Nack(false, true))
	}
	_ = conn.Close()
	s.publish(t, amqp.Publishing{MessageId: "dead-lettered", Headers: amqp.Table{"x-delay": int32(100),
		"x-death":             []any{amqp.Table{"count": int64(3), "reason": "rejected", "queue": "work"}},
		"x-first-death-queue": "work", "x-first-death-reason": "rejected", "x-last-death-queue": "work"}})
	s.publish(t, amqp.Publishing{MessageId: "mixed-case", Headers: amqp.Table{"X-Delay": int32(600000), "x-delay": int32(100)}})
	w.scan(s.env)
	got := collect(t, s.target, 3, 30*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d of 3 delivered", len(got))
	}
	for _, d := range got {
		for k := range d.Headers {
			if k == "x-delivery-count" || k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
				t.Errorf("%s reached the consumer with %s = %v", d.MessageId, k, d.Headers[k])
			}
		}
		switch d.MessageId {
		case "redelivered":
			if d.Headers["kind"] != "k" {
				t.Errorf("redelivered: its own header lost: %v", d.Headers)
			}
		case "mixed-case":
			if d.Headers["X-Delay"] != int32(600000) {
				t.Errorf("mixed-case: X-Delay not kept as sent: %v", d.Headers)
			}
		}
	}
}

// TestIngressCancelRightBehindItsMessage: 200 messages, each followed at
// once by its x-delayq-cancel on the same channel, consumed by 2 and by 3
// scanners: the broker hands a message and its cancel to different
// scanners, which may settle the cancel first. Every cancel must win:
// once all 400 are settled, nothing is scheduled and nothing delivered.
func TestIngressCancelRightBehindItsMessage(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d scanners", n), func(t *testing.T) {
			w := newWorld(t, 4)
			s := newIngress(t, w)
			var scanners []*proc
			for range n {
				p := w.scan(s.env)
				scanners = append(scanners, p)
				shardtest.WaitFor(t, 30*time.Second, func() bool {
					v, _ := metricValue(p.scrape(t), "delayq_ingress_consuming", "")
					return v == 1
				}, func() string { return "a scanner is not consuming the ingress queue:\n" + p.log.String() })
			}
			conn, err := amqp.Dial(rabbit.URL)
			must(t, err)
			defer conn.Close()
			ch, err := conn.Channel()
			must(t, err)
			const pairs = 200
			for i := range pairs {
				id := fmt.Sprintf("pair-%03d", i)
				for _, h := range []amqp.Table{{"x-delay": int32(30000)}, {"x-delayq-cancel": true}} {
					must(t, ch.PublishWithContext(t.Context(), s.inExchange, "rk", false, false, amqp.Publishing{MessageId: id, Headers: h}))
				}
			}
			outcomes := func() map[string]float64 {
				sum := map[string]float64{}
				for _, p := range scanners {
					m := p.scrape(t)
					for _, o := range []string{"scheduled", "cancelled", "cancel_missed", "cancelled_ahead", "rejected"} {
						v, _ := metricValue(m, "delayq_ingress_messages_total", `outcome="`+o+`"`)
						sum[o] += v
					}
				}
				return sum
			}
			shardtest.WaitFor(t, 60*time.Second, func() bool {
				o := outcomes()
				return o["scheduled"]+o["cancelled"]+o["cancel_missed"]+o["cancelled_ahead"]+o["rejected"] >= 2*pairs
			}, func() string { return fmt.Sprintf("not all settled: %v", outcomes()) })
			o := outcomes()
			st := w.stats()
			if st.Total.Scheduled+st.Total.InFlight > 0 || len(collect(t, s.target, 1, 0)) > 0 {
				t.Fatalf("%d scheduled and %d in flight after every cancel was settled (outcomes %v)", st.Total.Scheduled, st.Total.InFlight, o)
			}
			t.Logf("%d scanners: %v cancels found their message, %v came first and won (all %d cancelled)",
				n, o["cancelled"], o["cancelled_ahead"], pairs)
		})
	}
}

// TestIngressFarMessages: with the far tier on, a plugin-style message
// whose x-delay is beyond the horizon waits far, its duplicate is refused
// as for a near one, and an x-delayq-cancel published after it cancels
// it there; a near one beside them is delivered as usual.
func TestIngressFarMessages(t *testing.T) {
	w := newWorld(t, 4)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	must(t, store.EnableFar(context.Background(), shard.FarSettings{Horizon: time.Hour, BucketWidth: 10 * time.Minute, Since: 1}))
	s := newIngress(t, w)
	p := w.scan(s.env)
	threeHours := int32(3 * 3600 * 1000)
	s.publish(t, amqp.Publishing{MessageId: "trial-end", Body: []byte("far"), Headers: amqp.Table{"x-delay": threeHours}})
	s.publish(t, amqp.Publishing{MessageId: "trial-end", Body: []byte("again"), Headers: amqp.Table{"x-delay": threeHours}})
	s.publish(t, amqp.Publishing{MessageId: "renewal", Body: []byte("far"), Headers: amqp.Table{"x-delay": threeHours}})
	s.publish(t, amqp.Publishing{MessageId: "renewal", Headers: amqp.Table{"x-delayq-cancel": true}})
	s.publish(t, amqp.Publishing{MessageId: "soon", Body: []byte("near"), Headers: amqp.Table{"x-delay": int32(300)}})
	if got := collect(t, s.target, 1, 10*time.Second); len(got) != 1 || got[0].MessageId != "soon" {
		t.Fatalf("delivered %d messages, want soon only", len(got))
	}
	prod := shard.NewProducer(store, balance.Static(4), shard.ProducerOptions{})
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		info, err := prod.Inspect(context.Background(), "trial-end")
		gone, err2 := prod.Inspect(context.Background(), "renewal")
		return err == nil && err2 == nil && info.Far && info.Envelope != nil && string(info.Envelope.Body) == "far" &&
			gone.State == shard.StateUnknown
	}, func() string {
		info, _ := prod.Inspect(context.Background(), "trial-end")
		gone, _ := prod.Inspect(context.Background(), "renewal")
		return fmt.Sprintf("trial-end %+v, renewal %+v", info, gone)
	})
	m := p.scrape(t)
	for _, want := range []string{
		fmt.Sprintf(`delayq_ingress_messages_total{outcome="duplicate",queue=%q} 1`, s.inQueue),
		fmt.Sprintf(`delayq_ingress_messages_total{outcome="cancelled",queue=%q} 1`, s.inQueue),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestIngressScopedQueue: a queue mapped to a scope schedules what the
// scope holds and sends the rest to its dead-letter exchange, reason
// outside_scope: another team's ids, another destination, a cancel of an
// id that is not the team's.
func TestIngressScopedQueue(t *testing.T) {
	w := newWorld(t, 4)
	s := newIngress(t, w)
	scopes := filepath.Join(t.TempDir(), "scopes")
	must(t, os.WriteFile(scopes, []byte("team exchange="+w.exchange+"/rk ids=team-\n"), 0o644))
	p := w.scan(s.env+"@team", "DELAYQ_SCOPES_FILE="+scopes)
	s.publish(t, amqp.Publishing{MessageId: "other-1", Headers: amqp.Table{"x-delay": int32(50)}})
	s.publish(t, amqp.Publishing{MessageId: "team-2", Headers: amqp.Table{"x-delay": int32(50), "x-delayq-exchange": "amq.direct"}})
	s.publish(t, amqp.Publishing{MessageId: "other-2", Headers: amqp.Table{"x-delayq-cancel": true}})
	s.publish(t, amqp.Publishing{MessageId: "team-1", Headers: amqp.Table{"x-delay": int32(50)}})
	if got := collect(t, s.target, 1, 30*time.Second); len(got) != 1 || got[0].MessageId != "team-1" {
		t.Errorf("delivered %v, want team-1 alone", got)
	}
	dead := collect(t, s.dlq, 3, 30*time.Second)
	var ids []string
	for _, d := range dead {
		ids = append(ids, d.MessageId)
	}
	sort.Strings(ids)
	if !reflect.DeepEqual(ids, []string{"other-1", "other-2", "team-2"}) {
		t.Errorf("dead-lettered %v, want other-1, other-2 and team-2", ids)
	}
	line := fmt.Sprintf(`delayq_ingress_rejected_total{queue=%q,reason="outside_scope"} 3`, s.inQueue)
	if m := p.scrape(t); !strings.Contains(m, line) {
		t.Errorf("metrics lack %s", line)
	}
	// A scope that is not in the file: scan refuses to start, naming it.
	cmd := exec.Command(bin, "scan")
	cmd.Env = append(append([]string{}, w.env...), s.env+"@nobody", "DELAYQ_SCOPES_FILE="+scopes)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `scope "nobody" is not in DELAYQ_SCOPES_FILE`) {
		t.Errorf("scan with an unknown scope: %v\n%s", err, out)
	}
}
