package scanner_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
)

// fairFleet starts a fleet of m shards whose namespace has classes and a
// backlog of n messages a topic in backlog, due a minute ago, before its
// scanner starts: a fleet that was stopped.
func fairFleet(t *testing.T, m int, classes []shard.Class, backlog map[string]int) (*fleet, map[string][]string) {
	t.Helper()
	ids := map[string][]string{}
	f := newFleetWith(t, m, scanner.Config{Goroutines: 16}, rabbit.URL, func(st *shard.Store) *shard.Store {
		for _, c := range classes {
			if _, err := st.SetClass(t.Context(), c, "test"); err != nil {
				t.Fatal(err)
			}
		}
		prod := shard.NewProducer(st, balance.Static(m), shard.ProducerOptions{})
		past := time.Now().Add(-time.Minute)
		for topic, n := range backlog {
			msgs := make([]shard.Message, n)
			for j := range msgs {
				id := fmt.Sprintf("%s-%05d", topic, j)
				ids[topic] = append(ids[topic], id)
				msgs[j] = shard.Message{ID: id, Topic: topic, At: past.Add(time.Duration(j) * time.Millisecond), Body: []byte("x")}
			}
			for len(msgs) > 0 {
				k := min(len(msgs), 500)
				if _, err := prod.EnqueueBatch(t.Context(), msgs[:k]); err != nil {
					t.Fatal(err)
				}
				msgs = msgs[k:]
			}
		}
		return st
	})
	return f, ids
}

// TestFairReleaseKeepsAClassOnTime: a class with 60,000 messages overdue
// (the fleet was stopped) drains while another class, weight 1:1, gets
// messages due now; those arrive within a second, not behind the backlog;
// nothing is early and everything arrives.
func TestFairReleaseKeepsAClassOnTime(t *testing.T) {
	f, ids := fairFleet(t, 8, []shard.Class{
		{Name: "a", Topics: []string{"t"}, Weight: 1},
		{Name: "b", Topics: []string{"u"}, Weight: 1},
	}, map[string]int{"t": 60000})
	var urgent []string
	for round := range 30 {
		msgs := make([]shard.Message, 20)
		for j := range msgs {
			id := fmt.Sprintf("u-%02d-%02d", round, j)
			urgent = append(urgent, id)
			msgs[j] = shard.Message{ID: id, Topic: "u", Body: []byte("x")}
		}
		if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the load's own pace, not a wait for an outcome
	}
	sentLast := time.Now()
	f.waitAll(urgent, 30*time.Second)
	var late []time.Duration
	for _, id := range urgent {
		d := f.delivered(id)[0]
		late = append(late, d.at.Sub(time.UnixMilli(d.dueMs)))
	}
	slices.Sort(late)
	p99 := late[len(late)*99/100]
	f.waitAll(ids["t"], 2*time.Minute)
	backlog := f.receipts(ids["t"])
	t.Logf("class b: p50 %s, p99 %s, max %s late; class a's backlog drained %s after b's last was sent",
		late[len(late)/2], p99, late[len(late)-1], backlog[len(backlog)-1].Sub(sentLast))
	if p99 > time.Second {
		t.Errorf("class b's p99 lateness %s while a drains, want within 1 s", p99)
	}
	if backlog[len(backlog)-1].Before(sentLast) {
		t.Errorf("class a's backlog drained before class b's last message was sent: the test proves nothing")
	}
	var released dto.Metric
	if err := f.metrics.ClassReleased.WithLabelValues("b").Write(&released); err != nil || released.GetCounter().GetValue() == 0 {
		t.Errorf("class b released nothing from its backlog")
	}
}

// TestFairReleaseSplitsByWeight: two classes backlogged at weights 3:1
// share the releases 3:1 while both wait; a strict class drains before
// either.
func TestFairReleaseSplitsByWeight(t *testing.T) {
	f, ids := fairFleet(t, 8, []shard.Class{
		{Name: "heavy", Topics: []string{"t"}, Weight: 3},
		{Name: "light", Topics: []string{"u"}, Weight: 1},
		{Name: "first", Topics: []string{"late-ok"}, Strict: true},
	}, map[string]int{"t": 30000, "u": 30000, "late-ok": 3000})
	f.waitAll(slices.Concat(ids["t"], ids["u"], ids["late-ok"]), 3*time.Minute)
	heavy, light, strict := f.receipts(ids["t"]), f.receipts(ids["u"]), f.receipts(ids["late-ok"])
	if mid := heavy[len(heavy)/4]; strict[len(strict)-1].After(mid) {
		t.Errorf("the strict class's last arrived %s after a quarter of the heavy class's", strict[len(strict)-1].Sub(mid))
	}
	// While both weighted classes wait: from the strict class's end to
	// the first of them to drain, in windows of a second.
	from, to := strict[len(strict)-1], heavy[len(heavy)-1]
	if l := light[len(light)-1]; l.Before(to) {
		to = l
	}
	to = to.Add(-time.Second)
	count := func(at []time.Time, a, b time.Time) int {
		n := 0
		for _, x := range at {
			if !x.Before(a) && x.Before(b) {
				n++
			}
		}
		return n
	}
	h, l := count(heavy, from, to), count(light, from, to)
	if l == 0 || to.Sub(from) < 2*time.Second {
		t.Fatalf("both classes waited only %s (heavy %d, light %d in it)", to.Sub(from), h, l)
	}
	ratio := float64(h) / float64(l)
	t.Logf("both waiting for %s: heavy %d, light %d, ratio %.3f", to.Sub(from).Round(time.Millisecond), h, l, ratio)
	if ratio < 2.7 || ratio > 3.3 {
		t.Errorf("releases split %.3f:1 while both waited, want 3:1 within 10 %%", ratio)
	}
	for w := from; w.Add(time.Second).Before(to); w = w.Add(time.Second) {
		h, l := count(heavy, w, w.Add(time.Second)), count(light, w, w.Add(time.Second))
		if r := float64(h) / float64(max(l, 1)); r < 2.4 || r > 3.6 {
			t.Errorf("second from %s: heavy %d, light %d: %.2f:1, want 3:1 within 20 %%", w.Sub(from), h, l, r)
		}
	}
}
