package scanner

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/tracing"
)

// Tracing at publish (package tracing has the design): a message claimed
// by a scanner with a Tracer gets a publish span, a new trace linked to
// the producer's context stored in its headers; the span's own context
// replaces it in the published headers. A nil span (tracing off) costs
// nothing: every helper below checks for it.

// startPublishSpan starts the publish span of claimed message c of shard
// i, claimed at nowMs (Redis clock); nil when tracing is off.
func (s *Scanner) startPublishSpan(c *shard.Claimed, env *shard.Envelope, i int, nowMs int64) trace.Span {
	if s.d.Tracer == nil {
		return nil
	}
	var tp, ts string
	for _, h := range env.Headers {
		switch h.Key {
		case tracing.HeaderTraceparent:
			tp, _ = h.Value.(string)
		case tracing.HeaderTracestate:
			ts, _ = h.Value.(string)
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.message.id", c.ID),
		attribute.Int("delayq.shard", i),
		attribute.Int("delayq.attempt", c.Attempt),
		attribute.Int64("delayq.scheduled_ms", c.DueMs),
		attribute.Int64("delayq.lateness_ms", max(0, nowMs-c.DueMs)),
	}
	if env.Topic != "" {
		attrs = append(attrs, attribute.String("delayq.topic", env.Topic))
	}
	if o := env.Occurrence; o.Schedule != "" {
		attrs = append(attrs, attribute.String("delayq.schedule", o.Schedule))
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}
	if link := tracing.Link(tp, ts); link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	_, span := s.d.Tracer.Start(context.Background(), "publish", opts...)
	return span
}

// destined names the span after the destination its message was routed
// to, with the destination's attributes: before the publish, so that a
// message refused before it (its exchange missing) says where it was
// going too.
func destined(span trace.Span, exchange, routingKey string) {
	if span == nil {
		return
	}
	name := exchange
	if name == "" {
		name = "(default)"
	}
	span.SetName("publish " + name)
	span.SetAttributes(attribute.String("messaging.destination.name", exchange),
		attribute.String("messaging.rabbitmq.destination.routing_key", routingKey))
}

// routed puts the span's context in the headers to publish.
func routed(span trace.Span, h amqp.Table) {
	if span == nil {
		return
	}
	tracing.Inject(trace.ContextWithSpan(context.Background(), span), h)
}

// endUndeliverable ends the publish span of a message that could not be
// published for why; buried: it went to the dead set. A refusal that is
// retried is a "refused" event; the last one, which dead-letters the
// message, is followed by a "dead-lettered" event and ends the span in
// error, as anything else that dead-letters does; an expired message is
// an "expired" event, what its producer asked for, not an error.
func endUndeliverable(span trace.Span, why deadReason, buried bool) {
	if span == nil {
		return
	}
	switch {
	case why.label == ReasonExpired:
		endSpan(span, "expired", why.text, false)
	case why.refused && !buried:
		endSpan(span, "refused", why.text, false)
	case why.refused:
		span.AddEvent("refused", trace.WithAttributes(attribute.String("delayq.detail", why.text)))
		endSpan(span, "dead-lettered", why.text, true)
	default:
		endSpan(span, "dead-lettered", why.text, true)
	}
}

// endSpan ends a publish span with an event saying how the message was
// settled ("" for a plain confirm); failed marks the span's status.
func endSpan(span trace.Span, event, detail string, failed bool) {
	if span == nil {
		return
	}
	if event != "" {
		span.AddEvent(event, trace.WithAttributes(attribute.String("delayq.detail", detail)))
	}
	if failed {
		span.SetStatus(codes.Error, event+": "+detail)
	}
	span.End()
}

// observe records v in h, with the span's trace id as an exemplar when
// there is a span (Prometheus shows exemplars in the OpenMetrics format).
func observe(h prometheus.Histogram, v float64, span trace.Span) {
	if span != nil {
		if eo, ok := h.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": span.SpanContext().TraceID().String()})
			return
		}
	}
	h.Observe(v)
}
