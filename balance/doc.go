// Package balance answers the two questions of spreading work over shards:
// how many shards there are (M, and which shards may still hold messages),
// and which shard a scanner goroutine visits next.
//
// # How many
//
// M comes from a Counter: Static (DELAYQ_SHARDS), or a ConsulWatcher that
// follows a Consul KV key with blocking queries (a change arrives in
// milliseconds; each watcher holds one connection to the agent). A
// one-shot process reads the key once with ReadShardCount instead: a
// blocking query stays open on the agent for its wait time (30 s) after
// its client has gone, and the agent refuses an address holding more than
// http_max_conns_per_client (200) connections. Layout wraps the Counter for scanners and producers and
// adds the high-water mark, recorded in Redis (shard.Layout):
//
//   - Every Layout records the M it uses, raising the mark to at least M at
//     once, so scanners cover every shard any producer writes to.
//   - Messages stay in the shard they were written to. When M shrinks below
//     k, shard k is retired: producers stop writing to it, but scanners keep
//     visiting every shard below the mark, so its messages are still
//     published on time. A scanner's Layout lowers the mark only when M has
//     stayed the same for the grace period (30 s) and every shard in
//     [M, mark) is empty (nothing scheduled, in flight or dead: dead
//     messages in a retired shard keep it covered until purged or redriven).
//   - Every shard.Producer pins the M it writes under (whatever its
//     Counter: a Layout or a Static M) before it writes, and renews the pin
//     while it writes; the mark never comes down below a pinned M. So a
//     producer that learns a smaller M late, or is configured with a larger
//     static M than the fleet's, still writes only to covered shards.
//     Scanners also sweep every shard below the largest M ever recorded
//     every 10 s and raise the mark over any message they find.
//   - Cancel, reschedule and inspect look in the id's current shard first,
//     then in every shard below the mark; enqueue looks in the shards the
//     other recorded Ms (shard.Layout.Used) put the id in (shard.Producer).
//     A scanner's Layout sweeps the ids of every shard once a minute while
//     more than one M is recorded, and has the layout forget the older Ms
//     once every message is where the current M puts it (Settle).
//
// # When Consul is unreachable or wrong
//
// A bad value (not a whole number, outside 1..MaxShards, empty) or a
// deleted key is logged as an error naming the key and the value, and the
// last good M stays in force. While Consul is down the watcher keeps the
// last good M and retries with backoff. At start, before any answer, M is
// the last value read from Consul by any process (mirrored in Redis with
// its ModifyIndex); failing that, a scanner falls back to DELAYQ_SHARDS and
// logs loudly, while a producer refuses to enqueue (ErrShardCountUnknown)
// rather than guess an M smaller than the one in use.
//
// # Which next
//
// Cursor turns one Redis INCR on the namespace's cursor key into a shard
// index modulo the high-water mark. Goroutines of all scanner processes
// share the counter, so any run of `mark` consecutive INCRs visits every
// shard exactly once: each shard is visited once per round of the cursor,
// whatever M, the number of processes and of goroutines. (Scanners also go
// straight to shards they know are due, see package scanner; that adds
// visits, it never removes one.)
//
// # Fleet
//
// With Consul, every scanner registers as service "delayq-scanner" (tag:
// namespace) with a TTL check it keeps passing and deregisters on
// shutdown; Fleet lists them for `delayq shards`.
//
// # Non-guarantees
//
// The cursor spreads visits, it does not lock shards: two goroutines may
// visit the same shard at once (the claim script makes that safe). If Redis
// is unreachable, Next returns the error and the caller backs off. While
// Redis refuses writes at its memory limit (shard.ErrRedisFull), Next
// counts on a counter of its own process and the Layout reads the mark it
// cannot record, covering M at least: the scanners go on delivering,
// which is what frees memory.
package balance
