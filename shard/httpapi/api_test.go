package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/scope"
	"github.com/delayq/delayq/shard/shardtest"
)

var (
	srv    *shardtest.Redis
	srvErr error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if srv, srvErr = shardtest.StartRedis(shardtest.RedisOptions{}); srvErr == nil {
		defer srv.Close()
	}
	return m.Run()
}

const (
	adminToken = "admin-token-0123456789"
	readToken  = "read-token-0123456789ab"
)

type fixture struct {
	t    *testing.T
	url  string
	st   *shard.Store
	prod *shard.Producer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, "# test\nadmin "+adminToken+"\nread "+readToken+"\n", "")
}

// newFixtureWith is an API with the tokens file tokensFile, naming the
// scopes of scopesFile.
func newFixtureWith(t *testing.T, tokensFile, scopesFile string) *fixture {
	t.Helper()
	shardtest.Require(t, srvErr)
	st, err := shard.NewStore(srv.Client(t), shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(st, balance.Static(4), shard.ProducerOptions{MaxBody: 1000})
	scopes, err := scope.ParseSet(strings.NewReader(scopesFile))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := httpapi.ParseTokens(strings.NewReader(tokensFile), scopes)
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Options{Producer: prod, Store: st, Tokens: tokens, Scopes: scopes, MaxBody: 1000,
		Shards: func(context.Context) (int, error) { return 4, nil }})
	ts := httptest.NewServer(api.Handler())
	t.Cleanup(ts.Close)
	return &fixture{t: t, url: ts.URL, st: st, prod: prod}
}

// contract is the served OpenAPI document, loaded and checked once, and a
// router over it: every response a test gets is validated against it.
var contract struct {
	once   sync.Once
	router routers.Router
	err    error
}

// checkContract validates a response to req against the OpenAPI document
// the API serves: a status the document lists for the operation, and a
// body that matches that status's schema and content type.
func (f *fixture) checkContract(req *http.Request, status int, header http.Header, body []byte) {
	f.t.Helper()
	contract.once.Do(func() {
		resp, err := http.Get(f.url + "/v1/openapi.json")
		if err != nil {
			contract.err = err
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		doc, err := openapi3.NewLoader().LoadFromData(raw)
		if err != nil {
			contract.err = fmt.Errorf("load the OpenAPI document: %w", err)
			return
		}
		contract.router, contract.err = legacy.NewRouter(doc) // validates the document too
	})
	if contract.err != nil {
		f.t.Fatalf("OpenAPI document: %v", contract.err)
	}
	route, params, err := contract.router.FindRoute(req)
	if err != nil {
		if status == http.StatusNotFound {
			return // no such endpoint: not in the document, by definition
		}
		f.t.Fatalf("%s %s is not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status, Header: header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		f.t.Errorf("%s %s answered %d, which the OpenAPI document does not allow: %v\n%s", req.Method, req.URL.Path, status, err, body)
	}
}

// send sends a request and returns the response (its body read) and the
// body, checked against the OpenAPI document.
func (f *fixture) send(method, path, token, contentType, body string) (*http.Response, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	f.checkContract(req, resp.StatusCode, resp.Header, raw)
	return resp, raw
}

// do sends a request and returns the status and the decoded JSON body.
func (f *fixture) do(method, path, token, contentType, body string) (int, map[string]any) {
	f.t.Helper()
	resp, raw := f.send(method, path, token, contentType, body)
	var v map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			f.t.Fatalf("%s %s: body is not JSON: %q", method, path, raw)
		}
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		f.t.Errorf("%s %s: %d with Content-Type %q, want application/problem+json", method, path, resp.StatusCode,
			resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, v
}

const js = "application/json"

// TestMessageLifecycle: enqueue, get (with typed headers and properties),
// reschedule, cancel, and the statuses of each error.
func TestMessageLifecycle(t *testing.T) {
	f := newFixture(t)
	code, v := f.do("POST", "/v1/messages", adminToken, js,
		`{"id":"order-42","topic":"order.cancel","delay_ms":60000,"body":"{}","correlation_id":"c-1","headers":{"n":{"$int16":5},"tenant":"acme"}}`)
	if code != 201 || v["id"] != "order-42" || v["due"] == "" {
		t.Fatalf("enqueue: %d %v", code, v)
	}
	code, v = f.do("POST", "/v1/messages", adminToken, js, `{"id":"order-42","topic":"order.cancel","delay_ms":1}`)
	if code != 409 || v["field"] != "id" {
		t.Errorf("duplicate: %d %v", code, v)
	}
	code, v = f.do("GET", "/v1/messages/order-42", readToken, "", "")
	headers, _ := v["headers"].(map[string]any)
	props, _ := v["properties"].(map[string]any)
	if code != 200 || v["state"] != "scheduled" || v["body"] != "{}" || props["correlation_id"] != "c-1" ||
		headers["tenant"] != "acme" || headers["n"].(map[string]any)["$int16"] != 5.0 {
		t.Errorf("get: %d %v", code, v)
	}
	code, v = f.do("POST", "/v1/messages/order-42/reschedule", adminToken, js, `{"delay_ms":120000}`)
	if code != 200 || v["due"] == "" {
		t.Errorf("reschedule: %d %v", code, v)
	}
	if code, v = f.do("DELETE", "/v1/messages/order-42", adminToken, "", ""); code != 204 {
		t.Errorf("cancel: %d %v", code, v)
	}
	if code, v = f.do("DELETE", "/v1/messages/order-42", adminToken, "", ""); code != 404 {
		t.Errorf("cancel again: %d %v", code, v)
	}
	if code, v = f.do("GET", "/v1/messages/order-42", readToken, "", ""); code != 404 || v["field"] != "id" {
		t.Errorf("get after cancel: %d %v", code, v)
	}
}

// TestBadRequests: every kind of bad input is a clear 4xx naming what is
// wrong, and nothing is written.
func TestBadRequests(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name, method, path, token, ctype, body string
		status                                 int
		field                                  string
	}{
		{"no token", "GET", "/v1/stats", "", "", "", 401, ""},
		{"bad token", "GET", "/v1/stats", "not-a-token-at-all", "", "", 401, ""},
		{"read token writes", "POST", "/v1/messages", readToken, js, `{"id":"x","topic":"t","delay_ms":1}`, 403, ""},
		{"wrong content type", "POST", "/v1/messages", adminToken, "text/plain", `{"id":"x","topic":"t","delay_ms":1}`, 415, ""},
		{"malformed JSON", "POST", "/v1/messages", adminToken, js, `{"id":"x",`, 400, ""},
		{"unknown field", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t","delay_ms":1,"colour":"red"}`, 400, "colour"},
		{"delay of the wrong type", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t","delay_ms":"soon"}`, 400, "delay_ms"},
		{"reschedule at_ms too early", "POST", "/v1/messages/x/reschedule", adminToken, js, `{"at_ms":1}`, 400, "at_ms"},
		{"reschedule of the wrong type", "POST", "/v1/messages/x/reschedule", adminToken, js, `{"delay_ms":"soon"}`, 400, "delay_ms"},
		{"reschedule unknown field", "POST", "/v1/messages/x/reschedule", adminToken, js, `{"delay":5}`, 400, "delay"},
		{"batch unknown member", "POST", "/v1/messages/batch", adminToken, js, `{"messages":[],"colour":1}`, 400, "colour"},
		{"bad dead cursor", "GET", "/v1/dead?after=not-a-cursor", readToken, "", "", 400, "after"},
		{"invalid id", "POST", "/v1/messages", adminToken, js, `{"id":"a\u0001b","topic":"t","delay_ms":1}`, 400, "id"},
		{"no delay", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t"}`, 400, "delay_ms"},
		{"body over the limit", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t","delay_ms":1,"body":"` + strings.Repeat("b", 1001) + `"}`, 400, "body"},
		{"request too large", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t","delay_ms":1,"body":"` + strings.Repeat("b", 100<<10) + `"}`, 413, ""},
		{"bad header type", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t","delay_ms":1,"headers":{"h":{"$int9":1}}}`, 400, "headers[h]"},
		{"empty batch", "POST", "/v1/messages/batch", adminToken, js, `{"messages":[]}`, 400, "messages"},
		{"bad id in path", "GET", "/v1/messages/" + strings.Repeat("x", 300), readToken, "", "", 400, "id"},
		{"reschedule both", "POST", "/v1/messages/x/reschedule", adminToken, js, `{"delay_ms":1,"at_ms":2}`, 400, "delay_ms"},
		{"dead limit", "GET", "/v1/dead?limit=100000", readToken, "", "", 400, "limit"},
		{"selection both", "POST", "/v1/dead/redrive", adminToken, js, `{"ids":["a"],"all":true}`, 400, "ids"},
		{"no such endpoint", "GET", "/v1/nothing", readToken, "", "", 404, ""},
		{"a dead message", "POST", "/v1/messages", adminToken, js, `{"id":"x","topic":"t","dead":{"since_ms":1700000000000,"reason":"r"}}`, 400, "dead"},
		{"a schedule's exported state", "PUT", "/v1/schedules/s", adminToken, js, `{"spec":"@daily","message":{"topic":"t"},"state":{"fired":3,"created_ms":1700000000000}}`, 400, "state"},
	} {
		code, v := f.do(c.method, c.path, c.token, c.ctype, c.body)
		if code != c.status || c.field != "" && v["field"] != c.field || v["title"] == "" {
			t.Errorf("%s: %d %v, want %d naming %q", c.name, code, v, c.status, c.field)
		}
	}
	if st, err := f.st.Stats(context.Background(), 4); err != nil || slices.ContainsFunc(st, func(s shard.Stats) bool { return s.Scheduled > 0 }) {
		t.Errorf("something was written: %+v %v", st, err)
	}
}

// TestBatchResultsPerItem: one result per message, in order: scheduled,
// duplicate, invalid (with its field).
func TestBatchResultsPerItem(t *testing.T) {
	f := newFixture(t)
	code, v := f.do("POST", "/v1/messages/batch", adminToken, js, `{"messages":[`+
		`{"id":"b1","topic":"t","delay_ms":1000},{"id":"b1","topic":"t","delay_ms":1000},`+
		`{"id":"b2","topic":"t"},{"id":"b3","exchange":"x","routing_key":"k","at_ms":1800000000000}]}`)
	res, _ := v["results"].([]any)
	if code != 200 || len(res) != 4 {
		t.Fatalf("batch: %d %v", code, v)
	}
	want := []string{"scheduled", "duplicate", "invalid", "scheduled"}
	for i, r := range res {
		item := r.(map[string]any)
		if item["status"] != want[i] {
			t.Errorf("item %d: %v, want %s", i, item, want[i])
		}
	}
	if item := res[2].(map[string]any); item["field"] != "delay_ms" {
		t.Errorf("invalid item names %v, want delay_ms", item["field"])
	}
	// Members of the wrong type or unknown: each item names its field and id.
	_, v = f.do("POST", "/v1/messages/batch", adminToken, js, `{"messages":[`+
		`{"id":"c1","topic":"t","delay_ms":"soon"},{"id":"c2","topic":"t","delay_ms":1,"colour":"red"},`+
		`{"id":"c3","topic":"t","dead":{"since_ms":1700000000000,"reason":"r"}}]}`)
	res, _ = v["results"].([]any)
	for i, want := range [][2]string{{"c1", "delay_ms"}, {"c2", "colour"}, {"c3", "dead"}} {
		if item := res[i].(map[string]any); item["status"] != "invalid" || item["id"] != want[0] || item["field"] != want[1] {
			t.Errorf("item %d: %v, want invalid %s naming %s", i, item, want[0], want[1])
		}
	}
}

// TestDeadRedriveAndPurge: a dead message is listed with its reason,
// redriven (scheduled again) and another purged; the counts follow.
func TestDeadRedriveAndPurge(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, id := range []string{"d1", "d2", "d3"} {
		if _, err := f.prod.Enqueue(ctx, shard.Message{ID: id, Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // claim and bury everything
		r, err := f.st.Claim(ctx, i, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Msgs {
			if _, err := f.st.DeadLetter(ctx, i, c.Lease, "no route for topic t"); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, v := f.do("GET", "/v1/dead", readToken, "", "")
	dead, _ := v["dead"].([]any)
	if code != 200 || len(dead) != 3 || dead[0].(map[string]any)["reason"] != "no route for topic t" {
		t.Fatalf("dead list: %d %v", code, v)
	}
	code, v = f.do("GET", "/v1/dead?limit=2", readToken, "", "")
	next, _ := v["next"].(string)
	if page, _ := v["dead"].([]any); code != 200 || len(page) != 2 || v["more"] != true || next == "" {
		t.Fatalf("first page of 2: %d %v", code, v)
	}
	code, v = f.do("GET", "/v1/dead?limit=2&after="+url.QueryEscape(next), readToken, "", "")
	if page, _ := v["dead"].([]any); code != 200 || len(page) != 1 || v["more"] != false {
		t.Errorf("second page: %d %v", code, v)
	}
	if code, v = f.do("GET", "/v1/dead?after=soon", readToken, "", ""); code != 400 || v["field"] != "after" {
		t.Errorf("bad cursor: %d %v", code, v)
	}
	if code, v = f.do("POST", "/v1/dead/d1/redrive", adminToken, "", ""); code != 204 {
		t.Errorf("redrive: %d %v", code, v)
	}
	if code, v = f.do("DELETE", "/v1/dead/d2", adminToken, "", ""); code != 204 {
		t.Errorf("purge: %d %v", code, v)
	}
	if code, v = f.do("DELETE", "/v1/dead/d2", adminToken, "", ""); code != 404 {
		t.Errorf("purge again: %d %v", code, v)
	}
	code, v = f.do("POST", "/v1/dead/redrive", adminToken, js, `{"all":true}`)
	if code != 200 || v["done"] != 1.0 || v["dead_left"] != 0.0 {
		t.Errorf("redrive all: %d %v", code, v)
	}
	code, v = f.do("GET", "/v1/stats", readToken, "", "")
	total, _ := v["total"].(map[string]any)
	if code != 200 || total["scheduled"] != 2.0 || total["dead"] != 0.0 {
		t.Errorf("stats: %d %v", code, v)
	}
}

// TestOpenAPIMatchesRoutes: the OpenAPI document lists exactly the routes
// the server has.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f := newFixture(t)
	resp, err := http.Get(f.url + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.json: %v %q", err, doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	api := httpapi.New(httpapi.Options{})
	routes := api.Routes()
	slices.Sort(documented)
	slices.Sort(routes)
	if !slices.Equal(documented, routes) {
		t.Errorf("openapi.json documents\n%v\nthe server has\n%v", documented, routes)
	}
}

func TestParseTokens(t *testing.T) {
	for _, bad := range []string{"", "# only a comment\n", "admin\n", "root " + adminToken + "\n", "admin short\n"} {
		if _, err := httpapi.ParseTokens(strings.NewReader(bad), nil); err == nil || strings.Contains(err.Error(), adminToken) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	tk, err := httpapi.ParseTokens(strings.NewReader("read "+readToken+"\nadmin "+adminToken+"\n"), nil)
	if err != nil || tk.Caller(adminToken).Max() != httpapi.RoleAdmin || tk.Caller(readToken).Max() != httpapi.RoleRead ||
		tk.Caller("").Max() != httpapi.RoleNone || tk.Caller(adminToken+"x").Max() != httpapi.RoleNone {
		t.Errorf("roles: %v", err)
	}
	var none *httpapi.Tokens
	if !none.Caller("").Global(httpapi.RoleAdmin) {
		t.Error("no tokens configured should make every request an admin's")
	}

	// Scoped grants: a token on two lines holds both; errors name the line.
	scopes, err := scope.ParseSet(strings.NewReader("billing topic=billing.* ids=billing-\nops topic=ops.*\n"))
	if err != nil {
		t.Fatal(err)
	}
	tk, err = httpapi.ParseTokens(strings.NewReader("produce "+readToken+" billing-api billing\nread "+readToken+" billing-api ops\noperate "+adminToken+" sre\n"), scopes)
	if err != nil {
		t.Fatal(err)
	}
	c := tk.Caller(readToken)
	if c.Holder != "billing-api" || len(c.Grants) != 2 || !c.Scoped() || c.Global(httpapi.RoleRead) ||
		!c.Can(httpapi.RoleProduce, scope.Target{ID: "billing-1", Topic: "billing.refund"}) ||
		c.Can(httpapi.RoleProduce, scope.Target{ID: "o-1", Topic: "ops.page"}) || !c.Can(httpapi.RoleRead, scope.Target{ID: "o-1", Topic: "ops.page"}) {
		t.Errorf("scoped caller: %+v", c)
	}
	if c := tk.Caller(adminToken); c.Scoped() || !c.Global(httpapi.RoleOperate) || c.Global(httpapi.RoleAdmin) {
		t.Errorf("an unscoped operate token: %+v", c)
	}
	for _, c := range []struct{ file, want string }{
		{"produce " + readToken + " api nosuch\n", "tokens line 1: scope \"nosuch\" is not in the scopes file"},
		{"# x\nroot " + readToken + "\n", "tokens line 2: role \"root\""},
		{"read " + readToken + " a\nread " + readToken + " b\n", "tokens line 2: this token is held by \"a\""},
		{"read " + readToken + " a billing extra\n", "tokens line 1: want ROLE TOKEN"},
	} {
		_, err := httpapi.ParseTokens(strings.NewReader(c.file), scopes)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), readToken) {
			t.Errorf("%q: %v, want %q (and never the token)", c.file, err, c.want)
		}
	}
}

// FuzzDecodeBatch: whatever the body, DecodeBatch returns an error or one
// item per message, and never panics.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"messages":[{"id":"a","topic":"t","delay_ms":1},{"id":"b"}]}`))
	f.Add([]byte(`{"messages":[{"id":"a","topic":"t","delay_ms":1,"headers":{"x":{"$decimal":"1.5"}}}]}`))
	f.Add([]byte(`{"messages":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, index, items, err := httpapi.DecodeBatch(b)
		if err != nil {
			return
		}
		if len(msgs) != len(index) || len(items) == 0 || len(items) > httpapi.MaxBatch {
			t.Fatalf("%d messages, %d indexes, %d items", len(msgs), len(index), len(items))
		}
		for j, i := range index {
			if i < 0 || i >= len(items) || items[i].Status != "" || msgs[j].ID == "" {
				t.Fatalf("index %d -> %d of %d items (%+v)", j, i, len(items), items)
			}
		}
	})
}
