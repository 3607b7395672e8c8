package shard_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestFleetRates: what the scripts count (enqueued, published with their
// lateness, dead) comes out of two samples as rates; a sample is taken
// once an interval however many ask; a corrupt sample is skipped.
func TestFleetRates(t *testing.T) {
	b := setup(t, 4)
	const every = 200 * time.Millisecond
	if took, err := b.store.SampleRates(b.ctx, every); !took || err != nil { // nothing ever written: zeros
		t.Fatalf("first sample, of an empty namespace: %v %v", took, err)
	}
	if took, err := b.store.SampleRates(b.ctx, every); took || err != nil {
		t.Fatalf("a second sample within the interval: %v %v", took, err)
	}
	b.enqueue(t, "first", time.Hour)
	for i := range 10 {
		b.enqueue(t, fmt.Sprintf("r%d", i), 0)
	}
	claimed := b.claimAll(t, 100, time.Minute)
	if len(claimed) != 10 {
		t.Fatalf("claimed %d of 10", len(claimed))
	}
	acks := map[int][]shard.Confirmed{}
	for j, c := range claimed {
		i := shard.Of(c.ID, 4)
		switch {
		case j == 0:
			if ok, err := b.store.DeadLetter(b.ctx, i, c.Lease, "test"); !ok || err != nil {
				t.Fatalf("dead-letter: %v %v", ok, err)
			}
		case j <= 2: // held back by a limit: published, not in the lateness
			acks[i] = append(acks[i], shard.Confirmed{Lease: c.Lease, Late: -1})
		default:
			acks[i] = append(acks[i], shard.Confirmed{Lease: c.Lease, Late: 30 * time.Millisecond})
		}
	}
	if n, err := b.store.AckShards(b.ctx, acks); n != 9 || err != nil {
		t.Fatalf("acked %d, %v", n, err)
	}
	if err := b.rdb.ZAdd(b.ctx, shard.RatesKey(b.store.Namespace()), redis.Z{Score: float64(time.Now().UnixMilli()), Member: "not a sample"}).Err(); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		took, err := b.store.SampleRates(b.ctx, every)
		return took && err == nil
	}, func() string { return "no second sample" })
	r, err := b.store.Rates(b.ctx, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Points) != 1 || r.Corrupt != 1 {
		t.Fatalf("points %v, corrupt %d; want one point, one corrupt member skipped", r.Points, r.Corrupt)
	}
	p, sec := r.Points[0], r.Points[0].Seconds
	count := func(rate float64) int { return int(rate*sec + 0.5) }
	if count(p.Enqueued) != 11 || count(p.Published) != 9 || count(p.Dead) != 1 {
		t.Errorf("point: enqueued %d, published %d, dead %d over %.3fs; want 11, 9, 1", count(p.Enqueued), count(p.Published), count(p.Dead), sec)
	}
	if p.Lateness.UpTo != 50*time.Millisecond || p.Lateness.Count != 7 || p.Lateness.Over {
		t.Errorf("lateness %+v, want at most 50ms over 7 publishes", p.Lateness)
	}
	if r.Published != p.Published || r.Sampled <= 0 {
		t.Errorf("window: published %v a second over %s, the point %v", r.Published, r.Sampled, p.Published)
	}
	// A counter written by hand is left out, and named; the sample is taken.
	if err := b.rdb.HSet(b.ctx, shard.ShardKeys(b.store.Namespace(), 2).Counters, "published", "lots").Err(); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		took, err := b.store.SampleRates(b.ctx, every)
		return took && err != nil && strings.Contains(err.Error(), "counter published of ") && strings.Contains(err.Error(), `"lots"`)
	}, func() string { return "no sample with the bad counter named" })
	if _, err := b.store.Rates(b.ctx, time.Hour); err == nil {
		t.Error("a window beyond what is kept: no error")
	}
}
