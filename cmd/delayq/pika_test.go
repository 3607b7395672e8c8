package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
