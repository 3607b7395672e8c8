package shard

import "github.com/redis/go-redis/v9"

// The scripts of team quotas (quota.go has the design and their Go side).
// The namespace's quota keys share the hash tag {ns}; the shard's
// (scopeof, quotaheld, quotaout) the shard's {ns:i}: no script touches
// both.

// quotaSetScript creates, changes or deletes a scope's quota.
//
//	KEYS[1] quota HASH   KEYS[2] quotadefs HASH   KEYS[3] the scope's applied HASH
//	ARGV[1] scope   ARGV[2] definition (JSON, for producers; '' deletes)
//	ARGV[3] most messages held, 0 = none   ARGV[4] most enqueued a second, 0 = none
//
// A new quota (none for the scope, or deleted since) takes a new
// generation from the HASH's gen field and starts counting from 0; a
// change keeps the generation and the count. A delete removes the
// scope's fields and its applied HASH. Returns the generation (0 after a
// delete).
// Complexity: O(1), O(shards) for a delete.
var quotaSetScript = redis.NewScript(`
local s = ARGV[1]
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'gen:' .. s, 'max:' .. s, 'rate:' .. s, 'count:' .. s, 'win:' .. s, 'refused:' .. s, 'enqueued:' .. s, 'adopted:' .. s)
  redis.call('HDEL', KEYS[2], s)
  redis.call('DEL', KEYS[3])
  return 0
end
local g = redis.call('HGET', KEYS[1], 'gen:' .. s)
if not g then
  g = redis.call('HINCRBY', KEYS[1], 'gen', 1)
  redis.call('HSET', KEYS[1], 'gen:' .. s, g, 'count:' .. s, 0)
  redis.call('DEL', KEYS[3])
end
redis.call('HSET', KEYS[1], 'max:' .. s, ARGV[3], 'rate:' .. s, ARGV[4])
redis.call('HSET', KEYS[2], s, (string.gsub(ARGV[2], '"gen":0', '"gen":' .. g, 1)))
return tonumber(g)
`)

// quotaReserveScript reserves room for n messages of a scope: what its
// pending and rate quotas allow, up to n.
//
//	KEYS[1] quota HASH   KEYS[2] quotares ZSET
//	ARGV[1] scope   ARGV[2] generation the producer knows   ARGV[3] n
//	ARGV[4] reservation id   ARGV[5] its lifetime, ms
//
// Returns {granted, why, count, limit, retry ms, deadline ms}: granted
// -1 when the generation is not the scope's (the producer's quotas are
// stale: read them again); why 0 (all of n), 1 (the pending quota, limit
// its maximum), 2 (the rate quota, limit the rate). What is not granted
// counts in refused:<scope>. A grant adds to the count and the second's
// window, and is recorded in quotares as
// "<scope>:<gen>|<id>|<granted>" with its deadline (Redis clock) as
// score, until settled.
// Complexity: O(log R), R the reservations outstanding.
var quotaReserveScript = redis.NewScript(nowMs + `
local s = ARGV[1]
local g = redis.call('HGET', KEYS[1], 'gen:' .. s)
if g ~= ARGV[2] then return {-1, 0, 0, 0, 0, 0} end
local f = redis.call('HMGET', KEYS[1], 'max:' .. s, 'rate:' .. s, 'count:' .. s, 'win:' .. s)
local max, rate, count = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0
local n = tonumber(ARGV[3])
local grant, why, limit, retry = n, 0, 0, 0
if max > 0 and count + grant > max then
  grant, why, limit, retry = math.max(0, max - count), 1, max, 1000
end
local sec, used = math.floor(now / 1000), 0
if rate > 0 then
  local ws, wu = string.match(f[4] or '', '^(%d+):(%d+)$')
  if tonumber(ws) == sec then used = tonumber(wu) end
  if used + grant > rate then
    grant, why, limit, retry = math.max(0, rate - used), 2, rate, 1000 - now % 1000
  end
end
local deadline = now + tonumber(ARGV[5])
if grant < n then redis.call('HINCRBY', KEYS[1], 'refused:' .. s, n - grant) end
if grant > 0 then
  count = redis.call('HINCRBY', KEYS[1], 'count:' .. s, grant)
  if rate > 0 then redis.call('HSET', KEYS[1], 'win:' .. s, string.format('%d:%d', sec, used + grant)) end
  redis.call('ZADD', KEYS[2], deadline, s .. ':' .. g .. '|' .. ARGV[4] .. '|' .. grant)
end
return {grant, why, count, limit, retry, deadline}
`)

// quotaSettleScript settles a reservation: what it granted but did not
// store goes back to the count.
//
//	KEYS[1] quota HASH   KEYS[2] quotares ZSET
//	ARGV[1] scope   ARGV[2] generation   ARGV[3] the reservation's quotares member
//	ARGV[4] granted   ARGV[5] stored
//
// Only the first settle of a reservation counts (the member is removed),
// and only while the generation is the scope's; what was stored counts in
// enqueued:<scope> (the metrics' enqueue rate). Returns 1 settled now, 0
// settled before.
// Complexity: O(log R).
var quotaSettleScript = redis.NewScript(`
if redis.call('ZREM', KEYS[2], ARGV[3]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'gen:' .. ARGV[1]) == ARGV[2] then
  local back = tonumber(ARGV[4]) - tonumber(ARGV[5])
  if back ~= 0 then redis.call('HINCRBY', KEYS[1], 'count:' .. ARGV[1], -back) end
  if ARGV[5] ~= '0' then redis.call('HINCRBY', KEYS[1], 'enqueued:' .. ARGV[1], ARGV[5]) end
end
return 1
`)

// quotaApplyScript takes the removals the shards counted (their quotaout
// fields, which only grow) off a scope's count, and adds what the
// adoption counted in (quotain, which only grows too), each once.
//
//	KEYS[1] quota HASH   KEYS[2] the scope's applied HASH (quotaout:
//	shard -> value applied; quotain: "in:<shard>" -> value applied)
//	ARGV[1] scope   ARGV[2] generation   ARGV[3] "out" | "in"
//	then pairs ARGV[a] shard, ARGV[a+1] its quotaout (quotain) value
//
// Returns the count after, or -1 when the generation is not the scope's
// (nothing applied).
// Complexity: O(shards given).
var quotaApplyScript = redis.NewScript(`
local s = ARGV[1]
if redis.call('HGET', KEYS[1], 'gen:' .. s) ~= ARGV[2] then return -1 end
local prefix, sign = '', -1
if ARGV[3] == 'in' then prefix, sign = 'in:', 1 end
local moved = 0
for a = 4, #ARGV, 2 do
  local f = prefix .. ARGV[a]
  local v = tonumber(ARGV[a + 1])
  local had = tonumber(redis.call('HGET', KEYS[2], f)) or 0
  if v > had then
    moved = moved + v - had
    redis.call('HSET', KEYS[2], f, ARGV[a + 1])
  end
end
if moved > 0 then return redis.call('HINCRBY', KEYS[1], 'count:' .. s, sign * moved) end
return tonumber(redis.call('HGET', KEYS[1], 'count:' .. s)) or 0
`)

// quotaSweepScript counts out the messages of a shard that are tagged
// with a quota's scope but no longer held: published, cancelled, purged
// (every way a message leaves, without a hook in each).
//
//	KEYS[1] msg HASH   KEYS[2] scopeof HASH   KEYS[3] quotaout HASH
//	with the far tier on: KEYS[4] fardir ZSET, KEYS[4+j] fidx:<h> of id j
//	ARGV[1] n   then for j = 1..n: ARGV[2j] id, ARGV[2j+1] the tag read
//
// A tag still the one read, whose id is neither in the msg HASH (due, in
// flight, held or dead) nor live far, is deleted and counted in quotaout
// under the tag. Returns how many were.
// Complexity: O(n).
var quotaSweepScript = redis.NewScript(farPrelude + `
local gone = 0
for j = 1, tonumber(ARGV[1]) do
  local id, tag = ARGV[2 * j], ARGV[2 * j + 1]
  if redis.call('HGET', KEYS[2], id) == tag and redis.call('HEXISTS', KEYS[1], id) == 0
      and not (KEYS[4] and far_live(KEYS[4 + j], KEYS[4], id)) then
    redis.call('HDEL', KEYS[2], id)
    redis.call('HINCRBY', KEYS[3], tag, 1)
    gone = gone + 1
  end
end
return gone
`)

// quotaWrap makes the quota'd variant of an enqueue script whose body
// (everything after its preludes, which must define now) returns
// {status_1, value_1, ...}. The variant takes three more KEYS and six
// more ARGV, at the end:
//
//	KEYS: scopeof HASH, quotaheld HASH, quotaout HASH
//	ARGV: tag "<scope>:<gen>", reservation id, its deadline (ms, Redis
//	clock), the ARGV index of the first id, the ARGV stride between ids,
//	the number of messages
//
// It refuses the whole call past the deadline (QUOTAEXPIRED: nothing
// written; the maintenance may have settled the reservation already).
// With no reservation id (”) the call is an upsert at the quota, which
// may only replace: unless every id is tagged with the tag already, it
// refuses the whole call (QUOTA: nothing written). Then it runs the body,
// and tags each message the body created or replaced: an id tagged
// already with the same tag is counted already (an upsert within the
// scope, or a message gone and not yet swept, which this one takes the
// place of); another tag is a message of another quota gone or
// replaced, counted out in quotaout; the rest count as stored, added to
// quotaheld under the reservation id. The reply is the body's with the
// number stored appended.
// Complexity: the body's, and O(n) more.
func quotaWrap(preludes, body string) *redis.Script {
	return redis.NewScript(preludes + `
local q_n = tonumber(table.remove(ARGV))
local q_stride = tonumber(table.remove(ARGV))
local q_first = tonumber(table.remove(ARGV))
local q_deadline = tonumber(table.remove(ARGV))
local q_rid = table.remove(ARGV)
local q_tag = table.remove(ARGV)
local q_out = table.remove(KEYS)
local q_held = table.remove(KEYS)
local q_of = table.remove(KEYS)
if q_rid == '' then
  -- no reservation: an upsert at the quota, which may only replace
  for j = 1, q_n do
    if redis.call('HGET', q_of, ARGV[q_first + q_stride * (j - 1)]) ~= q_tag then
      return redis.error_reply('QUOTA the message would be a new one of its scope, which is at its quota')
    end
  end
elseif now > q_deadline then
  return redis.error_reply('QUOTAEXPIRED the quota reservation passed its deadline before its messages were stored')
end
local function q_body()
` + body + `
end
local out = q_body()
local stored = 0
for j = 1, #out / 2 do
  local st = out[2 * j - 1]
  if st == 1 or st == 2 then
    local id = ARGV[q_first + q_stride * (j - 1)]
    if redis.call('HSETNX', q_of, id, q_tag) == 1 then
      stored = stored + 1
    else
      local old = redis.call('HGET', q_of, id)
      if old ~= q_tag then
        redis.call('HINCRBY', q_out, old, 1)
        redis.call('HSET', q_of, id, q_tag)
        stored = stored + 1
      end
    end
  end
end
if stored > 0 and q_rid ~= '' then redis.call('HINCRBY', q_held, q_rid, stored) end
out[#out + 1] = stored
return out
`)
}

// quotaAdoptScript counts in a quota the messages its scope held before
// it was set (the adoption pass: quotaadopt.go): each id still held, and
// not tagged with the quota's generation, is tagged and counted in the
// shard's quotain under the tag, and in the adoption job's counter.
//
//	KEYS[1] msg HASH   KEYS[2] scopeof HASH   KEYS[3] quotain HASH
//	KEYS[4] the job's counter HASH (BulkKey)
//	for far records: KEYS[5] fardir ZSET, KEYS[5+j] fidx:<h> of record j
//	ARGV[1] tag "<scope>:<gen>"   ARGV[2] ms the counter lives
//	ARGV[3] "near" | "far"   then ids (near), or pairs id, "<b>:<seq>"
//	(far: the index entry the record was read under)
//
// Held: near, in the msg HASH; far, while the index still names the
// record. A tag of an older generation of the same scope is replaced.
// Returns one status per id: 3 counted in, 2 counted already, 0 gone.
// Complexity: O(n).
var quotaAdoptScript = redis.NewScript(farPrelude + `
local tag, far = ARGV[1], ARGV[3] == 'far'
local scope = string.match(tag, '^(.*):%d+$')
local out, n, step = {}, 0, 1
if far then step = 2 end
for a = 4, #ARGV, step do
  local id, j = ARGV[a], #out + 1
  local held
  if far then
    local b, q = far_live(KEYS[5 + j], KEYS[5], id)
    held = b and (b .. ':' .. q) == ARGV[a + 1]
  else
    held = redis.call('HEXISTS', KEYS[1], id) == 1
  end
  out[j] = 0
  if held then
    local old = redis.call('HGET', KEYS[2], id)
    if old == tag then
      out[j] = 2
    elseif not old or string.match(old, '^(.*):%d+$') == scope then
      redis.call('HSET', KEYS[2], id, tag)
      out[j], n = 3, n + 1
    else
      out[j] = 2 -- another scope's: the scopes changed; it counts there
    end
  end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[3], tag, n)
  redis.call('HINCRBY', KEYS[4], 'done', n)
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return out
`)
