package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard/shardtest"
)

// pikaConsumer consumes n messages from a queue with python3-pika and
// prints, per message, its id, properties and every header with the Python
// type pika decoded it to, as JSON.
const pikaConsumer = `
import json, sys, pika
url, queue, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
out = []
for method, props, body in ch.consume(queue, inactivity_timeout=30):
    if method is None:
        break
    out.append({"id": props.message_id, "content_type": props.content_type, "body": body.decode(),
                "delivery_mode": props.delivery_mode,
                "headers": {k: [type(v).__name__, v] for k, v in (props.headers or {}).items()}})
    ch.basic_ack(method.delivery_tag)
    if len(out) == n:
        break
conn.close()
print(json.dumps(out))
`

// TestPythonConsumerReadsWhatDelayqPublishes: a consumer written with
// python3-pika gets delayq's messages as published: message_id,
// content type, persistent delivery, the producer's headers as strings,
// x-delayq-due-ms as the exact 64-bit integer (pika's long, an int) and
// x-delayq-attempt as 1.
func TestPythonConsumerReadsWhatDelayqPublishes(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import pika").Run(); err != nil {
		shardtest.Require(t, fmt.Errorf("python3-pika: %w", shardtest.ErrNoBinary))
	}
	w := newWorld(t, 4)
	conn, err := amqp.Dial(rabbit.URL)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare(w.exchange, "direct", true, false, false, false, nil))
	q := w.ns + "-py"
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q, "py", w.exchange, false, nil))
	w.scan()
	due := map[string]int64{}
	for i := range 3 {
		id := fmt.Sprintf("py-%d", i)
		out, e, code := w.delayq("", "enqueue", "--id", id, "--exchange", w.exchange, "--routing-key", "py", "--delay", "200ms",
			"--header", "tenant=acme", "--content-type", "application/json", "--body", `{"n":`+fmt.Sprint(i)+`}`)
		if code != 0 {
			t.Fatalf("enqueue: %s %s", out, e)
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(out[strings.LastIndex(out, "due ")+4:]))
		must(t, err)
		due[id] = at.UnixMilli()
	}
	script := filepath.Join(t.TempDir(), "consume.py")
	must(t, os.WriteFile(script, []byte(pikaConsumer), 0o600))
	raw, err := exec.Command("/usr/bin/python3", script, rabbit.URL, q, "3").Output()
	if err != nil {
		t.Fatalf("pika consumer: %v", err)
	}
	var full []map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber() // x-delayq-due-ms is 13 digits: keep it exact
	must(t, dec.Decode(&full))
	if len(full) != 3 {
		t.Fatalf("pika got %d messages: %s", len(full), raw)
	}
	for _, m := range full {
		id, _ := m["id"].(string)
		h, _ := m["headers"].(map[string]any)
		check := func(key, wantType string, want any) {
			pair, _ := h[key].([]any)
			if len(pair) != 2 || pair[0] != wantType || fmt.Sprint(pair[1]) != fmt.Sprint(want) {
				t.Errorf("%s: header %s = %v, want %s %v", id, key, h[key], wantType, want)
			}
		}
		check("tenant", "str", "acme")
		check("x-delayq-attempt", "int", 1)
		check("x-delayq-due-ms", "long", due[id]) // pika's int subclass for 64-bit integers
		if m["content_type"] != "application/json" || m["delivery_mode"] != json.Number("2") || !strings.HasPrefix(m["body"].(string), `{"n":`) {
			t.Errorf("%s: properties or body: %v", id, m)
		}
	}
}

// pikaProducer publishes to the ingress exchange the way a plugin user's
// Python service does: x-delay as an int, and headers of every type pika
// can write (it has no float type), with properties.
const pikaProducer = `
import datetime, decimal, sys, pika
url, exchange = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
headers = {
    "x-delay": 500, "tenant": "acme", "small": -7, "big": 12345678901, "flag": True,
    "price": decimal.Decimal("12.34"), "when": datetime.datetime(2023, 11, 14, 22, 13, 20),
    "meta": {"region": "eu", "n": 3}, "tags": ["a", 1, False], "raw": b"\x00\x01", "nothing": None,
}
props = pika.BasicProperties(message_id="py-order-1", content_type="application/json", correlation_id="c-py",
    priority=3, app_id="shop-py", type="order.cancel", delivery_mode=2, headers=headers)
ch.basic_publish(exchange, "rk", b'{"order":1}', props)
ch.basic_publish(exchange, "rk", b"now", pika.BasicProperties(message_id="py-order-2", headers={"x-delay": "250"}))
conn.close()
`

// TestPythonProducerThroughIngress: a producer written with python3-pika
// publishes to the ingress exchange with x-delay (int and string forms)
// and typed headers; the consumer receives each header with the AMQP
// type pika wrote, the properties, and no x-delay, after the delay.
func TestPythonProducerThroughIngress(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import pika").Run(); err != nil {
		shardtest.Require(t, fmt.Errorf("python3-pika: %w", shardtest.ErrNoBinary))
	}
	w := newWorld(t, 4)
	s := newIngress(t, w)
	w.scan(s.env)
	script := filepath.Join(t.TempDir(), "produce.py")
	must(t, os.WriteFile(script, []byte(pikaProducer), 0o600))
	sent := time.Now()
	if out, err := exec.Command("/usr/bin/python3", script, rabbit.URL, s.inExchange).CombinedOutput(); err != nil {
		t.Fatalf("pika producer: %v\n%s", err, out)
	}
	got := collect(t, s.target, 2, 30*time.Second)
	if len(got) != 2 {
		t.Fatalf("got %d messages", len(got))
	}
	if got[0].MessageId != "py-order-2" || got[1].MessageId != "py-order-1" {
		t.Errorf("order %s, %s: want the 250 ms one first", got[0].MessageId, got[1].MessageId)
	}
	if since := time.Since(sent); since < 500*time.Millisecond {
		t.Errorf("delivered after %s, before the 500 ms x-delay", since)
	}
	d := got[1]
	want := amqp.Table{
		"tenant": "acme", "small": int32(-7), "big": int64(12345678901), "flag": true,
		"price": amqp.Decimal{Scale: 2, Value: 1234}, "meta": amqp.Table{"region": "eu", "n": int32(3)},
		"tags": []any{"a", int32(1), false}, "raw": []byte{0, 1}, "nothing": nil,
	}
	for k, v := range want {
		if !reflect.DeepEqual(d.Headers[k], v) {
			t.Errorf("header %s: got %#v, want %#v", k, d.Headers[k], v)
		}
	}
	if when, ok := d.Headers["when"].(time.Time); !ok || when.Unix() != 1700000000 {
		t.Errorf("header when: %#v", d.Headers["when"])
	}
	if _, ok := d.Headers["x-delay"]; ok {
		t.Error("x-delay was passed on")
	}
	if d.ContentType != "application/json" || d.CorrelationId != "c-py" || d.Priority != 3 || d.AppId != "shop-py" ||
		d.Type != "order.cancel" || d.DeliveryMode != 2 || string(d.Body) != `{"order":1}` {
		t.Errorf("properties or body: %+v", d)
	}
}
