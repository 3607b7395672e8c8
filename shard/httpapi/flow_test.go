package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestFlowsOverHTTP: limits and pauses set, listed and cleared over the
// API; bad input is a 400 naming the field and changes nothing.
func TestFlowsOverHTTP(t *testing.T) {
	f := newFixture(t)
	t.Parallel()
	for _, c := range []struct{ method, path, body, field string }{
		{"PUT", "/v1/flows/sms", `{"rate":-5}`, "rate"},
		{"PUT", "/v1/flows/sms", `{"rate":"fast"}`, "rate"},
		{"PUT", "/v1/flows/sms", `{}`, "rate"},
		{"PUT", "/v1/flows/sms", `{"rate":10,"burst":-1}`, "burst"},
		{"PUT", "/v1/flows/sms", `{"rate":10,"colour":"red"}`, "colour"},
		{"POST", "/v1/flows/sms/pause", `{"until":"2001-01-01T00:00:00Z"}`, "until"},
		{"POST", "/v1/flows/sms/pause", `{"until":"-1m"}`, "until"},
		{"POST", "/v1/flows/sms/pause", `{"until":"tomorrow"}`, "until"},
		{"PUT", "/v1/flows/%20sms", `{"rate":10}`, "topic"},
	} {
		if code, v := f.do(c.method, c.path, adminToken, js, c.body); code != http.StatusBadRequest || v["field"] != c.field {
			t.Errorf("%s %s %s: %d %v, want 400 naming %s", c.method, c.path, c.body, code, v, c.field)
		}
	}
	if flows, _ := f.st.Flows(t.Context()); len(flows) != 0 {
		t.Fatalf("bad requests left flows: %+v", flows)
	}
	if code, _ := f.do("PUT", "/v1/flows/sms", readToken, js, `{"rate":10}`); code != http.StatusForbidden {
		t.Errorf("a read token sets a limit: %d", code)
	}
	code, v := f.do("PUT", "/v1/flows/sms", adminToken, js, `{"rate":"30/m","burst":5}`)
	if code != http.StatusOK || v["rate"] != 0.5 || v["burst"] != 5.0 || v["paused"] != false {
		t.Fatalf("limit: %d %v", code, v)
	}
	code, v = f.do("POST", "/v1/flows/sms/pause", adminToken, js, `{"until":"10m"}`)
	if code != http.StatusOK || v["paused"] != true || v["rate"] != 0.5 || v["paused_until"] == nil {
		t.Fatalf("pause: %d %v", code, v)
	}
	code, v = f.do("GET", "/v1/stats", readToken, "", "")
	flows, _ := v["flows"].([]any)
	if code != http.StatusOK || len(flows) != 1 || !strings.Contains(flows[0].(map[string]any)["summary"].(string), "paused until") {
		t.Errorf("stats: %d flows %v", code, v["flows"])
	}
	code, v = f.do("POST", "/v1/flows/sms/resume", adminToken, "", "")
	if code != http.StatusOK || v["paused"] != false || v["summary"] != "limit 0.5/s burst 5" {
		t.Errorf("resume: %d %v", code, v)
	}
	code, v = f.do("PUT", "/v1/flows/sms", adminToken, js, `{"rate":"none"}`)
	if code != http.StatusOK || v["summary"] != "no limit" {
		t.Errorf("no limit: %d %v", code, v)
	}
}
