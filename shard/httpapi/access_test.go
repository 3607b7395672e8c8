package httpapi_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/shardtest"
)

const scopesFile = `billing  topic=billing.*  ids=billing-
search   topic=search.*   ids=search-
ops      topic=ops.*
`

// Tokens of the matrix: the search team's, one a role; one of ops (a
// scope without id prefixes, so its checks read the stored message); and
// an admin of everything.
var scopedTokens = map[string]string{
	"read@search":    "search-read-0123456789",
	"produce@search": "search-produce-0123456",
	"operate@search": "search-operate-0123456",
	"admin@search":   "search-admin-012345678",
	"operate@ops":    "ops-operate-0123456789",
}

// newScopedFixture is newFixture with scopes, the matrix's tokens, and
// the billing team's things for them to leave alone: a scheduled message,
// a dead one, a schedule and a flow limit.
func newScopedFixture(t *testing.T) *fixture {
	t.Helper()
	file := "admin " + adminToken + " root\nread " + readToken + " auditor\n"
	for grant, token := range scopedTokens {
		role, sc, _ := strings.Cut(grant, "@")
		file += role + " " + token + " " + grant + " " + sc + "\n"
	}
	f := newFixtureWith(t, file, scopesFile)
	prod, st := f.prod, f.st
	ctx := context.Background()
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "billing-dead", Topic: "billing.x"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		r, err := st.Claim(ctx, i, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Msgs {
			if _, err := st.DeadLetter(ctx, i, c.Lease, "no route"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/messages", `{"id":"billing-1","topic":"billing.x","delay_ms":3600000,"body":"b"}`},
		{"PUT", "/v1/schedules/billing-nightly", `{"spec":"30 2 * * *","message":{"topic":"billing.x","body":"run"}}`},
		{"PUT", "/v1/flows/billing.x", `{"rate":10}`},
		{"PUT", "/v1/quotas/billing", `{"max_pending":1000}`},
		{"PUT", "/v1/classes/bills", `{"topics":["billing.x"],"weight":2}`},
	} {
		if code, _ := f.raw(c.method, c.path, adminToken, c.body); code >= 300 {
			t.Fatalf("setup %s %s: %d", c.method, c.path, code)
		}
	}
	return f
}

// raw sends a request (a JSON body, if any) and returns the status and
// the body, checked against the OpenAPI document.
func (f *fixture) raw(method, path, token, body string) (int, string) {
	f.t.Helper()
	ct := ""
	if body != "" {
		ct = js
	}
	resp, b := f.send(method, path, token, ct, body)
	return resp.StatusCode, string(b)
}

// billingState is what the matrix must leave as it was.
func billingState(t *testing.T, f *fixture) string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, id := range []string{"billing-1", "billing-dead"} {
		info, err := f.prod.Inspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id+" "+string(info.State)+" "+info.At.String())
	}
	sc, err := f.st.ScheduleInfo(ctx, "billing-nightly")
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, "schedule version "+string(rune('0'+sc.Version))+" paused "+map[bool]string{true: "yes", false: "no"}[sc.Paused])
	flows, err := f.st.Flows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(flows)
	quotas, err := f.st.Quotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := json.Marshal(quotas)
	classes, err := f.st.Classes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := json.Marshal(classes)
	return strings.Join(append(out, string(b), string(q), string(c)), "\n")
}

// TestScopeMatrix: every route of the OpenAPI document, sent by each
// role of another team's scope (and by a scope without id prefixes) at
// the billing team's message, dead message, schedule, flow and topic:
// none changes anything, and no answer names any of them; a route the
// matrix has no request for fails it, so a new route must be added here
// with the check it needs.
func TestScopeMatrix(t *testing.T) {
	f := newScopedFixture(t)
	before := billingState(t, f)
	// The requests of each route, at what is billing's.
	requests := map[string][][2]string{ // pattern -> {path, body}
		"POST /v1/messages": {{"/v1/messages", `{"id":"billing-2","topic":"billing.x","delay_ms":60000}`},
			{"/v1/messages", `{"id":"search-2","topic":"billing.x","delay_ms":60000}`},
			{"/v1/messages", `{"id":"billing-3","topic":"search.q","delay_ms":60000}`}},
		"POST /v1/messages/batch":           {{"/v1/messages/batch", `{"messages":[{"id":"billing-4","topic":"billing.x","delay_ms":60000}]}`}},
		"GET /v1/messages/{id}":             {{"/v1/messages/billing-1", ""}, {"/v1/messages/billing-dead", ""}},
		"DELETE /v1/messages/{id}":          {{"/v1/messages/billing-1", ""}},
		"POST /v1/messages/{id}/reschedule": {{"/v1/messages/billing-1/reschedule", `{"delay_ms":1000}`}},
		"GET /v1/stats":                     {{"/v1/stats", ""}},
		"GET /v1/stats/due-profile":         {{"/v1/stats/due-profile", ""}, {"/v1/stats/due-profile?topic=billing.x", ""}},
		"GET /v1/stats/rates":               {{"/v1/stats/rates", ""}},
		"GET /v1/shards":                    {{"/v1/shards", ""}},
		"PUT /v1/shards":                    {{"/v1/shards", `{"m":8}`}},
		"GET /v1/dead":                      {{"/v1/dead", ""}},
		"POST /v1/dead/{id}/redrive":        {{"/v1/dead/billing-dead/redrive", ""}},
		"DELETE /v1/dead/{id}":              {{"/v1/dead/billing-dead", ""}},
		"POST /v1/dead/redrive":             {{"/v1/dead/redrive", `{"ids":["billing-dead"]}`}, {"/v1/dead/redrive", `{"all":true}`}},
		"POST /v1/dead/purge":               {{"/v1/dead/purge", `{"ids":["billing-dead"]}`}, {"/v1/dead/purge", `{"all":true}`}},
		"POST /v1/bulk/cancel":              {{"/v1/bulk/cancel", `{"all":true}`}, {"/v1/bulk/cancel", `{"prefix":"billing-"}`}},
		"POST /v1/bulk/reschedule":          {{"/v1/bulk/reschedule", `{"all":true,"delay_ms":1000}`}},
		"GET /v1/bulk/{job}":                {{"/v1/bulk/0123456789abcdef", ""}},
		"GET /v1/far":                       {{"/v1/far", ""}},
		"PUT /v1/far":                       {{"/v1/far", `{"on":true}`}},
		"GET /v1/flows":                     {{"/v1/flows", ""}},
		"GET /v1/quotas":                    {{"/v1/quotas", ""}},
		"PUT /v1/quotas/{scope}":            {{"/v1/quotas/billing", `{"max_pending":5}`}, {"/v1/quotas/search", `{"max_pending":5000000}`}},
		"DELETE /v1/quotas/{scope}":         {{"/v1/quotas/billing", ""}},
		"GET /v1/classes":                   {{"/v1/classes", ""}},
		"PUT /v1/classes/{name}":            {{"/v1/classes/bills", `{"topics":["search.q"]}`}, {"/v1/classes/mine", `{"topics":["search.*"],"strict":true}`}},
		"DELETE /v1/classes/{name}":         {{"/v1/classes/bills", ""}},
		"PUT /v1/flows/{topic}":             {{"/v1/flows/billing.x", `{"rate":1}`}},
		"POST /v1/flows/{topic}/pause":      {{"/v1/flows/billing.x/pause", `{}`}},
		"POST /v1/flows/{topic}/resume":     {{"/v1/flows/billing.x/resume", `{}`}},
		"GET /v1/schedules":                 {{"/v1/schedules", ""}},
		"GET /v1/schedules/{name}":          {{"/v1/schedules/billing-nightly", ""}},
		"PUT /v1/schedules/{name}":          {{"/v1/schedules/billing-nightly", `{"spec":"* * * * *","message":{"topic":"search.q"}}`}, {"/v1/schedules/billing-new", `{"spec":"* * * * *","message":{"topic":"billing.x"}}`}},
		"DELETE /v1/schedules/{name}":       {{"/v1/schedules/billing-nightly", ""}},
		"POST /v1/schedules/{name}/pause":   {{"/v1/schedules/billing-nightly/pause", ""}},
		"POST /v1/schedules/{name}/resume":  {{"/v1/schedules/billing-nightly/resume", ""}},
		"GET /v1/schedules/{name}/preview":  {{"/v1/schedules/billing-nightly/preview", ""}},
		"GET /v1/openapi.json":              {{"/v1/openapi.json", ""}},
		"GET /v1/export":                    {{"/v1/export", ""}, {"/v1/export?kind=dead", ""}, {"/v1/export?kind=schedules", ""}},
	}
	var routes []string
	code, doc := f.raw("GET", "/v1/openapi.json", "", "")
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if code != 200 || json.Unmarshal([]byte(doc), &spec) != nil {
		t.Fatalf("openapi.json: %d", code)
	}
	for path, ops := range spec.Paths {
		for method := range ops {
			routes = append(routes, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(routes)
	var jobs []string
	leaks := []string{"billing-1", "billing-dead", "billing-nightly", "billing.x", "billing-2", "billing-3", "billing-4", "topic=billing.*"}
	for _, route := range routes {
		reqs, ok := requests[route]
		if !ok {
			t.Errorf("%s: no request in the scope matrix; add one, with the access rule it needs", route)
			continue
		}
		method, _, _ := strings.Cut(route, " ")
		for grant, token := range scopedTokens {
			for _, rq := range reqs {
				code, body := f.raw(method, rq[0], token, rq[1])
				switch {
				case code == 403 || code == 404:
				case route == "GET /v1/openapi.json": // the document, the same for everyone
				case code == 200 || code == 202 || code == 204:
					if code == 202 {
						var job struct{ Job string }
						_ = json.Unmarshal([]byte(body), &job)
						jobs = append(jobs, job.Job)
					}
					if strings.Contains(body, `"matched":`) && !strings.Contains(body, `"matched":0`) {
						t.Errorf("%s %s %s by %s: a bulk job selects billing's: %s", method, rq[0], rq[1], grant, body)
					}
					for _, leak := range leaks {
						if strings.Contains(body, leak) && !(route == "POST /v1/messages/batch" && strings.Contains(body, `"forbidden"`)) {
							t.Errorf("%s %s %s by %s: %d names %s: %s", method, rq[0], rq[1], grant, code, leak, body)
						}
					}
					if strings.Contains(body, `"done":`) && !strings.Contains(body, `"done":0`) {
						t.Errorf("%s %s %s by %s: %s", method, rq[0], rq[1], grant, body)
					}
				default:
					t.Errorf("%s %s %s by %s: %d %s, want 403, 404 or an answer without billing's", method, rq[0], rq[1], grant, code, body)
				}
			}
		}
	}
	// The bulk jobs the scoped tokens started run on: wait for their end.
	for _, job := range jobs {
		shardtest.WaitFor(t, 30*time.Second, func() bool {
			_, body := f.raw("GET", "/v1/bulk/"+job, adminToken, "")
			return strings.Contains(body, `"state":"done"`)
		}, func() string { return "bulk job " + job + " never ended" })
	}
	if after := billingState(t, f); after != before {
		t.Errorf("the matrix changed billing's things:\nbefore %s\nafter  %s", before, after)
	}
	for _, id := range []string{"billing-2", "billing-3", "billing-4"} {
		if info, _ := f.prod.Inspect(context.Background(), id); info.State != shard.StateUnknown {
			t.Errorf("%s was enqueued by a token outside billing", id)
		}
	}
}

// TestScopedTokensAct: within its scope a token does what its role
// allows, and lists show it its own; a token of the whole namespace sees
// everyone's.
func TestScopedTokensAct(t *testing.T) {
	f := newScopedFixture(t)
	produce, operate, ops := scopedTokens["produce@search"], scopedTokens["operate@search"], scopedTokens["operate@ops"]
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "/v1/messages", produce, `{"id":"search-1","topic":"search.q","delay_ms":60000}`, 201},
		{"GET", "/v1/messages/search-1", scopedTokens["read@search"], "", 200},
		{"POST", "/v1/messages/search-1/reschedule", produce, `{"delay_ms":120000}`, 200},
		{"PUT", "/v1/flows/search.q", produce, `{"rate":5}`, 403}, // produce may not operate
		{"PUT", "/v1/flows/search.q", operate, `{"rate":5}`, 200},
		{"PUT", "/v1/schedules/search-hourly", operate, `{"spec":"@hourly","message":{"topic":"search.q"}}`, 201},
		{"DELETE", "/v1/messages/search-1", produce, "", 204},
		// A scope without id prefixes: its checks read the destination.
		{"POST", "/v1/messages", ops, `{"id":"page-1","topic":"ops.page","delay_ms":60000}`, 201},
		{"DELETE", "/v1/messages/billing-1", ops, "", 404},
		{"DELETE", "/v1/messages/page-1", ops, "", 204},
		{"PUT", "/v1/far", scopedTokens["admin@search"], `{"on":true}`, 403}, // the namespace's
	} {
		if code, body := f.raw(c.method, c.path, c.token, c.body); code != c.want {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, code, body, c.want)
		}
	}
	code, body := f.raw("POST", "/v1/messages/batch", produce,
		`{"messages":[{"id":"search-5","topic":"search.q","delay_ms":60000},{"id":"billing-5","topic":"billing.x","delay_ms":60000}]}`)
	if code != 200 || !strings.Contains(body, `"status":"scheduled"`) || !strings.Contains(body, `"status":"forbidden"`) {
		t.Errorf("a batch half outside the scope: %d %s", code, body)
	}
	// A scoped {"all": true} cancels all of the team's own, and nothing
	// else; its job is the team's to follow.
	for _, id := range []string{"search-7", "search-8"} {
		if code, body := f.raw("POST", "/v1/messages", produce, `{"id":"`+id+`","topic":"search.q","delay_ms":60000}`); code != 201 {
			t.Fatalf("enqueue %s: %d %s", id, code, body)
		}
	}
	code, body = f.raw("POST", "/v1/bulk/cancel", operate, `{"all":true}`)
	var job struct {
		Job     string
		Matched int
	}
	if err := json.Unmarshal([]byte(body), &job); code != 202 || err != nil || job.Matched != 4 { // and search-5, and search-hourly's pending occurrence
		t.Fatalf("scoped bulk cancel of all: %d %s", code, body)
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		_, body := f.raw("GET", "/v1/bulk/"+job.Job, operate, "")
		return strings.Contains(body, `"state":"done"`)
	}, func() string { return "the scoped bulk cancel never ended" })
	for id, want := range map[string]shard.State{"search-7": shard.StateUnknown, "search-8": shard.StateUnknown, "billing-1": shard.StateScheduled} {
		if info, _ := f.prod.Inspect(context.Background(), id); info.State != want {
			t.Errorf("after a scoped bulk cancel of all, %s is %s, want %s", id, info.State, want)
		}
	}
	if code, _ := f.raw("GET", "/v1/bulk/"+job.Job, ops, ""); code != 404 {
		t.Errorf("another scope reads the job: %d", code)
	}

	// Lists: the team sees its own, the namespace's reader everyone's.
	for _, c := range []struct {
		path, token string
		see, not    []string
	}{
		{"/v1/flows", operate, []string{"search.q"}, []string{"billing.x"}},
		{"/v1/flows", readToken, []string{"search.q", "billing.x"}, nil},
		{"/v1/schedules", operate, []string{"search-hourly"}, []string{"billing-nightly"}},
		{"/v1/schedules", readToken, []string{"search-hourly", "billing-nightly"}, nil},
		{"/v1/dead", readToken, []string{"billing-dead"}, nil},
	} {
		code, body := f.raw("GET", c.path, c.token, "")
		for _, s := range c.see {
			if code != 200 || !strings.Contains(body, s) {
				t.Errorf("GET %s: %d, want %s in %s", c.path, code, s, body)
			}
		}
		for _, s := range c.not {
			if strings.Contains(body, s) {
				t.Errorf("GET %s: %s is shown to a token outside its scope: %s", c.path, s, body)
			}
		}
	}
}

// TestOpenAPIStatesEachRouteAccess: the OpenAPI document's x-delayq-role
// and x-delayq-scope of every operation are the access rule the server
// registers for the route.
func TestOpenAPIStatesEachRouteAccess(t *testing.T) {
	f := newFixture(t)
	_, doc := f.raw("GET", "/v1/openapi.json", "", "")
	var spec struct {
		Paths map[string]map[string]struct {
			Role  string `json:"x-delayq-role"`
			Scope string `json:"x-delayq-scope"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(doc), &spec); err != nil {
		t.Fatal(err)
	}
	rules := httpapi.New(httpapi.Options{}).RouteRules()
	for path, ops := range spec.Paths {
		for method, op := range ops {
			route := strings.ToUpper(method) + " " + path
			want := rules[route]
			if route == "GET /v1/openapi.json" {
				continue // public
			}
			if got := op.Role + "/" + op.Scope; got != want {
				t.Errorf("%s: the document says %s, the server checks %s", route, got, want)
			}
		}
	}
}
