package main

import (
	"context"
	"fmt"
	"time"

	"github.com/delayq/delayq/shard"
)

// ---- quota: what a team's quota costs its enqueues and its dispatch ----

// quotaResult compares messages of a scope with a quota (one too large to
// refuse: the work of counting, not of refusing) with the same messages
// without one: the enqueue rate of the bench's SDK producer (batches of
// 2,000 from 4 goroutines, as every fill) and saturated dispatch at k=1
// with one scanner, the two in turn, Rounds times. Counted is what the
// quota counts once the quota'd drain's last message is delivered and the
// scanners' maintenance has run: 0 when every delivery counted itself out.
type quotaResult struct {
	EnqueueWith    []float64 `json:"enqueue_with_quota"`
	EnqueueWithout []float64 `json:"enqueue_without_quota"`
	EnqueueRatio   float64   `json:"enqueue_with_over_without"` // medians
	DrainWith      []float64 `json:"drain_with_quota"`
	DrainWithout   []float64 `json:"drain_without_quota"`
	DrainRatio     float64   `json:"drain_with_over_without"`
	Counted        int64     `json:"counted_after_drain"`
}

// quotaOn sets a quota on every bench message of namespace ns (they are
// addressed to the bench's exchange).
func (b *bench) quotaOn(ctx context.Context, ns string) (*shard.Store, error) {
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return nil, err
	}
	if err := st.SetQuota(ctx, shard.Quota{Scope: "bench", Rules: "exchange=" + exchange, MaxPending: 1 << 40}); err != nil {
		return nil, err
	}
	// The namespace is empty: the adoption ends at once, so the runs
	// measure counting, not a one-time walk of what was held.
	_, err = st.AdoptQuotas(ctx, shards)
	return st, err
}

func (b *bench) quota(ctx context.Context) error {
	r := &quotaResult{}
	b.res.Quota = r
	n := b.c.backlog
	for round := range b.c.rounds {
		for j := range 2 {
			with := (j+round)%2 == 0
			ns := b.namespace(fmt.Sprintf("quota-fill-%v", with))
			if with {
				if _, err := b.quotaOn(ctx, ns); err != nil {
					return err
				}
			}
			start := time.Now()
			if _, err := b.fill(ctx, ns, n, time.Hour, time.Time{}); err != nil {
				return err
			}
			rate := float64(n) / time.Since(start).Seconds()
			if with {
				r.EnqueueWith = append(r.EnqueueWith, rate)
			} else {
				r.EnqueueWithout = append(r.EnqueueWithout, rate)
			}
			say("quota: enqueue, round %d, quota %v: %.0f msg/s", round+1, with, rate)
		}
	}
	r.EnqueueRatio = median(r.EnqueueWith) / median(r.EnqueueWithout)
	var last *shard.Store
	for round := range b.c.rounds {
		for j := range 2 {
			with := (j+round)%2 == 0
			var setup func(string) error
			if with {
				setup = func(ns string) error {
					st, err := b.quotaOn(ctx, ns)
					last = st
					return err
				}
			}
			rate, _, _, err := b.drainBacklogWith(ctx, fmt.Sprintf("quota-drain-%v", with), n, 1, 1, setup)
			if err != nil {
				return err
			}
			if with {
				r.DrainWith = append(r.DrainWith, rate)
				// Any process may run the maintenance that applies the
				// acks' counts: the fleet of the drain is gone.
				for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
					if _, err := last.MaintainQuotas(ctx, shards, 10*time.Millisecond); err != nil {
						return err
					}
					qs, err := last.Quotas(ctx)
					if err != nil || len(qs) != 1 {
						return fmt.Errorf("quota after the drain: %+v, %v", qs, err)
					}
					if r.Counted = qs[0].Count; r.Counted == 0 {
						break
					}
					sleep(ctx, 20*time.Millisecond)
				}
			} else {
				r.DrainWithout = append(r.DrainWithout, rate)
			}
			say("quota: saturated dispatch k=1, round %d, quota %v: %.0f msg/s", round+1, with, rate)
		}
	}
	r.DrainRatio = median(r.DrainWith) / median(r.DrainWithout)
	say("quota: with a quota over without, medians: enqueue %.3f, saturated dispatch %.3f; the quota counted %d once the drain ended",
		r.EnqueueRatio, r.DrainRatio, r.Counted)
	return nil
}
