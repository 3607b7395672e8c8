package scanner

import (
	"container/heap"
	"math"
)

// headHeap orders the shards the due board knows by their heads' due
// times, so the earliest is found in O(1) and kept in O(log M) per change
// (M goes up to balance.MaxShards; a scan per hand-out would not do).
type headHeap struct {
	items []headItem
	pos   map[int]int // shard -> its index in items
}

type headItem struct {
	shard int
	due   int64
}

func newHeadHeap() *headHeap { return &headHeap{pos: map[int]int{}} }

// set records or moves shard i's head.
func (h *headHeap) set(i int, due int64) {
	if p, ok := h.pos[i]; ok {
		h.items[p].due = due
		heap.Fix(h, p)
		return
	}
	heap.Push(h, headItem{shard: i, due: due})
}

// remove forgets shard i, if known.
func (h *headHeap) remove(i int) {
	if p, ok := h.pos[i]; ok {
		heap.Remove(h, p)
	}
}

// earliest returns the shard with the earliest head and its due time, or
// -1 and MaxInt64 when none is known.
func (h *headHeap) earliest() (int, int64) {
	if len(h.items) == 0 {
		return -1, math.MaxInt64
	}
	return h.items[0].shard, h.items[0].due
}

// heap.Interface; use set, remove and earliest instead.

func (h *headHeap) Len() int           { return len(h.items) }
func (h *headHeap) Less(a, b int) bool { return h.items[a].due < h.items[b].due }
func (h *headHeap) Swap(a, b int) {
	h.items[a], h.items[b] = h.items[b], h.items[a]
	h.pos[h.items[a].shard], h.pos[h.items[b].shard] = a, b
}

func (h *headHeap) Push(x any) {
	it := x.(headItem)
	h.pos[it.shard] = len(h.items)
	h.items = append(h.items, it)
}

func (h *headHeap) Pop() any {
	it := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.pos, it.shard)
	return it
}
