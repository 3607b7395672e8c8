package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard/httpapi"
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
	w.record(conn, ch)
}

// TestRabbitClusterFailover: a scanner given the three nodes of a RabbitMQ
// cluster publishes through the first; that node, which also leads the
// target quorum queue and the ingress's, is SIGKILLed under a flowing load
// (from the CLI and through the ingress) and restarted. The scanner and
// its ingress fail over to the next node; every message is delivered,
// none early; the time to resume is measured.
func TestRabbitClusterFailover(t *testing.T) {
	shardtest.Require(t, serverErr)
	cl, err := publishertest.StartCluster(3)
	shardtest.Require(t, err)
	t.Cleanup(cl.Close)
	w := newWorld(t, 8, "DELAYQ_AMQP_URL="+strings.Join(cl.URLs, ","))
	w.consumeQuorum(cl.URLs[0], cl.URLs[2]) // the queue's leader is on the node that dies
	// An ingress queue, also led by the node that dies, fed through another.
	conn, err := amqp.Dial(cl.URLs[0])
	must(t, err)
	ch, err := conn.Channel()
	must(t, err)
	inQ, inX := "inq-"+w.ns, "in-"+w.ns
	must(t, ch.ExchangeDeclare(inX, "fanout", true, false, false, false, nil))
	_, err = ch.QueueDeclare(inQ, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	must(t, err)
	must(t, ch.QueueBind(inQ, "", inX, false, nil))
	_ = conn.Close()
	p := w.scan("DELAYQ_INGRESS=" + inQ + "=" + w.exchange)
	viaIngress := publishFlow(t, cl.URLs[1], inX, 1500, "in", 100*time.Millisecond)
	node := p.node
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
	dups := w.waitDelivered(append(ids, <-viaIngress...), 90*time.Second)
	t.Logf("node killed: connected to %s after %s, deliveries resumed after %s; %d duplicates",
		node(), failover.Round(time.Millisecond), resumed.Round(time.Millisecond), dups)
	if st := w.stats(); st.Total.Dead > 0 {
		t.Errorf("%d messages went to the dead set during the failover", st.Total.Dead)
	}
}

// publishFlow publishes n messages to exchange through the node at url,
// 50 every 50 ms with x-delay, retrying each one until the broker confirms
// it (a node of the cluster may die meanwhile: then it reconnects to url).
// The channel gets the ids once every one is confirmed.
func publishFlow(t *testing.T, url, exchange string, n int, prefix string, delay time.Duration) chan []string {
	out := make(chan []string, 1)
	go func() {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		}
		var ch *amqp.Channel
		connect := func() {
			for {
				conn, err := amqp.Dial(url)
				if err == nil {
					if ch, err = conn.Channel(); err == nil && ch.Confirm(false) == nil {
						t.Cleanup(func() { _ = conn.Close() })
						return
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		connect()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for start := 0; start < n; start += 50 {
			for _, id := range ids[start:min(start+50, n)] {
				for {
					dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, "rk", false, false,
						amqp.Publishing{MessageId: id, Headers: amqp.Table{"x-delay": int32(delay.Milliseconds())}})
					if err == nil {
						if ok, err := dc.WaitContext(context.Background()); ok && err == nil {
							break
						}
					}
					// A nack or a lost channel: a new channel, once the
					// queue has had time to elect a leader.
					time.Sleep(200 * time.Millisecond)
					connect()
				}
			}
			<-tick.C
		}
		out <- ids
	}()
	return out
}

// stats reads `delayq stats --json`.
func (w *world) stats() httpapi.Stats {
	w.t.Helper()
	out, e, code := w.delayq("", "stats", "--json")
	var st httpapi.Stats
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		w.t.Fatalf("stats --json: exit %d: %s%s", code, out, e)
	}
	return st
}

// TestRabbitClusterSlowElection: the node two scanners publish through,
// which also leads the target quorum queue, is SIGKILLed while a third
// node is paused (SIGSTOP, as a GC or VM pause would), so the queue cannot
// elect its new leader until the pause ends, long after the scanners have
// reconnected to the surviving node. RabbitMQ 3.10 nacks every publish of
// a channel opened during the election, for good. No message may go to the
// dead set, and every one is delivered, none early, for pauses of 0.5 to
// 3 s. The killed node is restarted between rounds.
func TestRabbitClusterSlowElection(t *testing.T) {
	shardtest.Require(t, serverErr)
	t.Parallel()
	cl, err := publishertest.StartCluster(3)
	shardtest.Require(t, err)
	t.Cleanup(cl.Close)
	first := strings.TrimSuffix(strings.TrimPrefix(cl.URLs[0], "amqp://guest:guest@"), "/")
	for round, pause := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second} {
		t.Run(pause.String(), func(t *testing.T) {
			if round > 0 {
				must(t, cl.Restart(0)) // rejoins; the next queue is led by it again
			}
			w := newSerialWorld(t, 8, "DELAYQ_AMQP_URL="+strings.Join(cl.URLs, ","))
			w.consumeQuorum(cl.URLs[0], cl.URLs[1]) // led by the node that dies, consumed through a survivor
			scanners := []*proc{w.scan(), w.scan()}
			for _, p := range scanners {
				shardtest.WaitFor(t, 30*time.Second, func() bool { return p.node() == first },
					func() string { return "not connected to " + first + ":\n" + p.log.String() })
			}
			in, ids := w.jsonl(3000, 8*time.Second, "el")
			if _, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
				t.Fatal(e)
			}
			w.waitSome(500, 30*time.Second)
			must(t, cl.Nodes[2].Pause())
			killed := time.Now()
			cl.Nodes[0].Kill()
			time.Sleep(pause) // the fault itself: how long the third node stays paused
			must(t, cl.Nodes[2].Resume())
			before, resumed := w.count(), time.Duration(0)
			deadline := time.Now().Add(60 * time.Second)
			for w.count() < len(ids) && time.Now().Before(deadline) {
				if resumed == 0 && w.count() > before+100 {
					resumed = time.Since(killed)
				}
				if st := w.stats(); st.Total.Dead > 0 {
					t.Fatalf("%d messages went to the dead set during the election (%d delivered)\n%s", st.Total.Dead, w.count(),
						shardtest.Tail(scanners[0].log.String(), 30))
				}
				time.Sleep(100 * time.Millisecond)
			}
			dups := w.waitDelivered(ids, time.Until(deadline)+time.Second)
			if st := w.stats(); st.Total.Dead > 0 {
				t.Fatalf("%d messages in the dead set", st.Total.Dead)
			}
			replaced := 0
			for _, p := range scanners {
				replaced += strings.Count(p.log.String(), "nacked a publish; replacing it")
			}
			t.Logf("third node paused %s while the leader's node was SIGKILLed: deliveries resumed after %s, %d nack streaks; all %d delivered, %d duplicates, none dead",
				pause, resumed.Round(time.Millisecond), replaced, len(ids), dups)
		})
	}
}

// node is the node the scanner publishes through (delayq_amqp_node), "" if none.
func (p *proc) node() string {
	_, v := get("http://" + p.metrics + "/metrics")
	for _, line := range strings.Split(v, "\n") {
		if strings.HasPrefix(line, "delayq_amqp_node{") {
			return line[strings.Index(line, `"`)+1 : strings.LastIndex(line, `"`)]
		}
	}
	return ""
}
