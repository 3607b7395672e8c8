package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestFlowFromTheCLI: bad rates and pauses exit 2 naming the field and
// change nothing; a limit and a pause are listed with what they hold
// back, each change writes an audit line.
func TestFlowFromTheCLI(t *testing.T) {
	w := newWorld(t, 2)
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"flow", "limit", "sms", "-5"}, "invalid rate"},
		{[]string{"flow", "limit", "sms", "fast"}, "invalid rate"},
		{[]string{"flow", "limit", "sms", "10", "--burst", "-1"}, "invalid burst"},
		{[]string{"flow", "pause", "sms", "--until", "2001-01-01T00:00:00Z"}, "invalid until"},
		{[]string{"flow", "pause", "sms", "--until", "soon"}, "invalid until"},
		{[]string{"flow", "limit", " sms", "10"}, "invalid topic"},
	} {
		if _, e, code := w.delayq("", c.args...); code != 2 || !strings.Contains(e, c.field) {
			t.Errorf("%v: exit %d %q, want 2 naming %s", c.args, code, e, c.field)
		}
	}
	if out, _, code := w.delayq("", "flow"); code != 0 || !strings.Contains(out, "no topic is limited or paused") {
		t.Fatalf("flow after bad input: exit %d %q", code, out)
	}
	out, e, code := w.delayq("", "flow", "limit", "sms", "30/m", "--burst", "5")
	if code != 0 || !strings.Contains(out, "sms: limit 0.5/s burst 5") || !strings.Contains(e, "audit") || !strings.Contains(e, "flow limit") {
		t.Fatalf("flow limit: exit %d %q %q", code, out, e)
	}
	if out, _, code = w.delayq("", "flow", "pause", "sms", "--until", "10m"); code != 0 || !strings.Contains(out, "paused until") {
		t.Fatalf("flow pause: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "flow"); code != 0 || !strings.Contains(out, "limit 0.5/s burst 5, paused until") || !strings.Contains(out, "cli") {
		t.Errorf("flow: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "stats"); code != 0 || !strings.Contains(out, "flow sms: limit 0.5/s burst 5, paused until") {
		t.Errorf("stats: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "flow", "resume", "sms"); code != 0 || !strings.Contains(out, "sms: limit 0.5/s burst 5\n") {
		t.Errorf("flow resume: exit %d %q", code, out)
	}
}

// TestRoutesFileLimits: a scanner stores its routes file's limits, each
// change an audit line; a limit changed at runtime stays when a scanner
// starts with the file's (a warning says so); a limit a routes file set
// goes when the file no longer has it.
func TestRoutesFileLimits(t *testing.T) {
	w := newWorld(t, 2)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	write := func(body string) {
		if err := os.WriteFile(routes, []byte("routes:\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	started := func() *proc {
		p := w.scan("DELAYQ_ROUTES_FILE="+routes, "DELAYQ_DEFAULT_EXCHANGE="+w.exchange)
		waitForLog(t, p.log, "delayq scan running")
		return p
	}
	flows := func() map[string]httpapi.Flow {
		out, e, code := w.delayq("", "flow", "--json")
		var fs []httpapi.Flow
		if err := json.Unmarshal([]byte(out), &fs); code != 0 || err != nil {
			t.Fatalf("flow --json: exit %d %v %s %s", code, err, out, e)
		}
		m := map[string]httpapi.Flow{}
		for _, f := range fs {
			m[f.Topic] = f
		}
		return m
	}
	write("  sms: {exchange: x, routing_key: sms, rate: 100, burst: 10}\n  mail: {exchange: x, routing_key: mail, rate: 5}\n  free: {exchange: x, routing_key: f}\n")
	p := started()
	waitForLog(t, p.log, `"via": "routes"`, `"action": "flow limit"`, "sms: limit 100/s burst 10")
	fs := flows()
	if f := fs["sms"]; f.Rate != 100 || f.Burst != 10 || f.ChangedBy != "routes" || fs["mail"].Rate != 5 || len(fs) != 2 {
		t.Fatalf("flows after start: %+v", fs)
	}
	p.kill()
	if _, e, code := w.delayq("", "flow", "limit", "sms", "50"); code != 0 {
		t.Fatalf("flow limit: %s", e)
	}
	write("  sms: {exchange: x, routing_key: sms, rate: 100, burst: 10}\n  mail: {exchange: x, routing_key: mail}\n")
	p = started()
	waitForLog(t, p.log, "the routes file's limit is not applied", `"topic": "sms"`, `"changed_by": "cli"`)
	waitForLog(t, p.log, `"via": "routes"`, "mail: no limit")
	fs = flows()
	if f := fs["sms"]; f.Rate != 50 || f.ChangedBy != "cli" {
		t.Errorf("sms after a restart with the file's limit: %+v, want the runtime limit 50/s kept", f)
	}
	if f, ok := fs["mail"]; ok && f.Rate != 0 {
		t.Errorf("mail after its limit left the file: %+v, want no limit", f)
	}
	// What a paused topic holds back, in the scanner's metrics.
	if _, e, code := w.delayq("", "flow", "pause", "sms"); code != 0 {
		t.Fatalf("flow pause: %s", e)
	}
	for j := range 5 {
		if _, e, code := w.delayq("", "enqueue", "--id", fmt.Sprintf("s%d", j), "--topic", "sms", "--delay", "1ms", "--body", "x"); code != 0 {
			t.Fatalf("enqueue: %s", e)
		}
	}
	var scraped string
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		scraped = p.scrape(t)
		return strings.Contains(scraped, `delayq_flow_held{namespace="`+w.ns+`",topic="sms"} 5`)
	}, func() string { return "no delayq_flow_held of 5 for sms:\n" + scraped })
	for _, want := range []string{`delayq_flow_paused{namespace="` + w.ns + `",topic="sms"} 1`, `delayq_flow_limit{namespace="` + w.ns + `",topic="sms"} 50`,
		`delayq_flow_held_oldest_seconds{namespace="` + w.ns + `",topic="sms"}`, `delayq_flow_up{namespace="` + w.ns + `"} 1`} {
		if !strings.Contains(scraped, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A bad limit in the file: the scanner refuses to start, naming it.
	write("  sms: {exchange: x, routing_key: sms, rate: -1}\n")
	p = w.scan("DELAYQ_ROUTES_FILE=" + routes)
	select {
	case err := <-p.done:
		if err == nil || !strings.Contains(p.log.String(), `route "sms": rate -1`) {
			t.Errorf("scan with a negative rate: %v, %s", err, p.log)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("scan with a negative rate still runs: %s", p.log)
	}
}

// TestLimitedDrainSurvivesAScannerKill: three scanner processes drain a
// topic limited to 500/s; one is SIGKILLed half way. No second of the
// releases (x-delayq-released-ms, by the Redis clock) has more than the
// limit, and every message arrives, none early. scripts/test.sh runs it
// alone, after the other packages' tests.
func TestLimitedDrainSurvivesAScannerKill(t *testing.T) {
	w := newSerialWorld(t, 16, "DELAYQ_LEASE=3s")
	w.consume()
	if _, e, code := w.delayq("", "flow", "limit", "rk", "500", "--burst", "50"); code != 0 {
		t.Fatalf("flow limit: %s", e)
	}
	var in strings.Builder
	ids := make([]string, 5000)
	for j := range ids {
		ids[j] = fmt.Sprintf("m-%05d", j)
		fmt.Fprintf(&in, `{"id":%q,"topic":"rk","delay_ms":3000,"body":"x"}`+"\n", ids[j])
	}
	if out, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: exit %d %s %s", code, out, e)
	}
	env := "DELAYQ_DEFAULT_EXCHANGE=" + w.exchange
	victim := w.scan(env)
	w.scan(env)
	w.scan(env)
	w.waitSome(2500, 60*time.Second)
	victim.kill()
	w.waitDelivered(ids, 120*time.Second)
	at := w.firstReceipts(ids)
	rel := w.releases(ids)
	most, _ := shardtest.BusiestSecond(rel)
	delivered, _ := shardtest.BusiestSecond(at)
	t.Logf("busiest second: %d released, %d delivered; drained in %s", most, delivered, at[len(at)-1].Sub(at[0]))
	if most > 550 {
		t.Errorf("%d released in one second, want at most 500 + 50", most)
	}
	// 5,000 at 500/s take 10 s; the killed process's leases come back
	// after 3 s, inside the drain, so the kill costs it no more than that.
	if d := at[len(at)-1].Sub(at[0]); d > 14*time.Second {
		t.Errorf("drained in %s, want about 10 s (at most 14 s with the kill)", d)
	}
}

// TestRateLimitHoldsOnCluster is the limit's promise end to end on a
// 3-master Redis Cluster, the limit set in the routes file: 20,000
// messages of a topic limited to 2,000/s with a burst of 200 and 1,000 of
// an unlimited topic fall due at one instant on 16 shards with three
// scanner processes. No second of the releases has more than 2,200 of
// the limited topic, nor any of the consumer's more than that and what
// the path to it crowds together (shardtest.CheckLimit); it drains in 9.9 to 11 s, none is early; the
// unlimited topic arrives within a second. scripts/test.sh runs it alone,
// after the other packages' tests.
func TestRateLimitHoldsOnCluster(t *testing.T) {
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	w := newSerialWorld(t, 16, "DELAYQ_REDIS_ADDRS="+strings.Join(c.Addrs, ","))
	w.consume()
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, fmt.Appendf(nil, "routes:\n  limited: {exchange: %s, routing_key: rk, rate: 2000, burst: 200}\n  free: {exchange: %s, routing_key: rk}\n",
		w.exchange, w.exchange), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.scan("DELAYQ_ROUTES_FILE=" + routes)
	}
	// The routes file's limit is in Redis once a scanner started.
	var out string
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		out, _, _ = w.delayq("", "flow", "--json")
		var flows []httpapi.Flow
		_ = json.Unmarshal([]byte(out), &flows)
		return len(flows) == 1 && flows[0].Topic == "limited" && flows[0].Rate == 2000 && flows[0].Burst == 200 && flows[0].ChangedBy == "routes"
	}, func() string { return "the routes file's limit is not listed: " + out })
	due := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	var in strings.Builder
	var limited, free []string
	for j := range 21000 {
		id, topic := fmt.Sprintf("limited-%05d", j), "limited"
		if j%21 == 20 {
			id, topic = fmt.Sprintf("free-%04d", j/21), "free"
			free = append(free, id)
		} else {
			limited = append(limited, id)
		}
		fmt.Fprintf(&in, `{"id":%q,"topic":%q,"at_ms":%d,"body":"x"}`+"\n", id, topic, due.UnixMilli())
	}
	if out, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 || time.Now().After(due) {
		t.Fatalf("enqueue: exit %d %s %s (due in %s)", code, out, e, time.Until(due))
	}
	w.waitDelivered(free, 30*time.Second)
	fr := w.firstReceipts(free)
	t.Logf("unlimited: first %s, last %s after due", fr[0].Sub(due), fr[len(fr)-1].Sub(due))
	if last := fr[len(fr)-1].Sub(due); last > time.Second {
		t.Errorf("the unlimited topic's last message arrived %s after due, want within 1 s", last)
	}
	w.waitDelivered(limited, 60*time.Second)
	at := w.firstReceipts(limited)
	shardtest.CheckLimit(t, due, at, w.releases(limited), 2200)
	if d := at[len(at)-1].Sub(due); d < 9900*time.Millisecond || d > 11*time.Second {
		t.Errorf("the limited topic drained in %s, want 9.9 to 11 s", d)
	}
}

// firstReceipts are the receive times of ids' first deliveries, sorted.
func (w *world) firstReceipts(ids []string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		if rs := w.got[id]; len(rs) > 0 {
			at = append(at, rs[0].at)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	return at
}

// releases are the x-delayq-released-ms of ids' first deliveries, sorted.
func (w *world) releases(ids []string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		if rs := w.got[id]; len(rs) > 0 {
			if rs[0].releasedMs < rs[0].dueMs {
				w.t.Errorf("%s: released at %d, due at %d", id, rs[0].releasedMs, rs[0].dueMs)
			}
			at = append(at, time.UnixMilli(rs[0].releasedMs))
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	return at
}

// TestLimitWithoutBacklogNeverStampsAReleaseBeforeItsDue: a topic limited
// to 150/s gets 100 messages a second, each due on its own, so the limit
// holds none of them back. x-delayq-released-ms is never before
// x-delayq-due-ms (a grant taken just before a message fell due stamps its
// due time), and every message arrives, none early.
func TestLimitWithoutBacklogNeverStampsAReleaseBeforeItsDue(t *testing.T) {
	w := newWorld(t, 16)
	w.consume()
	if _, e, code := w.delayq("", "flow", "limit", "rk", "150", "--burst", "15"); code != 0 {
		t.Fatalf("flow limit: %s", e)
	}
	w.scan("DELAYQ_DEFAULT_EXCHANGE=" + w.exchange)
	w.scan("DELAYQ_DEFAULT_EXCHANGE=" + w.exchange)
	var in strings.Builder
	ids := make([]string, 800)
	for j := range ids {
		ids[j] = fmt.Sprintf("nb-%04d", j)
		fmt.Fprintf(&in, `{"id":%q,"topic":"rk","delay_ms":%d,"body":"x"}`+"\n", ids[j], 1000+j*10)
	}
	if out, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: exit %d %s %s", code, out, e)
	}
	w.waitDelivered(ids, 60*time.Second)
	held := 0
	w.mu.Lock()
	for _, id := range ids {
		r := w.got[id][0]
		if r.releasedMs == 0 {
			t.Errorf("%s: no x-delayq-released-ms", id)
		} else if r.releasedMs > r.dueMs {
			held++
		}
	}
	w.mu.Unlock()
	w.releases(ids) // fails the test for a release before its due time
	t.Logf("%d of %d released after their due time", held, len(ids))
}
