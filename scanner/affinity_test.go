package scanner

import "testing"

// TestOwnerOfSpreadsAndMovesLittle: rendezvous hashing gives each of 3
// processes about a third of 64 shards, and a fourth one that joins takes
// only shards from the others (about a quarter), moving none between them.
func TestOwnerOfSpreadsAndMovesLittle(t *testing.T) {
	three := []string{"0a1b2c3d4e5f6071", "9f8e7d6c5b4a3920", "13579bdf02468ace"}
	four := append(append([]string{}, three...), "fedcba9876543210")
	count := map[string]int{}
	moved := 0
	for i := range 64 {
		o3, o4 := ownerOf(three, i), ownerOf(four, i)
		count[o3]++
		if o3 != o4 {
			moved++
			if o4 != four[3] {
				t.Errorf("shard %d moved from %s to %s, not to the newcomer", i, o3, o4)
			}
		}
	}
	for _, id := range three {
		if count[id] < 12 || count[id] > 32 {
			t.Errorf("%s owns %d of 64 shards: %v", id, count[id], count)
		}
	}
	if moved < 8 || moved > 26 {
		t.Errorf("a fourth process took %d of 64 shards, want about 16", moved)
	}
	a := &affinity{self: three[0]}
	if !a.owns(5) {
		t.Error("without a membership a process owns every shard")
	}
	a.live.Store(&three)
	owned := 0
	for i := range 64 {
		if a.owns(i) {
			owned++
		}
	}
	if owned != count[three[0]] {
		t.Errorf("owns %d, ownerOf says %d", owned, count[three[0]])
	}
}
