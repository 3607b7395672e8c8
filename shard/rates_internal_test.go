package shard

import (
	"testing"
	"time"
)

// TestLatenessP99Of: the p99 is the bucket that holds the 99th
// percentile's rank; beyond the largest bucket it says so.
func TestLatenessP99Of(t *testing.T) {
	for _, c := range []struct {
		late map[string]int64
		want LatenessP99
	}{
		{map[string]int64{}, LatenessP99{}},
		{map[string]int64{"5": 98, "250": 1, "inf": 1}, LatenessP99{UpTo: 250 * time.Millisecond, Count: 100}},
		{map[string]int64{"5": 99, "inf": 1}, LatenessP99{UpTo: 5 * time.Millisecond, Count: 100}},
		{map[string]int64{"25": 1}, LatenessP99{UpTo: 25 * time.Millisecond, Count: 1}},
		{map[string]int64{"5": 1, "inf": 1}, LatenessP99{UpTo: 300 * time.Second, Over: true, Count: 2}},
	} {
		if got := p99Of(c.late); got != c.want {
			t.Errorf("p99Of(%v) = %+v, want %+v", c.late, got, c.want)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{-1, ""}, {0, "5"}, {5 * time.Millisecond, "5"}, {6 * time.Millisecond, "10"}, {time.Hour, "inf"}} {
		if got := latenessClass(c.d); got != c.want {
			t.Errorf("latenessClass(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}
