package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// ---- flow: flow control's cost, and its promise beside other topics ----

// flowResult is the flow scenario's figures.
type flowResult struct {
	// A/B against the build before flow control (-before), with no limit
	// set: saturated dispatch (k=1, one scanner) and the steady p99 at 50 %
	// of that rate (two scanners), each build in turn, Rounds times.
	Before         string          `json:"before,omitempty"`
	SaturatedA     []float64       `json:"saturated_this"`
	SaturatedB     []float64       `json:"saturated_before,omitempty"`
	SteadyP99A     []time.Duration `json:"steady_p99_this_ns"`
	SteadyP99B     []time.Duration `json:"steady_p99_before_ns,omitempty"`
	SaturatedRatio float64         `json:"saturated_this_over_before,omitempty"` // medians
	SteadyP99Ratio float64         `json:"steady_p99_this_over_before,omitempty"`

	// A topic limited to half the saturated rate (burst a tenth of it)
	// drains a backlog of 12 s of its limit, falling due over 4 s (2.5
	// times its limit meanwhile), while an unlimited topic runs an
	// open-loop load of a quarter of that rate; the same load runs again
	// without the limited topic, beside the same work unlimited, and with
	// the backlog due at one instant. Each run Rounds times, in turn; the
	// figures are medians.
	Saturated      float64       `json:"saturated"`
	Limit          float64       `json:"limit"`
	Limited        int           `json:"limited_messages"`
	LimitedRate    float64       `json:"limited_release_per_sec"` // releases (x-delayq-released-ms) over the drain, its first and last second left out; median of the rounds
	OfLimit        float64       `json:"limited_of_limit"`
	UnlimitedRate  float64       `json:"unlimited_per_sec"`
	UnlimitedP99   time.Duration `json:"unlimited_p99_beside_ns"`
	UnlimitedAlone time.Duration `json:"unlimited_p99_alone_ns"`
	// The same second topic with no limit, its messages falling due at the
	// limit's pace over the drain's length: the same work on the box at
	// the same time, without flow control. The unlimited topic's p99 beside
	// it separates what the limit costs the other topics (head-of-line
	// blocking, the releaser's share of the scanners) from what the
	// second topic's messages cost on shared cores whatever their limit.
	UnlimitedBesideSameLoad time.Duration `json:"unlimited_p99_beside_same_load_ns"`
	// With the whole backlog due at one instant, the claims set it apart
	// before they reach what falls due after it: the unlimited topic's
	// p99 then (informative).
	UnlimitedInstant time.Duration `json:"unlimited_p99_beside_instant_ns"`
	// Each round of each run: the unlimited topic's p99 at the consumer,
	// and where its lateness arises: the p99 of the claims' lateness
	// (Redis time of the claim minus due) and of publish-to-confirm (of
	// every publish), from the scanners' histograms (bucket bounds).
	Stages map[string][]flowStages `json:"stages"`
	Early  int                     `json:"early"`
}

// flowStages is one run's p99 of each stage of the unlimited topic's path.
type flowStages struct {
	Claim    time.Duration `json:"claim_lateness_p99_ns"`
	Confirm  time.Duration `json:"confirm_time_p99_ns"`
	Consumer time.Duration `json:"consumer_lateness_p99_ns"`
	// The limited topic's releases a second, of a limited run.
	Released float64 `json:"limited_release_per_sec,omitempty"`
}

// flowLoad is what runs beside the unlimited topic in one flow run: n
// messages of a second topic, limited to the flow's limit or not, falling
// due evenly over spread (0: at one instant) from 3 s into the load.
type flowLoad struct {
	name    string
	n       int
	limited bool
	spread  time.Duration
}

// flow measures flow control: its cost with no limit set (A/B against
// -before, when given), and a limited topic beside an unlimited one.
func (b *bench) flow(ctx context.Context) error {
	r := &flowResult{Before: b.c.before}
	b.res.Flow = r
	this := b.c.delayq
	defer func() { b.c.delayq = this }()
	builds := []string{this}
	if b.c.before != "" {
		builds = append(builds, b.c.before)
	}
	for round := range b.c.rounds {
		for j := range builds { // each round in the other order
			bin := builds[(j+round)%len(builds)]
			b.c.delayq = bin
			rate, _, _, err := b.drainBacklog(ctx, fmt.Sprintf("flow-ab-r%d", round+1), b.c.backlog, 1, 1)
			if err != nil {
				return err
			}
			if bin == this {
				r.SaturatedA = append(r.SaturatedA, rate)
			} else {
				r.SaturatedB = append(r.SaturatedB, rate)
			}
			say("flow A/B, round %d, %s: saturated %.0f msg/s", round+1, bin, rate)
		}
	}
	r.Saturated = median(r.SaturatedA)
	for round := range b.c.rounds {
		for j := range builds {
			bin := builds[(j+round)%len(builds)]
			b.c.delayq = bin
			s, err := b.steadyRun(ctx, 1, 2, 0.5, r.Saturated/2)
			if err != nil {
				return err
			}
			if bin == this {
				r.SteadyP99A = append(r.SteadyP99A, s.P99)
			} else {
				r.SteadyP99B = append(r.SteadyP99B, s.P99)
			}
			r.Early += s.Early
			say("flow A/B, round %d, %s: steady at %.0f msg/s: p99 %s", round+1, bin, r.Saturated/2, ms(s.P99))
		}
	}
	b.c.delayq = this
	if len(r.SaturatedB) > 0 {
		r.SaturatedRatio = median(r.SaturatedA) / median(r.SaturatedB)
		r.SteadyP99Ratio = float64(median(r.SteadyP99A)) / float64(median(r.SteadyP99B))
		say("flow A/B: saturated this/before %.3f, steady p99 this/before %.3f", r.SaturatedRatio, r.SteadyP99Ratio)
	}

	r.Limit = r.Saturated / 2
	r.UnlimitedRate = r.Saturated / 4
	r.Stages = map[string][]flowStages{}
	n := int(r.Limit * 12) // 12 s of the limit
	runs := []struct {
		load flowLoad
		p99  *time.Duration
	}{
		{flowLoad{name: "alone"}, &r.UnlimitedAlone},
		{flowLoad{name: "beside the same load unlimited", n: n, spread: 12 * time.Second}, &r.UnlimitedBesideSameLoad},
		{flowLoad{name: "beside a limited backlog due at one instant", n: n, limited: true}, &r.UnlimitedInstant},
		{flowLoad{name: "beside the limited drain", n: n, limited: true, spread: 4 * time.Second}, &r.UnlimitedP99},
	}
	var released []float64
	for round := range b.c.rounds {
		for _, run := range runs {
			st, err := b.flowRun(ctx, r, run.load)
			if err != nil {
				return err
			}
			r.Stages[run.load.name] = append(r.Stages[run.load.name], st)
			if run.load.limited && run.load.spread > 0 {
				released = append(released, st.Released)
			}
			say("flow, round %d: unlimited at %.0f/s %s: p99 %s at the consumer (claims' lateness p99 <= %s, confirm p99 <= %s)",
				round+1, r.UnlimitedRate, run.load.name, ms(st.Consumer), ms(st.Claim), ms(st.Confirm))
		}
	}
	for _, run := range runs {
		p99s := make([]time.Duration, 0, b.c.rounds)
		for _, st := range r.Stages[run.load.name] {
			p99s = append(p99s, st.Consumer)
		}
		*run.p99 = median(p99s)
	}
	r.LimitedRate = median(released)
	r.OfLimit = r.LimitedRate / r.Limit
	say("flow (medians): limited to %.0f/s: released %.0f/s (%.1f%% of its limit); unlimited at %.0f/s: p99 %s beside it, %s beside the same load unlimited, %s alone, %s beside a backlog due at one instant",
		r.Limit, r.LimitedRate, 100*r.OfLimit, r.UnlimitedRate, ms(r.UnlimitedP99), ms(r.UnlimitedBesideSameLoad), ms(r.UnlimitedAlone), ms(r.UnlimitedInstant))
	return nil
}

// flowRun runs the unlimited topic's open-loop load for c.steadyFor on two
// scanners, with load beside it, and returns the p99 of each stage of the
// unlimited topic's path.
func (b *bench) flowRun(ctx context.Context, r *flowResult, load flowLoad) (flowStages, error) {
	var res flowStages
	ns := b.namespace("flow")
	lTopic := ns + "-other" // each topic's routing key is its name, a queue of its own
	tu, tl := newTally(), newTally()
	stopU, err := b.consume(ctx, ns, tu)
	if err != nil {
		return res, err
	}
	defer stopU()
	stopL, err := b.consume(ctx, lTopic, tl)
	if err != nil {
		return res, err
	}
	defer stopL()
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return res, err
	}
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	n := load.n
	if load.limited {
		if _, err := st.SetLimit(ctx, lTopic, r.Limit, int(r.Limit/10), "bench"); err != nil {
			return res, err
		}
		r.Limited = n
	}
	f, err := b.startFleet(ns, 2, 1, shards, "DELAYQ_DEFAULT_EXCHANGE="+exchange)
	if err != nil {
		return res, err
	}
	defer f.stop()
	// The other topic falls due from 3 s into the unlimited load, so its
	// drain covers the load's stationary part (from 5 s on).
	start := time.Now().Add(time.Duration(n/20000)*time.Second + time.Second)
	if n > 0 {
		at := start.Add(3 * time.Second).Truncate(time.Millisecond)
		msgs := make([]shard.Message, 0, 2000)
		for i := range n {
			due := at.Add(load.spread * time.Duration(i) / time.Duration(n))
			msgs = append(msgs, shard.Message{ID: lTopic + "-" + strconv.Itoa(i), Topic: lTopic, Body: body, At: due})
			if len(msgs) == cap(msgs) || i == n-1 {
				if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
					return res, err
				}
				msgs = msgs[:0]
			}
		}
	}
	sleep(ctx, time.Until(start))
	sent := 0
	tick := time.NewTicker(10 * time.Millisecond)
	var wg sync.WaitGroup
	var enqErr error
	var mu sync.Mutex
	for now := range tick.C {
		el := now.Sub(start)
		if el > b.c.steadyFor || ctx.Err() != nil {
			break
		}
		want := int(r.UnlimitedRate * el.Seconds())
		if want <= sent {
			continue
		}
		msgs := make([]shard.Message, 0, want-sent)
		for i := sent; i < want; i++ {
			delay := time.Second + time.Duration(uint64(i)*2654435761%4000)*time.Millisecond
			msgs = append(msgs, shard.Message{ID: ns + "-" + strconv.Itoa(i), Topic: ns, Body: body, Delay: delay})
		}
		sent = want
		wg.Go(func() {
			if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
				mu.Lock()
				enqErr = err
				mu.Unlock()
			}
		})
	}
	tick.Stop()
	wg.Wait()
	if enqErr != nil {
		return res, enqErr
	}
	if !tu.waitFor(ctx, sent, 60*time.Second) {
		return res, fmt.Errorf("flow: %d of %d of the unlimited topic delivered", tu.count.Load(), sent)
	}
	hs, err := f.scrapeHistograms(ctx, claimLateness, confirmTime)
	if err != nil {
		return res, err
	}
	res.Claim, res.Confirm = hs[claimLateness].quantile(0.99), hs[confirmTime].quantile(0.99)
	if n > 0 {
		if !tl.waitFor(ctx, n, time.Duration(float64(n)/r.Limit*1.5)*time.Second+30*time.Second) {
			return res, fmt.Errorf("flow: %d of %d of the other topic delivered", tl.count.Load(), n)
		}
	}
	if n > 0 && load.limited {
		// The release times (x-delayq-released-ms, the grants' Redis
		// clock), the first and last second left out: the pace the limit
		// set, without what the path to the consumer adds.
		tl.mu.Lock()
		rel := slices.Clone(tl.rel)
		r.Early += tl.early
		tl.mu.Unlock()
		if len(rel) < n {
			return res, fmt.Errorf("flow: %d of %d limited messages carry %s", len(rel), n, shard.HeaderReleasedMs)
		}
		slices.Sort(rel)
		from, to := rel[0]+1000, rel[len(rel)-1]-1000
		in := 0
		for _, ms := range rel {
			if ms >= from && ms < to {
				in++
			}
		}
		res.Released = float64(in) / (float64(to-from) / 1000)
	}
	tu.mu.Lock()
	r.Early += tu.early
	tu.mu.Unlock()
	_, res.Consumer, _, _ = tu.quantiles()
	return res, nil
}

// median is the middle of xs (the upper one of an even count).
func median[T cmp.Ordered](xs []T) T {
	var zero T
	if len(xs) == 0 {
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
