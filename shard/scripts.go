package shard

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every script below touches the keys of one shard only (one hash tag, so one
// Redis Cluster slot), takes every key through KEYS, reads "now" from Redis
// TIME, and does a bounded amount of work. Times are unix milliseconds.
//
// Lua numbers are doubles: millisecond timestamps (< 2^53) are exact.

// nowMs is the prelude every time-aware script starts with.
const nowMs = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// wakeIfHead is shared by enqueue and reschedule: announce a new head of the
// shard, whenever it is due, so idle scanners know every shard's next due
// time without polling. ARGV[a] and ARGV[a+1] are channel and shard index.
const wakeIfHead = `
local function wake_if_head(due_key, id, due, a)
  local head = redis.call('ZRANGE', due_key, '0', '0')
  if head[1] == id then
    redis.call('PUBLISH', ARGV[a], ARGV[a + 1] .. ':' .. string.format('%d', due))
  end
end
`

// cancelledAhead is shared by the enqueue scripts: whether a tombstone in
// the ZSET key (Keys.Cancelled) refuses id now. An expired one is removed.
const cancelledAhead = `
local function cancelled_ahead(key, id)
  local until_ms = redis.call('ZSCORE', key, id)
  if not until_ms then return false end
  if tonumber(until_ms) > now then return true end
  redis.call('ZREM', key, id)
  return false
end
`

// enqueueScript stores a message and schedules it.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET
//	KEYS[4] attempts HASH   KEYS[5] dead ZSET   KEYS[6] reason HASH   KEYS[7] counters HASH
//	KEYS[8] cancelled ZSET (tombstones)
//	ARGV[1] id   ARGV[2] envelope   ARGV[3] "delay" | "at"
//	ARGV[4] delay ms (added to Redis TIME) or absolute due ms
//	ARGV[5] "1" to replace an existing scheduled or dead message (upsert)
//	ARGV[6] wake channel   ARGV[7] shard index
//	ARGV[8] most messages this shard may hold (scheduled + in flight), 0 = no limit
//	KEYS[9] fidx:<h> of the id, KEYS[10] fardir, KEYS[11] farmeta: when the
//	far tier is on (farscripts.go), an id live far is a duplicate, an
//	upsert moves it near, and the far messages count in ARGV[8]'s limit
//
// Returns {status, due ms}: status 1 created, 2 replaced, 0 duplicate id
// (nothing written), -1 in flight (upsert refused, nothing written), -2
// shard full (nothing written), -3 a tombstone refuses the id (a cancel
// came first; nothing written), 3 stored already by this very write
// (the id holds a byte-identical envelope: go-redis sent the call again
// after the connection broke once Redis had run it; enqueueManyScript
// says more), with the due time it has.
// Publishes "<shard>:<due>" on the wake channel when the message becomes
// the shard's head. A created message counts in counters.enqueued.
// Complexity: O(log N).
var enqueueScript = redis.NewScript(enqueuePreludes + enqueueBody)

const enqueuePreludes = nowMs + wakeIfHead + cancelledAhead + farPrelude

const enqueueBody = `
local id = ARGV[1]
local due = tonumber(ARGV[4])
if ARGV[3] == 'delay' then due = now + due end
local status = 1
local stored = redis.call('HGET', KEYS[2], id)
local fb = KEYS[9] and not stored and far_live(KEYS[9], KEYS[10], id)
if fb then
  if ARGV[5] ~= '1' then return {0, 0} end
  far_forget(KEYS[9], KEYS[11], id, fb)
  status = 2
elseif stored then
  if stored == ARGV[2] then return {3, tonumber(redis.call('ZSCORE', KEYS[1], id) or due)} end
  if ARGV[5] ~= '1' then return {0, 0} end
  if redis.call('ZSCORE', KEYS[3], id) then return {-1, 0} end
  redis.call('HDEL', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
  status = 2
else
  if cancelled_ahead(KEYS[8], id) then return {-3, 0} end
  local cap = tonumber(ARGV[8])
  if cap > 0 and redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[3]) + far_count(KEYS[11]) >= cap then return {-2, 0} end
end
redis.call('HSET', KEYS[2], id, ARGV[2])
redis.call('ZADD', KEYS[1], due, id)
if status == 1 then redis.call('HINCRBY', KEYS[7], 'enqueued', 1) end
wake_if_head(KEYS[1], id, due, 6)
return {status, due}
`

// enqueueManyScript stores several messages of one shard in one call:
// what EnqueueBatch and UpsertBatch send, so a batch costs one script call
// per shard instead of one per message.
//
//	KEYS as enqueueScript
//	ARGV[1] n, the number of messages (at most maxEnqueueMany)
//	ARGV[2] wake channel   ARGV[3] shard index
//	ARGV[4] most messages this shard may hold (scheduled + in flight), 0 = no limit
//	ARGV[5] "1" to replace existing scheduled or dead messages (upsert)
//	then for message j = 1..n, from a = 6 + 4*(j-1):
//	ARGV[a] id   ARGV[a+1] envelope   ARGV[a+2] "delay" | "at"   ARGV[a+3] ms
//	KEYS[9] fardir, KEYS[10] farmeta, KEYS[10+j] fidx:<h> of message j:
//	when the far tier is on, an id live far is a duplicate (0), an upsert
//	moves it near (2), and the far messages count in ARGV[4]'s limit
//
// Returns {status_1, due_1, ..., status_n, due_n}, each as enqueueScript
// returns it: 1 created, 2 replaced, 0 duplicate id, -1 in flight (upsert
// refused), -2 shard full, -3 refused by a tombstone (nothing written for
// that message); and 3, stored already by this very write, with the due
// time it has: the id, not given before in this call, holds a
// byte-identical envelope (same content and the same producer
// millisecond, EnqueuedMs), so this call is the write that stored it, run
// again. go-redis runs every command of a pipeline again when the first
// one's reply is an error it retries (TRYAGAIN while Redis Cluster moves a
// slot) or the connection broke after Redis ran them, those that ran
// included: without 3 such a batch reported its own messages as
// duplicates. Nothing is written or counted for a 3. The price: another
// call that stores the same id with a byte-identical envelope (the same
// message, encoded in the same millisecond) is told 3, stored, rather than
// 0, duplicate; either way the message is stored once. (A record of each
// call's answer, to replay on a run again, was exact but cost Redis 1.3
// µs more a message at 31 messages a call, go test -bench
// 'BenchmarkEnqueue/batch' ./shard/, five interleaved pairs.) When the
// shard's head is earlier after the call than before, publishes one notice
// "<shard>:<due>" for the new head, as n single enqueues would have for
// the last of them.
// Complexity: O(n log N).
var enqueueManyScript = redis.NewScript(enqueueManyPreludes + enqueueManyBody)

const enqueueManyPreludes = nowMs + cancelledAhead + farPrelude

const enqueueManyBody = `
-- stored_due is the due time of a message stored already, or what this
-- call computed if it is no longer scheduled (claimed since).
local function stored_due(id, due)
  return tonumber(redis.call('ZSCORE', KEYS[1], id) or due)
end
local n = tonumber(ARGV[1])
local cap = tonumber(ARGV[4])
local upsert = ARGV[5] == '1'
local tombs = redis.call('EXISTS', KEYS[8]) == 1
local before = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
local held = 0
if cap > 0 then held = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[3]) + far_count(KEYS[10]) end
local out, created, written, seen = {}, 0, 0, {}
for j = 1, n do
  local a = 6 + 4 * (j - 1)
  local id = ARGV[a]
  local due = tonumber(ARGV[a + 3])
  if ARGV[a + 2] == 'delay' then due = now + due end
  local status = 1
  local fb = KEYS[9] and far_live(KEYS[10 + j], KEYS[9], id)
  if fb then
    status = 0
    if upsert then
      far_forget(KEYS[10 + j], KEYS[10], id, fb)
      redis.call('HSET', KEYS[2], id, ARGV[a + 1])
      redis.call('ZADD', KEYS[1], due, id)
      status = 2
    end
  elseif upsert and redis.call('HEXISTS', KEYS[2], id) == 1 then
    if not seen[id] and redis.call('HGET', KEYS[2], id) == ARGV[a + 1] then
      status, due = 3, stored_due(id, due)
    elseif redis.call('ZSCORE', KEYS[3], id) then
      status = -1
    else
      redis.call('HDEL', KEYS[4], id)
      redis.call('ZREM', KEYS[5], id)
      redis.call('HDEL', KEYS[6], id)
      redis.call('HSET', KEYS[2], id, ARGV[a + 1])
      redis.call('ZADD', KEYS[1], due, id)
      status = 2
    end
  elseif tombs and redis.call('HEXISTS', KEYS[2], id) == 0 and cancelled_ahead(KEYS[8], id) then
    status = -3
  elseif cap > 0 and held >= cap then
    status = -2
    if redis.call('HEXISTS', KEYS[2], id) == 1 then status = 0 end
  elseif redis.call('HSETNX', KEYS[2], id, ARGV[a + 1]) == 0 then
    status = 0
    if not seen[id] and redis.call('HGET', KEYS[2], id) == ARGV[a + 1] then status, due = 3, stored_due(id, due) end
  else
    -- An integer due (the producer checks its range) formatted here
    -- costs less than Redis's %.17g.
    redis.call('ZADD', KEYS[1], due % 1 == 0 and string.format('%d', due) or due, id)
    held = held + 1
    created = created + 1
  end
  seen[id] = true
  if status == 1 or status == 2 then written = written + 1 end
  out[2 * j - 1] = status
  out[2 * j] = status > 0 and due or 0
end
if created > 0 then redis.call('HINCRBY', KEYS[7], 'enqueued', created) end
if written > 0 then
  local after = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
  if before[2] == nil or tonumber(after[2]) < tonumber(before[2]) then
    redis.call('PUBLISH', ARGV[2], ARGV[3] .. ':' .. string.format('%d', tonumber(after[2])))
  end
end
return out
`

// metaOf is the prelude of the scripts that read the attempts hash. Its
// value for an id is "<redeliveries>:<scheduled ms>[:<refusals>]" once the
// message has been claimed, or a bare "<redeliveries>" (written by older
// versions, or after a reschedule). The scheduled time is the due time the
// message was scheduled for, which the due ZSET's score no longer shows
// while the message is in flight, or after a failed publish set it due
// again later: every delivery reports it, and an expired lease puts the
// message back at it, so a redelivery is never mistaken for an on-time
// one. Refusals count the publishes the broker refused (releaseScript).
const metaOf = `
local function meta_of(v)
  if not v then return 0, nil, 0 end
  local a, s, r = string.match(v, '^(%d+):(-?%d+):(%d+)$')
  if a then return tonumber(a), tonumber(s), tonumber(r) end
  a, s = string.match(v, '^(%d+):(-?%d+)$')
  if a then return tonumber(a), tonumber(s), 0 end
  return tonumber(v) or 0, nil, 0
end
local function meta(a, s, r)
  if r and r > 0 then return string.format('%d:%d:%d', a, s, r) end
  return string.format('%d:%d', a, s)
end
-- forget_scheduled drops the scheduled time and refusals kept for id (a
-- reschedule or a redrive sets a new time: the due score, and a new
-- count), keeping its redelivery count.
local function forget_scheduled(key, id)
  local a, s = meta_of(redis.call('HGET', key, id))
  if not s then return end
  if a > 0 then redis.call('HSET', key, id, a) else redis.call('HDEL', key, id) end
end
`

// reapExpired is the reaper every claim starts with (claimScript,
// claimHoldScript): when the earliest lease of KEYS[3] (inflight) has
// expired, up to r expired leases go back to KEYS[1] (due) at the time
// they were scheduled for, their redelivery count in KEYS[4] (attempts)
// raised. It returns how many it re-queued and the shard's lease head
// after ({deadline, ...} of ZRANGE WITHSCORES, empty if none).
const reapExpired = `
local function reap(r)
  local lh = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
  if #lh == 0 or tonumber(lh[2]) > now then return 0, lh end
  local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', '0', r)
  local metas = redis.call('HMGET', KEYS[4], unpack(expired))
  local back, upd = {}, {}
  for j, id in ipairs(expired) do
    local a, s, rf = meta_of(metas[j])
    s = s or now -- leased by an older version, which kept no scheduled time
    back[2 * j - 1], back[2 * j] = s, id
    upd[2 * j - 1], upd[2 * j] = id, meta(a + 1, s, rf)
  end
  redis.call('ZREM', KEYS[3], unpack(expired))
  redis.call('ZADD', KEYS[1], unpack(back))
  redis.call('HSET', KEYS[4], unpack(upd))
  return #expired, redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
end
`

// claimScript is the heart of delayq: the atomic claim.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET   KEYS[4] attempts HASH
//	KEYS[5] the claim's receipt STRING (with ARGV[5])
//	ARGV[1] k, the most messages to claim (>= 1)   ARGV[2] lease ms
//	ARGV[3] r, the most expired leases to re-queue (>= 1)   ARGV[4] k + 1
//	ARGV[5] the claim's nonce (optional: without it, no receipt)
//
// First, when the earliest lease has expired, it re-queues up to r expired
// leases: each goes back to the due set at the time it was scheduled for
// (so among due messages the earliest scheduled goes first), with its
// redelivery count raised. The reaper lives here, so any shard that is
// visited can never strand a lease, and a claim reply says when the
// shard's next lease expires, so the fleet visits the shard then, as it
// does when a message falls due. Then ZRANGEBYSCORE due -inf now
// WITHSCORES LIMIT 0 k+1 reads up to k+1 due entries; the n <= k first are
// taken with ZREMRANGEBYRANK due 0 n-1 and move into inflight with lease
// deadline now + lease. The deadline doubles as the lease token that ack,
// release and deadletter must present. An entry read past the n is the
// new head (due: more work here); when there is none, ZRANGE due 0 0 reads
// the head. At k = 1 the range ends at +inf instead: the two entries read
// are the one to claim and the head, one call. Reading only due entries
// matters at larger k: a steady load's claims find two or three messages
// due, and reading k+1 entries regardless (the earlier form) cost Redis
// more than the second call (BenchmarkClaimSteady, 64 pipelined claims of
// two due messages in a shard of 200 more, five interleaved pairs:
// 109-117 -> 75-82 µs of Redis a claim at k = 32, 80-87 -> 76-81 at k = 8,
// 61-68 either way at k = 1).
// The envelopes and attempts of all n come from one HMGET each, their
// leases go in with one ZADD and their scheduled times with one HSET, so a
// claim makes the same 8 or 9 calls whatever k is (plus 6 when it reaps),
// and one more with a nonce: the receipt of what it leased (receipts.go),
// which recovers the claim if its reply is lost.
// Redis 7.0 turns each Lua number passed to redis.call into a string with
// printf's %.17g (0.25-0.45 µs each, measured): constant arguments are
// strings, k + 1 comes as ARGV[4], and the deadline is formatted once per
// claim rather than once per message.
//
// Returns {now, head, reaped, lease head, id, token, scheduled, envelope|nil,
// attempts, ...}: five fields per claimed message in due order; head is the
// due time of the earliest message still scheduled, lease head the deadline
// of the earliest lease still held (-1 if none; at most now when more
// leases have expired than this call re-queued); scheduled is the time the
// message was scheduled for; attempts counts earlier deliveries (0 on the
// first).
// Complexity: O(log N + (k + r) log N).
var claimScript = redis.NewScript(nowMs + metaOf + reapExpired + receiptPrelude + plainClaim + `
local reaped, lh = reap(tonumber(ARGV[3]))
local out = {now, -1, reaped, -1}
if #lh > 0 then out[4] = tonumber(lh[2]) end
plain_claim(out, tonumber(ARGV[1]), ARGV[4], ARGV[2], ARGV[5])
return out
`)

// plainClaim is plain_claim(out, k, k1, lease, nonce), the claim's reading
// and leasing after its reaper (claimScript, and claimFairScript while its
// shard is not behind and no topic is under flow control): up to k due
// entries of the due set KEYS[1] (k1 is k + 1, a string) leased into
// KEYS[3] for lease ms (a string), their envelopes from KEYS[2], their
// attempts in KEYS[4], and with a nonce a receipt in KEYS[5]; five reply
// fields a message appended to out, and out[2] set to the new head.
const plainClaim = `
local function plain_claim(out, k, k1, lease, nonce)
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', k == 1 and '+inf' or string.format('%d', now), 'WITHSCORES', 'LIMIT', '0', k1)
  local n, dues = 0, {}
  while n < k and 2 * n + 2 <= #first do
    local d = tonumber(first[2 * n + 2])
    if d > now then break end
    n = n + 1
    dues[n] = d
  end
  if 2 * n + 2 <= #first then out[2] = tonumber(first[2 * n + 2]) end
  if n > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], '0', n == 1 and '0' or n - 1)
    local deadline = now + tonumber(lease)
    local dl = string.format('%d', deadline)
    local ids, leases = {}, {}
    for i = 1, n do
      ids[i] = first[2 * i - 1]
      leases[2 * i - 1] = dl
      leases[2 * i] = ids[i]
    end
    redis.call('ZADD', KEYS[3], unpack(leases))
    if out[4] < 0 or deadline < out[4] then out[4] = deadline end
    local envs = redis.call('HMGET', KEYS[2], unpack(ids))
    local metas = redis.call('HMGET', KEYS[4], unpack(ids))
    local upd = {}
    for i = 1, n do
      -- The usual case, a first delivery, has no attempts entry: its
      -- scheduled time is the score, written as Redis gave it (an integer
      -- below 2^53 prints without exponent), with no parsing or formatting.
      local a, s, rf = 0, nil, 0
      if metas[i] then a, s, rf = meta_of(metas[i]) end
      upd[2 * i - 1] = ids[i]
      if s then
        upd[2 * i] = meta(a, s, rf)
      else
        s = dues[i]
        upd[2 * i] = (a == 0 and '0' or a) .. ':' .. first[2 * i]
      end
      out[#out + 1] = ids[i]
      out[#out + 1] = deadline
      out[#out + 1] = s
      out[#out + 1] = envs[i]
      out[#out + 1] = a
    end
    redis.call('HSET', KEYS[4], unpack(upd))
    receipt(KEYS[5], nonce, deadline, ids, lease)
  end
  if out[2] < 0 and k > 1 then
    local h = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
    if #h > 0 then out[2] = tonumber(h[2]) end
  end
end
`

// ackScript ends the life of messages whose publish the broker confirmed,
// in one shard or several (a single Redis server takes the leases of
// every shard of a flush in one call; Redis Cluster, where a script's keys
// must share a slot, one call per shard).
//
//	KEYS: for each shard, 4 keys: msg HASH, inflight ZSET, attempts HASH,
//	counters HASH (ackQuotaScript: and scopeof HASH, quotaout HASH)
//	ARGV[1] k, then k pairs: a lateness class (the upper bound in ms of a
//	lateness bucket, LatenessClasses) and how many publishes fell in it
//	(AckShards sends those of its whole round trip with its first call;
//	they are counted in the first shard's counters); then for each shard
//	of KEYS, in order: n, then n pairs: id, lease token, ...
//
// For each id still leased with that token: remove the lease, the envelope
// and the attempt count. An id whose lease was lost (it expired and was
// re-queued, maybe claimed again) is left alone: this script cannot tell a
// re-queued copy from a new message that reuses the id, and deleting the
// latter would lose it. The price is one duplicate delivery. An id not
// leased with that token whose envelope is gone counts as gone: for an
// ack sent again after its call failed, most likely the first call ran
// (Redis went away before it replied), which is no lost lease.
// Per shard, one ZMSCORE checks every lease, then one ZREM and two HDELs
// remove the acked ones: 4 calls for the shard's batch (Redis 6.2 or
// newer); ZREM's reply is the count (an id twice in a batch counts once).
// A token is compared as the string ZMSCORE returns before it is parsed:
// a millisecond deadline prints as its digits on both sides, so the usual
// ack parses no number. For the fleet's rates (Store.Rates): each shard's
// acked count goes to its counters.published, and each class's count to
// counters.late:<class>, one HINCRBY each (the classes come summed per
// round trip, so a message costs next to nothing more; a lease lost
// meanwhile still counts there, and its redelivery again). With
// ackQuotaScript (a namespace with quotas), an acked message tagged with
// a quota's scope (scopeof) is counted out of it in quotaout, and its tag
// deleted, in the same call: deliveries leave a quota at once, without
// waiting for the sweep; a shard without tags pays one EXISTS.
// Returns {ids acked, ids gone}. Complexity: O(n log N) for n ids.
var ackScript = redis.NewScript(strings.NewReplacer("$STRIDE", "4", "$HOOK", "").Replace(ackSource))

// ackQuotaScript is ackScript for a namespace with quotas (quota.go): six
// keys a shard, and the hook that counts acked tagged messages out.
var ackQuotaScript = redis.NewScript(strings.NewReplacer("$STRIDE", "6", "$HOOK", ackQuotaHook).Replace(ackSource))

const ackSource = `
local k = tonumber(ARGV[1])
local a = 2 + 2 * k
local total, gone = 0, 0
for j = 1, #KEYS, $STRIDE do
  local n = tonumber(ARGV[a])
  local ids = {}
  for i = 1, n do ids[i] = ARGV[a + 2 * i - 1] end
  local scores = redis.call('ZMSCORE', KEYS[j + 1], unpack(ids))
  local acked = {}
  for i = 1, n do
    local s, t = scores[i], ARGV[a + 2 * i]
    if s and (s == t or tonumber(s) == tonumber(t)) then
      acked[#acked + 1] = ids[i]
    elseif redis.call('HEXISTS', KEYS[j], ids[i]) == 0 then
      gone = gone + 1
    end
  end
  if #acked > 0 then
    local m = redis.call('ZREM', KEYS[j + 1], unpack(acked))
    redis.call('HDEL', KEYS[j], unpack(acked))
    redis.call('HDEL', KEYS[j + 2], unpack(acked))
    redis.call('HINCRBY', KEYS[j + 3], 'published', m)
    total = total + m
$HOOK  end
  a = a + 1 + 2 * n
end
for c = 0, k - 1 do redis.call('HINCRBY', KEYS[4], 'late:' .. ARGV[2 + 2 * c], ARGV[3 + 2 * c]) end
return {total, gone}
`

const ackQuotaHook = `    if redis.call('EXISTS', KEYS[j + 4]) == 1 then
      local tags, untag, per = redis.call('HMGET', KEYS[j + 4], unpack(acked)), {}, {}
      for i = 1, #acked do
        if tags[i] then
          untag[#untag + 1] = acked[i]
          per[tags[i]] = (per[tags[i]] or 0) + 1
        end
      end
      for tag, c in pairs(per) do redis.call('HINCRBY', KEYS[j + 5], tag, c) end
      if #untag > 0 then redis.call('HDEL', KEYS[j + 4], unpack(untag)) end
    end
`

// releaseScript gives a lease back early, after a publish failed: due
// again after a delay, or, when the broker refused it too often, dead.
//
//	KEYS[1] due ZSET   KEYS[2] inflight ZSET   KEYS[3] attempts HASH
//	KEYS[4] dead ZSET   KEYS[5] reason HASH   KEYS[6] counters HASH
//	ARGV[1] id   ARGV[2] lease token   ARGV[3] retry delay ms
//	ARGV[4] most refusals before the dead set; 0 = the broker did not
//	refuse (connection lost, timeout, blocked), which never counts
//	ARGV[5] the broker's reason, stored when the message dies
//	ARGV[6] wake channel   ARGV[7] shard index
//
// When the lease is still held: attempts + 1 (the publish may have reached
// the broker, so the next one is a redelivery), refusals + 1 if refused;
// then dead at now with the reason if refusals reached ARGV[4], else due
// at now + delay, announced on the wake channel when it becomes the
// shard's head (so the retry is on time, not left to the idle patrol). The
// scheduled time the claim recorded stays, so the next delivery still
// says when the message was due. A message that dies counts in
// counters.dead.
// Returns 1 released, 2 dead, 0 the lease was already lost.
// Complexity: O(log N).
var releaseScript = redis.NewScript(nowMs + metaOf + wakeIfHead + `
local l = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not l or tonumber(l) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
local due = now + tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local a, s, rf = meta_of(redis.call('HGET', KEYS[3], ARGV[1]))
if limit > 0 then rf = rf + 1 end
redis.call('HSET', KEYS[3], ARGV[1], meta(a + 1, s or due, rf))
if limit > 0 and rf >= limit then
  redis.call('ZADD', KEYS[4], now, ARGV[1])
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
  redis.call('HINCRBY', KEYS[6], 'dead', 1)
  return 2
end
redis.call('ZADD', KEYS[1], due, ARGV[1])
wake_if_head(KEYS[1], ARGV[1], due, 6)
return 1
`)

// deadLetterScript parks a message that cannot be delivered (corrupt
// envelope, no route, exchange missing, returned by the broker).
//
//	KEYS[1] inflight ZSET   KEYS[2] dead ZSET   KEYS[3] reason HASH   KEYS[4] counters HASH
//	ARGV[1] id   ARGV[2] lease token   ARGV[3] reason text
//
// When the lease is still held: dead at now with the reason, counted in
// counters.dead; the envelope stays in the msg hash for inspection and
// redrive.
// Returns 1 if moved, 0 if the lease was already lost. Complexity: O(log N).
var deadLetterScript = redis.NewScript(nowMs + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[4], 'dead', 1)
return 1
`)

// cancelScript removes a scheduled message or, when asked to, leaves a
// tombstone for one that is not there yet.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET   KEYS[4] attempts HASH
//	KEYS[5] cancelled ZSET (tombstones)
//	KEYS[6] fidx:<h> of the id, KEYS[7] fardir, KEYS[8] farmeta: when the
//	far tier is on, a message live far is cancelled there (farCancel)
//	ARGV[1] id   ARGV[2] tombstone ms: when > 0 and nothing is scheduled,
//	refuse enqueues of id for that long (the key expires with its last
//	tombstone, and up to 16 expired ones are removed)
//
// Returns 1 cancelled, 0 not scheduled here (tombstone written if asked),
// -1 in flight (too late to cancel; no tombstone). Complexity: O(log N).
var cancelScript = redis.NewScript(nowMs + farPrelude + farCancel + `
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  if far_cancel(ARGV[1]) then return 1 end
  local window = tonumber(ARGV[2])
  if window > 0 then
    redis.call('ZADD', KEYS[5], now + window, ARGV[1])
    redis.call('PEXPIRE', KEYS[5], window)
    local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 16)
    if #old > 0 then redis.call('ZREM', KEYS[5], unpack(old)) end
  end
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
`)

// rescheduleScript moves the due time of a scheduled message.
//
//	KEYS[1] due ZSET   KEYS[2] inflight ZSET   KEYS[3] attempts HASH
//	ARGV[1] id   ARGV[2] "delay" | "at"   ARGV[3] delay ms or absolute due ms
//	ARGV[4] wake channel   ARGV[5] shard index
//
// The new due time is also the time the message is scheduled for from now
// on (a scheduled time kept from an earlier delivery is dropped).
// Returns {1, due} moved, {0, 0} not scheduled here, {-1, 0} in flight.
// Complexity: O(log N).
var rescheduleScript = redis.NewScript(nowMs + wakeIfHead + metaOf + `
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {-1, 0} end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {0, 0} end
local due = tonumber(ARGV[3])
if ARGV[2] == 'delay' then due = now + due end
redis.call('ZADD', KEYS[1], 'XX', due, ARGV[1])
forget_scheduled(KEYS[3], ARGV[1])
wake_if_head(KEYS[1], ARGV[1], due, 4)
return {1, due}
`)

// inspectScript reports where a message is.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET
//	KEYS[4] attempts HASH   KEYS[5] dead ZSET   KEYS[6] reason HASH
//	ARGV[1] id
//
// Returns {now, state, score, attempts, scheduled, envelope|nil, reason|nil}
// with scheduled the time the message is (or was) scheduled for (0 when
// unknown) and state
// "scheduled" (score = due), "inflight" (score = lease deadline), "dead"
// (score = time of death) or "unknown" (score 0). Complexity: O(1).
var inspectScript = redis.NewScript(nowMs + metaOf + `
local id = ARGV[1]
local state, score = 'unknown', 0
local s = redis.call('ZSCORE', KEYS[3], id)
if s then state, score = 'inflight', s else
  s = redis.call('ZSCORE', KEYS[1], id)
  if s then state, score = 'scheduled', s else
    s = redis.call('ZSCORE', KEYS[5], id)
    if s then state, score = 'dead', s end
  end
end
local attempts, scheduled = meta_of(redis.call('HGET', KEYS[4], id))
if state == 'scheduled' and not scheduled then scheduled = score end
return {now, state, tonumber(score), attempts, scheduled or 0,
  redis.call('HGET', KEYS[2], id), redis.call('HGET', KEYS[6], id)}
`)

// statsScript counts one shard.
//
//	KEYS[1] due ZSET   KEYS[2] inflight ZSET   KEYS[3] dead ZSET   KEYS[4] counters HASH
//
// Returns {now, scheduled, due now, in flight, dead, head due ms or -1,
// enqueued ever}. Complexity: O(log N).
var statsScript = redis.NewScript(nowMs + `
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local h = -1
if #head > 0 then h = tonumber(head[2]) end
return {now, redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now),
  redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]), h,
  tonumber(redis.call('HGET', KEYS[4], 'enqueued') or '0')}
`)

// raiseLayoutScript records that M shards are in use.
//
//	KEYS[1] layout HASH
//	ARGV[1] M   ARGV[2] Consul ModifyIndex of M, or 0 when M is not from Consul
//	ARGV[3] pin ms: when > 0, the mark may not come below M for that long
//
// hwm = max(hwm, M), maxever = max(maxever, M); when ARGV[2] > m_index, the
// mirror fields m and m_index are set. A pin is the field "pin:<M>" = its
// expiry (unix ms): a producer pins the M it writes under, and renews the
// pin while it writes, so no scanner lowers the mark below a shard it may
// write to (setHighWaterScript). The field "used:<M>" = the last time M
// was recorded (unix ms) says that messages may have been written under
// M: an id can be in shard Of(id, M) of any used M, until
// settleLayoutScript finds every message where the current M puts it.
// Returns {hwm, maxever, m, m_index, used M, ...}.
// Complexity: O(F) for the F fields of the layout (a handful).
var raiseLayoutScript = redis.NewScript(nowMs + layoutUsed + `
local m = tonumber(ARGV[1])
if tonumber(ARGV[3]) > 0 then redis.call('HSET', KEYS[1], 'pin:' .. m, now + tonumber(ARGV[3])) end
redis.call('HSET', KEYS[1], 'used:' .. m, now)
local f = redis.call('HMGET', KEYS[1], 'hwm', 'maxever', 'm', 'm_index')
local hwm, maxever = tonumber(f[1] or '0'), tonumber(f[2] or '0')
local mm, mi = tonumber(f[3] or '0'), tonumber(f[4] or '0')
if m > hwm then hwm = m; redis.call('HSET', KEYS[1], 'hwm', hwm) end
if m > maxever then maxever = m; redis.call('HSET', KEYS[1], 'maxever', maxever) end
local idx = tonumber(ARGV[2])
if idx > mi then mm, mi = m, idx; redis.call('HSET', KEYS[1], 'm', mm, 'm_index', mi) end
local out = {hwm, maxever, mm, mi}
for _, u in ipairs(used_ms(KEYS[1])) do out[#out + 1] = u end
return out
`)

// layoutUsed is the prelude of the scripts that list the used Ms of a
// layout hash.
const layoutUsed = `
local function used_ms(key)
  local out = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local u = string.match(f, '^used:(%d+)$')
    if u then out[#out + 1] = tonumber(u) end
  end
  return out
end
`

// settleLayoutScript forgets the Ms other than the current one, once a
// sweep found every message in the shard the current M puts it in.
//
//	KEYS[1] layout HASH
//	ARGV[1] the current M   ARGV[2] when the sweep started (unix ms, Redis clock)
//
// Refused (nothing changes) when another M was recorded, or a pin of
// another M was still valid, at or after the sweep's start: a producer may
// have written under that M while the sweep ran. Every producer pins its M
// before it writes, so that is the only way a message can have been placed
// by another M without the sweep seeing it. Expired pins of other Ms are
// deleted with the used fields.
// Returns 1 when settled (only the current M is left), 0 when refused.
// Complexity: O(F) for the F fields of the layout (a handful).
var settleLayoutScript = redis.NewScript(`
local m, start = ARGV[1], tonumber(ARGV[2])
local f = redis.call('HGETALL', KEYS[1])
local drop = {}
for j = 1, #f, 2 do
  local kind, u = string.match(f[j], '^(%a+):(%d+)$')
  if (kind == 'used' or kind == 'pin') and u ~= m then
    if tonumber(f[j + 1]) >= start then return 0 end
    drop[#drop + 1] = f[j]
  end
end
if #drop > 0 then redis.call('HDEL', KEYS[1], unpack(drop)) end
return 1
`)

// scanIDsScript returns the ids of a shard's msg hash, a page at a time
// (HSCAN), without their envelopes: a sweep of every message costs the
// ids' bytes, not the bodies'.
//
//	KEYS[1] msg HASH
//	ARGV[1] HSCAN cursor ("0" to start)   ARGV[2] COUNT hint
//
// Returns {next cursor, id, ...}; next cursor "0" ends the scan. Every id
// present for the whole scan is returned at least once (HSCAN's promise).
// Complexity: O(COUNT) per call.
var scanIDsScript = redis.NewScript(`
local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local out = {r[1]}
for j = 1, #r[2], 2 do out[#out + 1] = r[2][j] end
return out
`)

// readLayoutScript reads the layout.
//
//	KEYS[1] layout HASH
//
// Returns {hwm, maxever, m, m_index, used M, ...} as raiseLayoutScript.
// Complexity: O(F) for the F fields of the layout (a handful).
var readLayoutScript = redis.NewScript(layoutUsed + `
local f = redis.call('HMGET', KEYS[1], 'hwm', 'maxever', 'm', 'm_index')
local out = {}
for j = 1, 4 do out[j] = tonumber(f[j] or '0') end
for _, u in ipairs(used_ms(KEYS[1])) do out[#out + 1] = u end
return out
`)

// setHighWaterScript moves the high-water mark with a compare-and-set.
//
//	KEYS[1] layout HASH
//	ARGV[1] expected hwm   ARGV[2] new hwm
//
// A new hwm below an M that a producer pinned, and whose pin has not
// expired, is refused. Expired pins stay (settleLayoutScript reads them,
// and deletes those of other Ms).
// Returns 1 when hwm was ARGV[1] and is now ARGV[2], 0 when hwm was not
// ARGV[1], -1 when a pin refused it. Complexity: O(P) for P pinned Ms (a
// handful: one per M producers use).
var setHighWaterScript = redis.NewScript(nowMs + `
local cur = tonumber(redis.call('HGET', KEYS[1], 'hwm') or '0')
if cur ~= tonumber(ARGV[1]) then return 0 end
local new = tonumber(ARGV[2])
local f = redis.call('HGETALL', KEYS[1])
local pinned = 0
for j = 1, #f, 2 do
  local pm = string.match(f[j], '^pin:(%d+)$')
  if pm and tonumber(f[j + 1]) > now and tonumber(pm) > pinned then pinned = tonumber(pm) end
end
if new < pinned then return -1 end
redis.call('HSET', KEYS[1], 'hwm', new)
return 1
`)

// redriveScript sends a dead message again: it becomes due now.
//
//	KEYS[1] dead ZSET   KEYS[2] reason HASH   KEYS[3] due ZSET   KEYS[4] attempts HASH
//	ARGV[1] id   ARGV[2] wake channel   ARGV[3] shard index
//
// Returns 1 when redriven, 0 when the id is not dead in this shard. The
// attempt count is kept; the message is scheduled for now (an operator's
// reschedule). Complexity: O(log N).
var redriveScript = redis.NewScript(nowMs + wakeIfHead + metaOf + `
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
forget_scheduled(KEYS[4], ARGV[1])
wake_if_head(KEYS[3], ARGV[1], now, 2)
return 1
`)

// purgeScript deletes a dead message for good.
//
//	KEYS[1] dead ZSET   KEYS[2] reason HASH   KEYS[3] msg HASH   KEYS[4] attempts HASH
//	ARGV[1] id
//
// Returns 1 when purged, 0 when the id is not dead in this shard.
// Complexity: O(log N).
var purgeScript = redis.NewScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
`)

// retryScript schedules the next step of a consumer's retry schedule, or
// buries the message in the dead set when the schedule is exhausted
// (Producer.Retry).
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET   KEYS[4] attempts HASH
//	KEYS[5] dead ZSET   KEYS[6] reason HASH   KEYS[7] counters HASH
//	ARGV[1] id   ARGV[2] envelope of the next step   ARGV[3] "delay" | "dead"
//	ARGV[4] delay ms, or the reason when dead   ARGV[5] wake channel   ARGV[6] shard index
//
// An id that is scheduled or dead already means this step was done (a
// redelivered copy retried twice): nothing changes. Otherwise the id is
// unknown (acked) or still in flight: the consumer may get a message before
// the scanner's ack. Then the retry takes the message over: it drops the
// lease, so the scanner's ack finds its token gone and deletes nothing.
// A buried message counts in counters.dead, a scheduled step in
// counters.enqueued.
// Returns {status, due}: 1 scheduled, 2 buried, 0 already done.
// Complexity: O(log N).
var retryScript = redis.NewScript(nowMs + wakeIfHead + `
local id = ARGV[1]
if redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[5], id) then return {0, 0} end
redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HSET', KEYS[2], id, ARGV[2])
if ARGV[3] == 'dead' then
  redis.call('ZADD', KEYS[5], now, id)
  redis.call('HSET', KEYS[6], id, ARGV[4])
  redis.call('HINCRBY', KEYS[7], 'dead', 1)
  return {2, 0}
end
local due = now + tonumber(ARGV[4])
redis.call('ZADD', KEYS[1], due, id)
redis.call('HINCRBY', KEYS[7], 'enqueued', 1)
wake_if_head(KEYS[1], id, due, 5)
return {1, due}
`)

// listScript reads one page of a shard's scheduled messages, in due order.
//
//	KEYS[1] due ZSET (or a held set, a class's backlog: the export)
//	KEYS[2] msg HASH   KEYS[3] attempts HASH
//	ARGV[1] the id the last page ended with, or ""
//	ARGV[2] that id's due ms (with no id: start at the first entry due at
//	or after it; 0: at the earliest)   ARGV[3] n, the page size (at most maxListPage)
//
// A page starts just after the last page's id when it is still scheduled
// at that time (ZRANK), else at the first entry due at or after that time
// (so a page may repeat entries that share the due time of an id that left
// the set meanwhile, and never skips one).
// Returns {id, due, envelope|nil, attempts value|nil, ...} for up to n
// entries. Complexity: O(log N + n).
var listScript = redis.NewScript(`
local n = tonumber(ARGV[3])
local start = 0
if ARGV[1] ~= '' or tonumber(ARGV[2]) > 0 then
  local s = ARGV[1] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[1])
  if s and tonumber(s) == tonumber(ARGV[2]) then
    start = redis.call('ZRANK', KEYS[1], ARGV[1]) + 1
  else
    start = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[2])
  end
end
local page = redis.call('ZRANGE', KEYS[1], start, start + n - 1, 'WITHSCORES')
local out = {}
if #page == 0 then return out end
local ids = {}
for j = 1, #page, 2 do ids[#ids + 1] = page[j] end
local envs = redis.call('HMGET', KEYS[2], unpack(ids))
local metas = redis.call('HMGET', KEYS[3], unpack(ids))
for j, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = tonumber(page[2 * j])
  out[#out + 1] = envs[j]
  out[#out + 1] = metas[j]
end
return out
`)

// cancelManyScript cancels several scheduled messages of one shard.
//
//	KEYS[1..4] as cancelScript (it writes no tombstones)
//	KEYS[5] fardir, KEYS[6] farmeta, KEYS[6+j] fidx:<h> of id j: when the
//	far tier is on, a message live far is cancelled there
//	ARGV ids (at most maxCancelMany)
//
// Returns one status per id, as cancelScript's: 1 cancelled, 0 not
// scheduled here, -1 in flight. Complexity: O(n log N).
var cancelManyScript = redis.NewScript(cancelOne + farPrelude + `
local out = {}
for j, id in ipairs(ARGV) do
  out[j] = cancel_one(id)
  if out[j] == 0 and KEYS[6 + j] then
    local b = far_live(KEYS[6 + j], KEYS[5], id)
    if b then
      far_forget(KEYS[6 + j], KEYS[6], id, b)
      out[j] = 1
    end
  end
end
return out
`)

// cancelOne is the prelude of the scripts that cancel several messages:
// cancel_one(id) with KEYS[1..4] as cancelScript's returns 1 cancelled, 0
// not scheduled here, -1 in flight (left alone).
const cancelOne = `
local function cancel_one(id)
  if redis.call('ZSCORE', KEYS[3], id) then return -1 end
  if redis.call('ZREM', KEYS[1], id) == 0 then return 0 end
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[4], id)
  return 1
end
`

// countDone is the prelude of the bulk job scripts: count_done(n) adds n
// to the job's counter KEYS[5], which lives ARGV[1] ms after the call.
const countDone = `
local function count_done(n)
  if n > 0 then
    redis.call('HINCRBY', KEYS[5], 'done', n)
    redis.call('PEXPIRE', KEYS[5], ARGV[1])
  end
end
`

// bulkCancelScript is cancelManyScript for a bulk cancel job: it also
// counts what it cancelled in the job's counter of the shard, in the same
// call, so the count survives its caller (Store.BulkCancel).
//
//	KEYS[1..4] as cancelScript   KEYS[5] the job's counter HASH (BulkKey)
//	ARGV[1] ms the counter lives after this call   ARGV[2..] ids (at most maxCancelMany)
//
// Returns one status per id, as cancelManyScript's. Complexity: O(n log N).
var bulkCancelScript = redis.NewScript(cancelOne + countDone + `
local out, n = {}, 0
for j = 2, #ARGV do
  out[j - 1] = cancel_one(ARGV[j])
  if out[j - 1] == 1 then n = n + 1 end
end
count_done(n)
return out
`)

// bulkRescheduleScript makes scheduled messages of a shard due at one
// time, for a bulk reschedule job, counting them as bulkCancelScript does
// (Store.BulkReschedule). As rescheduleScript, the new time is also the
// time each is scheduled for from now on.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH (unused: the keys of every bulk job)
//	KEYS[3] inflight ZSET   KEYS[4] attempts HASH   KEYS[5] the job's counter HASH
//	ARGV[1] ms the counter lives after this call   ARGV[2] the new due ms
//	ARGV[3] wake channel   ARGV[4] shard index   ARGV[5..] ids (at most maxCancelMany)
//
// Returns one status per id: 1 moved, 0 not scheduled here, -1 in flight,
// 2 scheduled for that time already (not moved, not counted): due then, or
// scheduled then and since claimed (in flight) or set due later by a
// failed publish's retry. A walk that meets a message it moved (the
// scanners took it meanwhile, or a retry put it later in the walk's way)
// so neither counts it twice nor calls it in flight. Publishes one wake
// notice when the shard's head is earlier after the call. Complexity:
// O(n log N).
var bulkRescheduleScript = redis.NewScript(metaOf + countDone + `
local due = ARGV[2]
local before = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
local out, n = {}, 0
for j = 5, #ARGV do
  local id = ARGV[j]
  local s = redis.call('ZSCORE', KEYS[1], id)
  local inflight = redis.call('ZSCORE', KEYS[3], id)
  local sch = nil
  if inflight or s then
    local _, t = meta_of(redis.call('HGET', KEYS[4], id))
    sch = t
  end
  if sch and sch == tonumber(due) then
    out[j - 4] = 2
  elseif inflight then
    out[j - 4] = -1
  elseif not s then
    out[j - 4] = 0
  elseif s == due or tonumber(s) == tonumber(due) then
    out[j - 4] = 2
  else
    redis.call('ZADD', KEYS[1], 'XX', due, id)
    forget_scheduled(KEYS[4], id)
    out[j - 4] = 1
    n = n + 1
  end
end
count_done(n)
if n > 0 and (before[2] == nil or tonumber(due) < tonumber(before[2])) then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. ':' .. due)
end
return out
`)

// bulkRescheduleHeldScript is bulkRescheduleScript for messages flow
// control holds back: it moves them from their topic's held set to the
// due set at the job's time (where the claim holds them again when they
// fall due, if their topic is still limited or paused).
//
//	KEYS[1] held ZSET   KEYS[2] due ZSET   KEYS[3] inflight ZSET (unused: the keys of every bulk job)
//	KEYS[4] attempts HASH   KEYS[5] the job's counter HASH
//	ARGV[1] ms the counter lives after this call   ARGV[2] the new due ms
//	ARGV[3] wake channel   ARGV[4] shard index   ARGV[5..] ids (at most maxCancelMany)
//
// Returns one status per id: 1 moved, 0 not held here, 2 held and due at
// that time already (left, not counted, so a run again counts nothing
// twice). Publishes one wake notice when the shard's head is earlier
// after the call. Complexity: O(n log N).
var bulkRescheduleHeldScript = redis.NewScript(metaOf + countDone + `
local due = ARGV[2]
local before = redis.call('ZRANGE', KEYS[2], '0', '0', 'WITHSCORES')
local out, n = {}, 0
for j = 5, #ARGV do
  local id = ARGV[j]
  local s = redis.call('ZSCORE', KEYS[1], id)
  if not s then
    out[j - 4] = 0
  elseif tonumber(s) == tonumber(due) then
    out[j - 4] = 2
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZADD', KEYS[2], due, id)
    forget_scheduled(KEYS[4], id)
    out[j - 4] = 1
    n = n + 1
  end
end
count_done(n)
if n > 0 and (before[2] == nil or tonumber(due) < tonumber(before[2])) then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. ':' .. due)
end
return out
`)

// heldPageScript reads a page of a held set (or a class's backlog) in
// (due, id) order, after a cursor: what a bulk job's walk reads
// (Store.walkSet).
//
//	KEYS[1] held ZSET
//	ARGV[1] cursor id ("": from ARGV[2] on, inclusive)   ARGV[2] cursor score ("-inf" or ms)
//	ARGV[3] n, the most entries
//
// With a cursor id still in the set, the page is the n entries after it
// by rank; with one gone (released or cancelled meanwhile), the entries
// from its score on that sort after it. Returns {id, score, ...}.
// Complexity: O(log N + n), plus the entries of the cursor's score that
// sort before it when the cursor is gone.
var heldPageScript = redis.NewScript(byteAfter + `
local n = tonumber(ARGV[3])
if ARGV[1] == '' then
  return redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', '0', n)
end
local r = redis.call('ZRANK', KEYS[1], ARGV[1])
if r then
  return redis.call('ZRANGE', KEYS[1], r + 1, r + n, 'WITHSCORES')
end
local out, off, cs = {}, 0, tonumber(ARGV[2])
while #out < 2 * n do
  local page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', off, n)
  if #page == 0 then break end
  for j = 1, #page, 2 do
    if #out < 2 * n and (tonumber(page[j + 1]) > cs or byte_after(page[j], ARGV[1])) then
      out[#out + 1], out[#out + 2] = page[j], page[j + 1]
    end
  end
  off = off + #page / 2
end
return out
`)

// heartbeatScript renews (or ends) a scanner process's membership and
// returns the live members.
//
//	KEYS[1] scanners ZSET (ScannersKey)
//	ARGV[1] process id   ARGV[2] ms it counts as alive from now; 0: it leaves
//
// Members whose time has passed (processes that died) are removed first;
// a process that stops removes itself. Returns the live ids in order.
// Complexity: O(P log P) for P processes; four commands, TIME included.
var heartbeatScript = redis.NewScript(nowMs + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
table.sort(ids)
return ids
`)

// allScripts is what Store.Load loads, so pipelines can use EVALSHA.
var allScripts = []*redis.Script{heartbeatScript,
	enqueueScript, enqueueManyScript, claimScript, unclaimScript, farPlaceScript, farPlaceManyScript, farSealScript, farPromoteScript, farDropScript, farCompactScript, farRescheduleScript, farBulkCancelScript, ackScript, releaseScript, deadLetterScript,
	cancelScript, rescheduleScript, inspectScript, statsScript, raiseLayoutScript, readLayoutScript, setHighWaterScript,
	redriveScript, purgeScript, retryScript, listScript, cancelManyScript, settleLayoutScript, scanIDsScript,
	bulkCancelScript, bulkRescheduleScript, claimHoldScript, claimHeldScript, grantScript, refundScript, flowSetScript,
	flowForgetScript, cancelHeldScript, bulkRescheduleHeldScript, heldPageScript, preHoldScript,
}
