package scanner

import (
	"testing"

	"github.com/delayq/delayq/shard"
)

// backlogOf is what a scan would learn: n messages of class c in shard 0,
// the earliest due at head.
func backlogOf(c string, n, head int64) map[string][]shard.Held {
	return map[string][]shard.Held{c: {{Shard: 0, Count: n, HeadMs: head}}}
}

// TestStrideScheduler: while both wait, weights 3:1 take turns 3:1 (by
// messages); a strict class goes first whatever its weight; a class of
// weight 0 only when no other waits; a class back from idle starts at the
// smallest pass (it banks nothing); a turn that found less gives back
// its charge.
func TestStrideScheduler(t *testing.T) {
	f := newFairControl(160)
	f.set([]shard.Class{
		{Name: "heavy", Topics: []string{"h"}, Weight: 3},
		{Name: "light", Topics: []string{"l"}, Weight: 1},
		{Name: "first", Topics: []string{"f"}, Strict: true},
		{Name: "last", Topics: []string{"z"}, Weight: 0},
	})
	f.learn(backlogOf("heavy", 1_000_000, 1))
	f.learn(backlogOf("light", 1_000_000, 1))
	f.learn(backlogOf("last", 1_000_000, 0))
	got := map[string]int{}
	for range 4000 {
		tn, ok := f.pick(10)
		if !ok {
			t.Fatal("nothing picked")
		}
		got[tn.class] += tn.want
		f.done(tn, tn.want, nil)
	}
	if r := float64(got["heavy"]) / float64(got["light"]); r < 2.99 || r > 3.01 || got["last"] != 0 {
		t.Errorf("turns: %v (%.3f:1), want 3:1 and nothing of weight 0", got, r)
	}
	f.learn(backlogOf("first", 5, 2))
	if tn, _ := f.pick(10); tn.class != "first" || tn.want != 5 {
		t.Errorf("with a strict class waiting: %+v", tn)
	}
	// Idle a long while, light comes back at the smallest pass: it gets
	// its share from then on, not the turns of its idle spell.
	f.learn(map[string][]shard.Held{"first": {{Shard: 0}}, "light": {{Shard: 0}}})
	for range 1000 {
		tn, _ := f.pick(10)
		f.done(tn, tn.want, nil)
	}
	f.learn(backlogOf("light", 1_000_000, 1))
	got = map[string]int{}
	for range 40 {
		tn, _ := f.pick(10)
		got[tn.class] += tn.want
		f.done(tn, tn.want, nil)
	}
	if got["light"] > 110 || got["heavy"] < 290 {
		t.Errorf("after light's idle spell, 40 turns: %v, want about 3:1", got)
	}
	// A turn that found nothing gives its charge back: the next turn is
	// the same class's.
	tn, _ := f.pick(10)
	f.done(tn, 0, nil)
	if again, _ := f.pick(10); again.class != tn.class {
		t.Errorf("after an empty turn of %s the next went to %s", tn.class, again.class)
	}
	// Weight 0 goes when nothing else waits.
	f.learn(map[string][]shard.Held{"heavy": {{Shard: 0}}, "light": {{Shard: 0}}})
	if tn, _ := f.pick(10); tn.class != "last" || !tn.apart {
		t.Errorf("with only weight 0 waiting: %+v", tn)
	}
}
