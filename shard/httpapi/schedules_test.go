package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// doList sends a request whose answer is a JSON array.
func (f *fixture) doList(path, token string) (int, []map[string]any) {
	f.t.Helper()
	req, err := http.NewRequest("GET", f.url+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	f.checkContract(req, resp.StatusCode, resp.Header, raw)
	var v []map[string]any
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &v); err != nil {
			f.t.Fatalf("GET %s: %q is not a JSON array", path, raw)
		}
	}
	return resp.StatusCode, v
}

// TestScheduleLifecycle: create, read, preview in the zone, change,
// pause, resume, list, delete; bad input names its field and stores
// nothing.
func TestScheduleLifecycle(t *testing.T) {
	f := newFixture(t)
	body := `{"spec":"30 2 * * *","zone":"America/New_York","missed":"latest","message":{"topic":"reports","body":"run","headers":{"n":{"$int16":5}}}}`
	code, v := f.do("PUT", "/v1/schedules/nightly", adminToken, js, body)
	if code != 201 || v["name"] != "nightly" || v["next"] == nil || !strings.HasPrefix(v["pending"].(string), "nightly@") {
		t.Fatalf("create: %d %v", code, v)
	}
	msg, _ := v["message"].(map[string]any)
	if msg["topic"] != "reports" || msg["body"] != "run" {
		t.Errorf("message: %v", msg)
	}
	code, v = f.do("PUT", "/v1/schedules/nightly", adminToken, js, strings.Replace(body, "30 2", "45 3", 1))
	if code != 200 || v["version"] != 2.0 || v["spec"] != "45 3 * * *" {
		t.Errorf("change: %d %v", code, v)
	}
	code, list := f.doList("/v1/schedules/nightly/preview?n=3", readToken)
	if code != 200 || len(list) != 3 {
		t.Fatalf("preview: %d %v", code, list)
	}
	for _, o := range list {
		if local := o["local"].(string); !strings.Contains(local, "T03:45:00-0") {
			t.Errorf("preview: %v is not 03:45 in New York", o)
		}
	}
	code, list = f.doList("/v1/schedules/nightly/preview?n=2&start=2031-03-09T00:00:00Z", readToken)
	if code != 200 || len(list) != 2 || list[0]["at"] != "2031-03-09T07:45:00Z" || list[1]["at"] != "2031-03-10T07:45:00Z" {
		t.Errorf("preview from a start across March's change: %d %v", code, list)
	}
	if code, v := f.do("GET", "/v1/schedules/nightly/preview?start=soon", readToken, "", ""); code != 400 || v["field"] != "start" {
		t.Errorf("preview with a bad start: %d %v", code, v)
	}
	if code, v = f.do("POST", "/v1/schedules/nightly/pause", adminToken, "", ""); code != 200 || v["paused"] != true || v["next"] != nil {
		t.Errorf("pause: %d %v", code, v)
	}
	if code, v = f.do("POST", "/v1/schedules/nightly/resume", adminToken, "", ""); code != 200 || v["paused"] != false || v["next"] == nil {
		t.Errorf("resume: %d %v", code, v)
	}
	if code, list = f.doList("/v1/schedules", readToken); code != 200 || len(list) != 1 {
		t.Errorf("list: %d %v", code, list)
	}
	if code, v = f.do("PUT", "/v1/schedules/nightly", readToken, js, body); code != 403 {
		t.Errorf("a read token changes a schedule: %d %v", code, v)
	}
	if code, _ = f.do("DELETE", "/v1/schedules/nightly", adminToken, "", ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, v = f.do("GET", "/v1/schedules/nightly", readToken, "", ""); code != 404 || v["field"] != "name" {
		t.Errorf("get after delete: %d %v", code, v)
	}
	for _, c := range []struct{ path, body, field string }{
		{"/v1/schedules/z", `{"spec":"@daily","zone":"Mars/Olympus","message":{"topic":"t"}}`, "zone"},
		{"/v1/schedules/m", `{"spec":"61 * * * *","message":{"topic":"t"}}`, "spec"},
		{"/v1/schedules/f", `{"spec":"0 0 30 2 *","message":{"topic":"t"}}`, "spec"},
		{"/v1/schedules/e", `{"spec":"@daily","start_ms":1900000000000,"end_ms":1800000000000,"message":{"topic":"t"}}`, "end"},
		{"/v1/schedules/bad%20name", `{"spec":"@daily","message":{"topic":"t"}}`, "name"},
		{"/v1/schedules/x", `{"spec":"@daily","message":{"topic":"t","delay_ms":5}}`, "message.delay"},
		{"/v1/schedules/x", `{"spec":"@daily"}`, "message"},
		{"/v1/schedules/x", `{"spec":"@daily","message":{"topic":"t"},"when":"now"}`, ""},
	} {
		code, v := f.do("PUT", c.path, adminToken, js, c.body)
		if code != 400 || c.field != "" && v["field"] != c.field {
			t.Errorf("PUT %s %s: %d %v, want 400 naming %q", c.path, c.body, code, v, c.field)
		}
	}
	if code, list = f.doList("/v1/schedules", readToken); code != 200 || len(list) != 0 {
		t.Errorf("bad input stored something: %v", list)
	}
}
