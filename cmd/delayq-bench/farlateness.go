package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// ---- far: lateness while far buckets are promoted ----

// farLatenessResult is the far scenario: one steady load of near messages
// twice, in a namespace with the far tier on: without far messages, and
// while the scanners promote Far of them (placed before the run, due
// after it, their buckets coming within the horizon in the middle of it).
// The difference in lateness is what promotion costs the hot path.
type farLatenessResult struct {
	Far      int          `json:"far_messages"`
	FillRate float64      `json:"far_fill_per_sec"`
	Promoted int64        `json:"promoted_during_run"`
	Without  steadyResult `json:"without_promotion"`
	With     steadyResult `json:"with_promotion"`
}

const (
	farBenchHorizon = 2 * time.Minute
	farBenchWidth   = 5 * time.Second // three buckets a shard over the 15 s the far messages span
	farBenchFor     = 30 * time.Second
	farBenchLoad    = 0.3 // of the shared-core limit (d)
)

func (b *bench) farLateness(ctx context.Context) error {
	k := b.c.batches[0]
	rate, err := b.loadRate(ctx, k, farBenchLoad)
	if err != nil {
		return err
	}
	res := &farLatenessResult{Far: b.c.far}
	for _, promote := range []bool{false, true} {
		var st *shard.Store
		s, err := b.steadyRunWith(ctx, "far", k, 2, farBenchLoad, rate, farBenchFor, func(ns string, s *shard.Store) error {
			st = s
			if err := s.EnableFar(ctx, shard.FarSettings{Horizon: farBenchHorizon, BucketWidth: farBenchWidth, Since: 1}); err != nil {
				return err
			}
			if !promote {
				return nil
			}
			// Due from 12 s after the horizon, over 15 s: the buckets come
			// within the horizon from about 6 s into the run (the fill
			// takes the rest), after the stationary window has begun.
			start := time.Now()
			base := start.Add(farBenchHorizon + 12*time.Second)
			if err := fillFar(ctx, s, res.Far, base, 15*time.Second); err != nil {
				return err
			}
			res.FillRate = float64(res.Far) / time.Since(start).Seconds()
			say("far: %d far messages placed at %.0f/s", res.Far, res.FillRate)
			return nil
		})
		if err != nil {
			return err
		}
		if promote {
			res.With = s
			status, err := st.FarStatus(ctx, shards)
			if err != nil {
				return err
			}
			res.Promoted = int64(res.Far) - status.Far
		} else {
			res.Without = s
		}
		say("far, %s promotion: %.0f/s near, p50 %s p99 %s max %s, early %d, missing %d", map[bool]string{false: "without", true: "with"}[promote],
			s.Rate, ms(s.P50), ms(s.P99), ms(s.Max), s.Early, s.Missing)
	}
	say("far: %d of %d promoted during the run", res.Promoted, res.Far)
	b.res.FarLateness = res
	return nil
}

// fillFar places n far messages of 100-byte bodies due at random in
// [base, base+span), in batches of 1,000 from four goroutines.
func fillFar(ctx context.Context, st *shard.Store, n int, base time.Time, span time.Duration) error {
	prod := shard.NewProducer(st, balance.Static(shards), shard.ProducerOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for from := g * 1000; from < n; from += 4000 {
				msgs := make([]shard.Message, 0, 1000)
				for i := from; i < min(from+1000, n); i++ {
					msgs = append(msgs, shard.Message{ID: fmt.Sprintf("far-%d", i), Exchange: exchange, RoutingKey: "nowhere", Body: body,
						At: base.Add(time.Duration(r.Int64N(int64(span))))})
				}
				res, err := prod.EnqueueBatch(ctx, msgs)
				for _, x := range res {
					if err == nil {
						err = x.Err
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// loadRate is load (a fraction) of the shared-core limit at claim batch
// k, measured now (or of the per-server limit when the shared one is not
// known, or of -limit when given): the rate of a scenario's steady load.
func (b *bench) loadRate(ctx context.Context, k int, load float64) (float64, error) {
	near, err := b.nearCeilings(ctx, k)
	if err != nil {
		return 0, err
	}
	limit := near.sharedLimit(k)
	if limit == 0 {
		limit = near.limit(k)
	}
	if b.c.fixedLimit > 0 {
		limit = b.c.fixedLimit
	}
	return load * limit, nil
}
