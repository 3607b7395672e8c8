package shard

import "github.com/redis/go-redis/v9"

// The scripts of flow control at release (flow.go): holding a limited or
// paused topic's due messages apart, releasing them at the topic's rate,
// and the topic's token bucket. Each touches the keys of one slot.

// leaseAll is how the flow scripts lease what they take, as the claim
// does: ids[i] (scored scores[i], its due or held score as Redis printed
// it, with envelope envs[i]) go into the inflight ZSET inflight_key until
// now + lease ms, their scheduled time is kept in attempts_key, and each
// adds its five reply fields to out. It returns the deadline.
const leaseAll = `
local function lease_all(inflight_key, attempts_key, ids, scores, envs, lease, out)
  local deadline = now + lease
  local dl = string.format('%d', deadline)
  local leases = {}
  for i, id in ipairs(ids) do leases[2 * i - 1], leases[2 * i] = dl, id end
  redis.call('ZADD', inflight_key, unpack(leases))
  local metas = redis.call('HMGET', attempts_key, unpack(ids))
  local upd = {}
  for i, id in ipairs(ids) do
    local a, s, rf = meta_of(metas[i])
    if not s then s = tonumber(scores[i]) end
    upd[2 * i - 1], upd[2 * i] = id, meta(a, s, rf)
    out[#out + 1] = id
    out[#out + 1] = deadline
    out[#out + 1] = s
    out[#out + 1] = envs[i]
    out[#out + 1] = a
  end
  redis.call('HSET', attempts_key, unpack(upd))
  return deadline
end
`

// byteAfter is byte_after(a, b): whether string a sorts after b byte by
// byte, as a sorted set orders members of equal score (Lua's own string
// comparison follows the server's locale).
const byteAfter = `
local function byte_after(a, b)
  local la, lb = #a, #b
  for p = 1, math.min(la, lb) do
    local x, y = string.byte(a, p), string.byte(b, p)
    if x ~= y then return x > y end
  end
  return la > lb
end
`

// topicOf reads the topic of an envelope (format 1 or 2: the version
// byte, the enqueue time as a varint, then the topic as a uvarint length
// and its bytes) without decoding the rest. nil for anything else: the
// claim hands such a message on, and the scanner dead-letters it as
// corrupt.
const topicOf = `
local function topic_of(env)
  if not env then return nil end
  local v = string.byte(env, 1)
  if v ~= 1 and v ~= 2 then return nil end
  local p = 2
  repeat
    local b = string.byte(env, p)
    if not b then return nil end
    p = p + 1
  until b < 128
  local len, mul = 0, 1
  repeat
    local b = string.byte(env, p)
    if not b or mul > 2097152 then return nil end
    p = p + 1
    len = len + (b % 128) * mul
    mul = mul * 128
  until b < 128
  if p + len - 1 > #env then return nil end
  return string.sub(env, p, p + len - 1)
end
`

// claimHoldScript is the claim (claimScript) of a namespace with topics
// under flow control: it sets the due messages of those topics apart, so
// that they wait for their topic's releaser without blocking anything
// behind them, and claims the others as the claim does.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET   KEYS[4] attempts HASH
//	KEYS[4+j] the held ZSET of controlled topic j (j = 1..t)
//	ARGV[1] k, the most messages to claim (>= 1)   ARGV[2] lease ms
//	ARGV[3] r, the most expired leases to re-queue (>= 1)
//	ARGV[4] h, the most entries to set apart in this call (>= 1)
//	ARGV[5] t   ARGV[5+j] the name of controlled topic j
//	ARGV[6+t] the claim's nonce (optional: without it, no receipt)
//	KEYS[5+t] the claim's receipt STRING (with ARGV[6+t]; receipts.go)
//
// After the reaper, it reads the due entries in due order (score <= now,
// k at first, then up to k + 32 a read), reads their topics from their envelopes
// (topicOf), moves each entry of a controlled topic into that topic's held
// set with its due time as score (up to h a call), and leases the others,
// up to k, exactly as the claim does. An entry read but neither moved nor
// leased stays where it was.
//
// Returns {now, head, reaped, lease head, held, id, token, scheduled,
// envelope|nil, attempts, ...}: the claim's reply with, fifth, the number
// of entries set apart by this call.
// Complexity: O((k + h + r) log N).
var claimHoldScript = redis.NewScript(nowMs + metaOf + reapExpired + leaseAll + topicOf + receiptPrelude + holdThenLease + `
local k, h, t = tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local held = {}
for j = 1, t do held[ARGV[5 + j]] = KEYS[4 + j] end
local reaped, lh = reap(tonumber(ARGV[3]))
local out = {now, -1, reaped, -1, 0}
if #lh > 0 then out[4] = tonumber(lh[2]) end
local ids, scores, envs = {}, {}, {}
out[5] = hold_then_lease(k, h, held, ids, scores, envs)
local head = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
if #head > 0 then out[2] = tonumber(head[2]) end
if #ids > 0 then
  local deadline = lease_all(KEYS[3], KEYS[4], ids, scores, envs, tonumber(ARGV[2]), out)
  if out[4] < 0 or deadline < out[4] then out[4] = deadline end
  receipt(KEYS[5 + t], ARGV[6 + t], deadline, ids, ARGV[2])
end
return out
`)

// holdThenLease is hold_then_lease(k, h, held, ids, scores, envs), the
// claim of a namespace with topics under flow control (claimHoldScript,
// and claimFairScript while its shard is not behind): it reads the due
// entries of the due set KEYS[1] in due order (score <= now, k at first,
// then up to k + 32 a read), reads their topics from their envelopes in
// the msg hash KEYS[2] (topicOf), moves each entry of a topic in held
// (topic -> its held ZSET) into that set with its due time as score (up
// to h a call), and appends the others, up to k, to ids, scores and envs
// for lease_all. An entry read but neither moved nor taken stays where it
// was. It returns how many entries it moved.
const holdThenLease = `
local function hold_then_lease(k, h, held, ids, scores, envs)
  local moved, full, ahead = 0, false, 0
  while #ids < k and not full do
    -- The first read takes what a claim takes; once entries to set apart
    -- turn up, reads go further ahead.
    local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', '0', k - #ids + ahead)
    ahead = 32
    if #due == 0 then break end
    local batch = {}
    for j = 1, #due / 2 do batch[j] = due[2 * j - 1] end
    local es = redis.call('HMGET', KEYS[2], unpack(batch))
    local taken, adds = {}, {}
    for j, id in ipairs(batch) do
      local topic = topic_of(es[j])
      local hk = topic and held[topic]
      if hk then
        if moved >= h then full = true break end
        local a = adds[hk]
        if not a then a = {} adds[hk] = a end
        a[#a + 1], a[#a + 2] = due[2 * j], id
        moved = moved + 1
      elseif #ids < k then
        ids[#ids + 1], scores[#scores + 1], envs[#envs + 1] = id, due[2 * j], es[j]
      else
        break
      end
      taken[#taken + 1] = id
    end
    if #taken == 0 then break end
    for hk, a in pairs(adds) do redis.call('ZADD', hk, unpack(a)) end
    redis.call('ZREM', KEYS[1], unpack(taken))
  end
  return moved
end
`

// preHoldScript sets apart, ahead of time, the entries of controlled
// topics that fall due within the next lookahead ms, so that when they
// fall due the claims do not have to step over them first: a limited
// backlog due at one instant no longer delays what falls due behind it
// by the time it takes to set it apart. A per-shard cursor in Redis
// makes the work shared: whichever scanner runs the script goes on where
// the last one stopped, and each entry is read about once. What is
// enqueued behind the cursor is set apart by the claim (claimHoldScript).
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] cursor HASH (score, id)
//	KEYS[3+j] the held ZSET of controlled topic j (j = 1..t)
//	ARGV[1] lookahead ms   ARGV[2] n, the most entries to read (>= 1)
//	ARGV[3] t   ARGV[3+j] the name of controlled topic j
//
// It reads, in (due, id) order, up to n entries due after the Redis
// clock and at most lookahead ms after it, starting after the cursor
// (after the clock when the cursor is behind it or missing), reads their
// topics from their envelopes (topicOf) and moves those of controlled
// topics into their held sets, scored by their due time. The cursor
// becomes the last entry read. Entries due now or earlier are the
// claim's.
// Returns {read, moved, full}: full is 1 when it stopped at n.
// Complexity: O(n log N), plus, when the cursor's entry has left the due
// set, the entries of the cursor's due time that sort before it (at most
// 4n, then the cursor moves on).
var preHoldScript = redis.NewScript(nowMs + topicOf + byteAfter + `
local ahead, n, t = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local held = {}
for j = 1, t do held[ARGV[3 + j]] = KEYS[3 + j] end
local horizon = now + ahead
local cur = redis.call('HMGET', KEYS[3], 'score', 'id')
local cs, cid = tonumber(cur[1]), cur[2]
local page = {}
if not cs or not cid or cs <= now then
  page = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, horizon, 'WITHSCORES', 'LIMIT', '0', n)
else
  local r = redis.call('ZRANK', KEYS[1], cid)
  if r then
    local got = redis.call('ZRANGE', KEYS[1], r + 1, r + n, 'WITHSCORES')
    for j = 1, #got, 2 do
      if tonumber(got[j + 1]) > horizon then break end
      page[#page + 1], page[#page + 2] = got[j], got[j + 1]
    end
  else -- its entry left the due set: from its due time on, after it
    local off, skipped, last = 0, 0, nil
    while #page < 2 * n and skipped < 4 * n do
      local got = redis.call('ZRANGEBYSCORE', KEYS[1], cs, horizon, 'WITHSCORES', 'LIMIT', off, n)
      if #got == 0 then break end
      for j = 1, #got, 2 do
        if tonumber(got[j + 1]) > cs or byte_after(got[j], cid) then
          if #page < 2 * n then page[#page + 1], page[#page + 2] = got[j], got[j + 1] end
        else
          skipped, last = skipped + 1, got[j]
        end
      end
      off = off + #got / 2
    end
    if #page == 0 and last then
      -- Only entries before the cursor so far: go on by rank from the
      -- last of them (still in the set) next time.
      redis.call('HSET', KEYS[3], 'score', cs, 'id', last)
      return {0, 0, 1}
    end
  end
end
if #page == 0 then return {0, 0, 0} end
local ids = {}
for j = 1, #page / 2 do ids[j] = page[2 * j - 1] end
local es = redis.call('HMGET', KEYS[2], unpack(ids))
local adds, gone = {}, {}
for j, id in ipairs(ids) do
  local topic = topic_of(es[j])
  local hk = topic and held[topic]
  if hk then
    local a = adds[hk]
    if not a then a = {} adds[hk] = a end
    a[#a + 1], a[#a + 2] = page[2 * j], id
    gone[#gone + 1] = id
  end
end
for hk, a in pairs(adds) do redis.call('ZADD', hk, unpack(a)) end
if #gone > 0 then redis.call('ZREM', KEYS[1], unpack(gone)) end
redis.call('HSET', KEYS[3], 'score', page[#page], 'id', page[#page - 1])
local full = 0
if #ids >= n then full = 1 end
return {#ids, #gone, full}
`)

// claimHeldScript releases held messages of one topic in one shard: what
// a releaser runs once the topic's bucket granted it n messages.
//
//	KEYS[1] held ZSET of the topic   KEYS[2] msg HASH   KEYS[3] inflight ZSET
//	KEYS[4] attempts HASH
//	ARGV[1] n (>= 1)   ARGV[2] lease ms
//	KEYS[5] counters HASH, ARGV[3] a field of it (optional: a class's
//	backlog, fair.go, counts its releases there)
//
// Takes the n earliest held entries whose score (their due time) has
// passed, in due order, and leases them as the claim does (and adds
// their number to the counter, when given).
// Returns {now, head, left, lease deadline, id, token, scheduled,
// envelope|nil, attempts, ...}: head is the due time of the earliest entry
// still held (-1 if none), left how many are still held.
// Complexity: O(n log N).
var claimHeldScript = redis.NewScript(nowMs + metaOf + leaseAll + `
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
local out = {now, -1, 0, -1}
local ids, scores, envs = {}, {}, {}
for j = 1, #first / 2 do ids[j], scores[j] = first[2 * j - 1], first[2 * j] end
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
  local es = redis.call('HMGET', KEYS[2], unpack(ids))
  for j = 1, #ids do envs[j] = es[j] end
  out[4] = lease_all(KEYS[3], KEYS[4], ids, scores, envs, tonumber(ARGV[2]), out)
  if KEYS[5] then redis.call('HINCRBY', KEYS[5], ARGV[3], #ids) end
end
local head = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
if #head > 0 then out[2] = tonumber(head[2]) end
out[3] = redis.call('ZCARD', KEYS[1])
return out
`)

// grantScript is a topic's rate limit for the whole fleet: a token bucket
// refilled by the Redis clock, and a log of what it granted over the last
// window, which no grant may take above rate + burst.
//
//	KEYS[1] bucket HASH (tokens, ts, sum)   KEYS[2] log LIST of "<ms>:<n>"
//	ARGV[1] want (>= 1)   ARGV[2] refill rate a second (0 = no limit)
//	ARGV[3] bucket capacity (>= 1)   ARGV[4] most grants in a window (rate + burst)
//	ARGV[5] window ms   ARGV[6] paused until ms (0 not paused, -1 until resumed)
//
// The bucket smooths releases (at most its capacity at once); a new
// bucket starts empty, so a backlog that forms while no bucket exists
// (a limit just set, a topic quiet for long) starts at the pace, not
// with a burst; the bucket keeps its tokens while it lives. The log
// makes the limit hold over every window of ARGV[5] ms, which is longer
// than a second by the spread of publish latency, so a consumer's
// one-second windows hold it too. Paused, it grants nothing; with no limit
// it grants want.
// Returns {granted, wait ms, now}: when nothing is granted, how long
// until a grant could succeed (the end of the pause, -1 for a pause
// without end; else the next token or the oldest grant leaving the
// window); now is the Redis clock, the ms of the grant's log entry.
// Complexity: O(1) amortized (each log entry is pushed and popped once).
var grantScript = redis.NewScript(nowMs + `
local want, rate, cap, most, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local paused = tonumber(ARGV[6])
if paused < 0 then return {0, -1, now} end
if paused > now then return {0, paused - now, now} end
if rate <= 0 then return {want, 0, now} end
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'sum')
local tokens, ts, sum = tonumber(st[1]) or 0, tonumber(st[2]) or now, tonumber(st[3]) or 0
tokens = math.min(cap, tokens + math.max(0, now - ts) * rate / 1000)
while true do
  local e = redis.call('LINDEX', KEYS[2], 0)
  if not e then sum = 0 break end
  local at, n = string.match(e, '^(%d+):(-?%d+)$')
  if tonumber(at) > now - window then break end
  redis.call('LPOP', KEYS[2])
  sum = sum - tonumber(n)
end
local g = math.min(want, math.floor(tokens), most - sum)
local wait = 0
if g > 0 then
  tokens = tokens - g
  sum = sum + g
  redis.call('RPUSH', KEYS[2], string.format('%d:%d', now, g))
else
  g = 0
  if tokens < 1 then wait = math.ceil((1 - tokens) * 1000 / rate) end
  if sum >= most then
    local e = redis.call('LINDEX', KEYS[2], 0)
    local at = e and tonumber(string.match(e, '^(%d+):')) or now
    wait = math.max(wait, at + window - now + 1)
  end
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now, 'sum', sum)
local ttl = window + math.ceil(cap * 1000 / rate) + 60000
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {g, wait, now}
`)

// refundScript gives back tokens a releaser was granted but found nothing
// to release with (another process took those messages first).
//
//	KEYS[1] bucket HASH   KEYS[2] log LIST
//	ARGV[1] the grant's "<ms>:<n>" log entry   ARGV[2] r, tokens unused (1..n)
//	ARGV[3] bucket capacity
//
// The tokens go back to the bucket (at most its capacity), and the grant's
// log entry, when still in the window (one of the last 16), becomes
// "<ms>:<n - r>", so the window counts only what was released.
// Returns 1 if the log entry was found. Complexity: O(1).
var refundScript = redis.NewScript(`
local r, cap = tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if not tokens then return 0 end
redis.call('HSET', KEYS[1], 'tokens', tostring(math.min(cap, tokens + r)))
local last = redis.call('LRANGE', KEYS[2], -16, -1)
for j = #last, 1, -1 do
  if last[j] == ARGV[1] then
    local at, n = string.match(ARGV[1], '^(%d+):(%d+)$')
    redis.call('LSET', KEYS[2], j - #last - 1, at .. ':' .. (tonumber(n) - r))
    redis.call('HINCRBY', KEYS[1], 'sum', -r)
    return 1
  end
end
return 0
`)

// flowSetScript changes one topic's flow in the namespace's flow HASH.
//
//	KEYS[1] flow HASH (topic -> "<rate> <burst> <paused until ms> <changed ms> <source>")
//	ARGV[1] topic   ARGV[2] op: "limit" | "pause" | "resume" | "routes"
//	ARGV[3] rate   ARGV[4] burst   ARGV[5] paused until ms (-1 until resumed)
//	ARGV[6] source (who changed it)
//
// limit sets rate and burst and keeps the pause; pause sets the pause
// (refused when its end has passed by the Redis clock) and keeps the
// limit; resume ends the pause; routes sets rate and burst as limit does,
// but only when the topic has no flow yet or its flow came from a routes
// file (a change made at runtime stays until changed again).
// Returns {1, value} changed, {0, value} left as it was (routes),
// {-1, now} a pause whose end has passed. Complexity: O(1).
var flowSetScript = redis.NewScript(nowMs + `
local old = redis.call('HGET', KEYS[1], ARGV[1])
local rate, burst, paused, src = '0', '0', '0', ''
if old then
  rate, burst, paused, src = string.match(old, '^(%S+) (%S+) (%S+) %S+ (.*)$')
end
local op = ARGV[2]
if op == 'routes' then
  if old and src ~= 'routes' then return {0, old} end
  rate, burst = ARGV[3], ARGV[4]
elseif op == 'limit' then
  rate, burst = ARGV[3], ARGV[4]
elseif op == 'pause' then
  local until_ms = tonumber(ARGV[5])
  if until_ms >= 0 and until_ms <= now then return {-1, now} end
  paused = ARGV[5]
else
  paused = '0'
end
local v = rate .. ' ' .. burst .. ' ' .. paused .. ' ' .. string.format('%d', now) .. ' ' .. ARGV[6]
redis.call('HSET', KEYS[1], ARGV[1], v)
return {1, v}
`)

// flowForgetScript removes a topic's flow once it controls nothing: no
// limit, no pause, and (the caller checked) nothing held.
//
//	KEYS[1] flow HASH   ARGV[1] topic   ARGV[2] the value the caller read
//
// Returns 1 removed, 0 changed meanwhile (kept). Complexity: O(1).
var flowForgetScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
`)

// cancelHeldScript cancels a held message (a cancel, reschedule or bulk
// cancel found it in its topic's held set rather than in the due set).
//
//	KEYS[1] held ZSET   KEYS[2] msg HASH   KEYS[3] attempts HASH   KEYS[4] due ZSET
//	KEYS[4+j] more sets it may wait in (optional: the class backlogs of
//	the shard, fair.go), looked at in turn when KEYS[1] has not got it
//	ARGV[1] id   ARGV[2] "cancel" | "delay" | "at"   ARGV[3] delay ms or due ms
//	ARGV[4] wake channel   ARGV[5] shard index
//
// cancel removes it with its envelope and attempts; delay and at move it
// back to the due set at the new time, announced when it is the shard's
// new head (it is held again if its topic is still controlled when it
// falls due).
// Returns {1, due} done, {0, 0} not held here. Complexity: O(log N) a
// set looked at.
var cancelHeldScript = redis.NewScript(nowMs + metaOf + wakeIfHead + `
local found = redis.call('ZREM', KEYS[1], ARGV[1])
for j = 5, #KEYS do
  if found == 1 then break end
  found = redis.call('ZREM', KEYS[j], ARGV[1])
end
if found == 0 then return {0, 0} end
if ARGV[2] == 'cancel' then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  return {1, 0}
end
local due = tonumber(ARGV[3])
if ARGV[2] == 'delay' then due = now + due end
redis.call('ZADD', KEYS[4], due, ARGV[1])
forget_scheduled(KEYS[3], ARGV[1])
wake_if_head(KEYS[4], ARGV[1], due, 4)
return {1, due}
`)
