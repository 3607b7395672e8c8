// Package tracing carries W3C trace context through delayq, with the
// OpenTelemetry API: from the producer, through the wait, to the
// consumer.
//
// # Design
//
// A delayed message's publish happens minutes or days after the request
// that scheduled it, so delayq does not make it a child of the producer's
// span (that trace would stay open for the whole wait): the publish starts
// a trace of its own, linked to the producer's span context, as the
// OpenTelemetry messaging conventions say for batch and deferred sends.
//
//   - Capture: at every way in, the producer's context becomes the
//     message's traceparent and tracestate headers, stored in its envelope
//     like any header: the Go SDK from the context.Context (Inject, through
//     the global propagator, so the application's choice holds), the HTTP
//     API from the request's headers, the CLI from TRACEPARENT and
//     TRACESTATE, the AMQP ingress from the message's own headers. A header
//     the producer set itself wins over the context. A malformed
//     traceparent (wrong length, version ff, all-zero ids) is dropped with
//     its tracestate (Clean), and the message goes on without them: no
//     error to the producer.
//   - Publish: a scanner with tracing on starts a span "publish
//     <exchange>" (kind producer) when it has claimed a message, linked to
//     the stored context, with the messaging attributes, the shard, the
//     attempt, the scheduled time and the lateness; it replaces the
//     message's traceparent and tracestate with the span's own, so an
//     instrumented consumer continues this trace. A retry, a refusal, a
//     dead-letter and an expiry are events on the span; it ends when the
//     broker confirmed the message or it was settled otherwise. A
//     dead-letter ends the span in error, also after the last refusal
//     (events "refused" then "dead-lettered"); the span is named after the
//     destination (and has its attributes) even when the broker refused
//     the message before any publish, its exchange missing.
//   - Export (Setup): over OTLP/HTTP, configured by the standard OTEL_*
//     variables (OTEL_EXPORTER_OTLP_ENDPOINT or _TRACES_ENDPOINT, headers,
//     OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).
//     Off unless an OTLP endpoint is set or OTEL_TRACES_EXPORTER=otlp;
//     OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
//     When off, a scanner starts no span and the stored headers are
//     published as they came, so the consumer continues the producer's
//     trace.
//
// # Guarantees and non-guarantees
//
// Tracing never fails a message: a malformed context is dropped, an
// export that fails is the exporter's to retry or drop. Spans are
// exported in batches and may be lost when a process is killed. The
// wait itself is not a span (it would be open for days); its length is
// the publish span's scheduled time and lateness.
package tracing
