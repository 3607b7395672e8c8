package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap/zaptest"

	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard/shardtest"
)

var (
	rabbit    *publishertest.Rabbit
	rabbitErr error
)

func TestMain(m *testing.M) {
	rabbit, rabbitErr = publishertest.StartRabbit()
	code := m.Run()
	if rabbit != nil {
		rabbit.Close()
	}
	os.Exit(code)
}

// topology declares a fanout-free direct exchange with one bound queue
// ("routed") under a name unique to the test, and returns a consumer of it.
func topology(t *testing.T, url string) (exchange string, deliveries <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	exchange = shardtest.Namespace(t)
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "routed", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return exchange, d
}

func start(t *testing.T, url string) *publisher.Publisher {
	t.Helper()
	return startWith(t, publisher.Options{URLs: []string{url}})
}

// startWith starts a publisher with opts (short backoffs unless set) and
// waits until it is ready.
func startWith(t *testing.T, opts publisher.Options) *publisher.Publisher {
	t.Helper()
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	}
	p, err := publisher.New(opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPublishConfirmed(t *testing.T) {
	shardtest.Require(t, rabbitErr)
	t.Parallel()
	ex, deliveries := topology(t, rabbit.URL)
	p := start(t, rabbit.URL)
	ts := time.Unix(1700000000, 0)
	f, err := p.Publish(t.Context(), publisher.Message{Exchange: ex, RoutingKey: "routed", MessageID: "m1",
		ContentType: "text/plain", Headers: amqp.Table{"x-delayq-attempt": int32(1)}, Body: []byte("hi"), Timestamp: ts})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(t.Context()); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	d := <-deliveries
	if d.MessageId != "m1" || d.DeliveryMode != amqp.Persistent || string(d.Body) != "hi" ||
		d.ContentType != "text/plain" || d.Headers["x-delayq-attempt"] != int32(1) || !d.Timestamp.Equal(ts) {
		t.Errorf("delivered %+v", d)
	}
}

// TestReturnsMatchTheirPublishes interleaves routable and unroutable
// publishes from many goroutines: each Confirm, and each PublishNotify
// callback (the odd goroutines use it), must report its own fate.
func TestReturnsMatchTheirPublishes(t *testing.T) {
	shardtest.Require(t, rabbitErr)
	t.Parallel()
	ex, deliveries := topology(t, rabbit.URL)
	p := start(t, rabbit.URL)
	const n = 2000
	var wg, notified sync.WaitGroup
	errs := make([]error, n)
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				rk := "routed"
				if i%3 == 0 {
					rk = "nowhere"
				}
				m := publisher.Message{Exchange: ex, RoutingKey: rk, MessageID: fmt.Sprint(i)}
				if g%2 == 1 {
					notified.Add(1)
					if err := p.PublishNotify(t.Context(), m, func(err error) { errs[i] = err; notified.Done() }); err != nil {
						errs[i] = err
						notified.Done()
					}
					continue
				}
				f, err := p.Publish(t.Context(), m)
				if err == nil {
					err = f.Wait(t.Context())
				}
				errs[i] = err
			}
		})
	}
	wg.Wait()
	notified.Wait()
	for i, err := range errs {
		var re *publisher.ReturnedError
		switch {
		case i%3 == 0 && (!errors.As(err, &re) || re.Code != amqp.NoRoute || re.RoutingKey != "nowhere"):
			t.Fatalf("message %d (unroutable): %v, want ReturnedError NO_ROUTE", i, err)
		case i%3 != 0 && err != nil:
			t.Fatalf("message %d (routable): %v", i, err)
		}
	}
	got := 0
	for got < n-(n+2)/3 {
		<-deliveries
		got++
	}
}

func TestMissingExchange(t *testing.T) {
	shardtest.Require(t, rabbitErr)
	t.Parallel()
	ex, deliveries := topology(t, rabbit.URL)
	p := start(t, rabbit.URL)
	if ok, err := p.ExchangeExists(t.Context(), "no-such-exchange"); ok || err != nil {
		t.Fatalf("missing exchange: %v, %v", ok, err)
	}
	if ok, err := p.ExchangeExists(t.Context(), ex); !ok || err != nil {
		t.Fatalf("existing exchange: %v, %v", ok, err)
	}
	// Publishing to it anyway closes that channel: the confirm fails, and
	// the channel comes back for the next publish.
	for range 4 { // hit every channel of the pool
		f, err := p.Publish(t.Context(), publisher.Message{Exchange: "no-such-exchange", MessageID: "x"})
		if err == nil {
			err = f.Wait(t.Context())
		}
		if !errors.Is(err, publisher.ErrConnectionLost) {
			t.Fatalf("publish to a missing exchange: %v, want ErrConnectionLost", err)
		}
	}
	for i := range 8 {
		f, err := p.Publish(t.Context(), publisher.Message{Exchange: ex, RoutingKey: "routed", MessageID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Wait(t.Context()); err != nil {
			t.Fatalf("after channel error: %v", err)
		}
		<-deliveries
	}
}

// rejectingQueue binds a queue that refuses every publish (x-overflow
// reject-publish at length 0) to exchange with key "full".
func rejectingQueue(t *testing.T, exchange string) {
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
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "full", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
}

// publishWait publishes m and waits for its outcome.
func publishWait(t *testing.T, p *publisher.Publisher, m publisher.Message) error {
	t.Helper()
	f, err := p.Publish(t.Context(), m)
	if err != nil {
		return err
	}
	return f.Wait(t.Context())
}

// TestNackReplacesTheChannel: a channel that nacks is replaced by a fresh
// one (RabbitMQ 3.10 can leave a channel nacking everything), and only
// its first nack is believed; a channel on probation (just after the
// connect) believes none. Publishes to other queues go on meanwhile.
func TestNackReplacesTheChannel(t *testing.T) {
	shardtest.Require(t, rabbitErr)
	t.Parallel()
	ex, deliveries := topology(t, rabbit.URL)
	rejectingQueue(t, ex)
	full := publisher.Message{Exchange: ex, RoutingKey: "full", MessageID: "refused"}
	routed := publisher.Message{Exchange: ex, RoutingKey: "routed", MessageID: "fine"}

	onProbation := startWith(t, publisher.Options{URLs: []string{rabbit.URL}, Channels: 1})
	for i := range 3 {
		if err := publishWait(t, onProbation, full); !errors.Is(err, publisher.ErrNackedSuspect) || errors.Is(err, publisher.ErrNacked) {
			t.Fatalf("nack %d on probation: %v, want ErrNackedSuspect only", i+1, err)
		}
		if err := publishWait(t, onProbation, routed); err != nil {
			t.Fatalf("publish after the channel nacked: %v", err)
		}
		<-deliveries
	}

	p := startWith(t, publisher.Options{URLs: []string{rabbit.URL}, Channels: 1, Probation: -1})
	for i := range 3 { // each on a fresh channel: its first nack is believed
		if err := publishWait(t, p, full); !errors.Is(err, publisher.ErrNacked) {
			t.Fatalf("nack %d: %v, want ErrNacked", i+1, err)
		}
	}
	// Many at once on one channel: only the first nack is believed; the
	// others are suspect, or failed when the retired channel closed.
	const n = 50
	confirms := make([]*publisher.Confirm, n)
	for i := range confirms {
		f, err := p.Publish(t.Context(), full)
		if err != nil {
			t.Fatal(err)
		}
		confirms[i] = f
	}
	believed := 0
	for i, f := range confirms {
		switch err := f.Wait(t.Context()); {
		case errors.Is(err, publisher.ErrNacked):
			believed++
		case errors.Is(err, publisher.ErrNackedSuspect), errors.Is(err, publisher.ErrConnectionLost):
		default:
			t.Fatalf("publish %d of %d to a rejecting queue: %v", i+1, n, err)
		}
	}
	// Each channel takes publishes until its first nack comes back, so how
	// many channels share the n depends on the machine's speed (a loaded
	// one spread them over 4-7); what must hold is that a channel's later
	// nacks are not believed.
	if believed < 1 || believed > n/5 {
		t.Errorf("%d of %d nacks believed; want one per channel that took them", believed, n)
	}
	if err := publishWait(t, p, routed); err != nil {
		t.Fatalf("publish after the nacks: %v", err)
	}
	<-deliveries
}

func TestReconnectAfterBrokerRestart(t *testing.T) {
	shardtest.Require(t, rabbitErr)
	t.Parallel()
	own, err := publishertest.StartRabbit()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close) // registered first, so it runs after the publisher's Close
	p := start(t, own.URL)
	own.Kill()
	shardtest.WaitFor(t, 10*time.Second, func() bool { return !p.Ready() }, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	if _, err := p.Publish(ctx, publisher.Message{RoutingKey: "q", MessageID: "m"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("publish while down: %v, want to wait for the connection", err)
	}
	cancel()
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatalf("no reconnect: %v", err)
	}
	// The default exchange routes to no queue named "q": returned, which
	// proves a round trip through the new connection.
	f, err := p.Publish(t.Context(), publisher.Message{RoutingKey: "q", MessageID: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(t.Context()); !errors.Is(err, publisher.ErrReturned) {
		t.Fatalf("after reconnect: %v, want ErrReturned", err)
	}
}

func TestBadURL(t *testing.T) {
	_, err := publisher.New(publisher.Options{URLs: []string{"http://user:secret@host/"}}, zaptest.NewLogger(t))
	if err == nil {
		t.Fatal("http URL accepted")
	}
	if s := err.Error(); strings.Contains(s, "secret") {
		t.Errorf("error leaks the password: %s", s)
	}
}

// TestDeletedExchangeIsCheckedAgain: after a publish hits an exchange that
// was deleted since ExchangeExists saw it, the next check asks the broker.
func TestDeletedExchangeIsCheckedAgain(t *testing.T) {
	shardtest.Require(t, rabbitErr)
	t.Parallel()
	p := start(t, rabbit.URL)
	conn, err := amqp.Dial(rabbit.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex := shardtest.Namespace(t)
	if err := ch.ExchangeDeclare(ex, "direct", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.ExchangeExists(t.Context(), ex); !ok || err != nil {
		t.Fatalf("before delete: %v %v", ok, err)
	}
	if err := ch.ExchangeDelete(ex, false, false); err != nil {
		t.Fatal(err)
	}
	f, err := p.Publish(t.Context(), publisher.Message{Exchange: ex, MessageID: "m"})
	if err == nil {
		err = f.Wait(t.Context())
	}
	if !errors.Is(err, publisher.ErrConnectionLost) {
		t.Fatalf("publish to the deleted exchange: %v", err)
	}
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		ok, err := p.ExchangeExists(t.Context(), ex)
		return !ok && err == nil
	}, func() string { return "ExchangeExists still answers from its cache" })
}
