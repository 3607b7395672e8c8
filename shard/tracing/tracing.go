package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The W3C trace context headers.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// w3c reads and writes the W3C headers themselves, whatever the global
// propagator is: what delayq stores and publishes.
var w3c = propagation.TraceContext{}

// Capture returns h with the trace context of ctx as traceparent and
// tracestate (through the global propagator; W3C when the application
// chose none), unless h has a traceparent of its own; then Clean. h is not changed: the result is a copy when
// anything differs.
func Capture(ctx context.Context, h amqp.Table) amqp.Table {
	if _, ok := h[HeaderTraceparent]; !ok && trace.SpanContextFromContext(ctx).IsValid() {
		carrier := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, carrier)
		if carrier.Get(HeaderTraceparent) == "" { // no propagator chosen (the API's default does nothing): W3C
			w3c.Inject(ctx, carrier)
		}
		if tp := carrier.Get(HeaderTraceparent); tp != "" {
			out := make(amqp.Table, len(h)+2)
			for k, v := range h {
				out[k] = v
			}
			out[HeaderTraceparent] = tp
			if ts := carrier.Get(HeaderTracestate); ts != "" {
				out[HeaderTracestate] = ts
			}
			h = out
		}
	}
	return Clean(h)
}

// Clean returns h without a traceparent that is not a valid W3C one (and
// then without its tracestate too); h is not changed.
func Clean(h amqp.Table) amqp.Table {
	v, ok := h[HeaderTraceparent]
	if !ok {
		if _, has := h[HeaderTracestate]; !has {
			return h
		}
	} else if s, isStr := v.(string); isStr && Link(s, "").IsValid() {
		return h
	}
	out := make(amqp.Table, len(h))
	for k, v := range h {
		if k != HeaderTraceparent && k != HeaderTracestate {
			out[k] = v
		}
	}
	return out
}

// Link is the span context a stored traceparent and tracestate name
// (invalid when traceparent is not a valid W3C one).
func Link(traceparent, tracestate string) trace.SpanContext {
	carrier := propagation.MapCarrier{HeaderTraceparent: traceparent}
	if tracestate != "" {
		carrier[HeaderTracestate] = tracestate
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), carrier))
}

// Inject writes the span context of ctx into h as traceparent and
// tracestate (W3C), replacing what was there.
func Inject(ctx context.Context, h amqp.Table) {
	delete(h, HeaderTracestate)
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	for k, v := range carrier {
		h[k] = v
	}
}

// StartCreate starts the producer's "create" span for messages to
// destination (a topic, or an exchange), with the application's tracer
// provider (the global one: a no-op unless the application set one up);
// its context is what the messages carry. The caller ends it.
func StartCreate(ctx context.Context, destination string, n int) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// Not in a traced request: no span (as a no-op provider would).
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "create"), attribute.String("messaging.operation.name", "create"),
		attribute.String("messaging.destination.name", destination)}
	if n > 1 {
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", n))
	}
	return otel.Tracer("github.com/delayq/delayq/shard").Start(ctx, "create "+destination,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// Extract returns ctx carrying the remote span context that carrier
// holds, read by the global propagator (W3C when the application chose
// none). An HTTP request's headers: propagation.HeaderCarrier(r.Header).
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	out := otel.GetTextMapPropagator().Extract(ctx, carrier)
	if !trace.SpanContextFromContext(out).IsValid() {
		out = w3c.Extract(ctx, carrier)
	}
	return out
}

// FromEnv returns ctx carrying the remote span context of the TRACEPARENT
// and TRACESTATE environment variables (the CLI's way in), if valid.
func FromEnv(ctx context.Context) context.Context {
	tp := os.Getenv("TRACEPARENT")
	if tp == "" {
		return ctx
	}
	sc := Link(tp, os.Getenv("TRACESTATE"))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Enabled reports whether the OTEL_* variables turn tracing on: an OTLP
// endpoint set, or OTEL_TRACES_EXPORTER=otlp; never with
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the W3C propagator (trace context and baggage) and, when
// the OTEL_* variables turn tracing on (Enabled), a tracer provider that
// exports over OTLP/HTTP, named service (OTEL_SERVICE_NAME wins). It
// returns the tracer for delayq's spans (nil when tracing is off) and a
// shutdown that flushes the spans in hand; call it last when stopping.
func Setup(ctx context.Context, service, version string) (trace.Tracer, func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled() {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service),
		attribute.String("service.version", version)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Tracer("github.com/delayq/delayq"), tp.Shutdown, nil
}
