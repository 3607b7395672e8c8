package scanner

import (
	"context"
	"time"
)

// The far-future tier's promoter and compactor (shard's doc.go, "The
// far-future tier", and farcompact.go). Every farPromoteEvery each process
// promotes the far buckets, within the horizon, of the shards it takes the
// wake-ups of (affinity.go; every shard while the membership is unknown),
// at most farBucketsPerVisit a shard a round, then compresses up to
// farBlocksPerVisit blocks of their raw records. No leader: a bucket's lease keeps two processes off one
// bucket, and promotion is idempotent by id, so a process that dies in
// the middle leaves the rest to the next round of whoever owns the shard
// then. With the tier off a round reads nothing from Redis (the store
// caches the settings' absence).
//
// The goroutine is started and stopped with the claims stage (Stop's
// step 1): it promotes nothing after the claims ended, which costs
// nothing, since promotion runs an hour ahead of the messages by default.

const (
	farPromoteEvery    = time.Second
	farBucketsPerVisit = 4
	farBlocksPerVisit  = 64 // 16,384 records a shard a second: ahead of any producer
)

// promoteFar runs the promotion rounds until life ends; the Redis calls
// use workCtx.
func (s *Scanner) promoteFar(life, workCtx context.Context) {
	t := time.NewTicker(farPromoteEvery)
	defer t.Stop()
	for {
		select {
		case <-life.Done():
			return
		case <-t.C:
		}
		hw, err := s.d.Shards.HighWater()
		if err != nil {
			s.errLog.warn("promote far messages: shard count", err)
			continue
		}
		for i := range hw {
			if !s.aff.owns(i) {
				continue
			}
			p, err := s.d.Store.PromoteDue(workCtx, i, farBucketsPerVisit)
			if p.Moved > 0 {
				s.d.Metrics.FarPromoted.Add(float64(p.Moved))
			}
			if p.Buckets > 0 {
				s.d.Metrics.FarPromotionAhead.Observe(p.AheadMin)
			}
			if p.Dead > 0 {
				s.d.Metrics.Dead.WithLabelValues(ReasonCorrupt).Add(float64(p.Dead))
			}
			if err != nil {
				s.errLog.warn("promote far messages", err)
			}
			n, err := s.d.Store.CompactFar(workCtx, i, farBlocksPerVisit)
			s.d.Metrics.FarCompacted.Add(float64(n))
			if err != nil {
				s.errLog.warn("compress far messages", err)
			}
		}
	}
}
