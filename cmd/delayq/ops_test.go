package main_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue returns the value of the first sample of name whose labels
// contain labels.
func metricValue(body, name, labels string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		if strings.Contains(m[1], labels) {
			v, err := strconv.ParseFloat(m[2], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestMetricsAndHealth: a scanner serves /healthz, /readyz and /metrics with
// the counters, lateness histogram and per-shard gauges moving.
func TestMetricsAndHealth(t *testing.T) {
	w := newWorld(t, 4)
	w.consume()
	p := w.scan()
	base := "http://" + p.metrics
	shardtest.WaitFor(t, 20*time.Second, func() bool { code, _ := get(base + "/readyz"); return code == 200 },
		func() string { _, b := get(base + "/readyz"); return "never ready: " + b + "\n" + p.log.String() })
	if code, _ := get(base + "/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, _ := get(base + "/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without DELAYQ_PPROF: %d, want 404", code)
	}
	in, ids := w.jsonl(200, 500*time.Millisecond, "m")
	if _, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	if _, e, code := w.delayq("", "enqueue", "--id", "later", "--topic", "t", "--delay", "1h"); code != 0 {
		t.Fatal(e)
	}
	w.waitDelivered(ids, 30*time.Second)
	var body string
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		_, body = get(base + "/metrics")
		v, _ := metricValue(body, "delayq_messages_published_total", "")
		return v >= 200
	}, func() string { return "published counter never reached 200:\n" + body })
	for _, c := range []struct {
		name, labels string
		min          float64
	}{
		{"delayq_messages_claimed_total", "", 200},
		{"delayq_messages_enqueued_total", `shard="` + strconv.Itoa(shardOf("later", 4)) + `"`, 1},
		{"delayq_dispatch_lateness_seconds_count", "", 200},
		{"delayq_claim_lateness_seconds_count", "", 200},
		{"delayq_publish_confirm_seconds_count", "", 200},
		{"delayq_claim_duration_seconds_count", "", 1},
		{"delayq_messages_dead_total", `reason="returned"`, 0},
		{"delayq_shards", "", 4},
		{"delayq_shards_high_water", "", 4},
		{"delayq_shard_scheduled", `shard="` + strconv.Itoa(shardOf("later", 4)) + `"`, 1},
		{"delayq_amqp_ready", "", 1},
		{"delayq_build_info", `goversion="go`, 1},
		{"go_goroutines", "", 1},
	} {
		if v, ok := metricValue(body, c.name, c.labels); !ok || v < c.min {
			t.Errorf("%s%s = %v (present %v), want >= %v", c.name, c.labels, v, ok, c.min)
		}
	}
	if strings.Contains(body, "order-") || strings.Contains(body, `id="`) {
		t.Error("metrics carry message ids: unbounded cardinality")
	}
	// Shutdown: readiness goes first, the process exits 0.
	if err := p.term(30 * time.Second); err != nil {
		t.Errorf("exit: %v\n%s", err, p.log.String())
	}
}

// TestNotReadyWithoutBroker: with RabbitMQ unreachable the scanner is alive
// but not ready, says why, and claims nothing.
func TestNotReadyWithoutBroker(t *testing.T) {
	w := newWorld(t, 4)
	port, _ := shardtest.FreePort()
	p := w.scan("DELAYQ_AMQP_URL=amqp://guest:guest@127.0.0.1:" + strconv.Itoa(port) + "/")
	base := "http://" + p.metrics
	shardtest.WaitFor(t, 20*time.Second, func() bool { code, _ := get(base + "/healthz"); return code == 200 },
		func() string { return "never alive:\n" + p.log.String() })
	code, body := get(base + "/readyz")
	if code != 503 || !strings.Contains(body, "amqp") {
		t.Errorf("/readyz = %d %q, want 503 naming amqp", code, body)
	}
	at := time.Now().Add(-10 * time.Second).UTC().Format(time.RFC3339Nano)
	if _, e, c := w.delayq("", "enqueue", "--id", "waits", "--exchange", "x", "--routing-key", "k", "--at", at); c != 0 {
		t.Fatal(e)
	}
	_, metrics := get(base + "/metrics")
	if v, _ := metricValue(metrics, "delayq_messages_claimed_total", ""); v != 0 {
		t.Errorf("claimed %v messages with no broker to publish to", v)
	}
	// The backlog gauges: one message due, waiting since 10 s ago.
	sh := `shard="` + strconv.Itoa(shardOf("waits", 4)) + `"`
	if v, ok := metricValue(metrics, "delayq_shard_due", sh); !ok || v != 1 {
		t.Errorf("delayq_shard_due{%s} = %v (present %v), want 1", sh, v, ok)
	}
	if v, ok := metricValue(metrics, "delayq_shard_oldest_overdue_seconds", sh); !ok || v < 10 || v > 60 {
		t.Errorf("delayq_shard_oldest_overdue_seconds{%s} = %v (present %v), want 10 to 60", sh, v, ok)
	}
	if out, _, _ := w.delayq("", "inspect", "waits"); !strings.Contains(out, "scheduled") {
		t.Errorf("message not left scheduled: %s", out)
	}
}

func shardOf(id string, m int) int { return shard.Of(id, m) }

// TestProfilesOnRequest: DELAYQ_PPROF=true serves Go's profiles on the
// metrics listener, the block profile included.
func TestProfilesOnRequest(t *testing.T) {
	w := newWorld(t, 4)
	p := w.scan("DELAYQ_PPROF=true")
	base := "http://" + p.metrics
	shardtest.WaitFor(t, 20*time.Second, func() bool { code, _ := get(base + "/debug/pprof/"); return code == 200 },
		func() string { return "no /debug/pprof/:\n" + p.log.String() })
	if code, body := get(base + "/debug/pprof/block?debug=1"); code != 200 || !strings.Contains(body, "cycles/second") {
		t.Errorf("block profile: %d %.200s", code, body)
	}
}
