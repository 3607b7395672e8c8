package main

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/shard/tracing"
)

// tracer is the tracing part of scan and serve: it sets up export from
// the OTEL_* variables when started (package tracing) and flushes the
// spans in hand when stopped, after the parts that make spans.
type tracer struct {
	service string
	t       trace.Tracer // nil while tracing is off
	stop    func(context.Context) error
}

func (t *tracer) Start(ctx context.Context) error {
	tr, stop, err := tracing.Setup(ctx, t.service, readBuildInfo().Version)
	if err != nil {
		return err
	}
	t.t, t.stop = tr, stop
	return nil
}

func (t *tracer) Stop(ctx context.Context) error {
	if t.stop == nil {
		return nil
	}
	return t.stop(ctx)
}
