package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// exportVariety is message j of a round trip: every destination form,
// header type, property, deadline, retry schedule and step, text and
// binary bodies, and a count of earlier deliveries, in turn.
func exportVariety(j int, base time.Time) shard.Message {
	m := shard.Message{ID: fmt.Sprintf("rt-%06d", j), At: base.Add(time.Duration(j%7200) * time.Second),
		Body: []byte(fmt.Sprintf(`{"n":%d,"text":"ünïcode & <tags>"}`, j))}
	switch j % 3 {
	case 0:
		m.Topic = "order.cancel"
	case 1:
		m.Exchange, m.RoutingKey = "orders", "order.cancel"
	default:
		m.Exchange, m.RoutingKey = "", "a-queue" // the default exchange
	}
	if j%2 == 0 {
		m.Headers = amqp.Table{"s": "text", "i8": int8(-8), "i16": int16(1600), "i32": int32(-32000), "i64": int64(1) << 40,
			"u8": uint8(200), "f32": float32(1.5), "f64": 2.25, "b": true, "d": amqp.Decimal{Scale: 2, Value: 12345},
			"t": time.Unix(1700000000, 0).UTC(), "bytes": []byte{0, 1, 2, 255}, "nested": amqp.Table{"k": "v", "n": int32(7)},
			"list": []any{"a", int32(1), false}}
	}
	if j%5 == 0 {
		m.ContentType = "application/json"
		m.Properties = shard.Properties{ContentEncoding: "gzip", CorrelationID: "c-" + m.ID, ReplyTo: "replies", Expiration: "60000",
			Type: "order", AppID: "shop", Priority: 5, DeliveryMode: 1, Timestamp: time.Unix(1700000000+int64(j), 0).UTC()}
	}
	if j%7 == 0 {
		m.ExpiresAt = m.At.Add(time.Hour)
		m.MaxLateness = 10 * time.Minute
	}
	if j%11 == 0 {
		m.Retry = []time.Duration{15 * time.Second, 3 * time.Minute, time.Hour}
		m.RetryStep = j % 4
	}
	if j%13 == 0 {
		m.Body = []byte{0xff, 0xfe, 0, byte(j)} // not UTF-8: body_base64
	}
	if j%17 == 0 {
		m.Attempts = 1 + j%5
	}
	return m
}

// TestExportImportRoundTrip: 100,000 messages with every field and header
// type are exported, read back by enqueue -f into another namespace and
// into a Redis Cluster of three masters, and exported again from each:
// every export is the same bytes; a message's attempts and due time come
// back as they were; every message is delivered from the cluster as it
// was enqueued; a bad line is named by number and the rest go in.
func TestExportImportRoundTrip(t *testing.T) {
	const n = 100_000
	w := newWorld(t, 8)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	prod := shard.NewProducer(store, balance.Static(8), shard.ProducerOptions{})
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for from := 0; from < n; from += 2000 {
		msgs := make([]shard.Message, 0, 2000)
		for j := from; j < from+2000; j++ {
			msgs = append(msgs, exportVariety(j, base))
		}
		res, err := prod.EnqueueBatch(context.Background(), msgs)
		must(t, err)
		for _, r := range res {
			must(t, r.Err)
		}
	}
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "second.jsonl")
	start := time.Now()
	_, e, code := w.delayq("", "export", "-o", first)
	took := time.Since(start)
	if code != 0 || !strings.Contains(e, fmt.Sprintf("%d messages exported from 8 shards", n)) {
		t.Fatalf("export: exit %d %s", code, e)
	}
	to := w.sibling("-to")
	lines, err := os.ReadFile(first)
	must(t, err)
	start = time.Now()
	out, e, code := to.delayq(string(lines), "enqueue", "-f", "-")
	tookIn := time.Since(start)
	if code != 0 || !strings.Contains(out+e, fmt.Sprintf("enqueued %d, duplicates 0, rejected 0", n)) {
		t.Fatalf("enqueue -f of the export: exit %d %s %s", code, out, e)
	}
	if _, e, code := to.delayq("", "export", "-o", second); code != 0 {
		t.Fatalf("export of the copy: exit %d %s", code, e)
	}
	again, err := os.ReadFile(second)
	must(t, err)
	if !bytes.Equal(lines, again) {
		a, b := strings.Split(string(lines), "\n"), strings.Split(string(again), "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("export -> enqueue -f -> export differs at line %d:\n%s\n%s", i+1, a[i], b[i])
			}
		}
		t.Fatalf("export -> enqueue -f -> export: %d lines, then %d", len(a), len(b))
	}
	t.Logf("%d messages, %d bytes: export %s (%.0f msg/s), enqueue -f %s (%.0f msg/s)", n, len(lines),
		took.Round(time.Millisecond), n/took.Seconds(), tookIn.Round(time.Millisecond), n/tookIn.Seconds())
	// And from one Redis to a Redis Cluster of three masters (the same M):
	// the same lines again.
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	onCluster := w.sibling("-cluster", "DELAYQ_REDIS_ADDRS="+strings.Join(c.Addrs, ","))
	if out, e, code := onCluster.delayq(string(lines), "enqueue", "-f", "-"); code != 0 ||
		!strings.Contains(out, fmt.Sprintf("enqueued %d, duplicates 0, rejected 0", n)) {
		t.Fatalf("enqueue -f into the cluster: exit %d %s %s", code, out, e)
	}
	third := filepath.Join(dir, "third.jsonl")
	if _, e, code := onCluster.delayq("", "export", "-o", third); code != 0 {
		t.Fatalf("export from the cluster: exit %d %s", code, e)
	}
	if fromCluster, err := os.ReadFile(third); err != nil || !bytes.Equal(lines, fromCluster) {
		t.Fatalf("export from the cluster differs from the first (%d and %d bytes): %v", len(lines), len(fromCluster), err)
	}
	deliverAsEnqueued(t, onCluster, n, base)
	// What the consumer would see: attempts and typed headers as they were.
	copyStore, err := shard.NewStore(rdb, to.ns)
	must(t, err)
	copyProd := shard.NewProducer(copyStore, balance.Static(8), shard.ProducerOptions{})
	for _, j := range []int{0, 17 * 6, 11 * 3, 7 * 2} {
		want := exportVariety(j, base)
		info, err := copyProd.Inspect(context.Background(), want.ID)
		must(t, err)
		if info.Attempts != want.Attempts || !info.At.Equal(want.At) || info.Envelope == nil {
			t.Errorf("%s: attempts %d at %s, want %d at %s", want.ID, info.Attempts, info.At, want.Attempts, want.At)
		}
	}
	// A line that does not parse is named by number and skipped; the rest
	// go in.
	bad := `{"id":"ok-1","topic":"t","at_ms":` + fmt.Sprint(base.UnixMilli()) + `}` + "\n" + `{"id":"bad","topic":"t","attempts":-1,"at_ms":1}` + "\n"
	if out, e, code := to.delayq(bad, "enqueue", "-f", "-"); code != 1 || !strings.Contains(out+e, "line 2") || !strings.Contains(out+e, "enqueued 1,") {
		t.Errorf("a bad line: exit %d %s %s", code, out, e)
	}
}

// TestExportSchedulesAndDead: export --schedules writes each recurring
// schedule with what it has done (fired, last, paused, created), which
// schedule set --file restores into another namespace: exported again, the
// same bytes, and set twice, still the same; export --dead writes each
// dead message with its reason, time of death and deliveries, which
// enqueue -f puts back in the dead set (not scheduled): exported again,
// the same bytes; redriven there, it leaves the dead set. Bad state and dead
// fields are named.
func TestExportSchedulesAndDead(t *testing.T) {
	w := newWorld(t, 4, "DELAYQ_MAX_REFUSALS=1")
	w.consume()
	to := w.sibling("-to")
	ctx := context.Background()
	_, src, dst := storesOf(t, w, to)
	w.succeed("", "schedule", "set", "tick", "@every 1s", "--count", "1000", "--exchange", w.exchange, "--routing-key", "rk", "--body", "tick")
	w.succeed("", "schedule", "set", "berlin", "30 9 * * 1-5", "--zone", "Europe/Berlin", "--missed", "latest", "--grace", "5m",
		"--topic", "reports", "--max-lateness", "1h", "--body", "<b>report</b> ü")
	w.succeed("", "schedule", "pause", "berlin")
	for j := range 6 { // dead after one refusal: no queue is bound to "none"
		w.succeed("", "enqueue", "--id", fmt.Sprintf("dead-%d", j), "--exchange", w.exchange, "--routing-key", "none",
			"--header", "n=42", "--body", fmt.Sprintf("dead body %d", j), "--delay", "10ms")
	}
	sc := w.scan()
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		info, err := src.ScheduleInfo(ctx, "tick")
		dead, derr := src.DeadList(ctx, 4, 100)
		return err == nil && derr == nil && info.Fired >= 3 && len(dead) == 6
	}, func() string { return "the schedule did not fire 3 times, or the 6 messages are not dead" })
	sc.kill()

	schedules := w.succeed("", "export", "--schedules")
	if n := strings.Count(schedules, "\n"); n != 2 || !strings.Contains(schedules, `"paused":true`) || !strings.Contains(schedules, `"last_ms":`) {
		t.Fatalf("export --schedules: %d lines, want 2 with a paused one and a last occurrence:\n%s", n, schedules)
	}
	to.succeed(schedules, "schedule", "set", "--file", "-")
	if again := to.succeed("", "export", "--schedules"); again != schedules {
		t.Fatalf("export --schedules -> set --file -> export differs:\n%s\n%s", schedules, again)
	}
	to.succeed(schedules, "schedule", "set", "--file", "-") // twice: the state stays
	if again := to.succeed("", "export", "--schedules"); again != schedules {
		t.Errorf("set --file twice changed the state:\n%s\n%s", schedules, again)
	}
	was, err := src.ScheduleInfo(ctx, "tick")
	must(t, err)
	now, err := dst.ScheduleInfo(ctx, "tick")
	must(t, err)
	if now.Fired != was.Fired || !now.Last.Equal(was.Last) || !now.Created.Equal(was.Created) ||
		now.Next.Sub(was.Created)%time.Second != 0 || !now.Next.After(was.Last) {
		t.Errorf("restored tick: fired %d last %s created %s next %s; was fired %d last %s created %s",
			now.Fired, now.Last, now.Created, now.Next, was.Fired, was.Last, was.Created)
	}
	if b, err := dst.ScheduleInfo(ctx, "berlin"); err != nil || !b.Paused || !b.Next.IsZero() {
		t.Errorf("restored berlin: paused %v next %s (%v), want paused with none pending", b.Paused, b.Next, err)
	}

	dead := w.succeed("", "export", "--dead")
	if n := strings.Count(dead, "\n"); n != 6 || !strings.Contains(dead, `"dead":{"since_ms":`) || !strings.Contains(dead, `"attempts":1`) {
		t.Fatalf("export --dead: %d lines, want 6 dead with their deliveries:\n%s", n, dead)
	}
	if out := to.succeed(dead, "enqueue", "-f", "-"); !strings.Contains(out, "enqueued 6, duplicates 0, rejected 0") {
		t.Errorf("enqueue -f of the dead: %s", out)
	}
	if out := to.succeed(dead, "enqueue", "-f", "-"); !strings.Contains(out, "enqueued 0, duplicates 6") {
		t.Errorf("enqueue -f of the dead again: %s", out)
	}
	if again := to.succeed("", "export", "--dead"); again != dead {
		t.Fatalf("export --dead -> enqueue -f -> export differs:\n%s\n%s", dead, again)
	}
	if out := to.succeed("", "inspect", "dead-3"); !strings.Contains(out, "dead") || !strings.Contains(out, "NO_ROUTE") {
		t.Errorf("inspect of a restored dead message: %s", out)
	}
	// Redriven where it was restored, to a bound routing key: delivered,
	// as its second attempt.
	to.succeed("", "dead", "redrive", "dead-3")
	out := to.succeed("", "export", "--dead")
	if strings.Contains(out, `"id":"dead-3"`) || strings.Count(out, "\n") != 5 {
		t.Errorf("after the redrive, export --dead still has dead-3 or not the other 5:\n%s", out)
	}

	for _, c := range []struct{ line, want string }{
		{`{"id":"d","topic":"t","at_ms":1700000000000,"dead":{"since_ms":1700000000000,"reason":"x"}}`, "dead: a dead message has no due time"},
		{`{"id":"d","topic":"t","dead":{"since_ms":5,"reason":"x"}}`, "dead.since_ms: 5 is outside"},
		{`{"id":"d","topic":"t","dead":{"since_ms":1700000000000,"why":"x"}}`, `unknown field "why"`},
	} {
		if out, e, code := to.delayq(c.line+"\n", "enqueue", "-f", "-"); code != 1 || !strings.Contains(out+e, "line 1") || !strings.Contains(out+e, c.want) {
			t.Errorf("%s: exit %d %s %s, want line 1 saying %q", c.line, code, out, e, c.want)
		}
	}
	for _, c := range []struct{ state, want string }{
		{`{"fired":-1,"created_ms":1700000000000}`, "state.fired: -1 is negative"},
		{`{"fired":1,"created_ms":3}`, "state.created_ms: 3 is outside"},
		{`{"fired":1,"created_ms":1700000000000,"last_ms":-4}`, "state.last_ms: -4 is outside"},
	} {
		line := `{"name":"s","spec":"@daily","message":{"topic":"t"},"state":` + c.state + "}\n"
		if out, e, code := to.delayq(line, "schedule", "set", "--file", "-"); code != 1 || !strings.Contains(out+e, "line 1") || !strings.Contains(out+e, c.want) {
			t.Errorf("%s: exit %d %s %s, want line 1 saying %q", c.state, code, out, e, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "--schedules", "--dead"}, "two exports"},
		{[]string{"export", "--schedules", "--after", "1:2:x"}, "--after is for messages"},
		{[]string{"export", "--dead", "--after", "x"}, "not a cursor of the dead list"},
	} {
		if _, e, code := w.delayq("", c.args...); code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d %s, want saying %q", c.args, code, e, c.want)
		}
	}
}

// deliverAsEnqueued makes the n messages of w (exportVariety(j, base),
// read back from an export) due now with a bulk reschedule, publishes them
// with a scanner, and checks that each arrives once as it was enqueued:
// id, body, every property, every typed header, and the attempt that
// follows its exported count of deliveries.
func deliverAsEnqueued(t *testing.T, w *world, n int, base time.Time) {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare("orders", "direct", true, false, false, false, nil))
	orders := w.ns + "-orders"
	for _, q := range []string{orders, "a-queue"} { // "a-queue": the default exchange's routing key in the lines
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		must(t, err)
		_, err = ch.QueuePurge(q, false)
		must(t, err)
	}
	must(t, ch.QueueBind(orders, "order.cancel", "orders", false, nil))
	var mu sync.Mutex
	got := map[string][]amqp.Delivery{}
	for _, q := range []string{orders, "a-queue"} {
		ds, err := ch.Consume(q, "", true, false, false, false, nil)
		must(t, err)
		go func() {
			for d := range ds {
				d.Acknowledger = nil
				mu.Lock()
				got[d.MessageId] = append(got[d.MessageId], d)
				mu.Unlock()
			}
		}()
	}
	// The topic's messages go to the default exchange of the scanner,
	// "orders", with the topic as routing key.
	w.scan("DELAYQ_DEFAULT_EXCHANGE=orders")
	if out := w.succeed("", "reschedule", "--prefix", "rt-", "--delay", "1s", "--yes"); !strings.Contains(out, fmt.Sprint(n)) {
		t.Fatalf("reschedule of the %d: %s", n, out)
	}
	shardtest.WaitFor(t, 3*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= n
	}, func() string { return fmt.Sprintf("%d of %d delivered", len(got), n) })
	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for j := range n {
		want := exportVariety(j, base)
		ds := got[want.ID]
		if len(ds) != 1 {
			t.Errorf("%s delivered %d times", want.ID, len(ds))
			continue
		}
		d := ds[0]
		mode := want.Properties.DeliveryMode
		if mode == 0 {
			mode = amqp.Persistent
		}
		var why []string
		check := func(what string, got, want any) {
			if !reflect.DeepEqual(got, want) {
				why = append(why, fmt.Sprintf("%s %#v, want %#v", what, got, want))
			}
		}
		check("body", d.Body, want.Body)
		check("content type", d.ContentType, want.ContentType)
		p := want.Properties
		check("properties", []any{d.ContentEncoding, d.CorrelationId, d.ReplyTo, d.Expiration, d.Type, d.AppId, d.Priority, d.DeliveryMode},
			[]any{p.ContentEncoding, p.CorrelationID, p.ReplyTo, p.Expiration, p.Type, p.AppID, p.Priority, mode})
		if !p.Timestamp.IsZero() {
			check("timestamp", d.Timestamp.UTC(), p.Timestamp)
		}
		for k, v := range want.Headers {
			got := d.Headers[k]
			if t, ok := got.(time.Time); ok { // the same instant, decoded in the local zone
				got = t.UTC()
			}
			check("header "+k, got, v)
		}
		check("attempt", d.Headers[shard.HeaderAttempt], int32(want.Attempts+1))
		if len(want.Retry) > 0 {
			check("retry step", fmt.Sprint(d.Headers[shard.HeaderRetryStep]), fmt.Sprint(want.RetryStep))
		}
		if len(why) > 0 {
			if bad++; bad <= 10 {
				t.Errorf("%s delivered from the cluster not as enqueued: %s", want.ID, strings.Join(why, "; "))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d not as enqueued", bad, n)
	}
}

// TestConsoleExport: in Chromium, the console's Export page links the
// three downloads, and each gives the bytes delayq export writes (the
// scheduled messages with typed headers, a schedule with its state, a
// dead message with its reason).
func TestConsoleExport(t *testing.T) {
	w := newWorld(t, 4)
	ctx := browser(t)
	var in strings.Builder
	for j := range 2500 { // more than a flush of the download
		fmt.Fprintf(&in, `{"id":"exp-%04d","topic":"t","delay_ms":3600000,"headers":{"n":{"int":%d}},"body":"b%d"}`+"\n", j, j, j)
	}
	fmt.Fprintf(&in, `{"id":"gone","topic":"t","body":"x","dead":{"since_ms":%d,"reason":"NO_ROUTE"}}`+"\n", time.Now().Add(-time.Hour).UnixMilli())
	w.succeed(in.String(), "enqueue", "-f", "-")
	w.succeed("", "schedule", "set", "nightly", "30 2 * * *", "--topic", "reports")
	w.succeed("", "schedule", "pause", "nightly")
	base := w.serve(t)
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleAdmin), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("totals")), chromedp.Click(chromedp.ID("nav-export")), chromedp.WaitVisible(chromedp.ID("exports"))))
	for _, c := range []struct{ link, flag string }{{"export-messages", ""}, {"export-schedules", "--schedules"}, {"export-dead", "--dead"}} {
		args := []string{"export"}
		if c.flag != "" {
			args = append(args, c.flag)
		}
		want := w.succeed("", args...)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.getElementById("`+c.link+`").href).then(r => r.text())`,
			chromedp.EvalAwaitPromise))
		must(t, err)
		if got != want || want == "" {
			t.Errorf("%s: the download (%d lines) differs from delayq %s (%d lines)", c.link, strings.Count(got, "\n"), strings.Join(args, " "), strings.Count(want, "\n"))
		}
	}
}
