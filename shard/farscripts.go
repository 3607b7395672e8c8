package shard

import "github.com/redis/go-redis/v9"

// The scripts of the far-future tier (doc.go, "The far-future tier"; far.go
// runs them). Every key of a call is in one shard's slot: a far bucket
// far:<b>, the shard's bucket directory fardir and farmeta, and the index
// keys fidx:<h> of the ids concerned.

// farPrelude is shared by the far scripts and by the near scripts that
// must see far messages (enqueue, cancel):
//
//   - far_live(idx, dir, id): the live index entry of id, as its bucket
//     and sequence (strings), or nil. An entry whose bucket is no longer
//     in the directory is deleted and counts as absent: the directory,
//     not the index, says what exists.
//   - far_count(meta): the shard's far messages (0 with no meta key: the
//     tier is off).
//   - far_forget(idx, meta, id, b): delete id's entry of bucket b, and
//     count it out of the shard's and the bucket's live counts.
//   - far_record(id, offset, seq, env): a record as AppendFarRecord
//     writes it (farrecord.go), for RPUSH.
//   - far_parse(rec): id, due offset, sequence and envelope of a record,
//     or nil.
const farPrelude = `
local function far_live(idx, dir, id)
  local v = redis.call('HGET', idx, id)
  if not v then return nil end
  local b, q = string.match(v, '^(%-?%d+):(%d+)$')
  if b and redis.call('ZSCORE', dir, b) then return b, q end
  redis.call('HDEL', idx, id)
  return nil
end
local function far_count(meta)
  if not meta then return 0 end
  return tonumber(redis.call('HGET', meta, 'live')) or 0
end
local function far_forget(idx, meta, id, b)
  redis.call('HDEL', idx, id)
  redis.call('HINCRBY', meta, 'live', -1)
  redis.call('HINCRBY', meta, 'live:' .. b, -1)
end
local function uvarint(n)
  if n < 128 then return string.char(n) end
  if n < 16384 then return string.char(n % 128 + 128, math.floor(n / 128)) end
  if n < 2097152 then return string.char(n % 128 + 128, math.floor(n / 128) % 128 + 128, math.floor(n / 16384)) end
  if n < 268435456 then
    return string.char(n % 128 + 128, math.floor(n / 128) % 128 + 128, math.floor(n / 16384) % 128 + 128, math.floor(n / 2097152))
  end
  local t = {}
  while n >= 128 do
    t[#t + 1] = string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  t[#t + 1] = string.char(n)
  return table.concat(t)
end
local function read_uvarint(s, p)
  local n, mul = 0, 1
  while p <= #s do
    local c = string.byte(s, p)
    n = n + (c % 128) * mul
    p = p + 1
    if c < 128 then return n, p end
    mul = mul * 128
  end
  return nil, p
end
local function far_record(id, off, seq, env)
  local l, o, q = uvarint(#id), uvarint(off), uvarint(seq)
  return uvarint(#l + #id + #o + #q + #env) .. l .. id .. o .. q .. env
end
local function far_parse(rec)
  local _, p = read_uvarint(rec, 1)
  if not _ then return nil end
  local n
  n, p = read_uvarint(rec, p)
  if not n then return nil end
  local id = string.sub(rec, p, p + n - 1)
  p = p + n
  local off, seq
  off, p = read_uvarint(rec, p)
  if not off then return nil end
  seq, p = read_uvarint(rec, p)
  if not seq then return nil end
  return id, off, seq, string.sub(rec, p)
end
`

// farPlace is the placement of messages of one shard (farPlaceScript
// says what it does and returns), with KEYS[1..8] the shard's near keys as
// the enqueue script has them. A call's writes are gathered: the records
// of a bucket go in one RPUSH, the counts and directory entries once a
// call (whatever the number of buckets: a few calls in all), the near
// check of every id in one HMGET, and the index entry of a new id is
// written by the HSETNX that checks it; what is left per message is that
// HSETNX, and per bucket its RPUSH (BenchmarkEnqueue's far rows):
//
//   - far_begin(dir, meta, compact, block, n, w, h, cap, since, ids,
//     buckets): the state of a call that places the n messages ids into
//     buckets. It takes n sequence numbers at once, and reads the
//     tombstones' existence, the shard's count and the buckets' seals once.
//   - far_place(st, j, idx, bucket, id, env, mode, ms, b, upsert): message
//     j; returns status and value.
//   - far_end(st): the records, counts and directory entries, written; a
//     bucket whose raw records reach a block goes on the compaction list
//     (farcompact: farcompact.go).
const farPlace = `
local function far_begin(dir, meta, compact, block, n, w, h, cap, since, ids, buckets)
  -- A value longer than hash-max-listpack-value keeps farmeta a hash
  -- table: its per-bucket fields are read and written dozens at a time,
  -- which in a listpack is a scan of the whole hash for each.
  redis.call('HSETNX', meta, 'kind', 'the far tier counts of one shard (a hash table: fields are read dozens at a time)')
  local st = {dir = dir, meta = meta, compact = compact, block = block, w = w, h = h, cap = cap, since = since,
    seq = redis.call('HINCRBY', meta, 'seq', n) - n, tombs = redis.call('EXISTS', KEYS[8]) == 1,
    near = redis.call('HMGET', KEYS[2], unpack(ids)),
    sealed = {}, starts = {}, push = {}, bucket = {}, live = {}, nlive = 0, created = 0, held = 0}
  local fields, seen = {}, {}
  for _, bs in ipairs(buckets) do
    if not seen[bs] then
      seen[bs] = true
      fields[#fields + 1] = bs
    end
  end
  -- sealed:<b> and live:<b> of each bucket, in one read: a bucket with a
  -- live count is in the directory already (the two are written and
  -- deleted together), so far_end adds only the new ones.
  local ask = {}
  for j, bs in ipairs(fields) do ask[2 * j - 1], ask[2 * j] = 'sealed:' .. bs, 'live:' .. bs end
  local got = redis.call('HMGET', meta, unpack(ask))
  st.listed = {}
  for j, bs in ipairs(fields) do
    st.sealed[bs] = got[2 * j - 1] ~= false
    st.listed[bs] = got[2 * j] ~= false
  end
  if cap > 0 then
    st.held = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[3]) + (tonumber(redis.call('HGET', meta, 'live')) or 0)
  end
  return st
end
-- far_live of this call: a bucket it created is live before far_end
-- writes its directory entry.
local function far_live_st(st, idx, id)
  local v = redis.call('HGET', idx, id)
  if not v then return nil end
  local b, q = string.match(v, '^(%-?%d+):(%d+)$')
  if b and (st.starts[b] or redis.call('ZSCORE', st.dir, b)) then return b, q end
  redis.call('HDEL', idx, id)
  return nil
end
local function far_place(st, j, idx, bucket, id, env, mode, ms, bs, upsert)
  local due = tonumber(ms)
  if mode == 'delay' then due = now + due end
  local b = math.floor(due / st.w)
  if b ~= tonumber(bs) then return 5, b end
  local start = b * st.w
  if now < st.since or start < now + st.h then return 4, due end
  if st.sealed[bs] then return 4, due end
  local status = 1
  if st.near[j] and redis.call('HEXISTS', KEYS[2], id) == 1 then
    if not upsert then return 0, 0 end
    if redis.call('ZSCORE', KEYS[3], id) then return -1, 0 end
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
    redis.call('HDEL', KEYS[6], id)
    status = 2
  end
  local val = bs .. ':' .. string.format('%d', st.seq + 1)
  if redis.call('HSETNX', idx, id, val) == 0 then
    local fb, fq = far_live_st(st, idx, id)
    if fb and not upsert then
      if fb == bs then
        for _, rec in ipairs(redis.call('LRANGE', bucket, '-16', '-1')) do
          local rid, off, seq, renv = far_parse(rec)
          if rid == id and seq == tonumber(fq) and renv == env then return 3, start + off end
        end
      end
      return 0, 0
    end
    if fb then
      far_forget(idx, st.meta, id, fb)
      status = 2
    end
    redis.call('HSET', idx, id, val)
  end
  if status == 1 then
    if st.tombs and cancelled_ahead(KEYS[8], id) then
      redis.call('HDEL', idx, id)
      return -3, 0
    end
    if st.cap > 0 and st.held >= st.cap then
      redis.call('HDEL', idx, id)
      return -2, 0
    end
    st.held = st.held + 1
    st.created = st.created + 1
  end
  st.seq = st.seq + 1
  local p = st.push[bs]
  if not p then
    p = {}
    st.push[bs], st.bucket[bs] = p, bucket
  end
  p[#p + 1] = far_record(id, due - start, st.seq, env)
  st.starts[bs] = start
  st.live[bs] = (st.live[bs] or 0) + 1
  st.nlive = st.nlive + 1
  return status, due
end
local function far_end(st)
  if st.nlive == 0 then return end
  -- RPUSH answers the list's length: the bucket's raw records, which
  -- put it on the compaction list once they make a block.
  local full = {}
  for bs, recs in pairs(st.push) do
    if redis.call('RPUSH', st.bucket[bs], unpack(recs)) >= st.block then
      full[#full + 1], full[#full + 2] = string.format('%d', st.starts[bs]), bs
    end
  end
  if #full > 0 then redis.call('ZADD', st.compact, unpack(full)) end
  -- The counts of every bucket written, read and written in one call
  -- each: live, then live:<b> for each bucket.
  local dirs, fields, adds = {}, {'live'}, {st.nlive}
  for bs, start in pairs(st.starts) do
    if not st.listed[bs] then dirs[#dirs + 1], dirs[#dirs + 2] = string.format('%d', start), bs end
    fields[#fields + 1], adds[#adds + 1] = 'live:' .. bs, st.live[bs]
  end
  if #dirs > 0 then redis.call('ZADD', st.dir, unpack(dirs)) end
  local had = redis.call('HMGET', st.meta, unpack(fields))
  local set = {}
  for j, f in ipairs(fields) do set[2 * j - 1], set[2 * j] = f, (tonumber(had[j]) or 0) + adds[j] end
  redis.call('HSET', st.meta, unpack(set))
  if st.created > 0 then redis.call('HINCRBY', KEYS[7], 'enqueued', st.created) end
end
`

// farPlaceScript puts a message in its far bucket, or says it belongs near.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET
//	KEYS[4] attempts HASH   KEYS[5] dead ZSET   KEYS[6] reason HASH
//	KEYS[7] counters HASH   KEYS[8] cancelled ZSET   KEYS[9] fidx:<h> of the id
//	KEYS[10] fardir ZSET   KEYS[11] farmeta HASH   KEYS[12] far:<b> LIST
//	ARGV[1] id   ARGV[2] envelope   ARGV[3] "delay" | "at"   ARGV[4] ms
//	ARGV[5] "1" to replace (upsert)   ARGV[6] b, the bucket of KEYS[12]
//	ARGV[7] bucket width ms   ARGV[8] horizon ms
//	ARGV[9] most messages this shard may hold, 0 = no limit
//	ARGV[10] when the tier started placing (unix ms, Redis clock)
//	KEYS[13] farcompact ZSET   ARGV[11] records a compressed block holds
//
// The due time is computed from Redis TIME. When it is not in bucket b
// the reply is {5, its bucket}: nothing written, the caller sends it
// again with that bucket. When the bucket starts less than the horizon
// after now, is sealed for promotion, or the tier has not started
// placing yet, the reply is {4, due}: nothing written, the caller
// enqueues it near. Otherwise the id is checked as the near enqueue
// checks it, near and far (a duplicate {0, 0}; an upsert replaces a far
// copy or a near one that is not in flight, {-1, 0} if it is; a tombstone
// {-3, 0}; a full shard {-2, 0}, far messages counted), and the record
// goes to the tail of the bucket with a new sequence number, its index
// entry naming "<b>:<seq>": {1, due} created, {2, due} replaced, {3, due}
// stored already by this very write (a live far record of this id in
// this bucket among its last 16 has the same envelope: go-redis sent the
// call again after a lost reply; due is the stored one).
// Complexity: O(1) for the far write, O(log N) for the near checks.
var farPlaceScript = redis.NewScript(farPlacePreludes + farPlaceBody)

const farPlacePreludes = nowMs + cancelledAhead + farPrelude + farPlace

const farPlaceBody = `
local st = far_begin(KEYS[10], KEYS[11], KEYS[13], tonumber(ARGV[11]), 1, tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), {ARGV[1]}, {ARGV[6]})
local status, v = far_place(st, 1, KEYS[9], KEYS[12], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6], ARGV[5] == '1')
far_end(st)
return {status, v}
`

// farPlaceManyScript is farPlaceScript for several messages of one shard
// in one call, each in its own bucket: what EnqueueBatch sends.
//
//	KEYS[1..8] as farPlaceScript   KEYS[9] fardir   KEYS[10] farmeta
//	KEYS[11] farcompact
//	KEYS[10+2j] fidx:<h> of message j   KEYS[11+2j] its far:<b> LIST
//	ARGV[1] n   ARGV[2] bucket width ms   ARGV[3] horizon ms
//	ARGV[4] most messages this shard may hold, 0 = no limit
//	ARGV[5] "1" to replace (upsert)   ARGV[6] when the tier started placing
//	ARGV[7] records a compressed block holds
//	then for message j = 1..n, from a = 8 + 5*(j-1): ARGV[a] id
//	ARGV[a+1] envelope   ARGV[a+2] "delay" | "at"   ARGV[a+3] ms   ARGV[a+4] b
//
// Returns {status_1, value_1, ...}, each as farPlaceScript returns it.
// An id given twice is placed twice, the second as its own call would
// (the producer answers a duplicate within a batch before it sends it).
// Complexity: O(n log N).
var farPlaceManyScript = redis.NewScript(farPlacePreludes + farPlaceManyBody)

const farPlaceManyBody = `
local n = tonumber(ARGV[1])
local ids, bs = {}, {}
for j = 1, n do ids[j], bs[j] = ARGV[8 + 5 * (j - 1)], ARGV[12 + 5 * (j - 1)] end
local st = far_begin(KEYS[9], KEYS[10], KEYS[11], tonumber(ARGV[7]), n, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6]), ids, bs)
local upsert = ARGV[5] == '1'
local out = {}
for j = 1, n do
  local a = 8 + 5 * (j - 1)
  out[2 * j - 1], out[2 * j] = far_place(st, j, KEYS[10 + 2 * j], KEYS[11 + 2 * j], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], upsert)
end
far_end(st)
return out
`

// farSealScript seals bucket b for promotion: from now on placement sends
// its times near, so the records its promoter reads are all it will ever
// hold.
//
//	KEYS[1] fardir ZSET   KEYS[2] farmeta HASH   ARGV[1] b
//
// Returns 1 sealed (or sealed already), 0 the bucket does not exist.
// Complexity: O(1).
var farSealScript = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], 'sealed:' .. ARGV[1], '1')
return 1
`)

// farPromoteScript moves records of sealed bucket b into the due ZSET and
// msg hash, each only while its index entry still names it.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] farmeta HASH
//	KEYS[4] dead ZSET   KEYS[5] reason HASH   KEYS[6] counters HASH
//	KEYS[6+j] fidx:<h> of record j
//	ARGV[1] b   ARGV[2] wake channel   ARGV[3] shard index   ARGV[4] n
//	then for record j = 1..n, from a = 5 + 5*(j-1): ARGV[a] id
//	ARGV[a+1] sequence ('' when it did not decode)   ARGV[a+2] due ms
//	ARGV[a+3] envelope (the record's bytes when it did not decode)
//	ARGV[a+4] '' or, for a record that did not decode, why
//
// A record whose index entry is "<b>:<seq>" goes to the due set at its
// due time with its envelope, and the entry is deleted: a record replaced
// (upsert, reschedule) or cancelled since, or moved by an earlier run of
// this call, is skipped, so a rerun after a crash doubles nothing. An id
// near already (which placement never allows) keeps its near message.
// A record that did not decode, whose index entry names bucket b, goes to
// the dead set with its reason and its bytes as the envelope. Moves are
// counted out of the live counts; a new head of the due set is announced.
// Returns {moved, dead}. Complexity: O(n log N).
var farPromoteScript = redis.NewScript(nowMs + `
local b = ARGV[1]
local n = tonumber(ARGV[4])
local before = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
local moved, dead, gone, first = 0, 0, 0, nil
for j = 1, n do
  local a = 5 + 5 * (j - 1)
  local id, why = ARGV[a], ARGV[a + 4]
  local idx = KEYS[6 + j]
  local v = redis.call('HGET', idx, id)
  local mine
  if why == '' then
    mine = v == b .. ':' .. ARGV[a + 1]
  else
    mine = v and string.sub(v, 1, #b + 1) == b .. ':'
  end
  if mine then
    redis.call('HDEL', idx, id)
    gone = gone + 1
    if redis.call('HEXISTS', KEYS[2], id) == 0 then
      redis.call('HSET', KEYS[2], id, ARGV[a + 3])
      if why == '' then
        local due = tonumber(ARGV[a + 2])
        redis.call('ZADD', KEYS[1], ARGV[a + 2], id)
        if not first or due < first then first = due end
        moved = moved + 1
      else
        redis.call('ZADD', KEYS[4], now, id)
        redis.call('HSET', KEYS[5], id, why)
        redis.call('HINCRBY', KEYS[6], 'dead', 1)
        dead = dead + 1
      end
    end
  end
end
if gone > 0 then
  redis.call('HINCRBY', KEYS[3], 'live', -gone)
  redis.call('HINCRBY', KEYS[3], 'live:' .. b, -gone)
end
if first and (before[2] == nil or first < tonumber(before[2])) then
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. ':' .. string.format('%d', first))
end
return {moved, dead}
`)

// farDropScript deletes sealed bucket b once every record of it was
// handed to farPromoteScript.
//
//	KEYS[1] far:<b> LIST   KEYS[2] fardir ZSET   KEYS[3] farmeta HASH
//	KEYS[4] farz:<b> LIST   KEYS[5] farcompact ZSET   ARGV[1] b
//
// Entries still counted live in b (records whose id could not be read)
// leave the shard's live count; their index entries, if any, are absent
// from now on (far_live). Returns that count, or -1 when the bucket is
// not sealed (nothing deleted). Complexity: O(1) (UNLINK frees the list
// in the background).
var farDropScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[3], 'sealed:' .. ARGV[1]) == 0 then return -1 end
local left = tonumber(redis.call('HGET', KEYS[3], 'live:' .. ARGV[1])) or 0
redis.call('UNLINK', KEYS[1], KEYS[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[3], 'sealed:' .. ARGV[1], 'live:' .. ARGV[1])
if left ~= 0 then redis.call('HINCRBY', KEYS[3], 'live', -left) end
return left
`)

// farCancel is the far part of cancelScript (KEYS[6] fidx:<h> of the id,
// KEYS[7] fardir, KEYS[8] farmeta, when the tier is on): a live far entry
// is forgotten, which cancels the message (promotion skips its record).
const farCancel = `
local function far_cancel(id)
  if not KEYS[6] then return false end
  local b = far_live(KEYS[6], KEYS[7], id)
  if not b then return false end
  far_forget(KEYS[6], KEYS[8], id, b)
  return true
end
`

// farCompactScript replaces the first n raw records of bucket b with one
// compressed block of them (farcompact.go), unless the bucket was sealed
// or its head changed since the compactor read it.
//
//	KEYS[1] far:<b> LIST   KEYS[2] farz:<b> LIST   KEYS[3] farmeta HASH
//	KEYS[4] farcompact ZSET
//	ARGV[1] b   ARGV[2] n   ARGV[3] the first record read   ARGV[4] the
//	n-th   ARGV[5] the block   ARGV[6] records a block holds
//
// Records are unique (each has its own sequence number), appended at the
// tail and removed from the head only here, so a head whose first and
// n-th records are the ones read is the run read. The bucket leaves the
// compaction list when fewer than a block's records are raw.
// Returns 1 compacted, 0 sealed or changed (nothing written).
// Complexity: O(n) to trim the list.
var farCompactScript = redis.NewScript(`
local b, n = ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', KEYS[3], 'sealed:' .. b) == 1 then return 0 end
if redis.call('LINDEX', KEYS[1], '0') ~= ARGV[3] or redis.call('LINDEX', KEYS[1], n - 1) ~= ARGV[4] then return 0 end
redis.call('LTRIM', KEYS[1], n, '-1')
redis.call('RPUSH', KEYS[2], ARGV[5])
if redis.call('LLEN', KEYS[1]) < tonumber(ARGV[6]) then redis.call('ZREM', KEYS[4], b) end
return 1
`)

// farRescheduleScript moves a far message to a new due time: to another
// far bucket, or near.
//
//	KEYS[1..8] as farPlaceScript   KEYS[9] fidx:<h> of the id
//	KEYS[10] fardir ZSET   KEYS[11] farmeta HASH   KEYS[12] far:<b> LIST of
//	the new due time's bucket   KEYS[13] farcompact ZSET
//	ARGV[1] id   ARGV[2] "<b>:<seq>", the record read   ARGV[3] its envelope
//	ARGV[4] "delay" | "at"   ARGV[5] ms   ARGV[6] b, the new bucket
//	ARGV[7] bucket width ms   ARGV[8] horizon ms   ARGV[9] since
//	ARGV[10] records a block holds   ARGV[11] wake channel   ARGV[12] shard index
//	KEYS[14] (optional) a bulk job's counter HASH (BulkKey), which a move
//	counts in   ARGV[13] ms the counter lives after this call
//
// Only while the index still names the record read (the message was not
// cancelled, replaced or promoted since: {0, 0}, the caller looks again):
// the record is replaced by one with the new due time in its bucket when
// that is far (as an upsert places it), or the message goes near, into
// the due set and msg hash (a new head announced). The envelope, and so
// its enqueue time, stays. Returns {1, due}. Complexity: O(log N).
var farRescheduleScript = redis.NewScript(nowMs + wakeIfHead + cancelledAhead + farPrelude + farPlace + `
local function count_job()
  if KEYS[14] then
    redis.call('HINCRBY', KEYS[14], 'done', 1)
    redis.call('PEXPIRE', KEYS[14], ARGV[13])
  end
end
local id = ARGV[1]
local fb, fq = far_live(KEYS[9], KEYS[10], id)
if not fb or fb .. ':' .. fq ~= ARGV[2] then return {0, 0} end
local st = far_begin(KEYS[10], KEYS[11], KEYS[13], tonumber(ARGV[10]), 1, tonumber(ARGV[7]), tonumber(ARGV[8]), 0, tonumber(ARGV[9]), {id}, {ARGV[6]})
local status, v = far_place(st, 1, KEYS[9], KEYS[12], id, ARGV[3], ARGV[4], ARGV[5], ARGV[6], true)
if status == 4 or status == 5 then
  far_forget(KEYS[9], KEYS[11], id, fb)
  local due = tonumber(ARGV[5])
  if ARGV[4] == 'delay' then due = now + due end
  redis.call('HSET', KEYS[2], id, ARGV[3])
  redis.call('ZADD', KEYS[1], due, id)
  wake_if_head(KEYS[1], id, due, 11)
  count_job()
  return {1, due}
end
far_end(st)
count_job()
return {1, v}
`)

// farBulkCancelScript cancels far messages for a bulk cancel job, each
// only while the index still names the record the job read, and counts
// them in the job's counter of the shard (as bulkCancelScript does).
//
//	KEYS[1] fardir ZSET   KEYS[2] farmeta HASH   KEYS[3] the job's counter
//	HASH (BulkKey)   KEYS[3+j] fidx:<h> of message j
//	ARGV[1] ms the counter lives after this call
//	ARGV[2j] id of message j   ARGV[2j+1] "<b>:<seq>", its record read
//
// Returns one status per message: 1 cancelled, 0 not (cancelled,
// replaced or promoted since the read). Complexity: O(n).
var farBulkCancelScript = redis.NewScript(farPrelude + `
local out, n = {}, 0
for j = 1, (#ARGV - 1) / 2 do
  local id, entry = ARGV[2 * j], ARGV[2 * j + 1]
  local b, q = far_live(KEYS[3 + j], KEYS[1], id)
  if b and b .. ':' .. q == entry then
    far_forget(KEYS[3 + j], KEYS[2], id, b)
    out[j], n = 1, n + 1
  else
    out[j] = 0
  end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[3], 'done', n)
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
end
return out
`)
