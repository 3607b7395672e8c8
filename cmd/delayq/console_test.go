package main_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/shard/shardtest"
)

const (
	consoleAdmin = "admin-console-token-0123456789"
	consoleRead  = "read-console-token-0123456789"
)

// serve starts `delayq serve` with a tokens file and returns its base URL.
func (w *world) serve(t *testing.T, extraEnv ...string) string {
	t.Helper()
	base, _ := w.serveLogged(t, extraEnv...)
	return base
}

// serveLogged starts `delayq serve` with the test tokens (admin
// "tokens line 1", read "tokens line 2") and returns its base URL and log.
func (w *world) serveLogged(t *testing.T, extraEnv ...string) (string, *lockedWriter) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	must(t, os.WriteFile(tokens, []byte("admin "+consoleAdmin+"\nread "+consoleRead+"\n"), 0o600))
	port, err := shardtest.FreePort()
	must(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_HTTP_ADDR="+addr, "DELAYQ_HTTP_TOKENS_FILE="+tokens)
	cmd.Env = append(cmd.Env, extraEnv...)
	log := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = log, log
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	if slices.ContainsFunc(extraEnv, func(s string) bool { return strings.HasPrefix(s, "DELAYQ_HTTP_TLS_CERT=") }) {
		base = "https://" + addr
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, func() string { return "serve never listened:\n" + log.String() })
	t.Cleanup(func() {
		if strings.Contains(log.String(), consoleAdmin) || strings.Contains(log.String(), consoleRead) {
			t.Errorf("a token appears in the log:\n%s", log.String())
		}
	})
	return base, log
}

// browser starts headless Chromium (Debian's) for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		shardtest.Require(t, fmt.Errorf("chromium: %w", shardtest.ErrNoBinary))
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// The whole walk through the console, under the load of the other
	// test packages: each step waits on its own condition, this bounds
	// them all.
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// artifact saves a screenshot under $DELAYQ_TEST_ARTIFACTS (default: the
// test's temporary directory) and returns its path.
func artifact(t *testing.T, name string, png []byte) string {
	dir := os.Getenv("DELAYQ_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	must(t, os.MkdirAll(dir, 0o755))
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, png, 0o644))
	return p
}

// TestConsoleInABrowser drives the console in headless Chromium: a
// rejected token, signing in, the overview's counts, finding a message by
// id, redriving a dead message after the confirmation and seeing the
// counts change, and a read-only token that cannot change anything.
func TestConsoleInABrowser(t *testing.T) {
	w := newWorld(t, 4)
	ctx := browser(t)
	// Two messages die (no route for their topic), one waits an hour.
	p := w.scan()
	for _, id := range []string{"lost-1", "lost-2"} {
		if _, e, code := w.delayq("", "enqueue", "--id", id, "--topic", "nowhere", "--delay", "0s"); code != 0 {
			t.Fatal(e)
		}
	}
	if _, e, code := w.delayq("", "enqueue", "--id", "order-42-cancel", "--topic", "order.cancel", "--delay", "1h",
		"--header", "tenant=acme", "--body", `{"order":42}`); code != 0 {
		t.Fatal(e)
	}
	// A SHA-256 idempotency key as id, with headers of several types.
	long := strings.Repeat("0123456789abcdef", 4)
	if _, e, code := w.delayq(`{"id":"`+long+`","topic":"order.cancel","delay_ms":7200000,"headers":`+
		`{"n":{"$int8":-1},"s":"12","i":12,"b":{"$bytes":"AAE="},"v":null}}`+"\n", "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		out, _, _ := w.delayq("", "dead", "list")
		return strings.Contains(out, "lost-1") && strings.Contains(out, "lost-2")
	}, func() string { out, _, _ := w.delayq("", "dead", "list"); return out })
	must(t, p.term(20*time.Second)) // nothing publishes from here on: a redriven message stays scheduled
	base := w.serve(t)

	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		must(t, chromedp.Do(ctx, steps...))
	}
	text := func(id chromedp.ID) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(id))
		must(t, err)
		return v
	}
	screenshot := func(name string) string {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		must(t, err)
		return artifact(t, name, png)
	}
	// A rejected token.
	do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "not-a-valid-token-at-all"), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("error")))
	if msg := text("error"); !strings.Contains(msg, "not accepted") {
		t.Errorf("a bad token says %q", msg)
	}
	// Sign in; the overview counts 2 dead and 2 scheduled.
	do(chromedp.SendKeys(chromedp.ID("token"), consoleAdmin), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("totals")))
	if dead, scheduled := text("t-dead"), text("t-scheduled"); dead != "2" || scheduled != "2" {
		t.Errorf("overview: dead %q scheduled %q, want 2 and 2", dead, scheduled)
	}
	if redis := text("redis"); !strings.Contains(redis, "noeviction") || !strings.Contains(redis, "no limit") {
		t.Errorf("overview: the Redis table says\n%s", redis)
	}
	t.Logf("screenshot: %s", screenshot("console-overview.png"))
	// Find a message by id.
	do(chromedp.Navigate(base+"/messages"), chromedp.WaitVisible(chromedp.ID("id")),
		chromedp.SendKeys(chromedp.ID("id"), "order-42-cancel"), chromedp.Click(chromedp.ID("find")),
		chromedp.WaitVisible(chromedp.ID("message")))
	if state, page := text("m-state"), text("message"); state != "scheduled" || !strings.Contains(page, "acme") ||
		!strings.Contains(page, `{"order":42}`) {
		t.Errorf("message page: state %q\n%s", state, page)
	}
	screenshot("console-message.png")
	// Redrive one dead message: select, confirm, and the counts change.
	do(chromedp.Navigate(base+"/dead"), chromedp.WaitVisible(chromedp.ID("dead")))
	screenshot("console-dead.png")
	do(chromedp.Click(chromedp.CSS(`input[value="lost-1"]`)), chromedp.Click(chromedp.ID("redrive-selected")),
		chromedp.WaitVisible(chromedp.ID("confirm")), chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.ID("done")))
	if done, total := text("done"), text("dead-total"); done != "1 message redriven" || total != "1 in all" {
		t.Errorf("after the redrive: %q, %q", done, total)
	}
	if out, _, _ := w.delayq("", "inspect", "lost-1"); !strings.Contains(out, "scheduled") {
		t.Errorf("lost-1 after the redrive:\n%s", out)
	}
	do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("totals")))
	if dead, scheduled := text("t-dead"), text("t-scheduled"); dead != "1" || scheduled != "3" {
		t.Errorf("overview after the redrive: dead %q scheduled %q, want 1 and 3", dead, scheduled)
	}
	// Browse the scheduled messages by id prefix; open the long one: each
	// header shows its type (the string "12" is not the integer 12).
	do(chromedp.Click(chromedp.ID("nav-scheduled")), chromedp.WaitVisible(chromedp.ID("filters")),
		chromedp.SendKeys(chromedp.ID("prefix"), long[:10]), chromedp.Click(chromedp.ID("browse")),
		chromedp.WaitVisible(chromedp.CSS(`input#prefix[value="`+long[:10]+`"]`)), // the filtered page, not the last one
		chromedp.WaitVisible(chromedp.ID("scheduled")))
	if rows := text("scheduled"); !strings.Contains(rows, long) || strings.Contains(rows, "order-42-cancel") || !strings.Contains(rows, "in 1 h 59 m") {
		t.Errorf("scheduled page filtered by prefix:\n%s", rows)
	}
	screenshot("console-scheduled.png")
	do(chromedp.Click(chromedp.CSS(`#scheduled a`)), chromedp.WaitVisible(chromedp.ID("message")))
	page := text("message")
	for _, want := range []string{"header n\t-1 int8", "header s\t\"12\" string", "header i\t12 int32", "header b\t0x0001 bytes (2)", "header v\tvoid (null)", "local"} {
		if !strings.Contains(page, want) {
			t.Errorf("message page lacks %q:\n%s", want, page)
		}
	}
	// Cancel asks first.
	do(chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if q := text("question"); q != "Cancel "+long+"?" {
		t.Errorf("the cancel asks %q", q)
	}
	do(chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("done")))
	if out, _, _ := w.delayq("", "inspect", long); !strings.Contains(out, "unknown") {
		t.Errorf("%s after the cancel:\n%s", long, out)
	}
	// Cancel, then reschedule, every message a filter selects: the count
	// first, then the job's progress line until it is done.
	bulk := func(prefix string, n int, button string, fill []chromedp.Action[chromedp.Void], question, done string) {
		t.Helper()
		var in strings.Builder
		for i := range n {
			fmt.Fprintf(&in, `{"id":"%s%03d","topic":"promo","delay_ms":3600000}`+"\n", prefix, i)
		}
		if _, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 {
			t.Fatal(e)
		}
		do(chromedp.Navigate(base+"/scheduled?prefix="+prefix), chromedp.WaitVisible(chromedp.ID(button)))
		do(fill...)
		do(chromedp.Click(chromedp.ID(button)), chromedp.WaitVisible(chromedp.ID("confirm")))
		if q := text("question"); q != question {
			t.Errorf("%s asks %q, want %q", button, q, question)
		}
		do(chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("bulk-progress")))
		shardtest.WaitFor(t, 20*time.Second, func() bool {
			do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("bulk-progress")))
			return text("bulk-progress") == done
		}, func() string { return button + ": the progress line says " + text("bulk-progress") })
	}
	bulk("bulk-", 120, "cancel-matching", nil, "Cancel 120 scheduled messages?", "Done: 120 of 120 cancelled.")
	screenshot("console-bulk.png")
	bulk("move-", 30, "reschedule-matching", []chromedp.Action[chromedp.Void]{chromedp.SendKeys(chromedp.ID("bulk-delay"), "2h")},
		"Reschedule 30 scheduled messages to 2h0m0s from now?", "Done: 30 of 30 rescheduled.")
	if out, _, _ := w.delayq("", "inspect", "move-007"); !strings.Contains(out, "due:") {
		t.Errorf("move-007 after the bulk reschedule:\n%s", out)
	}
	// Flow control: limit a topic, pause it (asked first), a bad rate named,
	// resume.
	// Navigated to, not clicked: the bulk page before it refreshes itself
	// while a job runs, and a click can land on the page being replaced.
	do(chromedp.Navigate(base+"/flows"), chromedp.WaitVisible(chromedp.ID("no-flows")),
		chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=topic]`), "sms"),
		chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=rate]`), "200/s"),
		chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=burst]`), "20"),
		chromedp.Click(chromedp.ID("new-limit")), chromedp.WaitVisible(chromedp.ID("done")))
	if done, row := text("done"), text("flows"); done != "sms: limit 200/s burst 20" || !strings.Contains(row, "limit 200/s burst 20") {
		t.Errorf("after setting a limit: %q\n%s", done, row)
	}
	do(chromedp.SendKeys(chromedp.CSS(`#flow-sms input[name=until]`), "30m"), chromedp.Click(chromedp.CSS(`#flow-sms .pause`)),
		chromedp.WaitVisible(chromedp.ID("confirm")))
	if q := text("question"); q != "Pause sms for 30m0s?" {
		t.Errorf("the pause asks %q", q)
	}
	do(chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("done")))
	if done := text("done"); !strings.HasPrefix(done, "sms: limit 200/s burst 20, paused until ") {
		t.Errorf("after the pause: %q", done)
	}
	if out, _, _ := w.delayq("", "flow"); !strings.Contains(out, "paused until") || !strings.Contains(out, "console") {
		t.Errorf("delayq flow after the console's pause:\n%s", out)
	}
	do(chromedp.Click(chromedp.CSS(`header a.brand`)), chromedp.WaitVisible(chromedp.ID("overview-flows")))
	if row := text("overview-flows"); !strings.Contains(row, "sms") || !strings.Contains(row, "paused until") {
		t.Errorf("the overview's flows:\n%s", row)
	}
	do(chromedp.Click(chromedp.ID("nav-flows")), chromedp.WaitVisible(chromedp.ID("flows")))
	screenshot("console-flows.png")
	do(chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=topic]`), "mail"),
		chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=rate]`), "-5"),
		chromedp.Click(chromedp.ID("new-limit")), chromedp.WaitVisible(chromedp.ID("error")))
	if msg := text("error"); !strings.Contains(msg, "rate") || !strings.Contains(msg, "-5") {
		t.Errorf("a negative rate says %q", msg)
	}
	do(chromedp.Navigate(base+"/flows"), chromedp.WaitVisible(chromedp.ID("new-flow")),
		chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=topic]`), "mail"),
		chromedp.SendKeys(chromedp.CSS(`#new-flow input[name=until]`), "soon"),
		chromedp.Click(chromedp.ID("new-pause")), chromedp.WaitVisible(chromedp.ID("error")))
	if msg := text("error"); !strings.Contains(msg, "until") || !strings.Contains(msg, "soon") {
		t.Errorf("a pause until soon says %q", msg)
	}
	do(chromedp.Navigate(base+"/flows"), chromedp.WaitVisible(chromedp.ID("flows")),
		chromedp.Click(chromedp.CSS(`#flow-sms .resume`)), chromedp.WaitVisible(chromedp.ID("done")))
	if done, row := text("done"), text("flows"); done != "sms: limit 200/s burst 20" || strings.Contains(row, "mail") {
		t.Errorf("after the resume: %q\n%s", done, row)
	}
	// Release classes: one set from the form, listed with its share; a
	// bad weight named; the default class beside it.
	do(chromedp.Navigate(base+"/classes"), chromedp.WaitVisible(chromedp.ID("no-classes")),
		chromedp.SendKeys(chromedp.ID("class-name"), "urgent"), chromedp.SendKeys(chromedp.ID("class-topics"), "auth.*, payment.timeout"),
		chromedp.SetValue(chromedp.ID("class-weight"), "3"), chromedp.Click(chromedp.ID("class-save")), chromedp.WaitVisible(chromedp.ID("done")))
	if row := text("classes"); !strings.Contains(row, "urgent") || !strings.Contains(row, "weight 3") || !strings.Contains(row, "payment.timeout") ||
		!strings.Contains(row, "default") {
		t.Errorf("after setting a class:\n%s", row)
	}
	screenshot("console-classes.png")
	do(chromedp.SendKeys(chromedp.ID("class-name"), "bulk"), chromedp.SendKeys(chromedp.ID("class-topics"), "campaign.*"),
		chromedp.SetValue(chromedp.ID("class-weight"), "-2"), chromedp.Click(chromedp.ID("class-save")), chromedp.WaitVisible(chromedp.ID("error")))
	if msg := text("error"); !strings.Contains(msg, "weight") || !strings.Contains(msg, "-2") {
		t.Errorf("a negative weight says %q", msg)
	}
	if out, _, _ := w.delayq("", "class"); !strings.Contains(out, "urgent") || !strings.Contains(out, "console") {
		t.Errorf("delayq class after the console's change:\n%s", out)
	}
	// Schedules: the list with each next occurrence in its zone, one's
	// preview, pause and resume, a delete asked first.
	for _, args := range [][]string{{"nightly", "30 2 * * *", "--zone", "America/New_York"}, {"weekly", "@weekly", "--zone", "Europe/Berlin"}} {
		if _, e, code := w.delayq("", append([]string{"schedule", "set"}, append(args, "--topic", "order.cancel")...)...); code != 0 {
			t.Fatal(e)
		}
	}
	do(chromedp.Click(chromedp.ID("nav-schedules")), chromedp.WaitVisible(chromedp.ID("schedule-nightly")))
	if row := text("schedule-nightly"); !strings.Contains(row, "30 2 * * *") || !strings.Contains(row, "T02:30:00-05:00") {
		t.Errorf("the schedules page shows nightly as:\n%s", row)
	}
	screenshot("console-schedules.png")
	do(chromedp.Click(chromedp.CSS(`#schedule-nightly a`)), chromedp.WaitVisible(chromedp.ID("preview")))
	if p := text("preview"); strings.Count(p, "T02:30:00-05:00") < 3 || !strings.Contains(p, "nightly@") {
		t.Errorf("nightly's preview:\n%s", p)
	}
	do(chromedp.Navigate(base+"/schedules"), chromedp.WaitVisible(chromedp.ID("schedules")),
		chromedp.Click(chromedp.CSS(`#schedule-nightly .pause`)), chromedp.WaitVisible(chromedp.CSS(`#schedule-nightly .resume`)))
	if done := text("done"); done != "nightly: paused" {
		t.Errorf("after the pause: %q", done)
	}
	do(chromedp.Click(chromedp.CSS(`#schedule-nightly .resume`)), chromedp.WaitVisible(chromedp.CSS(`#schedule-nightly .pause`)))
	if done := text("done"); !strings.HasPrefix(done, "nightly: running, next ") {
		t.Errorf("after the resume: %q", done)
	}
	do(chromedp.Click(chromedp.CSS(`#schedule-nightly .delete`)), chromedp.WaitVisible(chromedp.ID("confirm")))
	if q := text("question"); q != "Delete schedule nightly?" {
		t.Errorf("the delete asks %q", q)
	}
	do(chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("done")))
	if done, list := text("done"), text("schedules"); done != "nightly: deleted" || strings.Contains(list, "nightly") || !strings.Contains(list, "weekly") {
		t.Errorf("after the delete: %q\n%s", done, list)
	}
	// A read token sees the dead list but has no buttons to change it.
	do(chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleRead), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("totals")), chromedp.Navigate(base+"/dead"), chromedp.WaitVisible(chromedp.ID("dead")))
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("button[name=action]").length`))
	must(t, err)
	if buttons != 0 {
		t.Errorf("a read-only session sees %d action buttons", buttons)
	}
	do(chromedp.Navigate(base+"/flows"), chromedp.WaitVisible(chromedp.ID("flows")))
	buttons, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("button[name=action]").length`))
	must(t, err)
	if buttons != 0 {
		t.Errorf("a read-only session sees %d flow buttons", buttons)
	}
	do(chromedp.Navigate(base+"/schedules"), chromedp.WaitVisible(chromedp.ID("schedules")))
	buttons, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("button[name=action]").length`))
	must(t, err)
	if buttons != 0 {
		t.Errorf("a read-only session sees %d schedule buttons", buttons)
	}
	// On a phone's screen every page fits its width (wide tables scroll
	// inside their box), also a message with a 64-character id and a W3C
	// traceparent header.
	traced := strings.Repeat("fedcba9876543210", 4)
	if _, e, code := w.delayq(`{"id":"`+traced+`","topic":"order.cancel","delay_ms":7200000,"headers":`+
		`{"traceparent":"00-4bf92f3577b34da6a3ce929b0e0e4736-00f067aa0ba902b7-01"}}`+"\n", "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	do(chromedp.EmulateViewport(390, 844))
	for _, path := range []string{"/", "/messages?id=order-42-cancel", "/dead", "/scheduled", "/flows", "/classes", "/schedules", "/schedules?name=weekly", "/messages?id=lost-1", "/messages?id=" + traced} {
		do(chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		must(t, err)
		if width > 390 {
			t.Errorf("%s is %d px wide on a 390 px screen", path, width)
		}
	}
	screenshot("console-phone.png")
}

// TestServeOverHTTPSAndSetShards: serve speaks HTTPS with the configured
// certificate; M is set over the API with a check-and-set in Consul; a
// serve without tokens refuses a non-loopback address.
func TestServeOverHTTPSAndSetShards(t *testing.T) {
	w := newWorld(t, 4)
	w.withConsul(t)
	w.setM(4)
	certs, err := shardtest.WriteTestCerts(t.TempDir())
	must(t, err)
	base := w.serve(t, "DELAYQ_HTTP_TLS_CERT="+certs.Cert, "DELAYQ_HTTP_TLS_KEY="+certs.Key)
	pem, err := os.ReadFile(certs.CA)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	put := func(body string) (int, string) {
		req, err := http.NewRequest("PUT", base+"/v1/shards", strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+consoleAdmin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := put(`{"m":8,"expect":4}`); code != 200 || !strings.Contains(body, `"from":4`) || !strings.Contains(body, `"to":8`) {
		t.Errorf("set M 4 -> 8: %d %s", code, body)
	}
	if code, body := put(`{"m":16,"expect":4}`); code != 409 || !strings.Contains(body, "M is 8 now") {
		t.Errorf("set M expecting a stale 4: %d %s", code, body)
	}
	if code, body := put(`{"m":0}`); code != 400 || !strings.Contains(body, `"field":"m"`) {
		t.Errorf("set M 0: %d %s", code, body)
	}
	if out, _, _ := w.delayq("", "shards"); !strings.Contains(out, "M 8") {
		t.Errorf("delayq shards after the API set M:\n%s", out)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_HTTP_ADDR=0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "DELAYQ_HTTP_TOKENS_FILE") {
		t.Errorf("serve on 0.0.0.0 without tokens: %v\n%s", err, out)
	}
}
