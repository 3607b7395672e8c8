// Package shard owns delayq's Redis layout: key names, the id→shard hash,
// the envelope codec, every Lua script with its Go wrapper (Store), and the
// producer SDK (Producer). Nothing else in delayq builds a Redis key, and
// only Store runs scripts, all through one path (Store.run: pipelined
// EVALSHA, resent once by EVAL after NOSCRIPT).
//
// # Layout
//
// A namespace ns has M shards. Shard i is eight keys (and a few more for
// flow control, schedules and claim receipts) sharing the hash tag
// {ns:i}, so each script runs in one Redis Cluster slot:
//
//	delayq:{ns:i}:due       ZSET  id -> due time (unix ms, Redis clock)
//	delayq:{ns:i}:msg       HASH  id -> envelope (see AppendEnvelope)
//	delayq:{ns:i}:inflight  ZSET  id -> lease deadline (unix ms), also the lease token
//	delayq:{ns:i}:attempts  HASH  id -> "<redeliveries>:<scheduled ms>[:<refusals>]" once claimed
//	                              (a bare count from older versions; absent = 0)
//	delayq:{ns:i}:dead      ZSET  id -> when it was dead-lettered
//	delayq:{ns:i}:reason    HASH  id -> why
//	delayq:{ns:i}:counters  HASH  enqueued, published, dead -> messages ever created,
//	                              acked after a confirm, dead-lettered in the shard;
//	                              late:<ms> -> publishes of that lateness bucket (rates.go)
//	delayq:{ns:i}:cancelled ZSET  id -> until when an enqueue of id is refused (a
//	                              cancel that came first: Producer.CancelAhead);
//	                              the key expires with its last entry
//	delayq:{ns:i}:held:<topic>  ZSET  under flow control: id -> due (HeldKey)
//	delayq:{ns:i}:prehold       HASH  under flow control: PreHold's cursor
//	delayq:{ns:i}:class:<name>  ZSET  behind, with release classes: id -> due (BacklogKey)
//	delayq:{ns:i}:schedule:<name> HASH a recurring schedule (ScheduleKey)
//	delayq:{ns:i}:claimed:<claimant>:<n> STRING what a claim leased, expiring
//	                              with the lease (receipts.go)
//
// plus the namespace's shard cursor (CursorKey), layout (LayoutKey: the
// high-water mark, every M used, producers' pins), wake-up channel
// (WakeChannel), live scanner processes (ScannersKey: who takes which
// shards' wake-ups), ended console sessions (SessionEndedKey), the
// registry of recurring schedules (ScheduleRegistryKey), the topics in
// use (TopicsKey) and the samples of the fleet's counters (RatesKey). A message lives in shard Of(id, M): FNV-1a 64 of the
// id, modulo M, pinned by a test so it never changes.
//
// An envelope is versioned by its first byte (AppendEnvelope): v1 holds
// string headers only; v2 adds every AMQP property and typed header values.
// v1 is still written when it suffices and both are read. envelope.go
// describes the format, encode.go writes it and decode.go reads it.
//
// # Life of a message
//
// Enqueue writes the envelope and the due score (a delay is added to the
// Redis clock, so producer clocks do not matter), refusing a duplicate id.
// Claim takes up to k due ids with ZRANGEBYSCORE … LIMIT 0 k plus
// ZREMRANGEBYRANK … 0 k-1 and leases them in the same call; the scanner
// publishes and, after the broker confirms, Ack deletes the message. A
// publish that fails for now is Released (due again shortly, as a
// redelivery), one the broker refused is Refused (the same, until the
// limit of refusals sends it to the dead set); one that can never succeed
// is dead-lettered with a reason. Every delivery carries the time the
// message was scheduled for (Claimed.DueMs), also after a redelivery.
// Cancel, Reschedule and Inspect work by id in O(log N).
//
// # Guarantees
//
//   - Never early: every script reads "now" from Redis TIME; nothing is
//     claimed before its score.
//   - At least once: a claimed message is deleted only by Ack with its
//     lease token. If the scanner dies, the lease expires and the next claim
//     of that shard re-queues it at its scheduled time (the reaper is part
//     of the claim script, so a visited shard cannot strand a lease), with
//     its attempt count raised. Each claim re-queues at most MaxReap and
//     reports the shard's next lease deadline (ClaimResult.LeaseHeadMs), so
//     a scanner knows when a shard has expired leases, as it knows its head.
//   - A lost reply is not a lost lease: a claim whose reply never came
//     back (Redis killed after running it, a connection cut) leaves its
//     Claimant a receipt, and Recover puts those messages back as due at
//     once (receipts.go). Claims are never sent twice by the Redis client.
//   - Covered: every Producer pins the M it writes under (PinLayout), so
//     the high-water mark scanners cover never drops below a shard it
//     writes to, whatever M it was given.
//   - Bounded: each script does O(k log N) work for a batch of k; none scans
//     a whole set.
//   - Atomic: each script is one Redis transaction; there is no state in
//     which a message is in no set.
//   - Full is not lost: at maxmemory with noeviction Redis refuses a
//     script at its first write, never in the middle, so an enqueue fails
//     whole with ErrRedisFull (naming the limit); the claim, ack, release
//     and dead-letter scripts begin with a delete, which Redis never
//     refuses, so deliveries go on and free memory.
//   - Settings are checked: a Producer's first call reads every master's
//     maxmemory-policy, memory and persistence (RedisServers) and refuses
//     a policy that can evict messages (CheckRedis, ErrUnsafeRedis);
//     redisconf.go has the table of verdicts.
//
// # Non-guarantees and deliberate differences from the design notes
//
//   - Ack does not remove a re-queued copy from the due set. It cannot tell
//     such a copy from a new message that reuses the id, and deleting that
//     one would lose it. The cost is one duplicate after a lease expiry;
//     consumers dedupe on message_id anyway.
//   - Ids are unique per shard by the scripts; across the shards of two
//     different Ms (a resize), the Producer looks the id up first, in a
//     second step: two producers enqueueing one id at the same moment
//     under different Ms can both succeed.
//   - Wake-up notices are Redis Pub/Sub: best effort. Notices published
//     while the subscription reconnects are lost; Notices.Next says when it
//     subscribed again, and the scanners then sweep their shards. A notice
//     lost otherwise makes a message late by at most the scanners' idle
//     patrol of the shards; never lost.
//   - Durability is Redis's: with appendfsync always an acknowledged enqueue
//     survives a Redis crash; with everysec up to a second can be lost. A
//     failover to a replica loses what the replica had not received, unless
//     the Store waits for replicas (WithReplicas: Redis WAIT after every
//     acknowledged write, ErrNotReplicated when too few confirm).
//
// # Recurring schedules
//
// A schedule (Schedule: a name, a spec in a time zone, optional start,
// end and count, a missed-run policy, and the message to publish) fires
// each occurrence as an ordinary message of its shard, with the id
// OccurrenceID(name, time) = name@<unix ms> and the headers
// x-delayq-schedule and x-delayq-nominal-ms. There is no scheduler
// process, no leader and no lock: a schedule's next occurrence is itself
// a due entry, so an idle schedule costs what a pending message costs (its
// HASH besides), and the claims that publish messages fire schedules.
//
//   - Where: the registry (ScheduleRegistryKey, HASH name -> shard, in the
//     namespace's slot) gives each name one shard for good, set by HSETNX
//     to Of(name, M) at its creation, so producers under different Ms
//     never make two schedules of one name. Everything else of the
//     schedule is in that shard's slot: its HASH (fields listed in
//     schedulescripts.go) and its occurrences, so every script touches
//     one slot (Redis Cluster).
//   - Firing (FireOccurrence, scheduleFireScript): a scanner that claims
//     an occurrence fires it before it publishes it. The occurrence
//     carries its schedule's rule (OccurrenceRef), so the scanner plans
//     without reading the schedule (package schedule: the next time, and
//     what the missed-run policy does); one script call, checking the
//     caller's lease, the schedule's version and that this occurrence is
//     the schedule's pending one, records the firing and adds the next
//     occurrence (and the missed ones the policy publishes). So the next
//     one exists before this one is published; a crash anywhere after the
//     claim loses nothing (the lease brings the occurrence back, and its
//     second firing finds the schedule moved on and only publishes it,
//     under the same id), and racing scanners publish one message per
//     occurrence. A version that changed meanwhile makes the scanner plan
//     again with the reply's rule.
//   - Changes (UpsertSchedule, PauseSchedule, ResumeSchedule,
//     scheduleWriteScript) compare and set the version. A pending
//     occurrence that is due or in flight is being fired and stays: it is
//     published under the old definition and its firing goes on with the
//     new one from the time of the change; one not yet due is replaced by
//     the new definition's next. So a change never doubles or drops an
//     occurrence. A pause removes the pending occurrence (one being fired
//     is published); a resume applies the missed-run policy to what fell
//     in the pause.
//   - Missed runs: an occurrence fired more than its grace (default 1 m)
//     after its time is missed; the policy publishes none of the missed
//     ones (skip, the default), the latest once, or each up to a bound
//     (all), and goes on with the first occurrence not missed. A fleet
//     that was down, a pause, and Redis restored from an old backup are
//     the same case.
//
// Not guaranteed: an occurrence is found by id (Cancel, Inspect) only in
// its schedule's shard, which its id does not hash to; the schedule's
// operations reach it. Removing a schedule's pending occurrence by other
// means (a bulk cancel matching name@) stops the schedule until it is set
// again (UpsertSchedule finds its pending occurrence gone and makes the
// next). A schedule's occurrences are not rate limited as a group beyond
// their topic's limit.
//
// # Flow control at release
//
// A topic may have a rate limit (messages a second for the whole fleet,
// and a burst) and a pause (until resumed, or until a time): its Flow,
// kept in the namespace's HASH delayq:{ns}:flow (FlowKey) and changed
// only by SetLimit, SetRoutesLimit, Pause and Resume. Every scanner
// process reads it every 250 ms, so a change reaches every claim within
// that time. Deadlines (Message.ExpiresAt, MaxLateness) and bulk cancel
// and reschedule by filter (BulkCancel, BulkReschedule) are the other
// parts of flow control.
//
// No head-of-line blocking: when topics are limited or paused, the claim
// (ClaimHolding, claimHoldScript) takes those topics as ARGV and their
// per-shard held sets, delayq:{ns:i}:held:<topic> (HeldKey: ZSET id ->
// due, in the shard's slot), as KEYS; it reads each due entry's topic
// from its envelope (the version byte, a varint, then the topic's length
// and bytes), moves an entry of a held topic into its held set instead of
// leasing it, at most 128 a call, and goes on to the next: a shard whose
// earliest entries belong to a limited topic still releases every other
// topic's messages on time. With no limited topic the claim is the plain
// claim script, at the same cost.
//
// Setting apart ahead: stepping over a limited backlog at the due time
// would still cost the messages behind it the time it takes (about 8 us
// of Redis per entry). So the scanners also set controlled topics'
// entries apart up to 2 s before they fall due (PreHold, preHoldScript):
// from a per-shard cursor in Redis, delayq:{ns:i}:prehold (PreHoldKey:
// HASH score, id), that whichever scanner runs it next goes on from, so
// the fleet reads each entry about once; a held entry not yet due waits
// for its time (ClaimHeld takes only due ones; Inspect says scheduled;
// FlowStatus counts only due ones as held back). What is enqueued behind
// the cursor is set apart by the claim. Not guaranteed: List, Browse and
// the shard counts do not show a controlled topic's messages in the 2 s
// before they fall due; the load a limited topic's releases add still
// raises other topics' lateness on shared cores. Figures (scripts/bench.sh
// -only flow, two shared cores, three rounds): a topic at 25 % of
// saturated dispatch (k = 1) has a p99 lateness of 10-14 ms alone; beside
// a 54,000-message backlog of a topic limited to 50 % (released at 99.4 %
// of its limit) 28-94 ms, beside the same work with no limit 48-115 ms,
// beside the backlog due at one instant 44-116 ms. So the limit costs the
// other topics nothing beyond its work's share of the cores; at 75 % of
// saturated dispatch, that share is what two cores have to give.
//
// Held messages go out at their topic's rate with no leader: a token
// bucket per topic in a slot of its own (delayq:{ns:flow:<topic>}:bucket,
// refilled by the Redis clock, TakeGrant) grants each process's releaser
// what the limit allows, and a log of the grants of the last window caps
// them at rate + burst, so in any window the fleet releases at most
// rate + burst of the topic, however many processes and shards. The
// window (Flow.Window) is longer than a second, (rate + burst) / rate
// seconds between 1.05 and 1.25, so that the spread of delivery latency
// does not crowd more than a second's releases into one of a consumer's
// seconds; with a burst below a twentieth of the rate, the steady pace is
// rate / 1.05. Each released message carries the grant's time
// (HeaderReleasedMs). A releaser
// claims from the held sets with the earliest heads it knows (ClaimHeld:
// due order exact within a shard, close across shards), leasing as the
// claim does, never before the due time, and gives back (Refund) what it
// could not use. A paused topic gets no grant until its pause ends by the
// Redis clock. A lease that expires puts a held message back in the due
// set, where the next claim holds it again: a crash never publishes more
// than the limit. Deadlines apply when a message is released, so a limit
// or a pause that makes a message miss its deadline expires it. Cancel,
// Inspect (StateHeld) and Reschedule find a held message from its
// envelope's topic. FlowStatuses says what each topic holds back.
//
// A flow that controls nothing any more (no limit, no pause) is removed
// by a scanner once nothing of it has been held for a few seconds. The
// bulk cancel and reschedule by filter read the held sets too (bulk.go).
//
// # Seeing the load
//
// What is about to fall due (profile.go: ZCOUNTs per shard and bucket; one
// topic's share from a bounded sample of envelopes) and the fleet's pace
// (rates.go: counters the scripts keep in each shard, sampled by whichever
// process comes first each interval) are read without a scan of the
// messages and without a leader; both docs say what they cost.
//
// # The far-future tier
//
// Most of what a busy namespace holds is due far ahead (trial ends,
// renewals, reminders days out), and today every pending message costs a
// ZSET entry and a hash field: 358 bytes with a 100-byte body. A message
// due beyond a horizon H (a setting; 1 h unless measurement says
// otherwise) will instead be stored compactly until it comes near, then
// promoted into the due ZSET and msg hash above, so the claim, ack and
// every script of the hot path stay as they are.
//
// Layout, per shard i (every key with the shard's hash tag {ns:i}, so a
// shard's far messages share its Redis Cluster slot):
//
//	far:<b>     LIST of records of bucket b (due in [b*W, (b+1)*W), W about
//	            10 min), appended raw, each: varint length, the id with its
//	            length, varint due offset in the bucket, varint sequence,
//	            envelope (farrecord.go: the codec, built and fuzzed)
//	farz:<b>    LIST of the same records compressed, blocks of 256 (zstd)
//	fidx:<h>    HASH id -> "<b>:<seq>" for the ids whose hash is h mod K:
//	            listpacks of about 100 ids (K set per namespace)
//	fardir      ZSET b -> bucket start: the buckets that exist
//	farmeta     HASH seq (the last sequence number), live (far messages
//	            of the shard), live:<b> (of bucket b), sealed:<b>
//	            (promotion under way: no more appends), kind (a value
//	            long enough to keep it a hash table: placement reads and
//	            writes dozens of its fields a call, each a scan of the
//	            whole hash in a listpack)
//	farlease:<b> STRING the promoter's lease on bucket b (SET NX PX, below)
//	farcompact  ZSET b -> bucket start: buckets with a block's worth of raw
//	            records, for the compactor (farcompact.go)
//
// Who deletes what: promotion deletes each record's index entry as it
// moves the record, cancel and replace delete theirs, and an index HASH
// left empty goes with its last entry; the drop deletes far:<b>,
// farz:<b>, the bucket's fardir and farcompact entries and its farmeta
// fields; the lease expires, or its promoter deletes it. What is left is
// bounded: farmeta's seq, live and kind (three fields a shard), and the
// index entries of records whose id could not be read (a corrupt record),
// which far_live deletes when the id is next looked up.
//
// Measured (scripts/memory-layouts.sh, cmd/delayq-bench/README.md,
// "Memory"): 60 bytes a message with 100-byte JSON bodies and random
// 16-digit ids (records compressed 4.2x, the id index 23-25 bytes), 276
// with 1 KiB JSON, 162 with bodies that do not compress; against 358, 1,478
// and 358 today (the script keeps a bucket's blocks in one STRING and its
// records without the sequence; a LIST element costs a few bytes a block
// of 256, the sequence a few bytes a record before compression). Compression: github.com/klauspost/compress/zstd at its
// fastest level (pure Go, well kept). On blocks of 256 records with
// 100-byte JSON bodies it stores 32.9 bytes a record (4.5x) for 1.2-1.4 µs
// of encode and decode a record, its default level 32.7 for 1.6, s2 55.6
// for 0.4 (go test -run '^$' -bench FarBlockCompression ./shard/, two
// shared cores); with 1 KiB bodies 246, 237 and 372 bytes. A dictionary
// of 16 KiB trained on other records gained nothing at this block size
// (33.9 bytes a record). s2 is the fallback should promotion's CPU matter
// more than 23 bytes a message.
//
// The rules, each one script call in the shard's slot (farscripts.go has
// the scripts, far.go their Go side):
//
//   - Settings, per namespace (FarKey, HASH): horizon H (default 1 h: a
//     bucket is promoted an hour before its first message is due, so a
//     promotion that stalls has an hour to recover before anything is
//     late), bucket width W (default 10 min: six buckets an hour, each
//     promoted in one pass; wider buckets mean fewer keys, narrower ones
//     less to promote at once) and index slots K per shard (default 4,096).
//     W and K are fixed once set: changing them would strand index
//     entries; H may change at any time. Without the settings the tier is
//     off and nothing below runs.
//   - The index: fidx:<h> with h = (FNV-1a 64 of the id >> 32) mod K, the
//     high half, so that it is independent of the shard (the low half
//     mod M). It stays a listpack while it holds at most
//     hash-max-listpack-entries (128) ids: a shard holds up to 128 K far
//     messages at full density, 512 Ki at the defaults, and M shards M
//     times that (100 M far messages want M >= 192 at K = 4,096). Below
//     that the index keys cost about 100 bytes each, K of them at most per
//     shard: 400 KB a shard when the population is small.
//   - An index entry is live only while its bucket is in fardir: a lookup
//     that finds "<b>:<seq>" for a bucket that is gone treats the id as
//     absent and deletes the entry. That is the seam Apache Pulsar's
//     bucketed index broke at (an index saying "present" for a bucket not
//     loaded): here the bucket directory, not the index, has the last
//     word, and a bucket leaves the directory only after promotion.
//   - Placement: the producer computes the bucket b of the due time by its
//     own clock and sends the message to the far placement script with
//     far:<b> among the KEYS; the script computes the due time from Redis
//     TIME, answers "wrong bucket" with the right b when the two clocks
//     disagree at a bucket's edge (the producer sends it again), and "near"
//     when the bucket starts less than H after now or is sealed: the
//     producer then enqueues it near, as today. So a record never lands in
//     a bucket that is being promoted, and its due time is always Redis's.
//     Dedupe: the id must be neither near (msg HASH) nor live far (the
//     index); an upsert replaces either (a near copy in flight is refused,
//     as today). Each far write takes a new sequence number from farmeta,
//     so a replaced record is told from its replacement by the index.
//     The near enqueue scripts check the index too, when the tier is on
//     (an upsert near forgets a far copy).
//   - Promotion, without a leader: each process promotes the shards it
//     takes the wake-ups of (scanner's affinity), and every shard when the
//     membership is unknown, every second; every process also promotes,
//     in any shard, a bucket within H/3 of its start that its owner left
//     (PromoteOverdue, a look a shard each H/6), so a dead or stalled
//     owner delays nothing past the slack: a bucket whose start is
//     within H of now, less the shard's stagger (up to min(W, H/2), so
//     that the shards promote a bucket over its width instead of all in
//     one burst: far.go, farStagger), is sealed (farmeta sealed:<b>;
//     placement sends that time near from then on), its records read back in pages of 256 and
//     decoded in Go, and handed to the promote script in calls of at most
//     64 records (a page's calls pipelined): a record moves to the due ZSET and msg hash only when
//     its index entry still says "<b>:<seq>", and the entry is deleted in
//     the same call. Last, the drop script deletes the bucket's keys and
//     directory entry. A crash at any line leaves a sealed bucket whose
//     rerun skips what moved (the index no longer names it): nothing lost,
//     nothing doubled, and due times are the records' own, so nothing is
//     early. Two processes promoting one bucket at once (a membership
//     change) only skip each other's records; a lease (farlease:<b>, SET
//     NX PX min(30 s, max(0.5 s, H/6)), renewed after each page) keeps
//     that rare, and a promoter killed in the middle holds its bucket back
//     for at most the lease.
//   - At Redis's maxmemory promotion is refused (ErrRedisFull; the
//     lease's SET is its first write) and the bucket waits far: a near
//     message costs more memory than a far one, and the horizon is the
//     slack while deliveries free memory (TestFarPromotionWithRedisFull).
//     A Redis Cluster holds a shard's far keys in the shard's slot, like
//     the rest of it (TestFarTierOnCluster).
//   - A record that does not decode goes to the dead set, with its reason,
//     when its id can be read and the index still names its bucket; the
//     rest of its bucket is promoted. One whose id cannot be read is
//     counted and logged; its index entry, if any, dies with the bucket.
//   - Cancel deletes the index entry (O(1)); the record stays as garbage
//     until promotion skips it. Upsert and reschedule write a new record
//     and entry. Raced with promotion, each is one script against the
//     index entry: whichever runs first decides, and the other sees the
//     message near, or gone. A cancel or an upsert looks at both tiers in
//     one script; a reschedule and an inspect look near, then far, then
//     near again (promotion only moves near), so none of them answers
//     "not found" for a message that is there. The right answers, tested
//     on 10,000 messages while their buckets are promoted
//     (TestFarOperationsRacingPromotion): a cancel succeeds and the
//     message is gone; an upsert succeeds and one copy remains, the new
//     one; a reschedule succeeds and one copy remains, due when it said.
//
// Built so far: settings, placement (Enqueue, Upsert and their batches),
// the near enqueues' check of the index, Cancel, Inspect, Reschedule (far
// to near, or to another bucket), Stats and the due profile
// (farread.go) with a topic's estimated share (farprofile.go), listing
// in due order among near messages (Browse: farlist.go), bulk cancel and
// reschedule by filter, and so clear (farbulk.go), turning the tier on
// (only once every live scanner promotes) and off (farcontrol.go: delayq
// far, GET and PUT /v1/far), compaction into blocks (farcompact.go), and
// promotion and compaction in the scanners, with their metrics and
// alert. Measured
// (scripts/bench.sh -only memory -memory 1000000, two shared cores;
// 100-byte JSON bodies, ids of 16 random hex digits, due at random over
// 10 hours a day out): 358 bytes a message near, 202 far before
// compaction and 95 after (the target: 120); far placement 64,781
// messages a second against 113,685 near. Promotion costs Redis 11.3-14.6
// µs a message from raw records, 9.4-10.2 from blocks (go test -run XXX
// -bench BenchmarkPromote -benchtime 5x -count 3 ./shard/), about an
// enqueue's. Redis CPU per message (go test
// -run XXX -bench 'BenchmarkEnqueue/batch=500' -benchtime 200x -count 3
// ./shard/, batches of 500 over 16 shards): near 6.8-7.5 µs, far in one
// bucket 8.0-9.3, far over 60 buckets 15.1-18.1 (16.7-20.1 while farmeta
// was a listpack). A bucket's writes (its RPUSH, its counts) are shared
// by the messages of a call that go to it; spread over many buckets, a
// message pays them alone, about 2 µs of Redis for the RPUSH and as much
// in Lua around it (INFO commandstats). TestFarPromotionSurvivesKills
// promotes 200,000 far messages while a scanner is SIGKILLed every half
// second.
//
// A recurring schedule's next occurrence always waits in the due set: a
// schedule has one pending occurrence at a time, so there is nothing worth
// moving far.
//
// What far placement can cost at best: BenchmarkPlacementFloor (go test
// -run XXX -bench PlacementFloor -benchtime 300x -count 3 ./shard/, two
// shared cores) runs, in turn, scripts that do only the writes a layout
// cannot do without, with records and index entries built by Go, and the
// real EnqueueBatch beside them. Redis CPU a message: near (HSETNX and
// ZADD) 9.0-9.7 µs; far in one bucket (the dedupe HMGET, the index HSETNX,
// a share of one RPUSH) 7.1-7.6, 0.78 of near; far over 30 buckets
// 11.5-12.2, 1.27 of near, the bucket writes being shared by about one
// message each; one inbox list a shard sorted into buckets later in bulk
// 8.3-8.9 with the sort, 0.92 of near. The real tier: 1.4-1.5 times the
// real near enqueue in one bucket, 2.1-2.2 over 60. The tier's own rules
// (tombstones, the shard's cap, a bucket's seal, the due time by Redis's
// clock, the directory, a retried call's answer) come on top of each
// floor. So no layout of scripts places messages spread over buckets as
// cheaply as the near enqueue stores them: an inbox would come closest, at
// the price of a second place that every reader (inspect, listing, bulk
// jobs, the move, promotion) must look in. The tier trades enqueue CPU for
// memory, where the pending population it is for is large against its
// arrival rate: 100 M pending due a week out on average arrive at 165 a
// second (Little's law), about 1/300 of far placement's rate on this box.
// Of the real scripts' extra cost, building the record in Lua is about a
// fifth of a near enqueue a message (measured by taking it out of a copy
// of the script, A/B interleaved); building it in Go would need the
// sequence number before the call, and the due time of a delay before
// Redis's clock gives it.
//
// Not yet: pacing a shard's promotion of a bucket (each is promoted in one
// burst, which the near messages due meanwhile wait behind:
// cmd/delayq-bench/README.md, "Memory"); a listing that does not read a
// far bucket whole for each page that reaches it.
//
// # Quotas
//
// A scope (package scope: a team's topics and id prefixes) may have a
// quota: the most messages it holds and enqueues a second, kept in Redis
// beside the flow limits. Its count lives in the namespace's slot and its
// messages in the shards', so no one script checks both: an enqueue
// reserves room first, stores with the enqueue scripts' quota'd variants
// (which tag each message with its scope in the shard), and settles what
// it did not store; removals are counted out by a leaderless sweep of the
// tags, with no change to the hot path. The count is never below what
// the scope holds; a killed producer's reservation holds at most a batch
// of the quota for at most 16 s. quota.go has the keys, the steps and
// the bounds; quotascripts.go the scripts.
//
// # Fair release across classes
//
// When the fleet is behind (after an outage, or a campaign due at one
// instant), releases in due order make a message of a small, urgent class
// wait behind the whole backlog. Release classes (fair.go,
// fairscripts.go; the scanner's part in scanner/fair.go) share the
// fleet's releases by weight instead, only while it is behind:
//
//   - Classes: a class names topic patterns (a topic, or a prefix ending
//     in *) and has a weight (1..1000), or is strict (before every
//     weighted class), or has weight 0 (only when no other class has
//     anything due waiting). Kept in the namespace's HASH
//     delayq:{ns}:classes (ClassesKey), set from the routes file, the CLI,
//     the API and the console; every change is a compare-and-set script
//     that refuses patterns overlapping another class's (ErrOverlap,
//     naming both), so a topic belongs to one class. A topic no class
//     names is in the default class (DefaultClass), weight 1 unless set.
//     At most 32 classes.
//   - Nothing changes while nothing is late: the claim of a namespace with
//     classes (ClaimFair, claimFairScript) reads its shard's head, which
//     it reads anyway; only when the head is more than FairAfter (500 ms)
//     late, or the shard's backlog sets hold anything, is the shard behind.
//     Then the claim leases nothing and moves up to 128 due entries into
//     the backlog set of their topic's class, delayq:{ns:i}:class:<name>
//     (BacklogKey: ZSET id -> due, in the shard's slot), taking half from
//     the latest due and half from the earliest: what falls due now
//     reaches its class within one claim however long the backlog before
//     it, while the backlog is set apart from its oldest end. A topic
//     under flow control goes to its held set as always (its limit
//     first: the shares apply among what may go).
//   - Releases: ClaimBacklog leases a class's earliest due entries in a
//     shard (claimHeldScript) and counts them in the shard's counters
//     (released:<class>, for the rates). Within a class, due order holds
//     in a shard and closely across shards, as for a limited topic.
//   - Shares without a leader: every scanner process runs a stride
//     scheduler over the classes with something due waiting (a turn of n
//     messages costs the class n/weight of pass; the smallest pass goes
//     next; a class back from idle starts at the smallest pass of the
//     others, so an idle spell earns nothing). Each process's releases
//     split by weight, so the fleet's do. The design first had one pass
//     table in Redis for the fleet; it would give the same shares for one
//     more round trip to one slot on every release of the fleet, so each
//     process keeps its own.
//   - Crashes, resizes, Cluster: a released message is leased as a claim
//     leases it, so a scanner killed after the release loses nothing: the
//     lease expires into the due set, where the next claim sets it apart
//     again. Nothing is moved or released before it is due (both compare
//     with the Redis clock). A resize changes nothing: the releasers scan
//     every shard below the high-water mark. Every script touches one
//     slot, so Redis Cluster works as for flow control.
//   - Cancel, reschedule and inspect find a message in any class's backlog
//     of its shard (StateBacklog), whatever its topic's class is now; bulk
//     jobs by filter (and a quota's adoption) walk the backlogs too,
//     reading the topics of a page from its envelopes. A deleted class
//     names no topic from then on, and is kept (DeletedMs) until its
//     backlogs are empty, then forgotten by the scanners.
//   - Not guaranteed: List, Browse, the due profile and the shard counts
//     do not show what waits in a backlog (it is due: ClassStatuses counts
//     it by class), as they do not show a limited topic's held messages.
//
// Measured on the 2-core benchmark VM (scripts/bench.sh -only fair, three
// rounds, medians): a saturated drain of 60,000 messages of two classes
// at 3:1, both backlogged, against one topic without classes: 1.000,
// 1.109 and 0.947 of its rate at claim batches 1, 8 and 32, the releases
// split 2.90-3.11:1 while both waited. Without classes nothing is added
// to a claim: against the build before classes (BEFORE=<it>
// scripts/bench.sh -only ab -batches 1,8 -rounds 5 -scanners 1 -limit
// 6000) saturated 0.975 and 1.012, steady p99 5.5 against 5.2 ms and 5.1
// against 5.3 ms, within the box's noise. TestFairReleaseAtScale: 1,000
// messages due now beside 500,000 overdue at 1:1, p99 0.44 s late. A
// namespace with classes pays for the check while it keeps up: a claim of
// two due messages at k = 8 cost Redis 61-73 µs against 49-51 without
// classes (go test -run XXX -bench 'BenchmarkClaimSteady/batch=8/receipts=true'
// ./shard/, four interleaved pairs, four classes of four patterns), half
// of it the EXISTS of the backlogs; the patterns travel as one argument
// and are read only when the shard is behind.
//
// # Moving to another Redis
//
// Export, import and a live move of every pending message, so that a team
// outgrows one Redis (for a Cluster, another region, a new namespace)
// without a pause. Built: Export and AppendLine (export.go), read back by
// enqueue -f; AppendScheduleLine (scheduleexport.go) and ExportDead
// (deadrestore.go) for the schedules and the dead; MovePage and MoveFar,
// the live move's batches with their journal (move.go), which delayq move
// runs pass after pass; MoveSchedules and MoveDeadPage (movestate.go);
// MoveSettings and MoveQuotas (movesettings.go). The design:
//
//   - One line format: export writes each scheduled message as the JSON
//     Lines object enqueue -f reads (jsonlines.go), with its due time as
//     at_ms, its typed headers (JSONValue), every property, its retry
//     schedule and deadlines, and one new field, attempts (deliveries so
//     far), which import writes into the attempts HASH as a redelivery
//     would. Export walks each shard in (due, id) order, near and far
//     merged (walkShard), then its held sets and class backlogs; its
//     cursor is the shard, the part and the last (due, id): a page at a
//     time, bounded memory, resumable. export -> import -> export gives
//     the same lines on any target of the same M.
//   - The live move copies, then removes what is unchanged. For each page
//     of a source shard: (1) read the entries with their scores,
//     envelopes and attempts; (2) write them to the target, deduped by id
//     (an id the target has stays as the target has it: a producer that
//     writes to both sides during the switch makes one message); (3) one
//     script on the source removes each id still exactly as read (same
//     score, same envelope), and says which it removed; (4) an id not
//     removed (cancelled, rescheduled or claimed on the source meanwhile)
//     has its target copy, if this batch made it, cancelled: it stays
//     where the source's operation left it, and a rescheduled one is
//     copied on a later pass.
//   - Never on both sides at once, by a margin: the mover leaves every
//     message due within --keep (default 30 s) of the Redis clock to the
//     source's fleet, so no copy can fall due on either side while its
//     batch (milliseconds) is under way, and a message is published by
//     the source before step 3 and by the target after it, never both.
//   - A crash at any line: before (2) nothing changed; between (2) and
//     (3) the batch is on both sides, not due within the margin; the
//     mover records each batch's ids in a journal on the source before
//     (2), and a rerun finishes the journal first ((2) finds them there,
//     (3) removes them). Not rerun before they fall due, that one batch
//     (at most 500) may be published by both sides: the documented
//     duplicate. Nothing is lost at any line: a message is removed from
//     the source only once the target has it.
//   - The far tier moves as the due set does, a bucket's live records a
//     batch at a time (MoveFar): a record is removed from the source only
//     while the far index still names the record read (the bulk cancel's
//     script), so one cancelled, rescheduled, replaced or promoted
//     meanwhile stays as that left it; a journal's id not in the due set
//     is looked for in the far tier. Held sets and class backlogs hold
//     messages already due: the source's fleet publishes them. So do
//     occurrences of recurring schedules: their schedules move instead.
//   - Schedules are handed over one at a time (movestate.go): the target's
//     copy is made with the source's state, its last occurrence the
//     source's pending one, which the source keeps and publishes; then one
//     script deletes the source's schedule if it is still the version and
//     pending occurrence read, else the copy is deleted and the schedule
//     tried again. A journal on the source names each copy made and not yet
//     handed over, so a rerun after a kill makes it again from the state
//     then: only occurrences due between the kill and the rerun can be
//     published by both sides (with the same id, name@time).
//   - Export and import carry a schedule's state ("state": paused, fired,
//     skipped, last, created, which is where @every counts from), applied
//     only when the set creates the schedule, so an import run twice
//     changes nothing; and a dead message's death ("dead": since, reason),
//     which puts it back in its shard's dead set (restoreDeadScript,
//     deduped by id in the shard), not in the due set. Both are an
//     operator's import: refused over HTTP.
//   - Dead messages move a page at a time (MoveDeadPage): copied into the
//     target's dead sets, removed from the source if still dead since the
//     time read; the copy of one redriven or purged meanwhile is purged.
//     The page's ids and times are in their shards' dead journals from
//     before the copy to after the removal. A rerun settles a killed
//     move's journals before any message moves: the copy of one redriven,
//     purged or dead again since is purged from the target (a redriven one
//     then moves as scheduled, instead of meeting its dead copy there and
//     being taken for a duplicate); one still as copied is found on the
//     target by the dead pass, which removes the source's.
//   - Settings set at runtime go too (movesettings.go), each the target
//     does not have (its own stays): flow limits and pauses, release
//     classes and the far tier's settings before the messages, since none
//     refuses one; quotas after them, since a quota set first would count
//     the move's copies against its rate, while one set after is adopted
//     by the target's scanners, which count what arrived.
//   - Paced (MoveOptions.Pace, delayq move --rate): the wait comes before
//     a due-set batch is read, so it never brings what the batch copies
//     within the margin; a far batch waits after its bucket was read,
//     which is safe because a far record is published only once promoted,
//     and promotion fails the removal's check.
//   - A mover cut short shows: its journals, which a running move keeps
//     for the moments of a batch, age (MoveJournalAge: the scanners'
//     delayq_move_journal_age_seconds, alert DelayqMoveCutShort).
//   - Refused before anything is copied: a target whose policy can evict,
//     which is over 80 % of its maxmemory, or whose namespace records
//     another M than asked (from Consul, or pinned by its producers). A
//     target that fills up during the move refuses some copies: the rest
//     of the batch moves, the refused stay on the source, and the move
//     stops (Redis checks maxmemory at a script's first write, so a
//     refused call wrote nothing).
//
// # Packages
//
// shard is the bottom of delayq: every other package builds on it, and
// it imports none of them. The packages a newcomer meets:
//
//	shard                the Redis layout, the scripts, the envelope codec, the producer SDK
//	shard/ingress        the AMQP ingress: plugin-style messages from RabbitMQ queues into the shards
//	shard/httpapi        the JSON API of delayq serve (its README.md is the API and console guide)
//	shard/console        the web console of delayq serve
//	shard/backoff        the doubling waits of every retry loop
//	shard/shardtest      test helpers: real Redis, Redis Cluster and Sentinel on loopback
//	scanner              the claim loops, the due board, settling confirms
//	publisher            publishing to RabbitMQ with confirms
//	publisher/amqpdial   reaching the first live node of a RabbitMQ cluster (publisher and ingress)
//	publisher/publishertest  test helpers: a real RabbitMQ node or cluster on loopback
//	router               topic -> exchange and routing key
//	balance              M from Consul or a static value, the cursor, the layout, the fleet
//	balance/consultest   test helpers: a real Consul agent on loopback
//	cmd/delayq           the binary: scan, serve and the CLI
//	cmd/delayq-bench     the benchmark (its README.md: method, scenarios, figures)
//	cmd/delayq-demo      the demo fleet of scripts/demo.sh
package shard
