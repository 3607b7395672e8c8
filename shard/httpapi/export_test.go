package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
)

// TestExportPages: GET /v1/export pages through the scheduled messages,
// limit lines a page, X-Delayq-Next naming the next until the last page;
// the pages together are what delayq export writes. kind=dead and
// kind=schedules give the dead and the schedules in their lines; a bad
// kind, limit or cursor is refused naming it; a read token for the whole
// namespace may, a scoped one may not (TestScopeMatrix).
func TestExportPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var msgs []shard.Message
	for j := range 250 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("e-%03d", j), Topic: "t", Body: []byte(fmt.Sprint("body ", j)),
			Delay: time.Hour + time.Duration(j)*time.Second, Headers: map[string]any{"n": int32(j)}})
	}
	if _, err := f.prod.EnqueueBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := f.prod.UpsertSchedule(ctx, shard.Schedule{Name: "nightly", Spec: "0 2 * * *", Message: shard.Message{Topic: "t", Body: []byte("n")}}); err != nil {
		t.Fatal(err)
	}
	get := func(query string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", f.url+"/v1/export"+query, nil)
		req.Header.Set("Authorization", "Bearer "+readToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	var want strings.Builder
	if err := f.st.Export(ctx, 4, shard.ExportCursor{}, 500, func(x shard.Exported) error {
		want.Write(x.Line) // nil for the schedule's occurrence, left out
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	pages, after := 0, ""
	for {
		code, h, body := get("?limit=100&after=" + url.QueryEscape(after))
		if code != 200 || h.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("page %d: %d %s %s", pages+1, code, h.Get("Content-Type"), body)
		}
		all.WriteString(body)
		pages++
		if after = h.Get("X-Delayq-Next"); after == "" {
			break
		}
		if pages > 5 {
			t.Fatalf("more than 5 pages of 100 for 250 messages")
		}
	}
	if pages != 3 || all.String() != want.String() || strings.Count(all.String(), "\n") != 250 {
		t.Errorf("%d pages, %d lines, the same as delayq export's: %v", pages, strings.Count(all.String(), "\n"), all.String() == want.String())
	}
	if code, _, body := get("?kind=schedules"); code != 200 || !strings.Contains(body, `"name":"nightly"`) || !strings.Contains(body, `"state":{`) {
		t.Errorf("kind=schedules: %d %s", code, body)
	}
	if code, h, body := get("?kind=dead"); code != 200 || body != "" || h.Get("X-Delayq-Next") != "" {
		t.Errorf("kind=dead with none dead: %d %q %q", code, body, h.Get("X-Delayq-Next"))
	}
	for _, c := range []struct{ query, field string }{
		{"?kind=all", "kind"}, {"?limit=0", "limit"}, {"?limit=10001", "limit"}, {"?after=zz", "after"},
		{"?kind=schedules&after=x", "after"}, {"?kind=dead&after=x", "after"},
	} {
		if code, _, body := get(c.query); code != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.query, code, body, c.field)
		}
	}
}
