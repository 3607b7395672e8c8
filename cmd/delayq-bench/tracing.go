package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// ---- tracing: its cost off (A/B) and on ----

// tracingResult is the tracing scenario's figures: saturated dispatch
// (k=1, one scanner) with tracing off against the build before tracing
// (-before), in turn, Rounds times; and with tracing on, every message
// sampled, exported over OTLP/HTTP to a receiver in this process.
type tracingResult struct {
	Before     string    `json:"before,omitempty"`
	OffA       []float64 `json:"saturated_off_this"`
	OffB       []float64 `json:"saturated_off_before,omitempty"`
	OffRatio   float64   `json:"saturated_off_this_over_before,omitempty"` // medians
	On         []float64 `json:"saturated_on"`
	OnRatio    float64   `json:"saturated_on_over_off"` // medians, this build
	UsOff      float64   `json:"us_per_msg_off"`        // the machine's CPU per message, median round
	UsOn       float64   `json:"us_per_msg_on"`         // with every message traced and exported
	Exports    int64     `json:"export_requests"`       // OTLP requests the receiver got
	ExportedKB int64     `json:"exported_kb"`
}

func (b *bench) tracing(ctx context.Context) error {
	r := &tracingResult{Before: b.c.before}
	b.res.Tracing = r
	// The OTLP/HTTP receiver: takes every request and counts it.
	var requests, bytes atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := io.Copy(io.Discard, req.Body)
		requests.Add(1)
		bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	this, env := b.c.delayq, b.c.scannerEnv
	defer func() { b.c.delayq, b.c.scannerEnv = this, env }()
	on := append(append([]string{}, env...), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+l.Addr().String(), "OTEL_TRACES_SAMPLER=always_on")
	type run struct {
		name string
		bin  string
		env  []string
		out  *[]float64
	}
	runs := []run{{"off", this, env, &r.OffA}, {"on", this, on, &r.On}}
	if b.c.before != "" {
		runs = append(runs, run{"off, the build before", b.c.before, env, &r.OffB})
	}
	var usOff, usOn []float64
	for round := range b.c.rounds {
		for j := range runs {
			x := runs[(j+round)%len(runs)]
			b.c.delayq, b.c.scannerEnv = x.bin, x.env
			rate, _, cpu, err := b.drainBacklog(ctx, fmt.Sprintf("tracing-r%d", round+1), b.c.backlog, 1, 1)
			if err != nil {
				return err
			}
			*x.out = append(*x.out, rate)
			us := cpu.total()
			switch {
			case x.name == "on":
				usOn = append(usOn, us)
			case x.bin == this:
				usOff = append(usOff, us)
			}
			say("tracing, round %d, %s: saturated %.0f msg/s, %.1f µs of CPU a message", round+1, x.name, rate, us)
		}
	}
	b.c.delayq, b.c.scannerEnv = this, env
	r.OnRatio = median(r.On) / median(r.OffA)
	r.UsOff, r.UsOn = median(usOff), median(usOn)
	if len(r.OffB) > 0 {
		r.OffRatio = median(r.OffA) / median(r.OffB)
	}
	r.Exports, r.ExportedKB = requests.Load(), bytes.Load()/1024
	say("tracing: off/before %.3f; on/off %.3f; CPU a message %.1f µs off, %.1f µs on; %d OTLP requests, %d KB",
		r.OffRatio, r.OnRatio, r.UsOff, r.UsOn, r.Exports, r.ExportedKB)
	return nil
}
