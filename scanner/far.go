package scanner

import (
	"context"
	"sync"
	"time"

	"github.com/delayq/delayq/shard"
)

// The far-future tier's promoter and compactor (shard's doc.go, "The
// far-future tier", and farcompact.go). Every farPromoteEvery each process
// promotes the far buckets, within the horizon, of the shards it takes the
// wake-ups of (affinity.go; every shard while the membership is unknown),
// at most farBucketsPerVisit a shard a round, then compresses up to
// farBlocksPerVisit blocks of their raw records. The other shards it looks
// at less often (shard.Store.PromoteOverdue: each sixth of the horizon),
// for buckets within a third of the horizon that their owner should have
// promoted already: an owner that died stays in the membership for
// membershipTTL, and one that is restarted over and over may never reach
// its first round. No leader: a bucket's lease keeps two processes off one
// bucket, and promotion is idempotent by id, so a process that dies in
// the middle leaves the rest to the next round of whoever owns the shard
// then, or to any process once the bucket is overdue. With the tier off a
// round reads nothing from Redis (the store caches the settings' absence).
//
// The goroutine is started and stopped with the claims stage (Stop's
// step 1): it promotes nothing after the claims ended, which costs
// nothing, since promotion runs an hour ahead of the messages by default.

const (
	farPromoteEvery    = time.Second
	farBucketsPerVisit = 4
	farBlocksPerVisit  = 64 // 16,384 records a shard a second: ahead of any producer
	farShardsAtOnce    = 4
)

// promoteFar runs the promotion rounds until life ends; the Redis calls
// use workCtx. A round works on up to farShardsAtOnce shards at a time,
// so that one shard's slow round trips do not hold back the others', and
// ends when they all have.
func (s *Scanner) promoteFar(life, workCtx context.Context) {
	s.everyRound(life, farPromoteEvery, "promote far messages", func(hw int) {
		var wg sync.WaitGroup
		slots := make(chan struct{}, farShardsAtOnce)
		for i := range hw {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				s.promoteShard(workCtx, i)
			})
		}
		wg.Wait()
	})
}

// promoteShard is a round's work on shard i: its due buckets and
// compaction when this process owns it, its overdue buckets otherwise.
func (s *Scanner) promoteShard(ctx context.Context, i int) {
	if !s.aff.owns(i) {
		p, err := s.d.Store.PromoteOverdue(ctx, i, farBucketsPerVisit)
		s.countPromotion(p)
		if err != nil {
			s.errLog.warn("promote overdue far messages", err)
		}
		return
	}
	p, err := s.d.Store.PromoteDue(ctx, i, farBucketsPerVisit)
	s.countPromotion(p)
	if err != nil {
		s.errLog.warn("promote far messages", err)
	}
	n, err := s.d.Store.CompactFar(ctx, i, farBlocksPerVisit)
	s.d.Metrics.FarCompacted.Add(float64(n))
	if err != nil {
		s.errLog.warn("compress far messages", err)
	}
}

// countPromotion counts what a promotion did in the metrics.
func (s *Scanner) countPromotion(p shard.Promotion) {
	if p.Moved > 0 {
		s.d.Metrics.FarPromoted.Add(float64(p.Moved))
	}
	if p.Buckets > 0 {
		s.d.Metrics.FarPromotionAhead.Observe(p.AheadMin)
	}
	if p.Dead > 0 {
		s.d.Metrics.Dead.WithLabelValues(ReasonCorrupt).Add(float64(p.Dead))
	}
}
