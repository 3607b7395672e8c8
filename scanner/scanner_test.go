package scanner_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/router"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

var (
	redisSrv  *shardtest.Redis
	rabbit    *publishertest.Rabbit
	serverErr error
)

func TestMain(m *testing.M) {
	redisSrv, serverErr = shardtest.StartRedis(shardtest.RedisOptions{})
	if serverErr == nil {
		rabbit, serverErr = publishertest.StartRabbit()
	}
	code := m.Run()
	if rabbit != nil {
		rabbit.Close()
	}
	if redisSrv != nil {
		redisSrv.Close()
	}
	os.Exit(code)
}

// fleet is one test's world: a namespace, a producer, a scanner, and a
// durable queue bound to the test's exchange with routing key "rk".
type fleet struct {
	t        testing.TB
	ns       string
	exchange string
	prod     *shard.Producer
	store    *shard.Store
	scanner  *scanner.Scanner
	pub      *publisher.Publisher
	metrics  *scanner.Metrics
	m        int

	mu  sync.Mutex
	got map[string][]delivery
}

type delivery struct {
	at      time.Time
	dueMs   int64
	attempt int32
	body    string
	raw     amqp.Delivery
}

func newFleet(t testing.TB, m int, cfg scanner.Config, amqpURL string) *fleet {
	t.Helper()
	return newFleetWith(t, m, cfg, amqpURL, nil)
}

// newFleetWith is newFleet whose scanner uses wrap(store) (nil: the store).
func newFleetWith(t testing.TB, m int, cfg scanner.Config, amqpURL string, wrap func(*shard.Store) *shard.Store) *fleet {
	t.Helper()
	shardtest.Require(t, serverErr)
	f := &fleet{t: t, ns: shardtest.Namespace(t), m: m, got: map[string][]delivery{}}
	f.exchange = f.ns
	var err error
	if f.store, err = shard.NewStore(redisSrv.Client(t), f.ns); err != nil {
		t.Fatal(err)
	}
	f.prod = shard.NewProducer(f.store, balance.Static(m), shard.ProducerOptions{})
	f.consume(amqpURL)
	scanStore := f.store
	if wrap != nil {
		scanStore = wrap(f.store)
	}
	f.scanner, f.pub, f.metrics = startScanner(t, f, cfg, amqpURL, scanStore)
	return f
}

// newFleetSharing is a second scanner process (its own publisher, Redis
// client and metrics) on the namespace and shards of f.
func newFleetSharing(t testing.TB, f *fleet, cfg scanner.Config) *fleet {
	t.Helper()
	g := &fleet{t: t, ns: f.ns, exchange: f.exchange, m: f.m, prod: f.prod}
	st, err := shard.NewStore(redisSrv.Client(t), f.ns)
	if err != nil {
		t.Fatal(err)
	}
	g.store = st
	g.scanner, g.pub, g.metrics = startScanner(t, g, cfg, rabbit.URL, st)
	return g
}

// startScanner starts a publisher and a scanner on f's namespace with
// store; both stop when the test ends.
func startScanner(t testing.TB, f *fleet, cfg scanner.Config, amqpURL string, store *shard.Store) (*scanner.Scanner, *publisher.Publisher, *scanner.Metrics) {
	t.Helper()
	log := zaptest.NewLogger(t)
	// No probation: the tests of refusals need the broker's first nacks
	// believed (the publisher's own tests cover probation).
	pub, err := publisher.New(publisher.Options{URLs: []string{amqpURL}, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		Probation: -1}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	routes, _ := router.New("", map[string]router.Destination{"t": {Exchange: f.exchange, RoutingKey: "rk"},
		"u":       {Exchange: f.exchange, RoutingKey: "rk"},
		"late-ok": {Exchange: f.exchange, RoutingKey: "rk", Expired: router.ExpiredPublish}})
	metrics := scanner.NewMetrics(prometheus.NewRegistry())
	rdb := redisSrv.Client(t)
	sc, err := scanner.New(cfg, scanner.Deps{
		Store: store, Shards: balance.Static(f.m), Cursor: balance.NewCursor(rdb, f.ns, balance.Static(f.m)),
		Routes: routes, Publisher: pub, Log: log, Metrics: metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sc.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return sc, pub, metrics
}

// consume declares the exchange and a durable queue and records every
// delivery, reconnecting if the broker goes away.
func (f *fleet) consume(url string) {
	setup := func() (*amqp.Connection, <-chan amqp.Delivery, error) {
		conn, err := amqp.Dial(url)
		if err != nil {
			return nil, nil, err
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.ExchangeDeclare(f.exchange, "direct", true, false, false, false, nil)
		}
		if err == nil {
			_, err = ch.QueueDeclare(f.ns, true, false, false, false, nil)
		}
		if err == nil {
			err = ch.QueueBind(f.ns, "rk", f.exchange, false, nil)
		}
		var d <-chan amqp.Delivery
		if err == nil {
			// Manual acks, after recording: with auto-ack a broker killed
			// right after writing a message to this socket counts it as
			// consumed (and confirms it to the scanner) while the reset
			// connection drops it unread.
			d, err = ch.Consume(f.ns, "", false, false, false, false, nil)
		}
		if err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
		return conn, d, nil
	}
	conn, d, err := setup()
	if err != nil {
		f.t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	f.t.Cleanup(func() { close(done); _ = conn.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			for msg := range d {
				f.mu.Lock()
				due, _ := msg.Headers[shard.HeaderDueMs].(int64)
				att, _ := msg.Headers[shard.HeaderAttempt].(int32)
				f.got[msg.MessageId] = append(f.got[msg.MessageId], delivery{at: time.Now(), dueMs: due, attempt: att, body: string(msg.Body), raw: msg})
				f.mu.Unlock()
				_ = msg.Ack(false)
			}
			for { // the broker went away: reconnect
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if c, nd, err := setup(); err == nil {
					conn, d = c, nd
					break
				}
			}
		}
	})
}

func (f *fleet) delivered(id string) []delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]delivery(nil), f.got[id]...)
}

// waitAll waits until every id was delivered at least once.
func (f *fleet) waitAll(ids []string, within time.Duration) {
	f.t.Helper()
	shardtest.WaitFor(f.t, within, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.got) < len(ids) { // cheap test first: not all can be there yet
			return false
		}
		for _, id := range ids {
			if len(f.got[id]) == 0 {
				return false
			}
		}
		return true
	}, func() string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var missing []string
		for _, id := range ids {
			if len(f.got[id]) == 0 {
				missing = append(missing, id)
			}
		}
		return fmt.Sprintf("%d of %d never delivered, e.g. %v", len(missing), len(ids), missing[:min(5, len(missing))])
	})
}

func TestDeliversOnTimeNeverEarly(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 8}, rabbit.URL)
	due := map[string]time.Time{}
	var ids []string
	var msgs []shard.Message
	for i := range 300 {
		id := fmt.Sprintf("order-%d", i)
		ids = append(ids, id)
		m := shard.Message{ID: id, Body: []byte("cancel " + id), Delay: time.Duration(i%100) * 20 * time.Millisecond,
			Headers: amqp.Table{"tenant": "acme"}, ContentType: "text/plain"}
		if i%2 == 0 {
			m.Topic = "t"
		} else {
			m.Exchange, m.RoutingKey = f.exchange, "rk"
		}
		msgs = append(msgs, m)
	}
	res, err := f.prod.EnqueueBatch(t.Context(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		due[r.ID] = r.Due
	}
	f.waitAll(ids, 30*time.Second)
	var late []time.Duration
	for _, id := range ids {
		d := f.delivered(id)[0]
		if d.at.Before(due[id]) || d.dueMs != due[id].UnixMilli() {
			t.Errorf("%s: received %s, due %s (header %d): early", id, d.at.Format(time.StampMicro), due[id].Format(time.StampMicro), d.dueMs)
		}
		if d.attempt != 1 || d.body != "cancel "+id {
			t.Errorf("%s: attempt %d body %q", id, d.attempt, d.body)
		}
		late = append(late, d.at.Sub(due[id]))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	t.Logf("lateness of %d messages: p50 %s, p99 %s, max %s", len(late), late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	// A consumer can get a message before the scanner has settled its
	// confirm: wait for the count.
	shardtest.WaitFor(t, 10*time.Second, func() bool { return f.scanner.Counts().Published == 300 },
		func() string { return fmt.Sprintf("counts %+v", f.scanner.Counts()) })
	if c := f.scanner.Counts(); c.Dead != 0 {
		t.Errorf("counts %+v", c)
	}
}

// TestWakeUpCutsIdleSleep: into an idle fleet, a message with a 200 ms
// delay is published close to its due time, not at the end of an idle sleep.
func TestWakeUpCutsIdleSleep(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 16, scanner.Config{Goroutines: 8}, rabbit.URL)
	f.waitRound()
	var late []time.Duration
	for i := range 5 {
		id := fmt.Sprintf("wake-%d", i)
		s, err := f.prod.Enqueue(t.Context(), shard.Message{ID: id, Topic: "t", Delay: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		f.waitAll([]string{id}, 5*time.Second)
		late = append(late, f.delivered(id)[0].at.Sub(s.Due))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	t.Logf("lateness after wake-up: %v", late)
	if late[0] < 0 {
		t.Errorf("published early: %v", late)
	}
	// Without the wake-up the fleet would wait for a patrol to find the
	// message; allow generous slack for a loaded CI machine under -race.
	if med := late[len(late)/2]; med > 150*time.Millisecond {
		t.Errorf("median lateness %s: the wake-up notice did not cut the idle sleep", med)
	}
}

// waitRound waits until the fleet's cursor has gone round every shard, so
// the scanner's board has heard from each and the fleet goes idle.
func (f *fleet) waitRound() {
	rdb := redisSrv.Client(f.t)
	shardtest.WaitFor(f.t, 10*time.Second, func() bool {
		n, _ := rdb.Get(context.Background(), shard.CursorKey(f.ns)).Int()
		return n >= f.m
	}, func() string { return "fleet never went round the shards" })
}

// claims is the number of claim calls the fleet's scanner has made.
func (f *fleet) claims() uint64 {
	var m dto.Metric
	if err := f.metrics.ClaimTime.Write(&m); err != nil {
		f.t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestLightLoadClaimsOncePerMessage: when messages fall due one at a time,
// the idle goroutines are woken for each by the due board, one goroutine
// per due head, and a claim whose reply says nothing more is due ends the
// visit: about one claim per message, not a round of empty claims after
// each.
func TestLightLoadClaimsOncePerMessage(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 16}, rabbit.URL)
	f.waitRound()
	const n = 100
	before := f.claims()
	var ids []string
	msgs := make([]shard.Message, n)
	for i := range msgs {
		msgs[i] = shard.Message{ID: fmt.Sprintf("light-%d", i), Topic: "t", Delay: 200*time.Millisecond + time.Duration(i)*15*time.Millisecond}
		ids = append(ids, msgs[i].ID)
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.waitAll(ids, 20*time.Second)
	claims := f.claims() - before
	patrols := uint64(time.Since(start)/time.Second) + 1 // the default PatrolInterval
	t.Logf("%d claims for %d messages (patrols allowed: %d)", claims, n, patrols)
	if claims > n+n/2+patrols+16 {
		t.Errorf("%d claims for %d messages due one at a time: want about one each", claims, n)
	}
}

func TestUndeliverableGoesDead(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, scanner.Config{Goroutines: 2, MaxRefusals: 3, RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}, rabbit.URL)
	bad := map[string]shard.Message{
		"no-binding":  {ID: "no-binding", Exchange: f.exchange, RoutingKey: "nobody-listens"},
		"no-exchange": {ID: "no-exchange", Exchange: "missing-" + f.ns, RoutingKey: "rk"},
		"no-route":    {ID: "no-route", Topic: "unknown.topic"},
		"good-after":  {ID: "good-after", Topic: "t", Delay: 50 * time.Millisecond},
	}
	for _, m := range bad {
		if _, err := f.prod.Enqueue(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	// A corrupt envelope written behind delayq's back.
	rdb := redisSrv.Client(t)
	ks := shard.ShardKeys(f.ns, shard.Of("corrupt", 2))
	rdb.HSet(t.Context(), ks.Msg, "corrupt", "\x09garbage")
	rdb.ZAdd(t.Context(), ks.Due, redisZ(0, "corrupt"))
	f.waitAll([]string{"good-after"}, 10*time.Second)
	want := map[string]string{
		"no-binding":  "NO_ROUTE",
		"no-exchange": "not found",
		"no-route":    "no route for topic",
		"corrupt":     "corrupt envelope",
	}
	for id, reason := range want {
		var info shard.Info
		shardtest.WaitFor(t, 10*time.Second, func() bool {
			var err error
			info, err = f.prod.Inspect(t.Context(), id)
			return err == nil && info.State == shard.StateDead
		}, func() string { return fmt.Sprintf("%s: %+v", id, info) })
		if !strings.Contains(info.Reason, reason) {
			t.Errorf("%s: dead because %q, want %q", id, info.Reason, reason)
		}
		// What the broker refused was tried MaxRefusals times first;
		// what can never work was not retried.
		if refused := id == "no-binding" || id == "no-exchange"; refused && info.Attempts != 3 || !refused && info.Attempts != 0 {
			t.Errorf("%s: dead after %d failed publishes", id, info.Attempts)
		}
		if len(f.delivered(id)) != 0 {
			t.Errorf("%s was delivered", id)
		}
	}
	st, err := f.store.Stats(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	var dead int64
	for _, s := range st {
		dead += s.Dead
	}
	if dead != 4 {
		t.Errorf("stats count %d dead; want 4", dead)
	}
	// The scanner counts a message dead right after Redis says so.
	shardtest.WaitFor(t, 5*time.Second, func() bool { return f.scanner.Counts().Dead == 4 },
		func() string { return fmt.Sprintf("scanner counts %+v; want 4 dead", f.scanner.Counts()) })
}

// TestExpiredMessages: a message claimed past its maximum lateness is
// dead-lettered as expired, never published, unless its topic's route
// says to publish it all the same: then it carries x-delayq-late-ms.
func TestExpiredMessages(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, scanner.Config{Goroutines: 2}, rabbit.URL)
	ago := time.Now().Add(-10 * time.Second) // due 10 s ago: claimed about 10 s late
	for _, m := range []shard.Message{
		{ID: "too-late", Topic: "t", At: ago, MaxLateness: time.Second},
		{ID: "late-but-wanted", Topic: "late-ok", At: ago, MaxLateness: time.Second},
		{ID: "in-time", Topic: "t", At: ago, MaxLateness: time.Minute},
	} {
		if _, err := f.prod.Enqueue(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	f.waitAll([]string{"late-but-wanted", "in-time"}, 10*time.Second)
	var info shard.Info
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		info, _ = f.prod.Inspect(t.Context(), "too-late")
		return info.State == shard.StateDead
	}, func() string { return fmt.Sprintf("too-late: %+v", info) })
	if !strings.Contains(info.Reason, "expired: claimed") || !strings.Contains(info.Reason, "maximum lateness of 1s") {
		t.Errorf("too-late is dead because %q", info.Reason)
	}
	if len(f.delivered("too-late")) != 0 {
		t.Error("too-late was published")
	}
	late, ok := f.delivered("late-but-wanted")[0].raw.Headers[shard.HeaderLateMs].(int64)
	if !ok || late < 9000 {
		t.Errorf("late-but-wanted carries %s = %v, want about 10000", shard.HeaderLateMs, late)
	}
	if _, ok := f.delivered("in-time")[0].raw.Headers[shard.HeaderLateMs]; ok {
		t.Errorf("in-time carries %s", shard.HeaderLateMs)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		var m dto.Metric
		return f.metrics.Dead.WithLabelValues(scanner.ReasonExpired).Write(&m) == nil && m.GetCounter().GetValue() == 1
	}, func() string { return "delayq_messages_dead_total{reason=\"expired\"} is not 1" })
}

// boundQueue declares an exclusive queue "<ns>-<key>" with args, bound to
// the fleet's exchange with routing key key, on a channel of its own.
func (f *fleet) boundQueue(t *testing.T, key string, args amqp.Table) (*amqp.Channel, string) {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := f.ns + "-" + key
	if _, err := ch.QueueDeclare(q, false, true, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, key, f.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return ch, q
}

// TestNackedMessageBacksOffThenDies: a queue that rejects every publish
// (x-overflow reject-publish at length 0) makes the broker nack; the
// message is retried with a growing delay, then dead-lettered with reason
// "nacked" after MaxRefusals. A good message alongside is delivered.
func TestNackedMessageBacksOffThenDies(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, scanner.Config{Goroutines: 2, MaxRefusals: 4, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}, rabbit.URL)
	f.boundQueue(t, "full", amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	start := time.Now()
	for _, m := range []shard.Message{{ID: "rejected", Exchange: f.exchange, RoutingKey: "full"}, {ID: "fine", Topic: "t"}} {
		if _, err := f.prod.Enqueue(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	f.waitAll([]string{"fine"}, 10*time.Second)
	var info shard.Info
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		info, _ = f.prod.Inspect(t.Context(), "rejected")
		return info.State == shard.StateDead
	}, func() string { return fmt.Sprintf("%+v", info) })
	took := time.Since(start)
	if !strings.Contains(info.Reason, "nack") || info.Attempts != 4 {
		t.Errorf("dead with reason %q after %d publishes; want nacked after 4", info.Reason, info.Attempts)
	}
	// Three waits of 100, 200 and 400 ms, each give or take a fifth.
	if took < 560*time.Millisecond {
		t.Errorf("4 refused publishes took %s: no backoff", took)
	}
	t.Logf("dead after 4 nacks in %s", took.Round(time.Millisecond))
}

// TestBrokerRestartLosesNothing kills RabbitMQ in the middle of a flow and
// starts it again: every message still arrives.
func TestBrokerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	f, own, ids := privateBrokerFlow(t, "r", 1000, 3*time.Millisecond, 200)
	own.Kill()
	t.Logf("RabbitMQ killed after %d published", f.scanner.Counts().Published)
	time.Sleep(500 * time.Millisecond) // the outage itself, not a wait for a condition
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	f.waitAll(ids, 60*time.Second)
	c := f.scanner.Counts()
	t.Logf("after restart: %+v", c)
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// TestHotShardDrainsAtSingleShardSpeed: messages that all hash to one shard
// of 16 drain about as fast as the same messages in a namespace with one
// shard. (A rate, so a loose bound; bench.sh measures it properly.)
func TestHotShardDrainsAtSingleShardSpeed(t *testing.T) {
	shardtest.Require(t, serverErr)
	const n = 1500
	drain := func(m int) time.Duration {
		f := newFleet(t, m, scanner.Config{Goroutines: 16}, rabbit.URL)
		var msgs []shard.Message
		var ids []string
		for i := 0; len(msgs) < n; i++ {
			id := fmt.Sprintf("hot-%d", i)
			if shard.Of(id, 16) != 3 {
				continue
			}
			ids = append(ids, id)
			msgs = append(msgs, shard.Message{ID: id, Topic: "t", Delay: 500 * time.Millisecond})
		}
		if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
			t.Fatal(err)
		}
		start := time.Now().Add(500 * time.Millisecond)
		f.waitAll(ids, 60*time.Second)
		return time.Since(start)
	}
	single := drain(1)
	hot := drain(16)
	t.Logf("%d messages: one shard of 1 drained in %s, one shard of 16 in %s (%.0f%% of single-shard speed)",
		n, single.Round(time.Millisecond), hot.Round(time.Millisecond), 100*single.Seconds()/hot.Seconds())
	if hot > 3*single {
		t.Errorf("a hot shard drains at %.0f%% of single-shard speed", 100*single.Seconds()/hot.Seconds())
	}
}

// TestBrokerBlockingIsRespected: RabbitMQ blocks publishers (memory alarm)
// in the middle of a flow. The publisher reports not ready, the scanner
// stops claiming instead of piling up leases, and after the alarm clears
// every message arrives.
func TestBrokerBlockingIsRespected(t *testing.T) {
	t.Parallel()
	f, own, ids := privateBrokerFlow(t, "b", 2000, 2*time.Millisecond, 300)
	if out, err := own.Ctl("set_vm_memory_high_watermark", "0.0001"); err != nil {
		t.Fatalf("memory alarm: %v %s", err, out)
	}
	// The broker blocks a connection when it next publishes: make sure
	// there is something to publish, however long rabbitmqctl took.
	more := make([]shard.Message, 50)
	for i := range more {
		more[i] = shard.Message{ID: fmt.Sprintf("b-after-alarm-%d", i), Topic: "t"}
		ids = append(ids, more[i].ID)
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), more); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool { return !f.pub.Ready() },
		func() string { return "publisher never saw the broker block it" })
	atBlock := f.scanner.Counts()
	t.Logf("blocked after %d published, %d claimed", atBlock.Published, atBlock.Claimed)
	if out, err := own.Ctl("set_vm_memory_high_watermark", "0.4"); err != nil {
		t.Fatalf("clear alarm: %v %s", err, out)
	}
	f.waitAll(ids, 60*time.Second)
	c := f.scanner.Counts()
	t.Logf("after the alarm: %+v", c)
	// Messages already on the wire when the broker blocked time out and are
	// released: at most those in flight then, plus one claim per goroutine
	// racing the block notice. A scanner that kept claiming while blocked
	// would fill its window (160) and release all of it.
	inFlight := atBlock.Claimed - atBlock.Published
	if limit := inFlight + 8; c.Released+c.Reaped > limit {
		t.Errorf("%d released and %d reaped, more than the %d in flight when the block was seen (+8): kept claiming while blocked",
			c.Released, c.Reaped, inFlight)
	}
}

// TestPausedBrokerStopsClaims: a broker that stops answering (SIGSTOP, as
// a long GC or VM pause would; the connection looks alive, so the
// publisher stays ready) confirms nothing, and the window fills. From then
// on the scanner claims nothing more: it never holds more than Window
// messages leased, rather than claiming batches that wait for a place
// while their leases run (the window used to be taken after the claim, so
// every goroutine held a claimed batch). Once the broker resumes, every
// message is delivered.
func TestPausedBrokerStopsClaims(t *testing.T) {
	t.Parallel()
	own := privateRabbit(t)
	const m, window, k = 4, 32, 8
	f := newFleet(t, m, scanner.Config{Goroutines: 16, ClaimBatch: k, Window: window, PublishTimeout: 3 * time.Second}, own.URL)
	if _, err := f.prod.Enqueue(t.Context(), shard.Message{ID: "p-first", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	f.waitAll([]string{"p-first"}, 20*time.Second) // connected and publishing
	rdb := redisSrv.Client(t)
	held := func() int {
		n := 0
		for i := range m {
			c, err := rdb.ZCard(t.Context(), shard.ShardKeys(f.ns, i).Inflight).Result()
			if err != nil {
				t.Fatal(err)
			}
			n += int(c)
		}
		return n
	}
	// A confirmed message leaves the window at once but its lease only at
	// the next ack flush (up to 10 ms later): wait for it, or it counts as
	// one more lease than the window.
	shardtest.WaitFor(t, 10*time.Second, func() bool { return held() == 0 },
		func() string { return fmt.Sprintf("%d leases still held after the first delivery", held()) })
	if err := own.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = own.Resume()
		}
	}()
	ids := make([]string, 300)
	msgs := make([]shard.Message, len(ids))
	for i := range msgs {
		ids[i] = fmt.Sprintf("p-%d", i)
		msgs[i] = shard.Message{ID: ids[i], Topic: "t"}
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	// Watch the leases until the first publish times out (PublishTimeout
	// after the pause) and is released.
	most := 0
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		most = max(most, held())
		return f.scanner.Counts().Released > 0
	}, func() string { return fmt.Sprintf("no publish timed out; %+v", f.scanner.Counts()) })
	t.Logf("while paused: at most %d leased (window %d, %d goroutines claiming %d each)", most, window, 16, k)
	if most > window {
		t.Errorf("%d messages leased at once while the broker was paused, more than the window of %d", most, window)
	}
	if most < window {
		t.Errorf("at most %d leased: the window (%d) never filled, so the test proved nothing", most, window)
	}
	if err := own.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	f.waitAll(ids, 60*time.Second)
}

// privateRabbit starts a RabbitMQ node of the test's own, to kill, block
// or pause; it stops after the cleanups registered later (the fleet's).
func privateRabbit(t *testing.T) *publishertest.Rabbit {
	t.Helper()
	shardtest.Require(t, serverErr)
	own, err := publishertest.StartRabbit()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	return own
}

// privateBrokerFlow starts a RabbitMQ node of the test's own (so it can be
// killed or blocked), a fleet on it, and n messages due every spacing; it
// returns once started messages have been published.
func privateBrokerFlow(t *testing.T, prefix string, n int, spacing time.Duration, started int64) (*fleet, *publishertest.Rabbit, []string) {
	t.Helper()
	own := privateRabbit(t)
	f := newFleet(t, 4, scanner.Config{Goroutines: 8, Lease: 3 * time.Second}, own.URL)
	ids := make([]string, n)
	msgs := make([]shard.Message, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = shard.Message{ID: ids[i], Topic: "t", Delay: time.Duration(i) * spacing}
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool { return f.scanner.Counts().Published >= started },
		func() string { return "flow did not start" })
	return f, own, ids
}

// TestSlowConsumer: a consumer far slower than the scanner lets its queue
// grow; the scanner keeps publishing at its own pace (RabbitMQ queues the
// messages) and every message is consumed in the end.
func TestSlowConsumer(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 8}, rabbit.URL)
	ch, q := f.boundQueue(t, "slow", nil)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	const n = 600
	var msgs []shard.Message
	for i := range n {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("s-%d", i), Exchange: f.exchange, RoutingKey: "slow"})
	}
	if _, err := f.prod.EnqueueBatch(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q, "", false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var consumed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range d {
			time.Sleep(5 * time.Millisecond) // the slow consumer's work
			_ = m.Ack(false)
			if consumed.Add(1) == n {
				return
			}
		}
	}()
	shardtest.WaitFor(t, 30*time.Second, func() bool { return f.scanner.Counts().Published >= n },
		func() string { return "the scanner did not publish everything" })
	behind := n - consumed.Load()
	t.Logf("all %d published while the consumer had %d still to process", n, behind)
	if behind < n/4 {
		t.Errorf("the consumer was not slow enough to prove anything (%d behind)", behind)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("consumed %d of %d", consumed.Load(), n)
	}
}

// TestAckNotReplicatedIsNotALostLease: with WAIT asking for a replica that
// does not exist, every ack takes effect on the master but reports
// ErrNotReplicated. The messages are delivered once, nothing is left in
// Redis, and delayq_leases_lost_total stays 0 (it counted every such ack
// as lost, and the log said they would be delivered again).
func TestAckNotReplicatedIsNotALostLease(t *testing.T) {
	t.Parallel()
	f := newFleetWith(t, 2, scanner.Config{Goroutines: 2}, rabbit.URL,
		func(s *shard.Store) *shard.Store { return s.WithReplicas(1, 10*time.Millisecond) })
	var ids []string
	for i := range 50 {
		ids = append(ids, fmt.Sprintf("m%d", i))
		if _, err := f.prod.Enqueue(t.Context(), shard.Message{ID: ids[i], Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitAll(ids, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.scanner.Stop(ctx); err != nil { // every ack flushed and counted
		t.Fatal(err)
	}
	st, err := f.store.Stats(t.Context(), f.m)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Scheduled+s.InFlight > 0 {
			t.Errorf("shard %d still holds %d scheduled, %d in flight", s.Shard, s.Scheduled, s.InFlight)
		}
	}
	if c := f.scanner.Counts(); c.LostLeases != 0 || c.Published != int64(len(ids)) {
		t.Errorf("counts %+v: want %d published and no lost lease", c, len(ids))
	}
}

// twoProcesses starts two scanner processes on one namespace of m shards
// and waits until both are members of its fleet.
func twoProcesses(t *testing.T, m int, cfg scanner.Config) (a, b *fleet) {
	t.Helper()
	a = newFleet(t, m, cfg, rabbit.URL)
	b = newFleetSharing(t, a, cfg)
	rdb := redisSrv.Client(t)
	shardtest.WaitFor(t, 10*time.Second, func() bool { return rdb.ZCard(t.Context(), shard.ScannersKey(a.ns)).Val() == 2 },
		func() string { return "the two processes never both joined" })
	return a, b
}

// TestTwoProcessesShareWakeups: two scanner processes on one shard. Each
// process's due board learns the shard's heads, but only the process the
// membership gives the shard to takes its wake-ups, so a head is claimed
// once: 20 messages due 50 ms apart make almost no empty claim
// (delayq_claims_empty_total; both processes took every head before,
// 26 empty claims for 20 messages in this test). Patrols are off here.
func TestTwoProcessesShareWakeups(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t, 1, scanner.Config{Goroutines: 2, PatrolInterval: time.Minute})
	empty := func() int64 { return a.scanner.Counts().EmptyClaims + b.scanner.Counts().EmptyClaims }
	before := empty()
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("m%d", i))
		// From 2.5 s on: each process has read the membership since both joined.
		if _, err := a.prod.Enqueue(t.Context(), shard.Message{ID: ids[i], Topic: "t", Delay: time.Duration(2500+50*i) * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	a.waitAll(ids, 20*time.Second)
	var ca, cb scanner.Counts
	shardtest.WaitFor(t, 5*time.Second, func() bool { // counted just after the consumer sees it
		ca, cb = a.scanner.Counts(), b.scanner.Counts()
		return ca.Published+cb.Published == int64(len(ids))
	}, func() string { return fmt.Sprintf("published %d + %d, want %d", ca.Published, cb.Published, len(ids)) })
	// Both processes taking every wake-up would make about one empty claim
	// a head (20). A process that falls behind is helped by the other (a
	// claim reply says work is due there now), which costs a few: a full
	// suite on two cores saw 6.
	if n := empty() - before; n > 10 {
		t.Errorf("%d empty claims for 20 heads: both processes took the wake-ups", n)
	}
	t.Logf("20 heads due 50 ms apart, one shard, two processes: %d empty claims, published %d and %d", empty()-before, ca.Published, cb.Published)
}

// TestStoppedProcessHandsOverItsShards: of two processes on 8 shards, one
// stops (it leaves the membership); the other takes every shard's
// wake-ups at its next heartbeat, so messages due from then on in every
// shard, those the stopped one had taken included, are published on time.
func TestStoppedProcessHandsOverItsShards(t *testing.T) {
	t.Parallel()
	a, b := twoProcesses(t, 8, scanner.Config{Goroutines: 4, PatrolInterval: time.Minute})
	rdb, key := redisSrv.Client(t), shard.ScannersKey(a.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.scanner.Stop(ctx))
	if n := rdb.ZCard(t.Context(), key).Val(); n != 1 {
		t.Fatalf("%d members after one stopped, want 1", n)
	}
	var ids []string
	for i := range 80 {
		ids = append(ids, fmt.Sprintf("h%d", i))
		if _, err := a.prod.Enqueue(t.Context(), shard.Message{ID: ids[i], Topic: "t", Delay: time.Duration(1500+10*i) * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	a.waitAll(ids, 20*time.Second)
	worst := time.Duration(0)
	for _, id := range ids {
		d := a.delivered(id)[0]
		worst = max(worst, d.at.Sub(time.UnixMilli(d.dueMs)))
	}
	if worst > 500*time.Millisecond {
		t.Errorf("a message was published %s after its due time: the stopped process's shards were not taken over", worst)
	}
	t.Logf("80 messages over 8 shards after one of two processes stopped: latest %s after due", worst.Round(time.Millisecond))
}
