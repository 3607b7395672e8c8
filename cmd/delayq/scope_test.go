package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/shard/shardtest"
)

const billingToken = "billing-produce-token-0123"

// TestScopedTokensThroughServe: serve with a scopes file and a token
// limited to the billing scope: it enqueues into billing's topics, is
// refused elsewhere, and does not see another team's message; the audit
// line names it with its grant.
func TestScopedTokensThroughServe(t *testing.T) {
	w := newWorld(t, 4)
	dir := t.TempDir()
	scopes, tokens := filepath.Join(dir, "scopes"), filepath.Join(dir, "tokens")
	must(t, os.WriteFile(scopes, []byte("billing topic=billing.* ids=billing-\nsearch topic=search.* ids=search-\n"), 0o644))
	must(t, os.WriteFile(tokens, []byte("admin "+consoleAdmin+"\nproduce "+billingToken+" billing-api billing\n"), 0o600))
	base, log := w.serveLogged(t, "DELAYQ_SCOPES_FILE="+scopes, "DELAYQ_HTTP_TOKENS_FILE="+tokens)
	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		return apiCallAs(t, token, method, base+path, body)
	}
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "/v1/messages", billingToken, `{"id":"billing-1","topic":"billing.refund","delay_ms":3600000}`, 201},
		{"POST", "/v1/messages", billingToken, `{"id":"billing-2","topic":"search.q","delay_ms":3600000}`, 403},
		{"POST", "/v1/messages", consoleAdmin, `{"id":"search-1","topic":"search.q","delay_ms":3600000}`, 201},
		{"GET", "/v1/messages/search-1", billingToken, "", 404},
		{"DELETE", "/v1/messages/search-1", billingToken, "", 404},
		{"GET", "/v1/messages/search-1", consoleAdmin, "", 200},
		{"DELETE", "/v1/messages/billing-1", billingToken, "", 204},
		{"PUT", "/v1/shards", billingToken, `{"m":8}`, 403},
	} {
		if code, body := call(c.method, c.path, c.token, c.body); code != c.want {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, code, body, c.want)
		}
	}
	if !strings.Contains(log.String(), "billing-api (produce@billing)") {
		t.Errorf("no audit line naming the scoped token's holder and grant:\n%s", log.String())
	}
}

// TestScopesFileRefusedNamingTheLine: serve and scan refuse to start on a
// scopes file or tokens file they cannot use, naming the file and line.
func TestScopesFileRefusedNamingTheLine(t *testing.T) {
	w := newWorld(t, 4)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	good := write("good-scopes", "billing topic=billing.*\n")
	for _, c := range []struct {
		cmd  string
		env  []string
		want []string
	}{
		{"scan", []string{"DELAYQ_SCOPES_FILE=" + write("overlap", "billing topic=billing.*\n\nrefunds topic=billing.refund\n")},
			[]string{"DELAYQ_SCOPES_FILE", "scopes line 3", "overlaps scope \"billing\" (line 1)"}},
		{"serve", []string{"DELAYQ_SCOPES_FILE=" + write("empty", "billing topic=\n")},
			[]string{"DELAYQ_SCOPES_FILE", "scopes line 1", "empty pattern"}},
		{"scan", []string{"DELAYQ_SCOPES_FILE=" + write("quota", "search topic=search.*\nbilling topic=billing.* pending=-5\n")},
			[]string{"DELAYQ_SCOPES_FILE", "scopes line 2", "pending=-5", "a quota is a whole number of messages, 0 or more"}},
		{"serve", []string{"DELAYQ_SCOPES_FILE=" + good, "DELAYQ_HTTP_TOKENS_FILE=" + write("tokens-scope", "admin "+consoleAdmin+"\nproduce "+billingToken+" api payments\n")},
			[]string{"DELAYQ_HTTP_TOKENS_FILE", "tokens line 2", "scope \"payments\" is not in the scopes file"}},
		{"serve", []string{"DELAYQ_HTTP_TOKENS_FILE=" + write("tokens-role", "superuser "+consoleAdmin+"\n")},
			[]string{"DELAYQ_HTTP_TOKENS_FILE", "tokens line 1", "role \"superuser\""}},
	} {
		// A port of its own, and a deadline: a command that does not
		// refuse would otherwise serve on.
		port, err := shardtest.FreePort()
		must(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, c.cmd)
		cmd.Env = append(append([]string{}, w.env...), fmt.Sprintf("DELAYQ_HTTP_ADDR=127.0.0.1:%d", port))
		cmd.Env = append(cmd.Env, c.env...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("%s with %v: %v, want exit 2\n%s", c.cmd, c.env, err, out)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(string(out), s) {
				t.Errorf("%s with %v: the error does not say %q:\n%s", c.cmd, c.env, s, out)
			}
		}
		if strings.Contains(string(out), consoleAdmin) || strings.Contains(string(out), billingToken) {
			t.Errorf("%s: a token in the error:\n%s", c.cmd, out)
		}
	}
}

// TestConsoleScopedInABrowser: in Chromium, a token limited to the search
// team's scope signs in to the console and sees its team's messages,
// flows, schedules and quota, and none of billing's, on every page.
func TestConsoleScopedInABrowser(t *testing.T) {
	w := newWorld(t, 4)
	ctx := browser(t)
	for _, args := range [][]string{
		{"enqueue", "--id", "billing-1", "--topic", "billing.refund", "--delay", "1h"},
		{"enqueue", "--id", "search-1", "--topic", "search.q", "--delay", "1h"},
		{"flow", "limit", "billing.refund", "10"},
		{"flow", "limit", "search.q", "20"},
		{"schedule", "set", "billing-nightly", "30 2 * * *", "--topic", "billing.refund"},
		{"schedule", "set", "search-hourly", "@hourly", "--topic", "search.q"},
		{"quota", "set", "billing", "--pending", "100", "--rules", "topic=billing.* ids=billing-"},
		{"quota", "set", "search", "--pending", "200", "--rules", "topic=search.* ids=search-"},
	} {
		if _, e, code := w.delayq("", args...); code != 0 {
			t.Fatalf("%v: %s", args, e)
		}
	}
	dir := t.TempDir()
	scopes, tokens := filepath.Join(dir, "scopes"), filepath.Join(dir, "tokens")
	must(t, os.WriteFile(scopes, []byte("billing topic=billing.* ids=billing-\nsearch topic=search.* ids=search-\n"), 0o644))
	const searchOps = "search-operate-token-0123"
	must(t, os.WriteFile(tokens, []byte("admin "+consoleAdmin+"\noperate "+searchOps+" search-ops search\n"), 0o600))
	base := w.serve(t, "DELAYQ_SCOPES_FILE="+scopes, "DELAYQ_HTTP_TOKENS_FILE="+tokens)

	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), searchOps), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("totals"))))
	if who, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("who"))); err != nil || !strings.Contains(who, "operate@search") {
		t.Errorf("the header says %q (%v), want the session's grant operate@search", who, err)
	}
	for _, page := range []struct{ path, table, own string }{
		{"/scheduled", "scheduled", "search-1"},
		{"/flows", "flows", "search.q"},
		{"/schedules", "schedules", "search-hourly"},
		{"/quotas", "quotas", "search.*"},
	} {
		must(t, chromedp.Do(ctx, chromedp.Navigate(base+page.path), chromedp.WaitVisible(chromedp.ID(page.table))))
		shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		must(t, err)
		if !strings.Contains(shown, page.own) || strings.Contains(shown, "billing") {
			t.Errorf("%s shows the search team:\n%s\nwant %s and nothing of billing's", page.path, shown, page.own)
		}
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, err)
	t.Logf("screenshot: %s", artifact(t, "console-scoped-schedules.png", png))
	for _, path := range []string{"/", "/dead", "/messages?id=billing-1", "/schedules?name=billing-nightly"} {
		must(t, chromedp.Do(ctx, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main"))))
		shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		must(t, err)
		if strings.Contains(shown, "billing.refund") || strings.Contains(shown, "in 59 m") && strings.Contains(path, "billing-1") {
			t.Errorf("%s shows billing's to the search team:\n%s", path, shown)
		}
	}
}

// TestScopeMetrics: a scanner given the scopes counts each published
// message in its scope's metrics, and a message of no scope in none.
func TestScopeMetrics(t *testing.T) {
	w := newWorld(t, 4)
	w.consume()
	scopes := filepath.Join(t.TempDir(), "scopes")
	must(t, os.WriteFile(scopes, []byte("billing exchange="+w.exchange+" ids=billing-\nsearch exchange="+w.exchange+" ids=search-\n"), 0o644))
	p := w.scan("DELAYQ_SCOPES_FILE=" + scopes)
	var lines []string
	var ids []string
	for _, id := range []string{"billing-1", "billing-2", "search-1", "other-1"} {
		lines = append(lines, `{"id":"`+id+`","exchange":"`+w.exchange+`","routing_key":"rk","delay_ms":10}`)
		ids = append(ids, id)
	}
	if _, e, code := w.delayq(strings.Join(lines, "\n")+"\n", "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	w.waitDelivered(ids, 30*time.Second)
	// A consumer may get a message before its publisher has the broker's
	// confirm, which is when it is counted: wait for the counts.
	wants := []string{`delayq_scope_published_total{scope="billing"} 2`, `delayq_scope_published_total{scope="search"} 1`,
		`delayq_scope_lateness_seconds_count{scope="billing"} 2`}
	var m string
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		m = p.scrape(t)
		for _, want := range wants {
			if !strings.Contains(m, want) {
				return false
			}
		}
		return true
	}, func() string { return "the scope metrics never said " + strings.Join(wants, ", ") + ":\n" + m })
	if strings.Contains(m, `scope=""`) {
		t.Error("a message of no scope is counted under an empty scope")
	}
}
