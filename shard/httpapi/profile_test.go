package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
)

// TestDueProfile: the API counts what falls due per minute and per hour
// as it was enqueued, for the namespace and for one topic; a bad
// resolution or an unknown topic is a 400 naming it.
func TestDueProfile(t *testing.T) {
	f := newFixture(t)
	base := time.Now().Truncate(time.Minute).Add(31*time.Minute + 20*time.Second) // the middle of a minute, 30-31 minutes ahead
	var msgs []shard.Message
	for j := range 200 {
		at := base
		if j >= 150 {
			at = base.Add(3 * time.Hour)
		}
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("p%d", j), Topic: "t", At: at})
	}
	for j := range 20 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("u%d", j), Topic: "u", At: base})
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	code, v := f.do("GET", "/v1/stats/due-profile?topic=t", readToken, "", "")
	if code != 200 || v["topic"] != "t" || v["total"] != 150.0 || v["max"] != 150.0 {
		t.Fatalf("topic t's minute profile: %d %v", code, v)
	}
	code, v = f.do("GET", "/v1/stats/due-profile", readToken, "", "")
	buckets, _ := v["buckets"].([]any)
	if code != 200 || len(buckets) != 60 || v["total"] != 170.0 || v["max"] != 170.0 {
		t.Fatalf("minute profile: %d %v", code, v)
	}
	found := false
	for _, b := range buckets {
		b := b.(map[string]any)
		from, _ := time.Parse(time.RFC3339, b["from"].(string))
		to, _ := time.Parse(time.RFC3339, b["to"].(string))
		if b["count"] == 170.0 {
			found = !base.Before(from) && base.Before(to)
		}
	}
	if !found {
		t.Errorf("the 170 are not in the bucket of %s: %v", base.UTC(), buckets)
	}
	if code, v = f.do("GET", "/v1/stats/due-profile?resolution=hour", readToken, "", ""); code != 200 || v["total"] != 220.0 ||
		len(v["buckets"].([]any)) != 168 {
		t.Errorf("hour profile: %d total %v", code, v["total"])
	}
	for _, c := range []struct{ q, field string }{{"resolution=7x", "resolution"}, {"topic=sms", "topic"}, {"topic=%20t", "topic"}} {
		if code, v := f.do("GET", "/v1/stats/due-profile?"+c.q, readToken, "", ""); code != 400 || v["field"] != c.field {
			t.Errorf("%s: %d %v", c.q, code, v)
		}
	}
}
