package main_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// consumeQuorum is consume with a quorum queue declared through the node
// at declareURL (which makes that node its leader), consumed through the
// node at url.
func (w *world) consumeQuorum(declareURL, url string) {
	t := w.t
	dconn, err := amqp.Dial(declareURL)
	must(t, err)
	dch, err := dconn.Channel()
	must(t, err)
	must(t, dch.ExchangeDeclare(w.exchange, "direct", true, false, false, false, nil))
	_, err = dch.QueueDeclare(w.ns, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	must(t, err)
	must(t, dch.QueueBind(w.ns, "rk", w.exchange, false, nil))
	_ = dconn.Close()
	conn, err := amqp.Dial(url)
	must(t, err)
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.Qos(1000, 0, false))
	d, err := ch.Consume(w.ns, "", false, false, false, false, nil)
	must(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = conn.Close(); wg.Wait() })
	wg.Go(func() {
		for msg := range d {
			due, _ := msg.Headers[shard.HeaderDueMs].(int64)
			att, _ := msg.Headers[shard.HeaderAttempt].(int32)
			w.mu.Lock()
			w.got[msg.MessageId] = append(w.got[msg.MessageId], received{at: time.Now(), dueMs: due, attempt: att})
			w.mu.Unlock()
			_ = msg.Ack(false)
		}
	})
}

// TestRabbitClusterFailover: a scanner given the three nodes of a RabbitMQ
// cluster publishes through the first; that node, which also leads the
// quorum queue, is SIGKILLed under a flowing load and restarted.
// The scanner fails over to the next node; every message is delivered,
// none early; the time to resume is measured.
func TestRabbitClusterFailover(t *testing.T) {
	shardtest.Require(t, serverErr)
	cl, err := publishertest.StartCluster(3)
	shardtest.Require(t, err)
	t.Cleanup(cl.Close)
	w := newWorld(t, 8, "DELAYQ_AMQP_URL="+strings.Join(cl.URLs, ","))
	w.consumeQuorum(cl.URLs[0], cl.URLs[2]) // the queue's leader is on the node that dies
	p := w.scan()
	node := func() string {
		_, v := get("http://" + p.metrics + "/metrics")
		for _, line := range strings.Split(v, "\n") {
			if strings.HasPrefix(line, "delayq_amqp_node{") {
				return line[strings.Index(line, `"`)+1 : strings.LastIndex(line, `"`)]
			}
		}
		return ""
	}
	first := strings.TrimSuffix(strings.TrimPrefix(cl.URLs[0], "amqp://guest:guest@"), "/")
	shardtest.WaitFor(t, 30*time.Second, func() bool { return node() == first },
		func() string {
			return "not connected to the first node " + first + ": " + node() + "\n" + p.log.String()
		})
	in, ids := w.jsonl(3000, 8*time.Second, "fo")
	if _, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	w.waitSome(600, 30*time.Second)
	killed := time.Now()
	cl.Nodes[0].Kill()
	before := w.count()
	shardtest.WaitFor(t, 30*time.Second, func() bool { n := node(); return n != "" && n != first },
		func() string { return "never failed over:\n" + p.log.String() })
	failover := time.Since(killed)
	shardtest.WaitFor(t, 30*time.Second, func() bool { return w.count() > before+100 },
		func() string { return fmt.Sprintf("deliveries did not resume: %d", w.count()) })
	resumed := time.Since(killed)
	must(t, cl.Restart(0))
	dups := w.waitDelivered(ids, 90*time.Second)
	t.Logf("node killed: connected to %s after %s, deliveries resumed after %s; %d duplicates",
		node(), failover.Round(time.Millisecond), resumed.Round(time.Millisecond), dups)
	if out, _, _ := w.delayq("", "stats", "--json"); strings.Contains(out, `"dead": 1`) {
		t.Errorf("a message went to the dead set during the failover: %s", out)
	}
}
