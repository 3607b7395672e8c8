package console

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/delayq/delayq/shard/httpapi"
)

// The overview's shards. With a few shards it shows each one; with more
// (M = 256 made 256 rows before the Redis table) it shows the busiest few
// and how uneven the shards are, and the full table is a click away (a
// <details> element). live.js redraws both the same way every 2 s.
const (
	shardRowsShown = 16 // up to this many shards, the overview lists them all
	busiestShown   = 8  // otherwise, this many of the busiest
)

// shardSummary is the overview's summary of many shards.
type shardSummary struct {
	Busiest []httpapi.ShardStats // most due now, then most scheduled
	Text    string               // how uneven they are
}

// summarizeShards is the summary of shards, or nil when the overview lists
// them all.
func summarizeShards(shards []httpapi.ShardStats) *shardSummary {
	if len(shards) <= shardRowsShown {
		return nil
	}
	busiest := slices.Clone(shards)
	slices.SortStableFunc(busiest, func(a, b httpapi.ShardStats) int {
		return cmp.Or(cmp.Compare(b.DueNow, a.DueNow), cmp.Compare(b.Scheduled, a.Scheduled), cmp.Compare(a.Shard, b.Shard))
	})
	return &shardSummary{Busiest: busiest[:busiestShown], Text: skewText(shards)}
}

// skewText says how evenly the scheduled messages spread over the shards:
// the mean, and the fullest shard against it. live.js writes the same.
func skewText(shards []httpapi.ShardStats) string {
	var total int64
	fullest := shards[0]
	for _, s := range shards {
		total += s.Scheduled
		if s.Scheduled > fullest.Scheduled {
			fullest = s
		}
	}
	mean := float64(total) / float64(len(shards))
	if total == 0 {
		return fmt.Sprintf("%d shards, none holds a scheduled message.", len(shards))
	}
	return fmt.Sprintf("%d shards, %.0f scheduled each on average; the fullest, shard %d, holds %d (%.1f× the average).",
		len(shards), mean, fullest.Shard, fullest.Scheduled, float64(fullest.Scheduled)/mean)
}
