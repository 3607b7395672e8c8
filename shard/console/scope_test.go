package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/console"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/scope"
	"github.com/delayq/delayq/shard/shardtest"
)

// A browser signed in to the console: its own cookies, and the form token
// of its session.
type signedIn struct {
	t    *testing.T
	base string
	cl   *http.Client
	csrf string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func signIn(t *testing.T, base, token string) *signedIn {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &signedIn{t: t, base: base, cl: &http.Client{Jar: jar}}
	_, page := b.get("/login")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form token on the sign-in page:\n%s", page)
	}
	if code, body := b.post("/login", url.Values{"token": {token}, "csrf": {m[1]}}); code != 200 {
		t.Fatalf("sign in: %d\n%s", code, body)
	}
	_, page = b.get("/")
	if m = csrfField.FindStringSubmatch(page); m == nil {
		t.Fatalf("no form token once signed in:\n%s", page)
	}
	b.csrf = m[1]
	return b
}

func (b *signedIn) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.cl.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *signedIn) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	if b.csrf != "" {
		form.Set("csrf", b.csrf)
	}
	resp, err := b.cl.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestConsoleScopes: a session of a token limited to a scope sees its
// own messages, dead messages, flows and schedules and nothing of another
// team's on any page, and no page or action of the console (Routes: a
// new one fails this test until it is added here) changes another team's.
func TestConsoleScopes(t *testing.T) {
	shardtest.Require(t, srvErr)
	ctx := context.Background()
	st, err := shard.NewStore(srv.Client(t), shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(st, balance.Static(2), shard.ProducerOptions{})
	scopes, err := scope.ParseSet(strings.NewReader("billing topic=billing.* ids=billing-\nsearch topic=search.* ids=search-\n"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		billingAdmin = "billing-admin-token-0123"
		searchOp     = "search-operate-token-012"
		searchRead   = "search-read-token-012345"
	)
	tokens, err := httpapi.ParseTokens(strings.NewReader("admin "+admin+" root\nadmin "+billingAdmin+" billing-ops billing\n"+
		"operate "+searchOp+" search-ops search\nread "+searchRead+" search-dash search\n"), scopes)
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Options{Producer: prod, Store: st, Tokens: tokens, Shards: func(context.Context) (int, error) { return 2, nil }})
	c, err := console.New(console.Options{API: api, Producer: prod, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(c.Handler())
	t.Cleanup(ts.Close)

	// Billing's things, each with a mark no other team may see.
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "billing-dead", Topic: "billing.x", Body: []byte("MARK-DEAD")}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r, err := st.Claim(ctx, i, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Msgs {
			if _, err := st.DeadLetter(ctx, i, m.Lease, "MARK-REASON"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range []shard.Message{
		{ID: "billing-1", Topic: "billing.x", Body: []byte("MARK-BODY"), Delay: time.Hour},
		{ID: "search-1", Topic: "search.q", Body: []byte("own"), Delay: time.Hour},
	} {
		if _, err := prod.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := prod.UpsertSchedule(ctx, shard.Schedule{Name: "billing-nightly", Spec: "30 2 * * *",
		Message: shard.Message{Topic: "billing.x", Body: []byte("MARK-SCHEDULE")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ChangeFlow(ctx, "test", "root", "limit", "billing.mark-flow", httpapi.FlowRequest{Rate: json.RawMessage(`7`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetQuota(ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.* ids=billing-", MaxPending: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetClass(ctx, shard.Class{Name: "bills", Topics: []string{"billing.mark-class"}, Weight: 2}, "test"); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var out []string
		for _, id := range []string{"billing-1", "billing-dead"} {
			info, _ := prod.Inspect(ctx, id)
			out = append(out, id+" "+string(info.State)+" "+info.At.String())
		}
		sc, _ := st.ScheduleInfo(ctx, "billing-nightly")
		fl, _ := st.Flows(ctx)
		b, _ := json.Marshal(fl)
		qs, _ := st.Quotas(ctx)
		q, _ := json.Marshal(qs)
		cs, _ := st.Classes(ctx)
		c, _ := json.Marshal(cs)
		return strings.Join(append(out, sc.Next.String(), string(b), string(q), string(c)), "\n")
	}
	before := state()
	marks := []string{"MARK-", "billing-1", "billing-dead", "billing-nightly", "billing.mark-flow", "topic=billing.*", "billing.mark-class"}

	// Every page and action, at billing's things. What a request names
	// itself (an id, a topic) may come back in an error; nothing else of
	// billing's may.
	requests := map[string][]struct {
		path string
		form url.Values // nil: a GET
		own  []string   // billing's names the request gives
	}{
		"GET /login":                 {{"/login", nil, nil}},
		"POST /login":                {}, // signIn covers it
		"POST /logout":               {}, // last, below
		"GET /{$}":                   {{"/", nil, nil}, {"/?topic=billing.x", nil, []string{"billing.x"}}},
		"GET /ui/stats":              {{"/ui/stats", nil, nil}},
		"GET /messages":              {{"/messages?id=billing-1", nil, []string{"billing-1"}}, {"/messages?id=billing-dead", nil, []string{"billing-dead"}}},
		"GET /scheduled":             {{"/scheduled", nil, nil}, {"/scheduled?topic=billing.x", nil, []string{"billing.x"}}},
		"POST /messages/cancel":      {{"/messages/cancel", url.Values{"id": {"billing-1"}, "confirm": {"yes"}}, []string{"billing-1"}}},
		"POST /messages/reschedule":  {{"/messages/reschedule", url.Values{"id": {"billing-1"}, "delay": {"1s"}}, []string{"billing-1"}}},
		"POST /scheduled/cancel":     {{"/scheduled/cancel", url.Values{"prefix": {"billing-"}, "confirm": {"yes"}}, nil}},
		"POST /scheduled/reschedule": {{"/scheduled/reschedule", url.Values{"prefix": {"billing-"}, "delay": {"1s"}, "confirm": {"yes"}}, nil}},
		"GET /bulk":                  {{"/bulk?job=0123456789abcdef", nil, nil}},
		"GET /dead":                  {{"/dead", nil, nil}},
		"POST /dead":                 {{"/dead", url.Values{"action": {"purge"}, "id": {"billing-dead"}, "confirm": {"yes"}}, []string{"billing-dead"}}, {"/dead", url.Values{"action": {"purge"}, "all": {"1"}, "confirm": {"yes"}}, nil}},
		"GET /flows":                 {{"/flows", nil, nil}},
		"POST /flows":                {{"/flows", url.Values{"action": {"pause"}, "topic": {"billing.mark-flow"}, "confirm": {"yes"}}, []string{"billing.mark-flow"}}, {"/flows", url.Values{"action": {"limit"}, "topic": {"billing.mark-flow"}, "rate": {"1"}}, []string{"billing.mark-flow"}}},
		"GET /far":                   {{"/far", nil, nil}},
		"GET /quotas":                {{"/quotas", nil, nil}},
		"GET /classes":               {{"/classes", nil, nil}},
		"POST /classes":              {{"/classes", url.Values{"action": {"set"}, "name": {"bills"}, "topics": {"search.q"}, "weight": {"1"}}, nil}, {"/classes", url.Values{"action": {"delete"}, "name": {"bills"}}, nil}, {"/classes", url.Values{"action": {"set"}, "name": {"mine"}, "topics": {"search.*"}, "share": {"strict"}}, nil}},
		"POST /quotas":               {{"/quotas", url.Values{"action": {"set"}, "scope": {"billing"}, "max_pending": {"1"}}, nil}, {"/quotas", url.Values{"action": {"delete"}, "scope": {"billing"}}, nil}, {"/quotas", url.Values{"action": {"set"}, "scope": {"search"}, "max_pending": {"99999"}, "rules": {"topic=search.*"}}, nil}},
		"POST /far":                  {{"/far", url.Values{"action": {"on"}}, nil}},
		"GET /schedules":             {{"/schedules", nil, nil}, {"/schedules?name=billing-nightly", nil, []string{"billing-nightly"}}},
		"POST /schedules":            {{"/schedules", url.Values{"action": {"delete"}, "name": {"billing-nightly"}, "confirm": {"yes"}}, []string{"billing-nightly"}}},
		"GET /export":                {{"/export", nil, nil}},
		"GET /export/{kind}":         {{"/export/messages", nil, nil}, {"/export/schedules", nil, nil}, {"/export/dead", nil, nil}},
	}
	for _, route := range c.Routes() {
		if _, ok := requests[route]; !ok {
			t.Errorf("%s: no request in the console's scope test; add one", route)
		}
	}
	for _, token := range []string{searchOp, searchRead} {
		b := signIn(t, ts.URL, token)
		for _, route := range c.Routes() {
			for _, rq := range requests[route] {
				var code int
				var body string
				if rq.form == nil {
					code, body = b.get(rq.path)
				} else {
					code, body = b.post(rq.path, rq.form)
				}
				for _, m := range marks {
					if strings.Contains(body, m) && !slices.Contains(rq.own, m) && !(m == "billing-1" && slices.Contains(rq.own, "billing-1")) {
						t.Errorf("%s %s %v (%d) shows %q to another team:\n%s", route, rq.path, rq.form, code, m, body)
					}
				}
				for _, m := range []string{"MARK-BODY", "MARK-DEAD", "MARK-REASON", "MARK-SCHEDULE"} {
					if strings.Contains(body, m) {
						t.Errorf("%s %s %v: billing's data %s is shown", route, rq.path, rq.form, m)
					}
				}
			}
		}
		if code, _ := b.post("/logout", url.Values{}); code >= 400 {
			t.Errorf("sign out: %d", code)
		}
	}
	// The bulk jobs run on after their page: wait for their end, then for
	// nothing to have changed.
	search, _ := scopes.Get("search")
	f := shard.BulkFilter{Prefix: "billing-", Within: []*scope.Scope{search}}
	resched, err := f.RescheduleJob(time.Second, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{f.Job(), resched} {
		shardtest.WaitFor(t, 10*time.Second, func() bool {
			j, err := api.ReadBulkJob(ctx, job)
			return err == nil && j.State == "done"
		}, func() string { return "the search team's bulk job " + job + " on billing- never ended" })
	}
	if after := state(); after != before {
		t.Errorf("another team changed billing's things:\nbefore %s\nafter  %s", before, after)
	}

	// Within its scope a session sees and acts; the namespace's admin sees all.
	b := signIn(t, ts.URL, searchOp)
	if _, body := b.get("/scheduled"); !strings.Contains(body, "search-1") {
		t.Errorf("the search team does not see its own message on the scheduled page:\n%s", body)
	}
	if code, body := b.post("/messages/cancel", url.Values{"id": {"search-1"}, "confirm": {"yes"}}); code != 200 || strings.Contains(body, "not found") {
		t.Errorf("the search team cancels its own: %d", code)
	}
	if info, _ := prod.Inspect(ctx, "search-1"); info.State != shard.StateUnknown {
		t.Errorf("search-1 after its team cancelled it: %s", info.State)
	}
	root := signIn(t, ts.URL, admin)
	for path, want := range map[string]string{"/scheduled": "billing-1", "/dead": "billing-dead", "/flows": "billing.mark-flow", "/schedules": "billing-nightly"} {
		if _, body := root.get(path); !strings.Contains(body, want) {
			t.Errorf("the namespace's admin does not see %s on %s", want, path)
		}
	}
	if _, body := signIn(t, ts.URL, billingAdmin).get("/far"); strings.Contains(body, `action="/far"`) {
		t.Error("a scope's admin is offered the far tier's buttons")
	}
}
