// Package balance answers the two questions of spreading work over shards:
// how many shards there are (M), and which shard a scanner goroutine visits
// next.
//
// # How many
//
// A Source reports M and the high-water mark: the largest M that may still
// have messages in its shards. Static is the fallback when no Consul is
// configured: M never changes, so the high-water mark is M. (The Consul KV
// watcher of a later release implements the same interface.)
//
// # Which next
//
// Cursor turns one Redis INCR on the namespace's cursor key into a shard
// index modulo the shards to cover (the high-water mark, so shards retired
// by a smaller M are still drained). Goroutines of all scanner processes
// share the counter, so consecutive visits go to consecutive shards and
// every shard is visited once per round of the counter, whatever the number
// of processes and goroutines.
//
// # Non-guarantees
//
// The cursor spreads visits, it does not lock shards: two goroutines may
// visit the same shard at once (the claim script makes that safe). If Redis
// is unreachable, Next returns the error; the caller backs off.
package balance
