package ingress_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/ingress"
)

func delivery(headers amqp.Table) *amqp.Delivery {
	return &amqp.Delivery{MessageId: "order-42", RoutingKey: "order.cancel", Headers: headers, Body: []byte("b")}
}

// TestDelayForms: x-delay as the plugin accepts it (every integer width,
// a numeric string) and a float (which the plugin ignores: we take it
// to the ms); zero or negative means now; x-delayq-at is unix ms.
func TestDelayForms(t *testing.T) {
	for _, c := range []struct {
		v    any
		want time.Duration
	}{
		{int8(5), 5 * time.Millisecond}, {uint8(200), 200 * time.Millisecond}, {int16(-3), 0},
		{uint16(60000), time.Minute}, {int32(1500), 1500 * time.Millisecond}, {uint32(4000000000), 4000000 * time.Second},
		{int64(1800000), 30 * time.Minute}, {"15000", 15 * time.Second}, {" 7 ", 7 * time.Millisecond},
		{60000.0, time.Minute}, {float32(2.9), 2 * time.Millisecond}, {"-5", 0},
	} {
		r, err := ingress.Parse(delivery(amqp.Table{"x-delay": c.v}), "orders", 1024)
		if err != nil {
			t.Errorf("x-delay %#v: %v", c.v, err)
			continue
		}
		if r.Kind != ingress.Schedule || r.Message.Delay != c.want || !r.Message.At.IsZero() {
			t.Errorf("x-delay %#v: kind %v delay %s at %v, want delay %s", c.v, r.Kind, r.Message.Delay, r.Message.At, c.want)
		}
		if _, ok := r.Message.Headers["x-delay"]; ok {
			t.Errorf("x-delay %#v: the header is kept", c.v)
		}
	}
	r, err := ingress.Parse(delivery(amqp.Table{"x-delayq-at": "1800000000000"}), "orders", 1024)
	if err != nil || r.Message.At.UnixMilli() != 1800000000000 {
		t.Errorf("x-delayq-at: %v %v", r.Message.At, err)
	}
	r, err = ingress.Parse(delivery(nil), "orders", 1024) // no delay: due now, as the plugin routes it at once
	if err != nil || r.Message.Delay != 0 || !r.Message.At.IsZero() {
		t.Errorf("no delay header: %+v %v", r.Message, err)
	}
}

// TestParseCarriesEverything: destination, properties and headers of a
// delivery become the message; control headers are taken out.
func TestParseCarriesEverything(t *testing.T) {
	ts := time.Unix(1700000000, 0)
	d := &amqp.Delivery{
		MessageId: "m-1", RoutingKey: "rk", ContentType: "application/json", ContentEncoding: "gzip",
		CorrelationId: "c", ReplyTo: "r", Expiration: "60000", Type: "t", AppId: "a", UserId: "guest",
		Priority: 7, DeliveryMode: 1, Timestamp: ts, Body: []byte("{}"),
		Headers: amqp.Table{"x-delay": int32(10), "tenant": "acme", "n": int16(3),
			"x-delayq-exchange": "other", "x-delayq-retry": "15s,3m", "x-delayq-attempt": int32(2), "x-delayq-due-ms": int64(5)},
	}
	r, err := ingress.Parse(d, "orders", 1024)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Message
	want := shard.Properties{ContentEncoding: "gzip", CorrelationID: "c", ReplyTo: "r", Expiration: "60000", Type: "t",
		AppID: "a", Priority: 7, DeliveryMode: 1, Timestamp: ts}
	if m.ID != "m-1" || m.Exchange != "other" || m.RoutingKey != "rk" || m.ContentType != "application/json" ||
		m.Properties != want || string(m.Body) != "{}" || r.GeneratedID {
		t.Errorf("message %+v", m)
	}
	if len(m.Headers) != 2 || m.Headers["tenant"] != "acme" || m.Headers["n"] != int16(3) {
		t.Errorf("headers %v, want tenant and n only", m.Headers)
	}
	if len(m.Retry) != 2 || m.Retry[0] != 15*time.Second || m.Retry[1] != 3*time.Minute {
		t.Errorf("retry %v", m.Retry)
	}
	d.MessageId = ""
	if r, err := ingress.Parse(d, "orders", 1024); err != nil || !r.GeneratedID || !strings.HasPrefix(r.Message.ID, "ingress-") {
		t.Errorf("no message_id: %+v %v", r, err)
	}
}

func TestCancelAndRetryRequests(t *testing.T) {
	r, err := ingress.Parse(delivery(amqp.Table{"x-delayq-cancel": true}), "orders", 1024)
	if err != nil || r.Kind != ingress.Cancel || r.ID != "order-42" {
		t.Errorf("cancel: %+v %v", r, err)
	}
	r, err = ingress.Parse(delivery(amqp.Table{"x-delayq-cancel": false, "x-delay": int32(1)}), "orders", 1024)
	if err != nil || r.Kind != ingress.Schedule {
		t.Errorf("x-delayq-cancel false: %+v %v", r, err)
	}
	r, err = ingress.Parse(delivery(amqp.Table{"x-delayq-retry-cause": "timeout", "x-delayq-retry": "1s,2s",
		"x-delayq-retry-step": "1", "tenant": "acme"}), "orders", 1024)
	if err != nil || r.Kind != ingress.Retry || r.Cause != "timeout" || r.Delivery.Exchange != "orders" ||
		r.Delivery.Headers["x-delayq-retry-step"] != "1" || r.Delivery.Headers["tenant"] != "acme" {
		t.Errorf("retry: %+v %v", r, err)
	}
}

// TestParseRejects: each kind of bad input is a RejectError with its
// reason, never a panic or a silent default.
func TestParseRejects(t *testing.T) {
	big := delivery(nil)
	big.Body = make([]byte, 1025)
	noID := delivery(amqp.Table{"x-delayq-cancel": true})
	noID.MessageId = ""
	badID := delivery(nil)
	badID.MessageId = "a\nb"
	noTarget := delivery(nil)
	noTarget.RoutingKey = ""
	for name, c := range map[string]struct {
		d      *amqp.Delivery
		target string
		reason string
	}{
		"delay not a number": {delivery(amqp.Table{"x-delay": "soon"}), "x", ingress.ReasonDelay},
		"delay a bool":       {delivery(amqp.Table{"x-delay": true}), "x", ingress.ReasonDelay},
		"delay NaN":          {delivery(amqp.Table{"x-delay": math.NaN()}), "x", ingress.ReasonDelay},
		"delay and at":       {delivery(amqp.Table{"x-delay": int32(1), "x-delayq-at": int64(1)}), "x", ingress.ReasonDelay},
		"at a table":         {delivery(amqp.Table{"x-delayq-at": amqp.Table{}}), "x", ingress.ReasonDelay},
		"body":               {big, "x", ingress.ReasonBody},
		"id":                 {badID, "x", ingress.ReasonID},
		"cancel without id":  {noID, "x", ingress.ReasonID},
		"unknown control":    {delivery(amqp.Table{"x-delayq-ay": int32(1)}), "x", ingress.ReasonControl},
		"exchange not text":  {delivery(amqp.Table{"x-delayq-exchange": int32(1)}), "x", ingress.ReasonTarget},
		"no target":          {noTarget, "", ingress.ReasonTarget},
		"bad retry step":     {delivery(amqp.Table{"x-delayq-retry": "15s,never"}), "x", ingress.ReasonRetry},
		"retry without plan": {delivery(amqp.Table{"x-delayq-retry-cause": "boom"}), "x", ingress.ReasonRetry},
	} {
		_, err := ingress.Parse(c.d, c.target, 1024)
		var re *ingress.RejectError
		if !errors.As(err, &re) || re.Reason != c.reason {
			t.Errorf("%s: err %v, want reason %s", name, err, c.reason)
		}
	}
}

// TestReasonOf maps the producer's validation errors to reasons; other
// errors (Redis) are not the message's fault.
func TestReasonOf(t *testing.T) {
	for err, want := range map[error]string{
		&shard.InvalidError{Field: "delay"}:        ingress.ReasonDelay,
		&shard.InvalidError{Field: "headers[a]"}:   ingress.ReasonHeader,
		&shard.InvalidError{Field: "expiration"}:   ingress.ReasonProperty,
		&shard.InvalidError{Field: "destination"}:  ingress.ReasonTarget,
		&shard.InvalidError{Field: "something"}:    ingress.ReasonInvalid,
		errors.New("dial tcp: connection refused"): "",
		shard.ErrCapacity:                          "",
	} {
		if got := ingress.ReasonOf(err); got != want {
			t.Errorf("ReasonOf(%v) = %q, want %q", err, got, want)
		}
	}
}

// FuzzParseDelay: whatever the x-delay header holds, Parse rejects it
// with a reason or schedules a delay in [0, ...), never panics.
func FuzzParseDelay(f *testing.F) {
	for _, s := range []string{"1500", "-1", "1e3", "NaN", "9223372036854775807", " 5", "0x10", ""} {
		f.Add(s, int64(0), 0.0)
	}
	f.Add("", int64(math.MinInt64), math.Inf(1))
	f.Fuzz(func(t *testing.T, s string, n int64, x float64) {
		for _, v := range []any{s, n, x, int32(n), float32(x)} {
			r, err := ingress.Parse(delivery(amqp.Table{"x-delay": v}), "orders", 1024)
			if err != nil {
				var re *ingress.RejectError
				if !errors.As(err, &re) || re.Reason != ingress.ReasonDelay {
					t.Fatalf("x-delay %#v: %v", v, err)
				}
				continue
			}
			if r.Message.Delay < 0 {
				t.Fatalf("x-delay %#v: negative delay %s", v, r.Message.Delay)
			}
		}
	})
}

func BenchmarkParse(b *testing.B) {
	d := &amqp.Delivery{MessageId: "order-42", RoutingKey: "rk", Body: make([]byte, 100),
		Headers: amqp.Table{"x-delay": int32(3600_000), "tenant": "acme"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ingress.Parse(d, "orders", 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHeaderNamesAreCaseSensitive: only x-delay is the delay, as in AMQP
// and the plugin; X-Delay is an ordinary header, kept as sent, and with
// both the delay is always x-delay's.
func TestHeaderNamesAreCaseSensitive(t *testing.T) {
	for range 20 { // map order is random: the old code picked one at random
		r, err := ingress.Parse(delivery(amqp.Table{"X-Delay": int32(60000), "x-delay": int32(100), "X-Delayq-Cancel": true}), "orders", 1024)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != ingress.Schedule || r.Message.Delay != 100*time.Millisecond {
			t.Fatalf("kind %v, delay %s; want a schedule in 100ms", r.Kind, r.Message.Delay)
		}
		if r.Message.Headers["X-Delay"] != int32(60000) || r.Message.Headers["X-Delayq-Cancel"] != true || len(r.Message.Headers) != 2 {
			t.Fatalf("headers %v; want X-Delay and X-Delayq-Cancel kept as sent", r.Message.Headers)
		}
	}
	r, err := ingress.Parse(delivery(amqp.Table{"X-Delay": int32(60000)}), "orders", 1024)
	if err != nil || r.Message.Delay != 0 {
		t.Errorf("X-Delay alone: delay %s, %v; want due now, as the plugin would route it", r.Message.Delay, err)
	}
}

// TestBrokerHeadersAreDropped: what RabbitMQ adds on a redelivery or a
// dead-lettering does not become the message's own.
func TestBrokerHeadersAreDropped(t *testing.T) {
	h := amqp.Table{
		"x-delivery-count": int64(2), "x-received-from": []any{amqp.Table{"uri": "amqp://up"}},
		"x-death":                []any{amqp.Table{"count": int64(1), "reason": "rejected"}},
		"x-first-death-exchange": "", "x-first-death-queue": "q", "x-first-death-reason": "rejected",
		"x-last-death-exchange": "", "x-last-death-queue": "q", "x-last-death-reason": "rejected",
		"x-death-note": "mine", "X-Delivery-Count": "mine too", "kind": "cancel",
	}
	r, err := ingress.Parse(delivery(h), "orders", 1024)
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Table{"x-death-note": "mine", "X-Delivery-Count": "mine too", "kind": "cancel"}
	if len(r.Message.Headers) != len(want) {
		t.Fatalf("headers %v, want %v", r.Message.Headers, want)
	}
	for k, v := range want {
		if r.Message.Headers[k] != v {
			t.Errorf("header %s = %#v, want %#v", k, r.Message.Headers[k], v)
		}
	}
}

// TestDeadlineHeaders: x-delayq-expires-at (unix ms) and
// x-delayq-max-lateness (ms) give the message its deadline; a value that
// is not a positive number of ms is rejected as bad_delay.
func TestDeadlineHeaders(t *testing.T) {
	r, err := ingress.Parse(delivery(amqp.Table{"x-delay": int32(1000), ingress.HeaderExpiresAt: int64(1800000060000),
		ingress.HeaderMaxLateness: "2000"}), "orders", 1024)
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Message; !m.ExpiresAt.Equal(time.UnixMilli(1800000060000)) || m.MaxLateness != 2*time.Second {
		t.Errorf("expires %v, max lateness %v", m.ExpiresAt, m.MaxLateness)
	}
	// A delivery published back for its next retry step keeps its deadline.
	r, err = ingress.Parse(delivery(amqp.Table{shard.HeaderRetry: "15s", shard.HeaderRetryStep: "0",
		ingress.HeaderRetryCause: "503", ingress.HeaderMaxLateness: int64(2000)}), "orders", 1024)
	if err != nil || r.Kind != ingress.Retry || r.Delivery.Headers[shard.HeaderMaxLateness] != int64(2000) {
		t.Errorf("a retry request with a deadline: %+v, %v", r, err)
	}
	for _, h := range []amqp.Table{{ingress.HeaderMaxLateness: int32(0)}, {ingress.HeaderMaxLateness: "soon"},
		{ingress.HeaderExpiresAt: int64(-5)}} {
		_, err := ingress.Parse(delivery(h), "orders", 1024)
		var re *ingress.RejectError
		if !errors.As(err, &re) || re.Reason != ingress.ReasonDelay {
			t.Errorf("%v: %v, want a bad_delay rejection", h, err)
		}
	}
}
