package console_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/console"
	"github.com/delayq/delayq/shard/httpapi"
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

const admin = "admin-token-0123456789"

// TestSignInAndCSRF: pages need a session; a bad token is refused; a
// state-changing form without its CSRF token changes nothing; with it,
// the cancel goes through.
func TestSignInAndCSRF(t *testing.T) {
	shardtest.Require(t, srvErr)
	ctx := context.Background()
	st, err := shard.NewStore(srv.Client(t), shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(st, balance.Static(2), shard.ProducerOptions{})
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "m1", Topic: "t", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	tokens, err := httpapi.ParseTokens(strings.NewReader("admin "+admin+"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Options{Producer: prod, Store: st, Tokens: tokens,
		Shards: func(context.Context) (int, error) { return 2, nil }})
	c, err := console.New(console.Options{API: api, Producer: prod, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(c.Handler())
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	b := &signedIn{t: t, base: ts.URL, cl: &http.Client{Jar: jar}} // not yet: no form token
	get, post := b.get, b.post
	if code, body := get("/"); code != 200 || !strings.Contains(body, `id="token"`) {
		t.Fatalf("not signed in: %d, want the sign-in page", code)
	}
	loginToken := func() string {
		_, page := get("/login")
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no form token on the sign-in page:\n%s", page)
		}
		return m[1]
	}
	if code, body := post("/login", url.Values{"token": {"wrong-token-0123456789"}, "csrf": {loginToken()}}); code != 401 || !strings.Contains(body, "not accepted") {
		t.Errorf("bad token: %d", code)
	}
	if code, body := post("/login", url.Values{"token": {admin}, "csrf": {loginToken()}}); code != 200 || !strings.Contains(body, `id="totals"`) {
		t.Fatalf("sign in: %d\n%s", code, body)
	}
	if code, _ := post("/messages/cancel", url.Values{"id": {"m1"}}); code != 403 {
		t.Errorf("cancel without a CSRF token: %d, want 403", code)
	}
	if code, _ := post("/messages/cancel", url.Values{"id": {"m1"}, "csrf": {"0000"}}); code != 403 {
		t.Errorf("cancel with a wrong CSRF token: %d, want 403", code)
	}
	if info, _ := prod.Inspect(ctx, "m1"); info.State != shard.StateScheduled {
		t.Fatalf("m1 changed without a CSRF token: %s", info.State)
	}
	_, page := get("/messages?id=m1")
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the message page:\n%s", page)
	}
	if code, body := post("/messages/cancel", url.Values{"id": {"m1"}, "csrf": {m[1]}}); code != 200 || !strings.Contains(body, "Cancel m1?") {
		t.Errorf("cancel asks first: %d\n%s", code, body)
	}
	if info, _ := prod.Inspect(ctx, "m1"); info.State != shard.StateScheduled {
		t.Fatalf("m1 cancelled before the confirmation: %s", info.State)
	}
	if code, body := post("/messages/cancel", url.Values{"id": {"m1"}, "csrf": {m[1]}, "confirm": {"yes"}}); code != 200 || !strings.Contains(body, "cancelled m1") {
		t.Errorf("cancel with the CSRF token, confirmed: %d", code)
	}
	if info, _ := prod.Inspect(ctx, "m1"); info.State != shard.StateUnknown {
		t.Errorf("m1 after the cancel: %s", info.State)
	}
}
