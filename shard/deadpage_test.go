package shard_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestDeadPageWalksEveryMessageOnce: paging the dead list by its cursor
// gives every dead message once, in order of death then id, also when
// many died in the same millisecond across and within shards.
func TestDeadPageWalksEveryMessageOnce(t *testing.T) {
	shardtest.Require(t, srvErr)
	ctx := context.Background()
	rdb := srv.Client(t)
	ns := shardtest.Namespace(t)
	st, err := shard.NewStore(rdb, ns)
	if err != nil {
		t.Fatal(err)
	}
	type dead struct {
		ms int64
		id string
	}
	var want []dead
	for i := range 4 {
		ks := shard.ShardKeys(ns, i)
		for j := range 9 {
			ms := int64(1000) // most died in one millisecond
			if j%3 == 0 {
				ms = int64(900 + i*10 + j)
			}
			id := fmt.Sprintf("s%d-%d", i, j)
			rdb.ZAdd(ctx, ks.Dead, redis.Z{Score: float64(ms), Member: id})
			rdb.HSet(ctx, ks.Reason, id, "why "+id)
			want = append(want, dead{ms, id})
		}
	}
	slices.SortFunc(want, func(a, b dead) int {
		if a.ms != b.ms {
			return int(a.ms - b.ms)
		}
		if a.id < b.id {
			return -1
		}
		return 1
	})
	var got []dead
	cur := shard.DeadCursor{}
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("paging does not end")
		}
		page, next, more, err := st.DeadPage(ctx, 4, cur, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			if d.Reason != "why "+d.ID {
				t.Errorf("%s: reason %q", d.ID, d.Reason)
			}
			got = append(got, dead{d.Since.UnixMilli(), d.ID})
		}
		if !more {
			break
		}
		back, err := shard.ParseDeadCursor(next.String())
		if err != nil || back != next {
			t.Fatalf("cursor %q parses as %+v, %v", next.String(), back, err)
		}
		cur = next
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged\n%v\nwant\n%v", got, want)
	}
	if _, err := shard.ParseDeadCursor("soon"); err == nil {
		t.Error("a bad cursor parses")
	}
}
