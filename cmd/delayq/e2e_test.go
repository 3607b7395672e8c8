package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/balance/consultest"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

var (
	bin       string // the delayq binary under test
	redisSrv  *shardtest.Redis
	rabbit    *publishertest.Rabbit
	serverErr error
	consul    *consultest.Consul
	consulErr error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "delayq-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "delayq")
	// Built without -race so that timing is realistic on 2 cores: the race
	// detector slows the scanner ~10x. The same code runs under -race in the
	// scanner package tests.
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build delayq: %v\n%s", err, out)
		return 1
	}
	redisSrv, serverErr = shardtest.StartRedis(shardtest.RedisOptions{})
	if serverErr == nil {
		defer redisSrv.Close()
		rabbit, serverErr = publishertest.StartRabbit()
		if serverErr == nil {
			defer rabbit.Close()
		}
	}
	if consul, consulErr = consultest.StartConsul(); consulErr == nil {
		defer consul.Close()
	}
	return m.Run()
}

// world is one test's namespace, exchange and queue, and the environment
// the binary runs with.
type world struct {
	t        *testing.T
	ns       string
	exchange string
	env      []string

	mu  sync.Mutex
	got map[string][]received
}

type received struct {
	at          time.Time
	dueMs       int64
	attempt     int32
	releasedMs  int64 // x-delayq-released-ms, 0 if none
	traceparent string
}

func newWorld(t *testing.T, shards int, extraEnv ...string) *world {
	t.Helper()
	shardtest.Require(t, serverErr)
	t.Parallel()
	return newSerialWorld(t, shards, extraEnv...)
}

// newSerialWorld is newWorld for a test that must not run in parallel
// (a subtest that shares a cluster its siblings kill nodes of).
func newSerialWorld(t *testing.T, shards int, extraEnv ...string) *world {
	t.Helper()
	shardtest.Require(t, serverErr)
	w := &world{t: t, ns: shardtest.Namespace(t), got: map[string][]received{}}
	w.exchange = "ex-" + w.ns
	w.env = append(os.Environ(),
		"DELAYQ_REDIS_ADDRS="+redisSrv.Addr,
		"DELAYQ_AMQP_URL="+rabbit.URL,
		"DELAYQ_NAMESPACE="+w.ns,
		fmt.Sprintf("DELAYQ_SHARDS=%d", shards),
		"DELAYQ_LOG_FORMAT=console",
		"DELAYQ_LOG_LEVEL=info",
	)
	w.env = append(w.env, extraEnv...)
	return w
}

// consume declares the exchange and a durable queue bound with key "rk"
// and records every delivery.
func (w *world) consume() { w.consumeFrom(rabbit.URL) }

// consumeFrom is consume on the broker at url.
func (w *world) consumeFrom(url string) {
	t := w.t
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must(t, ch.ExchangeDeclare(w.exchange, "direct", true, false, false, false, nil))
	_, err = ch.QueueDeclare(w.ns, true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(w.ns, "rk", w.exchange, false, nil))
	w.record(conn, ch)
}

// record consumes the world's queue on ch and records every delivery until
// the test ends, which closes conn.
func (w *world) record(conn *amqp.Connection, ch *amqp.Channel) {
	t := w.t
	must(t, ch.Qos(1000, 0, false))
	d, err := ch.Consume(w.ns, "", false, false, false, false, nil)
	must(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = conn.Close(); wg.Wait() })
	wg.Go(func() {
		for msg := range d {
			due, _ := msg.Headers[shard.HeaderDueMs].(int64)
			att, _ := msg.Headers[shard.HeaderAttempt].(int32)
			rel, _ := msg.Headers[shard.HeaderReleasedMs].(int64)
			tp, _ := msg.Headers["traceparent"].(string)
			w.mu.Lock()
			w.got[msg.MessageId] = append(w.got[msg.MessageId], received{at: time.Now(), dueMs: due, attempt: att, releasedMs: rel, traceparent: tp})
			w.mu.Unlock()
			_ = msg.Ack(false)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// delayq runs the binary to completion.
func (w *world) delayq(stdin string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(bin, args...)
	cmd.Env = w.env
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("run delayq %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// sibling is another world beside w: namespace w.ns+suffix (w's own when
// suffix is empty), w's exchange, w's environment with extraEnv on top
// (a later setting wins), and deliveries of its own.
func (w *world) sibling(suffix string, extraEnv ...string) *world {
	o := &world{t: w.t, ns: w.ns + suffix, exchange: w.exchange, got: map[string][]received{}}
	o.env = append(slices.Clone(w.env), "DELAYQ_NAMESPACE="+o.ns)
	o.env = append(o.env, extraEnv...)
	return o
}

// succeed runs the binary to completion and returns its stdout; any exit
// but 0 fails the test.
func (w *world) succeed(stdin string, args ...string) string {
	w.t.Helper()
	out, e, code := w.delayq(stdin, args...)
	if code != 0 {
		w.t.Fatalf("%v: exit %d %s %s", args, code, out, e)
	}
	return out
}

// proc is a running `delayq scan`.
type proc struct {
	cmd     *exec.Cmd
	log     *lockedWriter
	done    chan error
	metrics string // host:port of its /metrics, /healthz, /readyz
}

func (w *world) scan(extraEnv ...string) *proc {
	port, err := shardtest.FreePort()
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(bin, "scan")
	metrics := fmt.Sprintf("127.0.0.1:%d", port)
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_METRICS_ADDR="+metrics)
	cmd.Env = append(cmd.Env, extraEnv...)
	p := &proc{cmd: cmd, log: &lockedWriter{w: &bytes.Buffer{}}, done: make(chan error, 1), metrics: metrics}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	w.t.Cleanup(func() { p.kill() })
	return p
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		p.done <- nil // later calls see it dead too
	}
}

// term sends SIGTERM and returns the exit error.
func (p *proc) term(within time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(within):
		return fmt.Errorf("scanner did not exit within %s of SIGTERM", within)
	}
}

// jsonl writes n messages due over spread, to the test's exchange.
func (w *world) jsonl(n int, spread time.Duration, prefix string) (string, []string) {
	var b strings.Builder
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		delay := time.Duration(rand.Int64N(int64(spread))).Milliseconds()
		line, _ := json.Marshal(map[string]any{"id": ids[i], "exchange": w.exchange, "routing_key": "rk",
			"delay_ms": delay, "body": "cancel order " + ids[i], "headers": map[string]string{"kind": "cancel"}})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String(), ids
}

// duplicates counts the deliveries of ids beyond the first of each.
func (w *world) duplicates(ids []string) (dups int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if n := len(w.got[id]); n > 1 {
			dups += n - 1
		}
	}
	return dups
}

// enqueueBurst enqueues n messages ids prefix-0 … all due at dueMs, through
// the CLI, and returns their ids.
func (w *world) enqueueBurst(n int, prefix string, dueMs int64) []string {
	w.t.Helper()
	var b strings.Builder
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		fmt.Fprintf(&b, `{"id":%q,"exchange":%q,"routing_key":"rk","at_ms":%d,"body":"x"}`+"\n", ids[i], w.exchange, dueMs)
	}
	if out, errOut, code := w.delayq(b.String(), "enqueue", "-f", "-"); code != 0 {
		w.t.Fatalf("enqueue: %s %s", out, errOut)
	}
	return ids
}

// waitDelivered waits until every id arrived, then checks none was early
// and reports lateness and duplicates.
func (w *world) waitDelivered(ids []string, within time.Duration) (dups int) {
	t := w.t
	t.Helper()
	deadline := time.Now().Add(within)
	// Each look checks only what the last one found missing: a look at
	// every id of a large test (500,000) held the consumer's lock long
	// enough to make the consumer the pipeline's bottleneck.
	missing := slices.Clone(ids)
	for {
		w.mu.Lock()
		missing = slices.DeleteFunc(missing, func(id string) bool { return len(w.got[id]) > 0 })
		w.mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages never delivered within %s", len(missing), len(ids), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var late []time.Duration
	for _, id := range ids {
		rs := w.got[id]
		dups += len(rs) - 1
		for _, r := range rs {
			if r.at.UnixMilli() < r.dueMs {
				t.Errorf("%s received at %d ms, due at %d ms: early", id, r.at.UnixMilli(), r.dueMs)
			}
		}
		if rs[0].attempt == 1 {
			late = append(late, rs[0].at.Sub(time.UnixMilli(rs[0].dueMs)))
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if len(late) > 0 {
		t.Logf("%d messages, %d duplicates; lateness of first deliveries: p50 %s, p99 %s, max %s",
			len(ids), dups, late[len(late)/2].Round(time.Microsecond), late[len(late)*99/100].Round(time.Microsecond), late[len(late)-1].Round(time.Microsecond))
	}
	return dups
}

// TestEndToEnd: 10,000 messages due over 5 s, enqueued with the CLI from
// JSON Lines, published by 2 scanner processes: every one delivered, none
// early.
func TestEndToEnd(t *testing.T) {
	w := newWorld(t, 16)
	w.consume()
	a, b := w.scan(), w.scan()
	in, ids := w.jsonl(10000, 5*time.Second, "order")
	out, errOut, code := w.delayq(in, "enqueue", "-f", "-")
	if code != 0 || !strings.Contains(out, "enqueued 10000, duplicates 0, rejected 0") {
		t.Fatalf("enqueue: code %d\n%s\n%s", code, out, errOut)
	}
	w.waitDelivered(ids, 60*time.Second)
	for _, p := range []*proc{a, b} {
		if err := p.term(30 * time.Second); err != nil {
			t.Errorf("scanner exit: %v\n%s", err, p.log)
		}
	}
	stats, _, _ := w.delayq("", "stats", "--json")
	var v struct {
		Total struct {
			Scheduled int64 `json:"scheduled"`
			InFlight  int64 `json:"in_flight"`
			Dead      int64 `json:"dead"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(stats), &v); err != nil || v.Total.Scheduled+v.Total.InFlight+v.Total.Dead != 0 {
		t.Errorf("after the flow, stats: %v %s", err, stats)
	}
}

// TestCrashLosesNothing: the same flow while one scanner is killed with
// SIGKILL 20 times at random moments and restarted. Every id is delivered
// (duplicates allowed and counted), none early.
func TestCrashLosesNothing(t *testing.T) {
	w := newWorld(t, 8, "DELAYQ_LEASE=2s", "DELAYQ_GOROUTINES=16")
	w.consume()
	steady := w.scan()
	victim := w.scan()
	in, ids := w.jsonl(5000, 5*time.Second, "crash")
	if out, errOut, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, errOut)
	}
	const kills = 20
	for range kills {
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond) // random moments, by design
		victim.kill()
		victim = w.scan()
	}
	dups := w.waitDelivered(ids, 90*time.Second)
	t.Logf("%d SIGKILLs; %d duplicate deliveries", kills, dups)
	if err := steady.term(30 * time.Second); err != nil {
		t.Errorf("steady scanner: %v", err)
	}
}

// TestKillBetweenConfirmAndAck: in the middle of a burst (5,000 messages
// due at once), the scanner SIGKILLs itself right after the broker
// confirmed its 1,000th message and before that message's ack is queued,
// on the publisher's confirm goroutine. What it held confirmed but not
// acked comes back after the lease: every message arrives, within the
// lease and a margin of the kill, and at least one twice (the kill landed
// between a confirm and its ack).
func TestKillBetweenConfirmAndAck(t *testing.T) {
	const lease = 2 * time.Second
	w := newWorld(t, 4, fmt.Sprintf("DELAYQ_LEASE=%s", lease))
	w.consume()
	ids := w.enqueueBurst(5000, "confirmed", time.Now().UnixMilli())
	killed := w.scan("DELAYQ_TEST_KILL_AT=confirmed:1000")
	select {
	case <-killed.done:
		killed.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("the scanner did not kill itself at its 1,000th confirm")
	}
	at := time.Now()
	w.scan()
	dups := w.waitDelivered(ids, lease+30*time.Second)
	t.Logf("every message delivered %s after the SIGKILL (lease %s); %d duplicates",
		time.Since(at).Round(time.Millisecond), lease, dups)
	// What the killed scanner held confirmed but not acked comes back when
	// its lease expires, which may be after every message has arrived once
	// (the other scanner delivered the rest): wait for it.
	shardtest.WaitFor(t, lease+30*time.Second, func() bool { dups = w.duplicates(ids); return dups > 0 },
		func() string {
			return "no message delivered twice: the kill did not land between a confirm and its ack"
		})
	t.Logf("%d duplicates %s after the SIGKILL", dups, time.Since(at).Round(time.Millisecond))
}

// TestCrashDuringBurstRecoversAtLeaseSpeed: 20,000 messages fall due at
// once on M = 8 shards; one of two scanners is killed with SIGKILL six
// times while the burst drains. The messages a killed scanner held come
// back when their lease expires, all of them at once rather than a few per
// patrol: every message arrives within the lease (plus a margin for the
// drain itself) of the last kill, and each redelivery says the time it was
// scheduled for.
func TestCrashDuringBurstRecoversAtLeaseSpeed(t *testing.T) {
	const lease = 2 * time.Second
	w := newWorld(t, 8, fmt.Sprintf("DELAYQ_LEASE=%s", lease), "DELAYQ_GOROUTINES=32")
	w.consume()
	steady := w.scan()
	victim := w.scan()
	due := time.Now().Add(3 * time.Second).UnixMilli()
	ids := w.enqueueBurst(20000, "burst", due)
	if wait := time.Until(time.UnixMilli(due)); wait > 0 {
		time.Sleep(wait) // the burst falls due now, by design
	}
	w.waitSome(500, 30*time.Second) // the drain is under way
	var lastKill time.Time
	for range 6 {
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond) // random moments, by design
		victim.kill()
		lastKill = time.Now()
		victim = w.scan()
	}
	// What was not leased still has to drain after the last kill, at the
	// speed this box has just shown (it shares its cores with the other
	// tests): three times the time the rest takes at the rate of the drain
	// so far, at least 5 s, at most 60 s, on top of the lease.
	delivered := w.count()
	rate := float64(delivered) / lastKill.Sub(time.UnixMilli(due)).Seconds()
	drain := time.Duration(3 * float64(len(ids)-delivered) / rate * float64(time.Second))
	margin := min(max(drain, 5*time.Second), 60*time.Second)
	w.waitDelivered(ids, time.Until(lastKill.Add(lease+margin)))
	t.Logf("every message delivered %s after the last SIGKILL (lease %s; %d delivered before it at %.0f/s, margin %s)",
		time.Since(lastKill).Round(time.Millisecond), lease, delivered, rate, margin.Round(time.Millisecond))
	w.mu.Lock()
	redelivered := 0
	for _, id := range ids {
		for _, r := range w.got[id] {
			if r.dueMs != due {
				t.Errorf("%s attempt %d says due %d, scheduled %d", id, r.attempt, r.dueMs, due)
			}
			if r.attempt > 1 {
				redelivered++
			}
		}
	}
	w.mu.Unlock()
	t.Logf("%d redeliveries, all saying the scheduled time", redelivered)
	if err := steady.term(30 * time.Second); err != nil {
		t.Errorf("steady scanner: %v", err)
	}
}

// TestDeadIsVisible: a message to an exchange with no binding for its key
// is returned by the broker and shows up dead in stats and inspect.
func TestDeadIsVisible(t *testing.T) {
	w := newWorld(t, 4, "DELAYQ_MAX_REFUSALS=2")
	w.consume()
	w.scan()
	if _, e, code := w.delayq("", "enqueue", "--id", "lost-1", "--exchange", w.exchange, "--routing-key", "nobody", "--delay", "10ms"); code != 0 {
		t.Fatal(e)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, _ := w.delayq("", "inspect", "lost-1")
		if strings.Contains(out, "state:        dead") || strings.Contains(out, "dead") && strings.Contains(out, "NO_ROUTE") {
			if !strings.Contains(out, "NO_ROUTE") {
				t.Errorf("inspect does not say why: %s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never dead: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _, code := w.delayq("", "stats")
	if code != 0 || !regexpMatch(`(?m)^\s*total\s+0\s+0\s+0\s+1\s`, out) {
		t.Errorf("stats does not show 1 dead:\n%s", out)
	}
}

// TestEnqueueFileReportsBadLines: bad lines are reported with their line
// number and skipped; the good ones are enqueued; the exit code says so.
func TestEnqueueFileReportsBadLines(t *testing.T) {
	w := newWorld(t, 4)
	in := strings.Join([]string{
		`{"id":"ok-1","topic":"t","delay_ms":60000}`,
		`{"id":"bad-delay","topic":"t","delay_ms":-1}`,
		`{oops`,
		`{"id":"ok-2","exchange":"x","routing_key":"k","delay_ms":60000}`,
		`{"id":"no-dest","delay_ms":1}`,
		`{"id":"reserved","topic":"t","delay_ms":1,"headers":{"x-delayq-attempt":"9"}}`,
		`{"id":"ok-1","topic":"t","delay_ms":60000}`,
	}, "\n")
	out, errOut, code := w.delayq(in, "enqueue", "-f", "-")
	if code != 1 || !strings.Contains(out, "enqueued 2, duplicates 1, rejected 4") {
		t.Fatalf("code %d, out %q", code, out)
	}
	for _, want := range []string{"line 2: invalid delay_ms", "line 3: invalid JSON", "line 5:", "invalid destination",
		"line 6:", "reserved", "line 7:", "duplicate"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if out, _, _ := w.delayq("", "inspect", "ok-2"); !strings.Contains(out, "scheduled") {
		t.Errorf("good line after bad ones not enqueued: %s", out)
	}
	// -f takes every field from the file: a single-message flag is a
	// usage error, not silently ignored; --upsert replaces.
	for _, flag := range [][]string{{"--id", "x"}, {"--delay", "5s"}, {"--topic", "t"}, {"--body", "b"}, {"--header", "k=v"}} {
		if _, errOut, code := w.delayq(in, append([]string{"enqueue", "-f", "-"}, flag...)...); code != 2 || !strings.Contains(errOut, flag[0]) {
			t.Errorf("enqueue -f with %s: code %d, %q", flag[0], code, errOut)
		}
	}
	up := `{"id":"ok-1","topic":"t2","delay_ms":120000}` + "\n" + `{"id":"ok-3","topic":"t","delay_ms":60000}`
	if out, errOut, code := w.delayq(up, "enqueue", "-f", "-", "--upsert"); code != 0 || !strings.Contains(out, "enqueued 2, duplicates 0") {
		t.Errorf("enqueue -f --upsert: code %d, %q %q", code, out, errOut)
	}
	if out, _, _ := w.delayq("", "inspect", "ok-1", "--json"); !strings.Contains(out, `"t2"`) {
		t.Errorf("--upsert with -f did not replace ok-1: %s", out)
	}
	// A line that is not UTF-8 is refused, naming the line; the rest go in.
	bad := "{\"id\":\"caf\xe9\",\"topic\":\"t\",\"delay_ms\":60000}\n" + `{"id":"ok-4","topic":"t","delay_ms":60000}`
	if out, errOut, code := w.delayq(bad, "enqueue", "-f", "-"); code != 1 || !strings.Contains(out, "enqueued 1") || !strings.Contains(errOut, "line 1: not valid UTF-8") {
		t.Errorf("invalid UTF-8 line: code %d, %q %q", code, out, errOut)
	}
}

func TestCommands(t *testing.T) {
	w := newWorld(t, 4)
	if _, e, code := w.delayq("", "enqueue", "--id", "c-1", "--topic", "t", "--delay", "1h", "--header", "a=b", "--body", "x"); code != 0 {
		t.Fatal(e)
	}
	if out, _, _ := w.delayq("", "inspect", "c-1"); !strings.Contains(out, "scheduled") || !strings.Contains(out, "header a:") {
		t.Errorf("inspect: %s", out)
	}
	if out, e, code := w.delayq("", "reschedule", "c-1", "--at", "2099-01-01T00:00:00Z"); code != 0 || !strings.Contains(out, "2099-01-01T00:00:00Z") {
		t.Errorf("reschedule: %d %s %s", code, out, e)
	}
	if _, e, code := w.delayq("", "enqueue", "--id", "c-1", "--topic", "t", "--delay", "1h"); code != 1 || !strings.Contains(e, "duplicate") {
		t.Errorf("duplicate enqueue: %d %s", code, e)
	}
	if out, _, code := w.delayq("", "cancel", "c-1"); code != 0 || !strings.Contains(out, "cancelled c-1") {
		t.Errorf("cancel: %d %s", code, out)
	}
	if _, e, code := w.delayq("", "cancel", "c-1"); code != 1 || !strings.Contains(e, "not found") {
		t.Errorf("second cancel: %d %s", code, e)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--id", "x", "--topic", "t"}, "--delay or --at"},
		{[]string{"enqueue", "--id", "x", "--topic", "t", "--delay", "-5s"}, "invalid delay"},
		{[]string{"enqueue", "--id", "", "--topic", "t", "--delay", "5s"}, "invalid id"},
		{[]string{"enqueue", "--id", "x", "--delay", "5s"}, "invalid destination"},
		{[]string{"enqueue", "--id", "x", "--topic", "t", "--at", "yesterday"}, "--at"},
		{[]string{"enqueue", "--id", "x", "--topic", "t", "--delay", "1s", "--header", "x-delayq-due-ms=1"}, "reserved"},
		{[]string{"reschedule", "c-1"}, "--delay or --at"},
		{[]string{"frobnicate"}, "unknown command"},
	} {
		if _, e, code := w.delayq("", c.args...); code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%v: code %d, stderr %q, want %q", c.args, code, e, c.want)
		}
	}
	out, _, code := w.delayq("", "scan", "-h")
	if code != 0 || !strings.Contains(out, "DELAYQ_REDIS_ADDRS") || !strings.Contains(out, "DELAYQ_CLAIM_BATCH") {
		t.Errorf("scan -h: %s", out)
	}
}

// TestExitCodesAndHelp: 0 ok; 1 the operation failed or some input was
// rejected; 2 a usage or configuration error, always with a message; help
// for each command shows the flags it takes; version says the build.
func TestExitCodesAndHelp(t *testing.T) {
	w := newWorld(t, 4)
	for _, c := range []struct {
		code int
		want string
		env  string
		args []string
	}{
		{2, "invalid delay", "", []string{"enqueue", "--id", "x", "--topic", "t", "--delay", "-5s"}},
		{2, "there is no d", "", []string{"enqueue", "--id", "x", "--topic", "t", "--delay", "1d"}},
		{2, "2030-01-01T09:00:00Z", "", []string{"enqueue", "--id", "x", "--topic", "t", "--at", "2030-01-01"}},
		{2, "flag provided but not defined", "", []string{"enqueue", "--colour", "red"}},
		{2, "see 'delayq help stats'", "", []string{"stats", "--colour"}},
		{2, "--interval 0s: want more than 0", "", []string{"stats", "--watch", "--interval", "0s"}},
		{2, "unknown command \"frobnicate\"; see 'delayq help'", "", []string{"frobnicate"}},
		{2, `DELAYQ_SHARDS="abc": want a whole number`, "DELAYQ_SHARDS=abc", []string{"stats"}},
		{2, `DELAYQ_LEASE="5x": want a duration`, "DELAYQ_LEASE=5x", []string{"stats"}},
		{1, "is unknown", "", []string{"inspect", "nobody"}},
		{1, "not found", "", []string{"cancel", "nobody"}},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(append([]string{}, w.env...), c.env)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%s %v: exit %d, stderr %q; want exit %d saying %q", c.env, c.args, code, errOut.String(), c.code, c.want)
		}
		if strings.Contains(errOut.String(), "Go struct") || strings.Contains(errOut.String(), "strconv.") || strings.Contains(errOut.String(), "envconfig") {
			t.Errorf("%v: Go internals in %q", c.args, errOut.String())
		}
	}
	// Help: per command, with the flags that command parses.
	if out, _, code := w.delayq("", "help", "shards"); code != 0 || !strings.Contains(out, "-json") || strings.Contains(out, "-watch") {
		t.Errorf("help shards (exit %d) should list --json and not stats' --watch:\n%s", code, out)
	}
	if out, _, code := w.delayq("", "stats", "-h"); code != 0 || !strings.Contains(out, "-watch") || !strings.Contains(out, "-interval") {
		t.Errorf("stats -h (exit %d):\n%s", code, out)
	}
	if _, e, code := w.delayq("", "help", "nope"); code != 2 || !strings.Contains(e, "unknown command") {
		t.Errorf("help nope: %d %q", code, e)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if out, _, code := w.delayq("", args...); code != 0 || !strings.HasPrefix(out, "delayq ") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	// inspect shows the attempt a consumer would see.
	if _, e, code := w.delayq("", "enqueue", "--id", "h-1", "--topic", "t", "--delay", "1h"); code != 0 {
		t.Fatal(e)
	}
	if out, _, code := w.delayq("", "inspect", "h-1"); code != 0 || !strings.Contains(out, "next attempt:  1") {
		t.Errorf("inspect h-1: %d\n%s", code, out)
	}
}

func TestBadConfigIsAClearError(t *testing.T) {
	w := newWorld(t, 4)
	for env, want := range map[string]string{
		"DELAYQ_SHARDS=abc":                   "SHARDS",
		"DELAYQ_SHARDS=0":                     "DELAYQ_SHARDS",
		"DELAYQ_NAMESPACE=a{b}":               "DELAYQ_NAMESPACE",
		"DELAYQ_LOG_FORMAT=xml":               "DELAYQ_LOG_FORMAT",
		"DELAYQ_REDIS_ADDRS=127.0.0.1:1":      "127.0.0.1:1",
		"DELAYQ_REDIS_WAIT_REPLICAS=-1":       "DELAYQ_REDIS_WAIT_REPLICAS",
		"DELAYQ_REDIS_WAIT_TIMEOUT=0s":        "DELAYQ_REDIS_WAIT_TIMEOUT",
		"DELAYQ_AMQP_URL=amqp://a/,http://b/": "DELAYQ_AMQP_URL: URL 2",
	} {
		cmd := exec.Command(bin, "stats")
		cmd.Env = append(append([]string{}, w.env...), env)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v, output %q should name %q", env, err, out, want)
		}
	}
	// Scanner settings that cannot work are refused by scan, naming the
	// variable (exit 2), never replaced by defaults.
	for _, env := range []string{"DELAYQ_CLAIM_BATCH=0", "DELAYQ_CLAIM_BATCH=-1", "DELAYQ_GOROUTINES=0", "DELAYQ_WINDOW=0",
		"DELAYQ_LEASE=0", "DELAYQ_LEASE=10ms", "DELAYQ_SHUTDOWN_TIMEOUT=0s", "DELAYQ_INGRESS=no-exchange-given",
		"DELAYQ_INGRESS=q=a,q=b", "DELAYQ_INGRESS_PREFETCH=0"} {
		cmd := exec.Command(bin, "scan")
		cmd.Env = append(append([]string{}, w.env...), env)
		out, err := cmd.CombinedOutput()
		name, _, _ := strings.Cut(env, "=")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), name) {
			t.Errorf("scan with %s: %v, output %q should name %s and exit 2", env, err, out, name)
		}
	}
	// ... and only by scan; an empty variable counts as unset.
	for _, env := range [][]string{{"DELAYQ_LEASE=500ms"}, {"DELAYQ_SHARDS=", "DELAYQ_REDIS_PASSWORD=", "DELAYQ_CONSUL_ADDR="}} {
		cmd := exec.Command(bin, "stats")
		cmd.Env = append(append([]string{}, w.env...), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("stats with %v: %v\n%s", env, err, out)
		}
	}
	cmd := exec.Command(bin, "scan")
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_ROUTES_FILE=/nonexistent/routes.yaml")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "routes") {
		t.Errorf("missing routes file: %v %s", err, out)
	}
	cmd = exec.Command(bin, "scan")
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_AMQP_URL=amqp://guest:hunter2@127.0.0.1:1/", "DELAYQ_LOG_LEVEL=info")
	var log lockedWriter
	log.w = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &log, &log
	must(t, cmd.Start())
	logged := func() string {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.w.String()
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logged(), "AMQP connect failed") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if s := logged(); strings.Contains(s, "hunter2") || !strings.Contains(s, "127.0.0.1:1") {
		t.Errorf("scanner log leaks the password or hides the address:\n%s", s)
	}
}

func regexpMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

// TestSigtermUnderLoad: SIGTERM to a busy scanner stops claiming, settles
// what is in flight, and exits 0; with the rest of the fleet, every message
// still arrives.
func TestSigtermUnderLoad(t *testing.T) {
	w := newWorld(t, 8, "DELAYQ_LEASE=3s")
	w.consume()
	leaving := w.scan()
	w.scan() // the rest of the fleet
	in, ids := w.jsonl(4000, 3*time.Second, "term")
	if out, errOut, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, errOut)
	}
	// Wait until the flow is under way, then stop one scanner.
	w.waitSome(500, 20*time.Second)
	start := time.Now()
	if err := leaving.term(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM under load: %v\n%s", err, leaving.log.String())
	}
	t.Logf("scanner exited 0 %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(leaving.log.String(), "scanner stopped") {
		t.Errorf("no clean stop in the log:\n%s", leaving.log.String())
	}
	dups := w.waitDelivered(ids, 60*time.Second)
	t.Logf("%d duplicates after the graceful stop", dups)
}

// waitSome waits until at least n distinct messages arrived.
// inFlight returns the namespace's messages in flight, from delayq stats.
func (w *world) inFlight() int64 {
	w.t.Helper()
	out, e, code := w.delayq("", "stats", "--json")
	var v struct {
		Total struct {
			InFlight int64 `json:"in_flight"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		w.t.Fatalf("stats: %v %s %s", err, out, e)
	}
	return v.Total.InFlight
}

// TestSigtermLeavesNothingInFlight: a scanner stopped with SIGTERM under
// load settles everything it claimed before it exits (confirmed and acked,
// or released), so nothing waits for a lease; while it waits for confirms
// a blocked broker withholds, /readyz answers 503 "shutting down"; what it
// had to abandon comes back after the lease, and every message arrives.
func TestSigtermLeavesNothingInFlight(t *testing.T) {
	// Confirms time out after a third of the lease (10 s): long enough to
	// see them outstanding on a loaded machine.
	w := newWorld(t, 4, "DELAYQ_LEASE=30s", "DELAYQ_SHUTDOWN_TIMEOUT=2s")
	node, err := publishertest.StartRabbit()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	w.env = append(w.env, "DELAYQ_AMQP_URL="+node.URL)
	w.consumeFrom(node.URL)
	in, ids := w.jsonl(20000, 10*time.Second, "term")
	if out, errOut, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, errOut)
	}

	// A clean stop under load: nothing left in flight.
	first := w.scan()
	w.waitSome(1000, 30*time.Second)
	if err := first.term(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM under load: %v\n%s", err, first.log.String())
	}
	if n := w.inFlight(); n != 0 {
		t.Errorf("%d messages left in flight by a scanner stopped with SIGTERM", n)
	}

	// A stop while the broker withholds confirms: not ready at once. More
	// load first: the first scanner may have left little still to come.
	in, more := w.jsonl(5000, 10*time.Second, "term2")
	if out, errOut, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, errOut)
	}
	ids = append(ids, more...)
	second := w.scan()
	w.waitSome(w.count()+1000, 30*time.Second)
	if _, err := node.Ctl("set_vm_memory_high_watermark", "0.0001"); err != nil {
		t.Fatal(err)
	}
	// Messages due now, enqueued once the alarm is on: the scanner may have
	// published all of the batch above before the alarm took hold.
	in, more = w.jsonl(2000, time.Millisecond, "term3")
	if out, errOut, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue under the alarm: %s %s", out, errOut)
	}
	ids = append(ids, more...)
	shardtest.WaitFor(t, 30*time.Second, func() bool { return w.inFlight() > 0 }, func() string {
		out, _, _ := w.delayq("", "stats")
		return fmt.Sprintf("nothing in flight under the alarm; %d arrived\n%s\n%s", w.count(), out, second.log.String())
	})
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		code, body := get("http://" + second.metrics + "/readyz")
		return code == 503 && strings.Contains(body, "shutting down")
	}, func() string {
		code, body := get("http://" + second.metrics + "/readyz")
		return fmt.Sprintf("/readyz %d %q", code, body)
	})
	// The shutdown timeout (2 s) and the publisher's close timeout (2 s),
	// with room for a loaded machine.
	if err := second.term(15 * time.Second); err != nil {
		t.Errorf("exit under a broker alarm: %v", err)
	}
	if _, err := node.Ctl("set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatal(err)
	}
	w.scan()
	dups := w.waitDelivered(ids, 120*time.Second)
	t.Logf("%d duplicates after two SIGTERMs, one under a broker alarm", dups)
}

// TestEndToEndClaimBatch: the same flow as TestEndToEnd with claims of up
// to 16 messages: every message delivered once, none early.
func TestEndToEndClaimBatch(t *testing.T) {
	w := newWorld(t, 8, "DELAYQ_CLAIM_BATCH=16")
	w.consume()
	w.scan()
	w.scan()
	in, ids := w.jsonl(5000, 2*time.Second, "batch")
	if out, errOut, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 || !strings.Contains(out, "enqueued 5000") {
		t.Fatalf("enqueue: %d %s %s", code, out, errOut)
	}
	if dups := w.waitDelivered(ids, 60*time.Second); dups != 0 {
		t.Errorf("%d duplicates without any failure", dups)
	}
}

// count returns how many distinct ids have arrived.
func (w *world) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

func (w *world) waitSome(n int, within time.Duration) {
	w.t.Helper()
	shardtest.WaitFor(w.t, within, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.got) >= n
	}, func() string { return fmt.Sprintf("fewer than %d messages arrived", n) })
}

// TestDeadRedrive: a message to a queue that does not exist yet dies with
// the broker's reason; after the queue is declared, redrive delivers it.
func TestDeadRedrive(t *testing.T) {
	w := newWorld(t, 4, "DELAYQ_MAX_REFUSALS=2")
	w.scan()
	for _, id := range []string{"early-1", "early-2", "junk"} {
		if _, e, code := w.delayq("", "enqueue", "--id", id, "--exchange", w.exchange, "--routing-key", "rk", "--delay", "0s"); code != 0 {
			t.Fatal(e)
		}
	}
	// The exchange does not exist yet either: declared by consume() below.
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		out, _, _ := w.delayq("", "dead", "list")
		return strings.Count(out, "not found") == 3
	}, func() string { out, _, _ := w.delayq("", "dead", "list"); return "not all dead:\n" + out })
	if out, _, _ := w.delayq("", "dead", "show", "junk"); !strings.Contains(out, "dead") || !strings.Contains(out, "not found") {
		t.Errorf("dead show: %s", out)
	}
	if out, e, code := w.delayq("", "dead", "purge", "junk"); code != 0 || !strings.Contains(out, "purged junk") {
		t.Fatalf("purge: %s %s", out, e)
	}
	w.consume() // fix the route
	if out, e, code := w.delayq("", "dead", "redrive", "--all"); code != 0 || !strings.Contains(out, "redriven 2 dead") {
		t.Fatalf("redrive --all: %s %s", out, e)
	}
	// The scanner may have cached "exchange missing" for a moment; it
	// checks again each time, so both arrive.
	w.waitDelivered([]string{"early-1", "early-2"}, 30*time.Second)
	if out, _, _ := w.delayq("", "dead", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("dead set not empty: %s", out)
	}
	if _, e, code := w.delayq("", "dead", "redrive"); code != 2 || !strings.Contains(e, "IDs or --all") {
		t.Errorf("redrive without ids: %d %s", code, e)
	}
}

// TestRedriveAllEnds: redrive --all takes only what was dead when it
// started, so it ends even while a scanner dead-letters again, at once,
// everything it redrives (the route is still broken).
func TestRedriveAllEnds(t *testing.T) {
	w := newWorld(t, 2, "DELAYQ_MAX_REFUSALS=1")
	w.scan()
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, `{"id":"broken-%d","exchange":"missing-%s","routing_key":"rk","delay_ms":0}`+"\n", i, w.ns)
	}
	if out, e, code := w.delayq(b.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, e)
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		out, _, _ := w.delayq("", "stats", "--json")
		var v struct{ Total struct{ Dead int64 } }
		return json.Unmarshal([]byte(out), &v) == nil && v.Total.Dead == 300
	}, func() string { out, _, _ := w.delayq("", "stats", "--json"); return out })
	for range 3 {
		out, e, code := w.delayq("", "dead", "redrive", "--all")
		var n int
		if _, err := fmt.Sscanf(out, "redriven %d dead", &n); code != 0 || err != nil || n > 300 {
			t.Fatalf("redrive --all: code %d, %q %q: want at most the 300 dead when it started", code, out, e)
		}
	}
}

func TestCapacityLimit(t *testing.T) {
	w := newWorld(t, 2, "DELAYQ_MAX_PENDING=10")
	in, _ := w.jsonl(30, time.Hour, "cap")
	out, errOut, code := w.delayq(in, "enqueue", "-f", "-")
	if code != 1 || !strings.Contains(out, "enqueued 10,") || !strings.Contains(out, "refused at capacity 20") ||
		!strings.Contains(errOut, "namespace at capacity") {
		t.Fatalf("code %d\n%s\n%s", code, out, errOut)
	}
	if _, e, code := w.delayq("", "enqueue", "--id", "one-more", "--topic", "t", "--delay", "1h"); code != 1 || !strings.Contains(e, "capacity") {
		t.Errorf("single enqueue at capacity: %d %s", code, e)
	}
}

// TestStatsWatchAndQuietProgress: stats --watch --json streams one object
// per refresh until interrupted; enqueue -f draws no progress when piped.
func TestStatsWatchAndQuietProgress(t *testing.T) {
	w := newWorld(t, 2)
	in, _ := w.jsonl(50, time.Hour, "w")
	_, errOut, code := w.delayq(in, "enqueue", "-f", "-")
	if code != 0 || strings.ContainsAny(errOut, "\r\033") {
		t.Fatalf("enqueue piped: code %d, stderr %q", code, errOut)
	}
	cmd := exec.Command(bin, "stats", "--watch", "--json", "--interval", "100ms")
	cmd.Env = w.env
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout = out
	must(t, cmd.Start())
	shardtest.WaitFor(t, 10*time.Second, func() bool { return strings.Count(out.String(), "\n") >= 3 },
		func() string { return "fewer than 3 refreshes: " + out.String() })
	must(t, cmd.Process.Signal(syscall.SIGINT))
	if err := cmd.Wait(); err != nil {
		t.Errorf("stats --watch after SIGINT: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v struct {
			Total struct{ Scheduled int64 } `json:"total"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil || v.Total.Scheduled != 50 {
			t.Errorf("watch line %q: %v", line, err)
		}
	}
}
