package main

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

// rateSampler is the part of scan and serve that samples the fleet's
// counters for the rates (shard.Store.SampleRates) every period. Each
// process asks; the first one after the interval takes the sample, so the
// fleet takes one an interval whoever is running. Stopped early in the
// shutdown order (it holds nothing).
type rateSampler struct {
	st     *shard.Store
	period time.Duration // 0: off
	log    *zap.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRateSampler(st *shard.Store, period time.Duration, log *zap.Logger) *rateSampler {
	return &rateSampler{st: st, period: period, log: log.Named("rates")}
}

// Start launches the sampling goroutine (none when off).
func (r *rateSampler) Start(context.Context) error {
	if r.period <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Go(func() {
		t := time.NewTicker(r.period)
		defer t.Stop()
		failures := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Nine tenths of the period: processes tick at different
			// phases, and the one that comes first should take it.
			_, err := r.st.SampleRates(ctx, r.period-r.period/10)
			switch {
			case err != nil && ctx.Err() == nil:
				if failures++; failures == 1 || failures%30 == 0 {
					r.log.Warn("sampling the fleet's counters", zap.Int("failures", failures), zap.Error(err))
				}
			case err == nil && failures > 0:
				r.log.Info("sampling the fleet's counters again", zap.Int("failures", failures))
				failures = 0
			}
		}
	})
	return nil
}

// Stop ends the goroutine and waits for it.
func (r *rateSampler) Stop(context.Context) error {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	return nil
}
