package scanner

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The heap agrees with a scan of the heads after any sequence of sets
// (new shards, earlier and later heads) and removals.
func TestHeadHeapAgreesWithScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHeadHeap()
	heads := map[int]int64{}
	for step := range 20_000 {
		i := rng.IntN(64)
		if rng.IntN(3) == 0 {
			h.remove(i)
			delete(heads, i)
		} else {
			due := rng.Int64N(1000)
			h.set(i, due)
			heads[i] = due
		}
		wantDue := int64(math.MaxInt64)
		for _, d := range heads {
			wantDue = min(wantDue, d)
		}
		got, gotDue := h.earliest()
		if gotDue != wantDue || (got >= 0 && heads[got] != gotDue) || (got < 0) != (len(heads) == 0) {
			t.Fatalf("step %d: earliest = shard %d due %d; want due %d of %v", step, got, gotDue, wantDue, heads)
		}
		if h.Len() != len(heads) || len(h.pos) != len(heads) {
			t.Fatalf("step %d: heap holds %d (%d positions), want %d", step, h.Len(), len(h.pos), len(heads))
		}
	}
}
