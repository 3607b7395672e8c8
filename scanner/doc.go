// Package scanner is the worker of a scanner pod: goroutines that claim due
// messages from the shards, publish them to RabbitMQ and settle them.
//
// # The loop (per goroutine)
//
//  1. Wait until the publisher is ready (connected, not blocked): nothing
//     is claimed that cannot be published.
//  2. Take the next shard from the shared INCR cursor (balance.Cursor).
//  3. Claim up to ClaimBatch messages; while the claim reply says more are
//     due there (it reads one entry past the batch: the new head), claim
//     again, up to VisitBudget claims per visit. Claims go through the
//     process's claimer, which sends the claims that all goroutines ask for
//     meanwhile in pipelined round trips (two under way at once); each
//     stays its own atomic script call of at most ClaimBatch messages, so
//     batch 1 is still the classic claim, but Redis and the scanner pay a
//     read and a write syscall per round trip instead of per claim.
//  4. For each message: decode, route (router) and publish; then claim
//     again at once, without waiting for the confirm. Before each claim
//     the goroutine takes k places in the process's window
//     (Config.Window) of claimed, unsettled messages and gives back what
//     the claim did not fill; a message frees its place once settled. So
//     no claimed message waits for a place while its lease runs, and at k
//     = 32 the default window of 160 keeps at most 5 claims in flight,
//     not one per goroutine. Each confirm is settled on the goroutine
//     that reads its channel's confirms (settle.go: no goroutine waits
//     per message): a confirmed message's lease goes to the ack batcher,
//     which acks every 10 ms or 1,024 leases, all shards in one round
//     trip (one script call for them all on a single Redis server, one a
//     shard on Redis Cluster), and sends an ack that failed again until
//     Redis answers; a publish unconfirmed past PublishTimeout
//     is taken by the confirm watch, and what failed goes to the failure
//     settlers, which call Redis. One that failed for now (connection
//     lost, timeout) is released: due again after RetryDelay, doubled for
//     each earlier attempt up to MaxRetryDelay, with jitter, as a
//     redelivery. One the broker refused (nack, returned as unroutable,
//     exchange missing) is retried the same way until MaxRefusals, then
//     dead-lettered with the broker's reason. What can never be delivered
//     (corrupt envelope, no route) is dead-lettered before publishing,
//     and so is a message claimed past its deadline
//     (shard.Message.ExpiresAt, MaxLateness; reason expired), by the
//     Redis clock of its claim: late for any cause (an outage of the
//     fleet, a failed publish's retry), it is never published. When
//     confirms slow down, the window fills and workers stop claiming:
//     backpressure, not expired leases.
//  5. A visit that leaves its shard with nothing due ends in the idle
//     state, once the process has had a claim reply from every shard
//     (before that, after a whole round of the cursor found nothing). Idle
//     goroutines wait on the process's due board: the head due times that
//     claim replies report, and that the enqueue and reschedule scripts
//     announce on a Pub/Sub channel whenever a shard gets a new head. The
//     board's dispatcher hands each due shard to exactly one idle
//     goroutine, in rounds at most one per millisecond (heads that fall
//     due meanwhile share the next round's pipelined claims and socket
//     writes), so a message enqueued into an idle fleet is published
//     within milliseconds of its due time, and a fleet that keeps up makes
//     at most one claim per due head instead of polling.
//     With several processes, each takes the wake-ups of its own share of
//     the shards (affinity.go: a membership in Redis renewed every second,
//     rendezvous hashing), so a due head is claimed once, not once per
//     process; a process still records a shard it does not own when its
//     own claim finds work due there (an owner behind or dead), watches
//     every shard's lease deadlines, and takes over a departed process's
//     shards at its next heartbeat (2-3 s after a crash, within 1 s of a
//     stop).
//     Because Pub/Sub is best effort, the dispatcher also sends one idle
//     goroutine per process to visit a shard from the cursor every
//     PatrolInterval (about 5 Redis commands per interval per process,
//     counting the claim script's own, whatever M and the number of
//     goroutines). After a reconnect to Redis (the subscription made
//     again, or a claim that succeeds after one failed), a process sweeps
//     the shards it covers: each goes on its board as due now, one claim
//     a shard (sweep.go), since the notices sent meanwhile are lost.
//  6. While a visit ends at its budget with messages still due (a
//     backlog), the goroutine stays busy: every other visit goes to a shard
//     the board knows is due (free goroutines converge on a hot shard); the
//     others follow the cursor, so every shard is still visited each round.
//
// Expired leases are re-queued by the claim script itself whenever a shard
// is visited, so there is no separate reaper to run or to forget; a claim
// reply also says when the shard's next lease expires, and the due board
// treats that as work due then, so the messages of a crashed scanner come
// back when their lease expires, not when a patrol happens by. A claim
// whose reply was lost (Redis killed after it ran the claim, a connection
// cut) does not wait for its lease: each claimer goroutine claims as a
// shard.Claimant and presents the receipts of its lost claims before its
// next round trip (claimer.go), which makes those messages due at once
// (delayq_claims_recovered_total).
//
// # Flow control at release
//
// In a namespace with limited or paused topics (shard.Flow), the claims set
// those topics' due messages apart in their held sets, so the rest flows on
// time (no head-of-line blocking). Three more goroutines of the claims
// stage serve them (flow.go): one reads the flows every 250 ms; one sets
// those topics' messages apart up to 2 s before they fall due (preHold,
// every 250 ms over every shard, from a cursor the fleet shares in Redis,
// only while a topic is limited or paused; script calls of at most 64
// entries, two shards a round trip, so Redis is never held for more than
// about a millisecond and the claims interleave), so the claims rarely meet
// a limited backlog at its due time; and the releaser takes grants from
// each topic's bucket for the whole fleet and claims that many held
// messages, earliest first, publishing them as a worker does. The releaser
// has a publish window of its own, as large as the claims' (Config.Window),
// so a releaser waiting for room never queues ahead of a claim; it takes
// its places before the grant, so a grant is used at once and the releases
// keep the bucket's spacing; each message says when it was granted
// (x-delayq-released-ms). Their lateness is delayq_flow_lateness_seconds,
// by topic, kept out of the fleet's lateness histograms, so the fleet's
// lateness alert does not fire for a limit the operator chose. The routes
// file's rate and burst are stored at start (cmd/delayq).
//
// # Fair release across classes
//
// In a namespace with release classes (shard.Class), the claims go through
// shard.Store.ClaimFair: a shard whose earliest due message is more than
// half a second late (or whose class backlogs hold anything) is behind,
// and its claims set its due messages apart into their classes' backlogs
// instead of leasing them. More goroutines of the claims stage serve them
// (fair.go): one reads the classes every 250 ms, and two releasers take
// turns from the process's stride scheduler (strict classes first, then
// the weighted class with the smallest pass, weight 0 last) and release
// up to half the window of that class, earliest first, publishing as a
// worker does, from a window of their own as large as the claims'. Each
// process learns what waits from its own claims at once and from a scan
// of every shard's backlogs each second; each keeps the shares itself,
// so the fleet keeps them without a leader (fair.go says why that is the
// same as one shared table). Their lateness is
// delayq_class_lateness_seconds by class, and the fleet's too, except a
// class of weight 0, whose lateness is chosen. The routes file's classes
// are stored at start (cmd/delayq).
//
// # Tracing
//
// With a Tracer (Deps.Tracer, from the OTEL_* variables), each claimed
// message gets a publish span in a new trace linked to the producer's
// context stored in its traceparent header (trace.go; the design is in
// package tracing); the span's context replaces that header in what is
// published, its events say how the message was settled, and the
// lateness histogram carries its trace id as an exemplar. Without one,
// nothing is started and the stored headers are published as they came.
// Saturated dispatch with tracing off is 102 % of the build before
// tracing; on, with every message sampled and exported, 80 % of it and
// about 59 µs more CPU a message on the machine (scripts/bench.sh -only
// tracing, BEFORE=the commit before, two shared cores, three rounds).
//
// # Guarantees
//
//   - Never early: the claim script compares due times with Redis TIME.
//   - At least once: a message is deleted from Redis only after the broker
//     confirmed it. If the process dies at any point between claim and ack,
//     the lease expires and another scanner publishes it again, with
//     x-delayq-attempt raised.
//   - A message the broker refuses (returned as unroutable, nacked) is
//     never acked as delivered; after MaxRefusals it goes to the dead set
//     with the broker's reason. An outage (connection lost, blocked,
//     timeout) never dead-letters anything.
//   - Nothing is logged and dropped: a failure either settles the message
//     (dead, released) or leaves it leased to come back.
//
// # Non-guarantees
//
// Exactly-once: after a lease expiry, a message is published again;
// consumers dedupe on message_id. (An ack that fails is sent again until
// Redis answers, so it costs a duplicate only if the process dies first.) Ordering between
// messages is not preserved.
//
// # Lifecycle
//
// New, Start(ctx), Stop(ctx); Stop documents the shutdown order. The
// caller owns the Redis client and the publisher and closes them after Stop.
package scanner
