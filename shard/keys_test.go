package shard_test

import (
	"testing"

	"github.com/delayq/delayq/shard"
)

// TestOfIsStable pins ids to shards. If this test fails, the hash changed
// and every message already in Redis would be looked up in the wrong shard:
// do not "fix" the expectations.
func TestOfIsStable(t *testing.T) {
	for _, c := range []struct {
		id            string
		m16, m64, m1k int
	}{
		{"", 5, 37, 37},
		{"a", 12, 12, 996},
		{"order-42", 4, 20, 4},
		{"order-43", 7, 7, 215},
		{"user:7:trial-end", 7, 7, 319},
		{"ünïcode", 11, 43, 171},
	} {
		if got := [3]int{shard.Of(c.id, 16), shard.Of(c.id, 64), shard.Of(c.id, 1000)}; got != [3]int{c.m16, c.m64, c.m1k} {
			t.Errorf("Of(%q, 16/64/1000) = %v, want %v", c.id, got, [3]int{c.m16, c.m64, c.m1k})
		}
	}
	if shard.Of("anything", 1) != 0 || shard.Of("anything", 0) != 0 {
		t.Error("with one shard (or none) everything is shard 0")
	}
}

// TestOfSpreadsEvenly checks that sequential business keys, the usual case,
// spread over shards within 5% of the mean.
func TestOfSpreadsEvenly(t *testing.T) {
	for _, m := range []int{2, 16, 64, 100} {
		counts := make([]int, m)
		const n = 200000
		for i := range n {
			counts[shard.Of("order-"+itoa(i), m)]++
		}
		mean := float64(n) / float64(m)
		for s, c := range counts {
			if d := (float64(c) - mean) / mean; d > 0.05 || d < -0.05 {
				t.Errorf("m=%d: shard %d has %d ids, mean %.0f", m, s, c, mean)
			}
		}
	}
}

func itoa(i int) string {
	var b [20]byte
	p := len(b)
	for {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[p:])
		}
	}
}

func TestKeysShareHashTag(t *testing.T) {
	k := shard.ShardKeys("ns", 7)
	for _, key := range []string{k.Due, k.Msg, k.Inflight, k.Attempts, k.Dead, k.Reason} {
		if want := "delayq:{ns:7}:"; key[:len(want)] != want {
			t.Errorf("key %q lacks hash tag prefix %q", key, want)
		}
	}
}

func TestParseNotice(t *testing.T) {
	s, d, err := shard.ParseNotice("12:1700000000123")
	if err != nil || s != 12 || d != 1700000000123 {
		t.Fatalf("ParseNotice = %d, %d, %v", s, d, err)
	}
	for _, bad := range []string{"", "12", ":5", "x:5", "-1:5", "3:x"} {
		if _, _, err := shard.ParseNotice(bad); err == nil {
			t.Errorf("ParseNotice(%q) accepted", bad)
		}
	}
}
