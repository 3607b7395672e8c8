package main_test

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// otlpReceiver is a real OTLP/HTTP trace receiver: it decodes the
// protobuf requests the exporter sends to /v1/traces.
type otlpReceiver struct {
	url      string
	mu       sync.Mutex
	spans    []*tracepb.Span
	requests int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var in coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &in)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.requests++
		for _, rs := range in.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + l.Addr().String()
	return r
}

// publishSpans are the publish spans received for message id.
func (r *otlpReceiver) publishSpans(id string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		for _, a := range s.Attributes {
			if a.Key == "messaging.message.id" && a.Value.GetStringValue() == id {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestTracingFromProducerToConsumer: a traced SDK enqueue, an HTTP
// enqueue with traceparent, a CLI enqueue with TRACEPARENT and an AMQP
// message with traceparent through the ingress each give a publish span
// in a new trace linked to the producer's span context, exported over
// OTLP/HTTP; the consumer receives the publish span's trace. A refused
// publish is an event on its span; a malformed traceparent is dropped
// and the message published; with tracing off nothing is exported.
func TestTracingFromProducerToConsumer(t *testing.T) {
	recv := newOTLPReceiver(t)
	w := newWorld(t, 4, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.url, "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=delayq-test",
		"DELAYQ_MAX_REFUSALS=3")
	w.consume()
	in := newIngress(t, w)
	scanner := w.scan(in.env)
	base := w.serve(t)

	// Each producer's own span context: a trace id per way in.
	producer := map[string]string{}
	span := func(id string, n byte) trace.SpanContext {
		var tid trace.TraceID
		var sid trace.SpanID
		tid[0], tid[15], sid[7] = 0xab, n, n
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		producer[id] = tid.String()
		return sc
	}
	traceparent := func(sc trace.SpanContext) string {
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	}
	// The SDK, from the context.
	st, err := shard.NewStore(redisSrv.Client(t), w.ns)
	must(t, err)
	prod := shard.NewProducer(st, balance.Static(4), shard.ProducerOptions{})
	ctx := trace.ContextWithSpanContext(t.Context(), span("traced-sdk", 1))
	_, err = prod.Enqueue(ctx, shard.Message{ID: "traced-sdk", Exchange: w.exchange, RoutingKey: "rk", Delay: 200 * time.Millisecond})
	must(t, err)
	// The HTTP API, from the request's headers; and a malformed one.
	for id, tp := range map[string]string{"traced-http": traceparent(span("traced-http", 2)), "untraced-http": "00-zzz-01"} {
		req, err := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(
			fmt.Sprintf(`{"id":%q,"exchange":%q,"routing_key":"rk","delay_ms":200}`, id, w.exchange)))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+consoleAdmin)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		_ = resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("POST %s: %d", id, resp.StatusCode)
		}
	}
	// The CLI, from TRACEPARENT.
	env := w.env
	w.env = append(append([]string{}, env...), "TRACEPARENT="+traceparent(span("traced-cli", 3)))
	_, e, code := w.delayq("", "enqueue", "--id", "traced-cli", "--exchange", w.exchange, "--routing-key", "rk", "--delay", "200ms")
	w.env = env
	if code != 0 {
		t.Fatal(e)
	}
	// The AMQP ingress, from the message's headers; and an all-zero one.
	in.publish(t, amqp.Publishing{MessageId: "traced-amqp", Headers: amqp.Table{"x-delay": int32(200), "traceparent": traceparent(span("traced-amqp", 4))}})
	in.publish(t, amqp.Publishing{MessageId: "untraced-amqp", Headers: amqp.Table{"x-delay": int32(200),
		"traceparent": "00-00000000000000000000000000000000-0000000000000000-01", "tracestate": "k=v"}})

	ids := []string{"traced-sdk", "traced-http", "traced-cli", "traced-amqp", "untraced-http", "untraced-amqp"}
	w.waitDelivered(ids, 30*time.Second)
	shardtest.WaitFor(t, 15*time.Second, func() bool {
		for _, id := range ids {
			if len(recv.publishSpans(id)) == 0 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("publish spans missing; %d spans received", len(recv.spans)) })
	w.mu.Lock()
	got := map[string]received{}
	for _, id := range ids {
		got[id] = w.got[id][0]
	}
	w.mu.Unlock()
	for _, id := range ids {
		s := recv.publishSpans(id)[0]
		spanTrace := hex.EncodeToString(s.TraceId)
		if s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || !strings.HasPrefix(s.Name, "publish ") {
			t.Errorf("%s: span %q of kind %v", id, s.Name, s.Kind)
		}
		if tp := got[id].traceparent; !strings.Contains(tp, "-"+spanTrace+"-") {
			t.Errorf("%s: the consumer got traceparent %q, not the publish span's trace %s", id, tp, spanTrace)
		}
		want, traced := producer[id]
		switch {
		case traced && (len(s.Links) != 1 || hex.EncodeToString(s.Links[0].TraceId) != want):
			t.Errorf("%s: publish span links %v, want the producer's trace %s", id, s.Links, want)
		case traced && spanTrace == want:
			t.Errorf("%s: the publish span is in the producer's trace, not a new one linked to it", id)
		case !traced && len(s.Links) != 0:
			t.Errorf("%s: a malformed traceparent was kept as a link: %v", id, s.Links)
		}
	}

	// The lateness histogram carries the publish spans' trace ids as
	// exemplars (OpenMetrics).
	req, err := http.NewRequest("GET", "http://"+scanner.metrics+"/metrics", nil)
	must(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !regexpMatch(`delayq_dispatch_lateness_seconds_bucket\{[^}]*\} \d+ # \{trace_id="[0-9a-f]{32}"\}`, string(metrics)) {
		t.Errorf("no lateness exemplar with a trace id in:\n%s", grepLines(string(metrics), "dispatch_lateness"))
	}

	// A message that can never be published (no route for its topic) is
	// dead-lettered: an event on its span, which ends in error.
	_, err = prod.Enqueue(ctx, shard.Message{ID: "no-route", Topic: "nowhere", Delay: time.Millisecond})
	must(t, err)
	shardtest.WaitFor(t, 15*time.Second, func() bool {
		for _, s := range recv.publishSpans("no-route") {
			if len(s.Events) == 1 && s.Events[0].Name == "dead-lettered" && s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no dead-lettered span: %v", recv.publishSpans("no-route")) })

	// A refused publish (its exchange does not exist yet) is an event on
	// its span; the retry, once the exchange is there, a span of its own.
	missing := "later-" + w.ns
	_, err = prod.Enqueue(ctx, shard.Message{ID: "retried", Exchange: missing, RoutingKey: "rk", Delay: time.Millisecond})
	must(t, err)
	shardtest.WaitFor(t, 15*time.Second, func() bool {
		for _, s := range recv.publishSpans("retried") {
			for _, e := range s.Events {
				if e.Name == "refused" {
					return true
				}
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("no refused event on retried's spans: %v", recv.publishSpans("retried"))
	})
	must(t, in.ch.ExchangeDeclare(missing, "direct", true, false, false, false, nil))
	_, err = in.ch.QueueDeclare("q-"+missing, true, false, false, false, nil)
	must(t, err)
	must(t, in.ch.QueueBind("q-"+missing, "rk", missing, false, nil))
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		for _, s := range recv.publishSpans("retried") {
			var attempt int64
			for _, a := range s.Attributes {
				if a.Key == "delayq.attempt" {
					attempt = a.Value.GetIntValue()
				}
			}
			if attempt >= 2 && len(s.Events) == 0 {
				return true
			}
		}
		return false
	}, func() string { return "no span of retried's later attempt that was confirmed" })

	// Refused until it is dead (DELAYQ_MAX_REFUSALS=3): the last attempt's
	// span has the refusal, then the dead-lettering, and ends in error; a
	// span refused for a missing exchange is named after it and says where
	// it was going, as one returned unroutable does.
	gone := "gone-" + w.ns
	for id, dest := range map[string][2]string{"never-exchange": {gone, "rk"}, "never-routed": {w.exchange, "nobody"}} {
		_, err = prod.Enqueue(ctx, shard.Message{ID: id, Exchange: dest[0], RoutingKey: dest[1], Delay: time.Millisecond})
		must(t, err)
	}
	for id, exchange := range map[string]string{"never-exchange": gone, "never-routed": w.exchange} {
		shardtest.WaitFor(t, 30*time.Second, func() bool {
			for _, s := range recv.publishSpans(id) {
				var names []string
				for _, e := range s.Events {
					names = append(names, e.Name)
				}
				if strings.Join(names, ",") == "refused,dead-lettered" && s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
					dest := ""
					for _, a := range s.Attributes {
						if a.Key == "messaging.destination.name" {
							dest = a.Value.GetStringValue()
						}
					}
					if s.Name != "publish "+exchange || dest != exchange {
						t.Errorf("%s: dead-lettered span %q with destination %q, want publish %s", id, s.Name, dest, exchange)
					}
					return true
				}
			}
			return false
		}, func() string {
			return fmt.Sprintf("no span of %s refused and dead-lettered: %v", id, recv.publishSpans(id))
		})
	}

	// Tracing off: the same enqueue through a scanner without OTEL_*
	// exports nothing, and the consumer gets the producer's traceparent.
	quiet := newOTLPReceiver(t)
	off := newSerialWorld(t, 2, "OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT="+quiet.url)
	off.consume()
	offScanner := off.scan()
	st2, err := shard.NewStore(redisSrv.Client(t), off.ns)
	must(t, err)
	p2 := shard.NewProducer(st2, balance.Static(2), shard.ProducerOptions{})
	_, err = p2.Enqueue(ctx, shard.Message{ID: "off", Exchange: off.exchange, RoutingKey: "rk", Delay: time.Millisecond})
	must(t, err)
	off.waitDelivered([]string{"off"}, 20*time.Second)
	off.mu.Lock()
	tp := off.got["off"][0].traceparent
	off.mu.Unlock()
	if !strings.Contains(tp, producer["traced-sdk"]) {
		t.Errorf("tracing off: the consumer got traceparent %q, want the producer's", tp)
	}
	// A scanner with tracing on flushes its spans when it stops: after
	// this one stopped, whatever it would have exported has come.
	must(t, offScanner.term(20*time.Second))
	quiet.mu.Lock()
	defer quiet.mu.Unlock()
	if quiet.requests != 0 {
		t.Errorf("tracing off: %d export requests", quiet.requests)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
