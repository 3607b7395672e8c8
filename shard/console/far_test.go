package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/console"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestFarPageRefusesReadTokens: a read-only session sees the far page but
// no form, and its POST (with its own valid CSRF token) is a 403 that
// changes nothing; an admin's is asked to confirm turning the tier off.
func TestFarPageRefusesReadTokens(t *testing.T) {
	shardtest.Require(t, srvErr)
	st, err := shard.NewStore(srv.Client(t), shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const reader = "read-token-0123456789"
	tokens, err := httpapi.ParseTokens(strings.NewReader("admin "+admin+"\nread "+reader+"\n"), nil)
	must(err)
	prod := shard.NewProducer(st, balance.Static(2), shard.ProducerOptions{})
	api := httpapi.New(httpapi.Options{Producer: prod, Store: st, Tokens: tokens,
		Shards: func(context.Context) (int, error) { return 2, nil }})
	c, err := console.New(console.Options{API: api, Producer: prod, Tokens: tokens})
	must(err)
	ts := httptest.NewServer(c.Handler())
	t.Cleanup(ts.Close)
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	signIn := func(token string) (get func(string) (int, string), post func(string, url.Values) (int, string)) {
		jar, _ := cookiejar.New(nil)
		cl := &http.Client{Jar: jar}
		read := func(resp *http.Response, err error) (int, string) {
			t.Helper()
			must(err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		get = func(path string) (int, string) { return read(cl.Get(ts.URL + path)) }
		post = func(path string, form url.Values) (int, string) { return read(cl.PostForm(ts.URL+path, form)) }
		_, page := get("/login")
		m := csrf.FindStringSubmatch(page)
		if m == nil {
			t.Fatal("no form token on the sign-in page")
		}
		if code, _ := post("/login", url.Values{"token": {token}, "csrf": {m[1]}}); code != http.StatusOK {
			t.Fatalf("sign in: %d", code)
		}
		return get, post
	}

	get, post := signIn(reader)
	code, page := get("/far")
	if code != http.StatusOK || !strings.Contains(page, `id="far-state">off<`) || strings.Contains(page, `id="far-turn-on"`) {
		t.Fatalf("far page for a read token: %d, want the state and no form:\n%s", code, page)
	}
	m := csrf.FindStringSubmatch(page) // the sign-out form's: a valid token of this session
	if m == nil {
		t.Fatal("no CSRF token on the far page")
	}
	if code, _ := post("/far", url.Values{"action": {"on"}, "csrf": {m[1]}}); code != http.StatusForbidden {
		t.Errorf("a read token turns the tier on: %d, want 403", code)
	}
	if f, err := api.ReadFar(context.Background()); err != nil || f.State != "off" {
		t.Fatalf("after the refused POST: %+v, %v", f, err)
	}

	get, post = signIn(admin)
	_, page = get("/far")
	m = csrf.FindStringSubmatch(page)
	if code, body := post("/far", url.Values{"action": {"on"}, "horizon": {"2h"}, "csrf": {m[1]}}); code != http.StatusOK ||
		!strings.Contains(body, `id="far-horizon">2h0m0s<`) {
		t.Fatalf("an admin turns it on: %d\n%s", code, body)
	}
	if code, body := post("/far", url.Values{"action": {"off"}, "csrf": {m[1]}}); code != http.StatusOK || !strings.Contains(body, "Turn the far tier off?") {
		t.Fatalf("off asks first: %d\n%s", code, body)
	}
	if f, _ := api.ReadFar(context.Background()); f.State != "on" {
		t.Fatalf("turned off before the confirmation: %+v", f)
	}
	if code, body := post("/far", url.Values{"action": {"sideways"}, "csrf": {m[1]}}); code != http.StatusBadRequest {
		t.Errorf("an unknown action: %d %s", code, body)
	}
}
