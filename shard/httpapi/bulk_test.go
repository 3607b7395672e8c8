package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestBulkCancelOverHTTP: a dry run counts; a start answers 202 with the
// job to poll, which ends done with the count; bad filters are 400s
// naming the field, and change nothing.
func TestBulkCancelOverHTTP(t *testing.T) {
	f := newFixture(t)
	t.Parallel()
	f.enqueueAlternating(1200, "campaign", "keep")
	for body, field := range map[string]string{
		`{}`:                                   "filter",
		`{"all":true,"topic":"t"}`:             "filter",
		`{"prefix":"c","from":"soon"}`:         "from",
		`{"prefix":"c","from":"2h","to":"1h"}`: "to",
		`{"prefix":"c","colour":"red"}`:        "colour",
	} {
		if code, v := f.do("POST", "/v1/bulk/cancel", adminToken, js, body); code != http.StatusBadRequest || v["field"] != field {
			t.Errorf("POST %s: %d %v, want 400 naming %s", body, code, v, field)
		}
	}
	if code, _ := f.do("POST", "/v1/bulk/cancel", readToken, js, `{"prefix":"campaign-"}`); code != http.StatusForbidden {
		t.Errorf("a read token starts a bulk cancel: %d", code)
	}
	code, v := f.do("POST", "/v1/bulk/cancel", adminToken, js, `{"prefix":"campaign-","to":"2h","dry_run":true}`)
	if code != http.StatusOK || v["state"] != "dry_run" || v["matched"] != 600.0 {
		t.Fatalf("dry run: %d %v", code, v)
	}
	code, v = f.do("POST", "/v1/bulk/cancel", adminToken, js, `{"prefix":"campaign-","to":"2h"}`)
	if code != http.StatusAccepted || v["state"] != "running" || v["matched"] != 600.0 {
		t.Fatalf("start: %d %v", code, v)
	}
	v = f.waitJob(v["job"].(string))
	if v["done"] != 600.0 || v["action"] != "cancel" {
		t.Errorf("done: %v, want 600 cancelled", v)
	}
	if n, _ := f.st.CountMatching(t.Context(), 4, shard.BulkFilter{All: true}); n != 600 {
		t.Errorf("%d scheduled after the bulk cancel, want the 600 kept", n)
	}
	if code, v := f.do("GET", "/v1/bulk/0123456789abcdef", readToken, "", ""); code != http.StatusNotFound {
		t.Errorf("an unknown job: %d %v", code, v)
	}
	if code, v := f.do("GET", "/v1/bulk/nope", readToken, "", ""); code != http.StatusBadRequest || v["field"] != "job" {
		t.Errorf("a malformed job id: %d %v", code, v)
	}
}

// TestBulkRescheduleOverHTTP: the selected messages move to one time; a
// reschedule needs delay_ms or at_ms, a cancel takes neither.
func TestBulkRescheduleOverHTTP(t *testing.T) {
	f := newFixture(t)
	t.Parallel()
	f.enqueueAlternating(100, "move", "stay")
	for path, body := range map[string]string{
		"/v1/bulk/reschedule": `{"prefix":"move-"}`,
		"/v1/bulk/cancel":     `{"prefix":"move-","delay_ms":1000}`,
	} {
		if code, v := f.do("POST", path, adminToken, js, body); code != http.StatusBadRequest || v["field"] != "delay_ms" {
			t.Errorf("POST %s %s: %d %v, want 400 naming delay_ms", path, body, code, v)
		}
	}
	at := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)
	code, v := f.do("POST", "/v1/bulk/reschedule", adminToken, js, fmt.Sprintf(`{"prefix":"move-","at_ms":%d}`, at.UnixMilli()))
	if code != http.StatusAccepted || v["action"] != "reschedule" || v["matched"] != 50.0 {
		t.Fatalf("start: %d %v", code, v)
	}
	v = f.waitJob(v["job"].(string))
	if v["done"] != 50.0 || v["due"] != at.UTC().Format(time.RFC3339Nano) {
		t.Errorf("done: %v, want 50 moved to %s", v, at.UTC().Format(time.RFC3339Nano))
	}
	if info, err := f.prod.Inspect(t.Context(), "move-0"); err != nil || !info.At.Equal(at) {
		t.Errorf("move-0 is due at %v (%v), want %v", info.At, err, at)
	}
}

// enqueueAlternating schedules n messages an hour ahead, with ids
// "<a>-<i>" and "<b>-<i>" in turn.
func (f *fixture) enqueueAlternating(n int, a, b string) {
	f.t.Helper()
	msgs := make([]shard.Message, n)
	for i := range msgs {
		msgs[i] = shard.Message{ID: fmt.Sprintf("%s-%d", []string{a, b}[i%2], i), Topic: "t", Delay: time.Hour}
	}
	if _, err := f.prod.EnqueueBatch(f.t.Context(), msgs); err != nil {
		f.t.Fatal(err)
	}
}

// waitJob polls GET /v1/bulk/{job} until the job is done and returns it.
func (f *fixture) waitJob(job string) map[string]any {
	f.t.Helper()
	var v map[string]any
	shardtest.WaitFor(f.t, 20*time.Second, func() bool {
		_, v = f.do("GET", "/v1/bulk/"+job, readToken, "", "")
		return v["state"] == "done"
	}, func() string { return fmt.Sprintf("the job: %v", v) })
	return v
}
