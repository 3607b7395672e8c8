package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// ---- ab: this build against another (-before), for a change's own effect ----

// abResult is the A/B of two delayq builds in one run: saturated dispatch
// at each claim batch k, and steady runs at fixed rates, the two builds in
// turn (each round in the other order), so both meet the same drift of the
// host. Ratios are this build's median over the other's.
type abResult struct {
	Before    string      `json:"before"`
	Saturated []abDrain   `json:"saturated"`
	Steady    []abSteadyK `json:"steady,omitempty"`
}

type abDrain struct {
	Batch   int       `json:"batch"`
	A, B    []float64 // msg/s, this build and the other, per round
	UsA     []float64 `json:"us_per_msg_this"` // CPU of all processes a message, per round
	UsB     []float64 `json:"us_per_msg_before"`
	Ratio   float64   `json:"rate_this_over_before"` // medians
	UsRatio float64   `json:"us_this_over_before"`
	// Each process's CPU a message, per round, by build (this, before):
	// where a change saves, next to the host's drift in the totals.
	ProcA map[string][]float64 `json:"us_per_msg_by_process_this"`
	ProcB map[string][]float64 `json:"us_per_msg_by_process_before"`
}

type abSteadyK struct {
	Batch    int                  `json:"batch"`
	Scanners int                  `json:"scanners"`
	Rate     float64              `json:"enqueue_per_sec"`
	P99A     []time.Duration      `json:"p99_this_ns"`
	P99B     []time.Duration      `json:"p99_before_ns"`
	MaxA     []time.Duration      `json:"max_this_ns"`
	MaxB     []time.Duration      `json:"max_before_ns"`
	UsA      []float64            `json:"us_per_msg_this"`
	UsB      []float64            `json:"us_per_msg_before"`
	ProcA    map[string][]float64 `json:"us_per_msg_by_process_this"`
	ProcB    map[string][]float64 `json:"us_per_msg_by_process_before"`
}

// ab runs only when asked for (-only ab) with -before. The steady runs go
// at -limit/2 msg/s when -limit is set, else at half of the other build's
// median saturated rate at that k (about 40 % of (d)).
func (b *bench) ab(ctx context.Context) error {
	if b.c.before == "" {
		return fmt.Errorf("-only ab needs -before (the other build's delayq binary)")
	}
	r := &abResult{Before: b.c.before}
	b.res.AB = r
	this := b.c.delayq
	defer func() { b.c.delayq = this }()
	builds := []string{this, b.c.before}
	for _, k := range b.c.batches {
		d := abDrain{Batch: k, ProcA: map[string][]float64{}, ProcB: map[string][]float64{}}
		for round := range b.c.rounds {
			for j := range builds {
				bin := builds[(j+round)%2]
				b.c.delayq = bin
				rate, _, cpu, err := b.drainBacklog(ctx, fmt.Sprintf("ab-k%d-r%d", k, round+1), b.c.backlog, k, 1)
				if err != nil {
					return err
				}
				us := cpu.total()
				procs := d.ProcB
				if bin == this {
					d.A, d.UsA, procs = append(d.A, rate), append(d.UsA, us), d.ProcA
				} else {
					d.B, d.UsB = append(d.B, rate), append(d.UsB, us)
				}
				if cpu != nil {
					for p, v := range cpu.UsPerMsg {
						procs[p] = append(procs[p], v)
					}
				}
				say("A/B saturated, k=%d, round %d, %s: %.0f msg/s, %.1f µs of CPU a message", k, round+1, bin, rate, us)
			}
		}
		d.Ratio, d.UsRatio = median(d.A)/median(d.B), median(d.UsA)/median(d.UsB)
		say("A/B saturated, k=%d: this/before %.3f in msg/s, %.3f in CPU a message%s", k, d.Ratio, d.UsRatio, byProcess(d.ProcA, d.ProcB))
		r.Saturated = append(r.Saturated, d)
	}
	for i, k := range b.c.batches {
		rate := median(r.Saturated[i].B) / 2
		if b.c.fixedLimit > 0 {
			rate = b.c.fixedLimit / 2
		}
		for _, n := range b.c.scanners {
			s := abSteadyK{Batch: k, Scanners: n, Rate: rate, ProcA: map[string][]float64{}, ProcB: map[string][]float64{}}
			for round := range b.c.rounds {
				for j := range builds {
					bin := builds[(j+round)%2]
					b.c.delayq = bin
					res, err := b.steadyRun(ctx, k, n, 0, rate)
					if err != nil {
						return err
					}
					us := res.CPU.total()
					procs := s.ProcB
					if bin == this {
						procs = s.ProcA
						s.P99A, s.MaxA, s.UsA = append(s.P99A, res.P99), append(s.MaxA, res.Max), append(s.UsA, us)
					} else {
						s.P99B, s.MaxB, s.UsB = append(s.P99B, res.P99), append(s.MaxB, res.Max), append(s.UsB, us)
					}
					if res.CPU != nil {
						for p, v := range res.CPU.UsPerMsg {
							procs[p] = append(procs[p], v)
						}
					}
					say("A/B steady, k=%d, %d scanner(s), %.0f msg/s, round %d, %s: p99 %s, max %s, %.1f µs of CPU a message",
						k, n, rate, round+1, bin, ms(res.P99), ms(res.Max), us)
				}
			}
			say("A/B steady, k=%d, %d scanner(s): p99 %s this, %s before; max %s, %s (medians); CPU a message this/before %.3f%s",
				k, n, ms(median(s.P99A)), ms(median(s.P99B)), ms(median(s.MaxA)), ms(median(s.MaxB)), median(s.UsA)/median(s.UsB),
				byProcess(s.ProcA, s.ProcB))
			r.Steady = append(r.Steady, s)
		}
	}
	return nil
}

// byProcess prints each process's median CPU a message, this build's and
// the other's.
func byProcess(a, b map[string][]float64) string {
	names := slices.Sorted(maps.Keys(a))
	out := ""
	for _, p := range names {
		out += fmt.Sprintf("; %s %.1f / %.1f µs", p, median(a[p]), median(b[p]))
	}
	return out
}

// total is the CPU of all processes a message, 0 when not measured.
func (c *cpuUse) total() float64 {
	if c == nil {
		return 0
	}
	us := 0.0
	for _, v := range c.UsPerMsg {
		us += v
	}
	return us
}
