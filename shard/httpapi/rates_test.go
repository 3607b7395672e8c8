package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestRates: the fleet's rates from two samples, on their own and in the
// stats (both checked against the OpenAPI document); a bad window is a 400
// naming it.
func TestRates(t *testing.T) {
	f := newFixture(t)
	if code, v := f.do("GET", "/v1/stats/rates", readToken, "", ""); code != 200 || v["lateness_p99_ms"] != nil {
		t.Fatalf("rates with no samples: %d %v", code, v)
	}
	var msgs []shard.Message
	for j := range 30 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("r%d", j), Topic: "t", Delay: time.Hour})
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs[:10]); err != nil {
		t.Fatal(err)
	}
	sample := func() {
		shardtest.WaitFor(t, 5*time.Second, func() bool {
			took, err := f.st.SampleRates(t.Context(), 100*time.Millisecond)
			return took && err == nil
		},
			func() string { return "no sample taken" })
	}
	sample()
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs[10:]); err != nil {
		t.Fatal(err)
	}
	sample()
	code, v := f.do("GET", "/v1/stats/rates?window=1m", readToken, "", "")
	points, _ := v["points"].([]any)
	if code != 200 || len(points) != 1 || v["window_seconds"] != 60.0 {
		t.Fatalf("rates: %d %v", code, v)
	}
	p := points[0].(map[string]any)
	if n := p["enqueued_per_second"].(float64) * p["seconds"].(float64); n < 19 || n > 21 {
		t.Errorf("point: %v, want 20 enqueued over its seconds", p)
	}
	if code, v = f.do("GET", "/v1/stats", readToken, "", ""); code != 200 || v["rates"] == nil {
		t.Errorf("stats without rates: %d %v", code, v)
	}
	for _, q := range []string{"7x", "0s", "1h"} {
		if code, v := f.do("GET", "/v1/stats/rates?window="+q, readToken, "", ""); code != 400 || v["field"] != "window" {
			t.Errorf("window=%s: %d %v", q, code, v)
		}
	}
}
