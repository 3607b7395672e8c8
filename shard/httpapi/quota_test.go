package httpapi_test

import (
	"strings"
	"testing"
)

// TestQuotaOverHTTP: an admin of the namespace sets a team's quota by
// its scope's name; the team's enqueues past it are answered 429 with
// Retry-After (over_quota in a batch); the team sees its own quota and
// may not raise it; bad limits and unknown scopes are refused naming the
// field.
func TestQuotaOverHTTP(t *testing.T) {
	f := newScopedFixture(t)
	produce := scopedTokens["produce@search"]
	if code, body := f.raw("PUT", "/v1/quotas/search", adminToken, `{"max_pending":2}`); code != 200 ||
		!strings.Contains(body, `"rules":"topic=search.* ids=search-"`) || !strings.Contains(body, `"max_pending":2`) {
		t.Fatalf("set a quota: %d %s", code, body)
	}
	for k, want := range []int{201, 201, 429} {
		body := `{"id":"search-q` + string(rune('0'+k)) + `","topic":"search.q","delay_ms":60000}`
		resp, b := f.send("POST", "/v1/messages", produce, "application/json", body)
		if resp.StatusCode != want {
			t.Fatalf("enqueue %d: %d %s, want %d", k, resp.StatusCode, b, want)
		}
		if want == 429 && (resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"field":"quota"`) ||
			!strings.Contains(string(b), "scope search holds 2 of its quota of 2 pending messages")) {
			t.Fatalf("over quota: Retry-After %q, %s", resp.Header.Get("Retry-After"), b)
		}
	}
	if code, body := f.raw("POST", "/v1/messages/batch", produce,
		`{"messages":[{"id":"search-b1","topic":"search.q","delay_ms":60000}]}`); code != 200 || !strings.Contains(body, `"status":"over_quota"`) {
		t.Fatalf("a batch over the quota: %d %s", code, body)
	}
	// Another team is not limited by it.
	if code, body := f.raw("POST", "/v1/messages", adminToken, `{"id":"billing-q","topic":"billing.x","delay_ms":60000}`); code != 201 {
		t.Fatalf("another team's enqueue: %d %s", code, body)
	}
	if code, body := f.raw("GET", "/v1/quotas", scopedTokens["read@search"], ""); code != 200 ||
		!strings.Contains(body, `"scope":"search"`) || strings.Contains(body, `"scope":"billing"`) || !strings.Contains(body, `"refused":2`) {
		t.Fatalf("the team's view of the quotas: %d %s", code, body)
	}
	if code, body := f.raw("PUT", "/v1/quotas/search", scopedTokens["admin@search"], `{"max_pending":100}`); code != 403 {
		t.Fatalf("a team raising its own quota: %d %s", code, body)
	}
	for _, c := range []struct{ path, body, field string }{
		{"/v1/quotas/search", `{"max_pending":-1}`, "max_pending"},
		{"/v1/quotas/search", `{"max_rate":-2}`, "max_rate"},
		{"/v1/quotas/nosuch", `{"max_pending":10}`, "scope"},
		{"/v1/quotas/mail", `{"max_pending":10,"rules":"topic=search.q"}`, "rules"},
	} {
		if code, body := f.raw("PUT", c.path, adminToken, c.body); code != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) {
			t.Errorf("PUT %s %s: %d %s, want 400 naming %s", c.path, c.body, code, body, c.field)
		}
	}
	if code, body := f.raw("DELETE", "/v1/quotas/search", adminToken, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, body := f.raw("POST", "/v1/messages", produce, `{"id":"search-q9","topic":"search.q","delay_ms":60000}`); code != 201 {
		t.Fatalf("enqueue once the quota is gone: %d %s", code, body)
	}
}

// TestClassesOverHTTP: an admin of the namespace sets, lists and deletes
// release classes; bad input is refused naming the field, overlapping
// patterns naming both classes; a team sees the default class and its
// own, and may not set one; the stats carry the classes.
func TestClassesOverHTTP(t *testing.T) {
	f := newScopedFixture(t)
	if code, body := f.raw("PUT", "/v1/classes/search-urgent", adminToken, `{"topics":["search.code"],"strict":true}`); code != 200 ||
		!strings.Contains(body, `"strict":true`) || !strings.Contains(body, `"summary":"strict, topics search.code"`) {
		t.Fatalf("set a class: %d %s", code, body)
	}
	if code, body := f.raw("PUT", "/v1/classes/default", adminToken, `{"weight":2}`); code != 200 || !strings.Contains(body, `"weight":2`) {
		t.Fatalf("set the default class: %d %s", code, body)
	}
	for _, c := range []struct{ path, body, field string }{
		{"/v1/classes/Bad", `{"topics":["x"]}`, "name"},
		{"/v1/classes/neg", `{"topics":["x"],"weight":-1}`, "weight"},
		{"/v1/classes/none", `{"weight":3}`, "topics"},
		{"/v1/classes/star", `{"topics":["a*b"]}`, "topics[0]"},
		{"/v1/classes/twice", `{"topics":["search.*"]}`, "topics"},
		{"/v1/classes/default", `{"topics":["x"]}`, "topics"},
	} {
		if code, body := f.raw("PUT", c.path, adminToken, c.body); code != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) {
			t.Errorf("PUT %s %s: %d %s, want 400 naming %s", c.path, c.body, code, body, c.field)
		}
	}
	if code, body := f.raw("PUT", "/v1/classes/twice", adminToken, `{"topics":["search.*"]}`); !strings.Contains(body, `of class \"search-urgent\"`) {
		t.Errorf("overlap: %d %s; want the other class named", code, body)
	}
	code, body := f.raw("GET", "/v1/classes", scopedTokens["read@search"], "")
	if code != 200 || !strings.Contains(body, `"name":"search-urgent"`) || !strings.Contains(body, `"name":"default"`) || strings.Contains(body, "bills") {
		t.Errorf("the team's view of the classes: %d %s", code, body)
	}
	if code, body := f.raw("GET", "/v1/stats", adminToken, ""); code != 200 || !strings.Contains(body, `"classes":[`) || !strings.Contains(body, `"name":"bills"`) {
		t.Errorf("stats: %d %s; want the classes", code, body)
	}
	if code, body := f.raw("PUT", "/v1/classes/search-urgent", scopedTokens["admin@search"], `{"topics":["search.*"],"strict":true}`); code != 403 {
		t.Errorf("a team making its topics strict: %d %s", code, body)
	}
	if code, body := f.raw("DELETE", "/v1/classes/search-urgent", adminToken, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, body := f.raw("DELETE", "/v1/classes/nosuch", adminToken, ""); code != 404 || !strings.Contains(body, `"field":"name"`) {
		t.Errorf("delete an unknown class: %d %s", code, body)
	}
	if code, body := f.raw("GET", "/v1/classes", adminToken, ""); code != 200 || !strings.Contains(body, `"deleted":true`) {
		t.Errorf("a deleted class still draining: %d %s", code, body)
	}
}
