package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard/ingress"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestDeadlinesExpireWhatTheFleetIsTooLateFor: with the fleet stopped
// for 5 s while messages fall due, those with a maximum lateness of 2 s
// (from the CLI, and through the AMQP ingress) and those whose expiry time
// passed are dead-lettered as expired when a scanner finally claims them,
// none published; those with a maximum lateness of 30 s are all published.
func TestDeadlinesExpireWhatTheFleetIsTooLateFor(t *testing.T) {
	w := newWorld(t, 4)
	s := newIngress(t, w)
	w.consume()
	due := time.Now().Add(10 * time.Second) // time to store them all, through the ingress too
	var b strings.Builder
	var short, long []string
	for i := range 300 {
		id := fmt.Sprintf("dl-%d", i)
		line := map[string]any{"id": id, "exchange": w.exchange, "routing_key": "rk", "at_ms": due.UnixMilli(), "body": id}
		switch i % 3 {
		case 0:
			line["max_lateness_ms"] = 2000
			short = append(short, id)
		case 1:
			line["expires_at_ms"] = due.Add(2 * time.Second).UnixMilli()
			short = append(short, id)
		default:
			line["max_lateness_ms"] = 30000
			long = append(long, id)
		}
		j, _ := json.Marshal(line)
		b.Write(j)
		b.WriteByte('\n')
	}
	if _, e, code := w.delayq(b.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s", e)
	}
	if out, _, _ := w.delayq("", "inspect", "dl-2"); !strings.Contains(out, "max lateness:  30s") {
		t.Errorf("inspect does not show the deadline:\n%s", out)
	}
	// Through the ingress too, taken in by a scanner that is stopped once
	// they are stored, before anything is due.
	for i := range 100 {
		id := fmt.Sprintf("amqp-dl-%d", i)
		s.publish(t, amqp.Publishing{MessageId: id, Body: []byte(id), Headers: amqp.Table{
			ingress.HeaderAt: due.UnixMilli(), ingress.HeaderMaxLateness: int32(2000)}})
		short = append(short, id)
	}
	intake := w.scan(s.env)
	shardtest.WaitFor(t, 20*time.Second, func() bool { return w.stats().Total.Scheduled == 400 },
		func() string { return fmt.Sprintf("%d of 400 scheduled", w.stats().Total.Scheduled) })
	intake.kill()
	if time.Now().After(due) {
		t.Fatalf("the messages fell due before the intake stopped")
	}
	// The fleet is stopped while every message is due and 5 s more.
	shardtest.WaitFor(t, 30*time.Second, func() bool { return w.stats().Total.OldestOverdueSec >= 5 },
		func() string { return fmt.Sprintf("oldest overdue %.1f s", w.stats().Total.OldestOverdueSec) })
	p := w.scan()
	w.waitDelivered(long, 60*time.Second)
	shardtest.WaitFor(t, 30*time.Second, func() bool { return w.stats().Total.Dead == int64(len(short)) },
		func() string { return fmt.Sprintf("%d dead of %d", w.stats().Total.Dead, len(short)) })
	w.mu.Lock()
	for _, id := range short {
		if len(w.got[id]) > 0 {
			t.Errorf("%s was published after its deadline", id)
		}
	}
	w.mu.Unlock()
	out, _, _ := w.delayq("", "dead", "list", "--limit", "1000")
	if n := strings.Count(out, "expired: claimed "); n != len(short) {
		t.Errorf("%d dead messages say they expired, want %d:\n%s", n, len(short), out)
	}
	if v, _ := metricValue(p.scrape(t), "delayq_messages_dead_total", `reason="expired"`); int(v) != len(short) {
		t.Errorf("delayq_messages_dead_total{reason=\"expired\"} = %v, want %d", v, len(short))
	}
}
