package shard

import "github.com/redis/go-redis/v9"

// The scripts of fair release across classes (fair.go). Each touches the
// keys of one slot. Releasing from a class's backlog is claimHeldScript
// (flowscripts.go) on the backlog set, with the class's release counter;
// cancelling or rescheduling what waits there is cancelHeldScript with the
// shard's backlog sets.

// claimFairScript is the claim (claimScript, claimHoldScript) of a
// namespace with release classes. While its shard is not behind, it is
// claimScript (claimHoldScript with topics under flow control). Behind
// (the earliest due entry is more than the threshold late, or the shard's
// backlog sets hold anything while something is due), it leases nothing:
// it moves due entries into the backlog set of their topic's class (a
// topic under flow control into its held set, as the claim does), where
// the releasers take them by the classes' shares.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] inflight ZSET   KEYS[4] attempts HASH
//	KEYS[5] the claim's receipt STRING (written only with a nonce; receipts.go)
//	KEYS[5+j] the held ZSET of controlled topic j (j = 1..t)
//	KEYS[5+t+j] the backlog ZSET of class j (j = 1..c; the last is the
//	default class, of every topic no other class names)
//	ARGV[1] k, the most messages to claim (>= 1)   ARGV[2] lease ms
//	ARGV[3] r, the most expired leases to re-queue (>= 1)   ARGV[4] k + 1
//	ARGV[5] the claim's nonce ("": no receipt)
//	ARGV[6] h, the most entries to set apart in this call (>= 2)
//	ARGV[7] the threshold ms
//	ARGV[8] t   ARGV[8+j] the name of controlled topic j
//	ARGV[9+t] c   ARGV[10+t] the patterns of each class but the default,
//	in the order of their keys: for each class "<p>;" and then its p
//	patterns (a topic, or a prefix ending in *), each as "<bytes>:<it>"
//	(one argument, read only when the shard is behind)
//
// It reads the earliest due entry (one ZRANGEBYSCORE); only when there is
// one does it look further (EXISTS of the backlogs, while it is not late
// enough on its own). Behind, it reads at most h due entries (score <=
// now): the h/2 latest due first, then the earliest, so what falls due
// now reaches its class within one call however long a backlog stands
// before it, while the backlog is set apart from its oldest end; it reads
// their topics from their envelopes (topicOf; an envelope that cannot be
// read goes to the default class, whose releaser hands it on to be
// dead-lettered), matches them against the patterns (read only then), and
// moves each, scored by its due time. Nothing is ever moved before it is
// due, and a backlog set is released by due time, so nothing is early.
//
// Returns {now, head, reaped, lease head, moved, id, token, scheduled,
// envelope|nil, attempts, ...}: claimHoldScript's reply; behind, with no
// messages and moved counting the entries it set apart.
// Complexity: as claimScript while not behind, plus O(log N); behind,
// O((h + r) log N + h p) for p patterns in all.
var claimFairScript = redis.NewScript(nowMs + metaOf + reapExpired + leaseAll + topicOf + receiptPrelude + holdThenLease + plainClaim + `
local k, t = tonumber(ARGV[1]), tonumber(ARGV[8])
local c = tonumber(ARGV[9 + t])
local backlogs = {}
for j = 1, c do backlogs[j] = KEYS[5 + t + j] end
local reaped, lh = reap(tonumber(ARGV[3]))
local out = {now, -1, reaped, -1, 0}
if #lh > 0 then out[4] = tonumber(lh[2]) end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', '0', '1')
local behind = false
if #first > 0 then
  behind = tonumber(first[2]) <= now - tonumber(ARGV[7])
  if not behind then behind = redis.call('EXISTS', unpack(backlogs)) > 0 end
end
local held = {}
for j = 1, t do held[ARGV[8 + j]] = KEYS[5 + j] end
if behind then
  local exact, prefixes = {}, {}
  local blob, pos = ARGV[10 + t], 1
  for j = 1, c - 1 do
    local e = string.find(blob, ';', pos, true)
    local p = tonumber(string.sub(blob, pos, e - 1))
    pos = e + 1
    for q = 1, p do
      local e2 = string.find(blob, ':', pos, true)
      local n = tonumber(string.sub(blob, pos, e2 - 1))
      local pat = string.sub(blob, e2 + 1, e2 + n)
      pos = e2 + n + 1
      if string.sub(pat, -1) == '*' then
        prefixes[#prefixes + 1] = {string.sub(pat, 1, -2), backlogs[j]}
      else
        exact[pat] = backlogs[j]
      end
    end
  end
  local h = tonumber(ARGV[6])
  local half = math.max(1, math.floor(h / 2))
  local ids, scores, seen = {}, {}, {}
  local latest = redis.call('ZREVRANGEBYSCORE', KEYS[1], now, '-inf', 'WITHSCORES', 'LIMIT', '0', half)
  local earliest = {}
  if #latest / 2 >= half then
    earliest = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', '0', h - half)
  end
  for _, got in ipairs({latest, earliest}) do
    for j = 1, #got, 2 do
      if not seen[got[j]] then
        seen[got[j]] = true
        ids[#ids + 1], scores[#scores + 1] = got[j], got[j + 1]
      end
    end
  end
  local es = redis.call('HMGET', KEYS[2], unpack(ids))
  local adds, class_of = {}, {}
  for j, id in ipairs(ids) do
    local topic = topic_of(es[j])
    local key = topic and held[topic]
    if not key and topic then
      key = class_of[topic]
      if not key then
        key = exact[topic]
        if not key then
          for _, pk in ipairs(prefixes) do
            if string.sub(topic, 1, #pk[1]) == pk[1] then key = pk[2] break end
          end
        end
        key = key or backlogs[c]
        class_of[topic] = key
      end
    end
    key = key or backlogs[c]
    local add = adds[key]
    if not add then add = {} adds[key] = add end
    add[#add + 1], add[#add + 2] = scores[j], id
  end
  for key, add in pairs(adds) do redis.call('ZADD', key, unpack(add)) end
  redis.call('ZREM', KEYS[1], unpack(ids))
  out[5] = #ids
  local head = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
  if #head > 0 then out[2] = tonumber(head[2]) end
  return out
end
if t == 0 then
  plain_claim(out, k, ARGV[4], ARGV[2], ARGV[5])
  return out
end
local ids, scores, envs = {}, {}, {}
out[5] = hold_then_lease(k, tonumber(ARGV[6]), held, ids, scores, envs)
local head = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
if #head > 0 then out[2] = tonumber(head[2]) end
if #ids > 0 then
  local deadline = lease_all(KEYS[3], KEYS[4], ids, scores, envs, tonumber(ARGV[2]), out)
  if out[4] < 0 or deadline < out[4] then out[4] = deadline end
  receipt(KEYS[5], ARGV[5], deadline, ids, ARGV[2])
end
return out
`)

// classPutScript changes one class in the namespace's classes HASH, if it
// is still as the caller read it, and refuses a live class whose patterns
// overlap another live class's.
//
//	KEYS[1] classes HASH (name -> "<changed ms> <JSON>")
//	ARGV[1] name   ARGV[2] the value the caller read ("" for none)
//	ARGV[3] the new JSON ({"weight", "strict", "topics", "source",
//	"deleted_ms"}), or "" to remove the class
//
// Returns {1, value} stored (value "" when removed), {0} changed meanwhile
// (read again), {-1, other class, its pattern, the new pattern} overlap.
// Complexity: O(C P^2) for C classes of at most P patterns.
var classPutScript = redis.NewScript(nowMs + `
local old = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if old ~= ARGV[2] then return {0} end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {1, ''}
end
local function live_topics(js)
  local ok, d = pcall(cjson.decode, js)
  if not ok or type(d) ~= 'table' then return {} end
  if d.deleted_ms and d.deleted_ms ~= 0 then return {} end
  if type(d.topics) ~= 'table' then return {} end
  return d.topics
end
local function overlap(p, q)
  local pp, qp = string.sub(p, -1) == '*', string.sub(q, -1) == '*'
  if pp then p = string.sub(p, 1, -2) end
  if qp then q = string.sub(q, 1, -2) end
  if pp and qp then return string.sub(p, 1, #q) == q or string.sub(q, 1, #p) == p end
  if pp then return string.sub(q, 1, #p) == p end
  if qp then return string.sub(p, 1, #q) == q end
  return p == q
end
local mine = live_topics(ARGV[3])
if #mine > 0 then
  local all = redis.call('HGETALL', KEYS[1])
  for j = 1, #all, 2 do
    if all[j] ~= ARGV[1] then
      for _, q in ipairs(live_topics(string.match(all[j + 1], '^%d+ (.*)$') or '')) do
        for _, p in ipairs(mine) do
          if type(q) == 'string' and overlap(p, q) then return {-1, all[j], q, p} end
        end
      end
    end
  end
end
local v = string.format('%d', now) .. ' ' .. ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], v)
return {1, v}
`)
