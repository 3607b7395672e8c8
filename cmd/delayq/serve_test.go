package main_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// httpClient is a browser-like client: a cookie jar, and redirects
// followed unless follow is false.
func httpClient(follow bool) *http.Client {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

// send makes a request with optional headers (Host sets the Host header)
// and returns the status and body.
func send(t *testing.T, c *http.Client, method, target string, form url.Values, headers ...string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	must(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := c.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// formToken returns the CSRF token of the form on the page at target.
func formToken(t *testing.T, c *http.Client, target string) string {
	t.Helper()
	code, page := send(t, c, "GET", target, nil)
	m := csrfField.FindStringSubmatch(page)
	if code != 200 || m == nil {
		t.Fatalf("GET %s: %d, no form token:\n%s", target, code, page)
	}
	return m[1]
}

// TestServeInstancesShareSessions: two serve instances with one
// configuration, as behind a round-robin balancer. A sign-in on one works
// on the other, a form from one is accepted by the other, the cookie does
// not carry the token, and a sign-out on one ends the session everywhere,
// for a copied cookie too. Sign-in and sign-out need their form tokens.
// The audit log names who cancelled what, never the token.
func TestServeInstancesShareSessions(t *testing.T) {
	w := newWorld(t, 4)
	for _, id := range []string{"m1", "m2"} {
		if _, e, code := w.delayq("", "enqueue", "--id", id, "--topic", "t", "--delay", "1h"); code != 0 {
			t.Fatal(e)
		}
	}
	a, _ := w.serveLogged(t)
	b, blog := w.serveLogged(t)
	cl := httpClient(true)

	if code, page := send(t, cl, "POST", a+"/login", url.Values{"token": {consoleAdmin}}); code != 403 || !strings.Contains(page, "sign in again") {
		t.Errorf("sign-in without its form token: %d, want 403", code)
	}
	if code, page := send(t, cl, "POST", a+"/login", url.Values{"token": {consoleAdmin}, "csrf": {formToken(t, cl, a+"/login")}}); code != 200 ||
		!strings.Contains(page, `id="totals"`) {
		t.Fatalf("sign in on A: %d\n%s", code, page)
	}
	u, _ := url.Parse(a)
	var copied string
	for _, ck := range cl.Jar.Cookies(u) {
		if strings.Contains(ck.Value, consoleAdmin) {
			t.Errorf("cookie %s carries the token", ck.Name)
		}
		if ck.Name == "delayq_session" {
			copied = ck.Value
		}
	}
	if copied == "" {
		t.Fatal("no session cookie")
	}
	// A form from A, sent to B.
	tok := formToken(t, cl, a+"/messages?id=m1")
	if code, page := send(t, cl, "POST", b+"/messages/cancel", url.Values{"id": {"m1"}, "csrf": {tok}, "confirm": {"yes"}}); code != 200 || !strings.Contains(page, "cancelled m1") {
		t.Fatalf("A's form posted to B: %d\n%s", code, page)
	}
	if code, _ := send(t, cl, "POST", b+"/logout", url.Values{}); code != 403 {
		t.Errorf("sign-out without its form token: %d, want 403", code)
	}
	if code, page := send(t, cl, "GET", a+"/", nil); code != 200 || !strings.Contains(page, `id="totals"`) {
		t.Fatalf("still signed in after a refused sign-out: %d", code)
	}
	if code, page := send(t, cl, "POST", b+"/logout", url.Values{"csrf": {tok}}); code != 200 || !strings.Contains(page, `id="token"`) {
		t.Fatalf("sign out on B: %d\n%s", code, page)
	}
	// The copied cookie is dead on both instances.
	for _, base := range []string{a, b} {
		code, _ := send(t, httpClient(false), "GET", base+"/messages?id=m2", nil, "Cookie", "delayq_session="+copied)
		if code != http.StatusSeeOther {
			t.Errorf("%s: a copy of the signed-out cookie got %d, want the sign-in page (303)", base, code)
		}
	}
	waitForLog(t, blog, `"action": "cancel"`, "m1", `"who": "tokens line 1"`)
}

// waitForLog waits until one line of log holds every part.
func waitForLog(t *testing.T, log *lockedWriter, parts ...string) {
	t.Helper()
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		for _, line := range strings.Split(log.String(), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no log line with %q:\n%s", parts, log.String()) })
}

// TestServeRefusesRebindingAndCrossSite: a request whose Host is a name
// serve does not answer to (a DNS-rebinding page) is refused, with or
// without tokens, and so is a state-changing request that another site's
// page sent (its Origin); the message stays scheduled. An allowed name and
// plain local callers pass.
func TestServeRefusesRebindingAndCrossSite(t *testing.T) {
	w := newWorld(t, 4)
	if _, e, code := w.delayq("", "enqueue", "--id", "m1", "--topic", "t", "--delay", "1h"); code != 0 {
		t.Fatal(e)
	}
	scheduled := func() bool { out, _, _ := w.delayq("", "inspect", "m1"); return strings.Contains(out, "scheduled") }
	open := w.serve(t, "DELAYQ_HTTP_TOKENS_FILE=", "DELAYQ_HTTP_ALLOWED_HOSTS=delayq.internal") // no tokens: every local caller is an admin
	port := open[strings.LastIndex(open, ":")+1:]
	cl := httpClient(false)
	for _, c := range []struct {
		what, method, path string
		headers            []string
		want               int
	}{
		{"rebinding DELETE", "DELETE", "/v1/messages/m1", []string{"Host", "rebind.attacker.test:" + port}, 421},
		{"rebinding console", "GET", "/messages?id=m1", []string{"Host", "rebind.attacker.test:" + port}, 421},
		{"cross-site DELETE", "DELETE", "/v1/messages/m1", []string{"Origin", "http://rebind.attacker.test"}, 403},
		{"cross-site form", "POST", "/messages/cancel", []string{"Origin", "http://evil.test", "Sec-Fetch-Site", "cross-site"}, 403},
		{"sandboxed page", "DELETE", "/v1/messages/m1", []string{"Origin", "null"}, 403},
		{"allowed name, read", "GET", "/v1/messages/m1", []string{"Host", "delayq.internal:" + port}, 200},
		{"localhost, read", "GET", "/v1/stats", []string{"Host", "localhost:" + port}, 200},
	} {
		var form url.Values
		if c.method == "POST" {
			form = url.Values{"id": {"m1"}}
		}
		if code, body := send(t, cl, c.method, open+c.path, form, c.headers...); code != c.want {
			t.Errorf("%s: %d, want %d\n%s", c.what, code, c.want, body)
		}
		if !scheduled() {
			t.Fatalf("%s cancelled m1", c.what)
		}
	}
	if code, _ := send(t, cl, "DELETE", open+"/v1/messages/m1", nil, "Origin", open); code != 204 || scheduled() {
		t.Errorf("a same-origin cancel: %d", code)
	}
}
