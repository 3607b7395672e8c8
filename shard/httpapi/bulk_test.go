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
	var msgs []shard.Message
	for i := range 1200 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("%s-%d", []string{"campaign", "keep"}[i%2], i), Topic: "t", Delay: time.Hour})
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
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
	poll := "/v1/bulk/cancel/" + v["job"].(string)
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		_, v = f.do("GET", poll, readToken, "", "")
		return v["state"] == "done"
	}, func() string { return fmt.Sprintf("the job: %v", v) })
	if v["cancelled"] != 600.0 {
		t.Errorf("done: %v, want 600 cancelled", v)
	}
	if n, _ := f.st.CountMatching(t.Context(), 4, shard.BulkFilter{All: true}); n != 600 {
		t.Errorf("%d scheduled after the bulk cancel, want the 600 kept", n)
	}
	if code, v := f.do("GET", "/v1/bulk/cancel/0123456789abcdef", readToken, "", ""); code != http.StatusNotFound {
		t.Errorf("an unknown job: %d %v", code, v)
	}
	if code, v := f.do("GET", "/v1/bulk/cancel/nope", readToken, "", ""); code != http.StatusBadRequest || v["field"] != "job" {
		t.Errorf("a malformed job id: %d %v", code, v)
	}
}
