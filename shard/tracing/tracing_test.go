package tracing

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const valid = "00-4bf92f3577b34da6a3ce929b0e0e4736-00f067aa0ba902b7-01"

func TestCleanDropsMalformedTraceparents(t *testing.T) {
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929b0e0e4736-00f067aa0ba902b7",    // wrong length
		"ff-4bf92f3577b34da6a3ce929b0e0e4736-00f067aa0ba902b7-01", // version ff
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // all-zero trace id
		"00-4bf92f3577b34da6a3ce929b0e0e4736-0000000000000000-01", // all-zero span id
		"00-4BF92F3577B34DA6A3CE929B0E0E4736-00F067AA0BA902B7-01", // upper case
		"not a traceparent",
	} {
		h := amqp.Table{HeaderTraceparent: tp, HeaderTracestate: "k=v", "tenant": "acme"}
		out := Clean(h)
		if _, ok := out[HeaderTraceparent]; ok || out[HeaderTracestate] != nil || out["tenant"] != "acme" {
			t.Errorf("%q: kept as %v", tp, out)
		}
		if h[HeaderTraceparent] != tp {
			t.Errorf("%q: Clean changed its argument", tp)
		}
	}
	if out := Clean(amqp.Table{HeaderTraceparent: []byte(valid)}); len(out) != 0 {
		t.Errorf("a traceparent that is not a string: kept as %v", out)
	}
	h := amqp.Table{HeaderTraceparent: valid, HeaderTracestate: "k=v"}
	if out := Clean(h); out[HeaderTraceparent] != valid || out[HeaderTracestate] != "k=v" {
		t.Errorf("a valid traceparent: %v", out)
	}
}

func TestCaptureFromTheContext(t *testing.T) {
	sc := Link(valid, "k=v")
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929b0e0e4736" {
		t.Fatalf("Link: %v", sc)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	h := amqp.Table{"tenant": "acme"}
	out := Capture(ctx, h)
	if out[HeaderTraceparent] != valid || out[HeaderTracestate] != "k=v" || len(h) != 1 {
		t.Fatalf("Capture: %v (argument %v)", out, h)
	}
	// A traceparent the producer set wins over the context.
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if out := Capture(ctx, amqp.Table{HeaderTraceparent: own}); out[HeaderTraceparent] != own {
		t.Errorf("the producer's own traceparent: %v", out)
	}
	if out := Capture(context.Background(), nil); len(out) != 0 {
		t.Errorf("no trace: %v", out)
	}
}

func TestFromEnvAndEnabled(t *testing.T) {
	t.Setenv("TRACEPARENT", valid)
	if sc := trace.SpanContextFromContext(FromEnv(context.Background())); sc.TraceID().String() != "4bf92f3577b34da6a3ce929b0e0e4736" {
		t.Errorf("FromEnv: %v", sc)
	}
	t.Setenv("TRACEPARENT", "00-bad")
	if sc := trace.SpanContextFromContext(FromEnv(context.Background())); sc.IsValid() {
		t.Errorf("FromEnv of a bad TRACEPARENT: %v", sc)
	}
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
			t.Setenv(k, c.env[k])
		}
		if got := Enabled(); got != c.want {
			t.Errorf("Enabled with %v: %v", c.env, got)
		}
	}
}

// With the application's tracer provider, an enqueue in a traced request
// makes a create span, a child of the request's, whose context the
// message carries.
func TestCreateSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	parent := trace.ContextWithSpanContext(context.Background(), Link(valid, ""))
	ctx, span := StartCreate(parent, "orders", 1)
	h := Capture(ctx, nil)
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "create orders" || ended[0].SpanKind() != trace.SpanKindProducer ||
		ended[0].Parent().SpanID() != Link(valid, "").SpanID() {
		t.Fatalf("create span: %+v", ended)
	}
	if got := Link(h[HeaderTraceparent].(string), ""); got.SpanID() != ended[0].SpanContext().SpanID() {
		t.Errorf("the message carries %v, not the create span", h)
	}
	if _, s := StartCreate(context.Background(), "orders", 1); s != nil {
		t.Error("a create span outside a traced request")
	}
}
