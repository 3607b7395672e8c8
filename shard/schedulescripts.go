package shard

import "github.com/redis/go-redis/v9"

// The scripts of recurring schedules (schedules.go). Each touches one
// shard's keys: the schedule's HASH (ScheduleKey) and the shard's due,
// msg, inflight, attempts and counters keys. The registry of names
// (ScheduleRegistryKey) is written by plain commands in its own slot.
//
// A schedule's HASH holds: def (the Schedule as JSON, Go's), rule (the
// schedule.Rule JSON its occurrences carry), version, count (0: no
// limit), fired, skipped, pending (the id of its next occurrence: in the
// due set, or in flight while it is fired; "" when none), next_ms, last_ms
// (the latest occurrence published), paused ("1" or absent), changed_ms
// (Redis time of the last change of def or pause), created_ms.

// addOccurrences is shared by the schedule scripts: store occurrence
// messages (id, due ms, envelope) given in ARGV from index a, n of them,
// as the enqueue script stores a message (an id that exists is left as it
// is), and announce a new head of the shard. KEYS[2] due, KEYS[3] msg,
// KEYS[6] counters; ARGV[w] wake channel, ARGV[w + 1] shard index.
// Returns how many it created.
const addOccurrences = `
local function add_occurrences(a, n, w)
  local made = {}
  for j = 0, n - 1 do
    local id, due, env = ARGV[a + 3 * j], tonumber(ARGV[a + 3 * j + 1]), ARGV[a + 3 * j + 2]
    if redis.call('HSETNX', KEYS[3], id, env) == 1 then
      redis.call('ZADD', KEYS[2], due, id)
      made[id] = due
    end
  end
  local head = redis.call('ZRANGE', KEYS[2], '0', '0')
  local count = 0
  for _ in pairs(made) do count = count + 1 end
  if count > 0 then
    redis.call('HINCRBY', KEYS[6], 'enqueued', count)
    if head[1] and made[head[1]] then
      redis.call('PUBLISH', ARGV[w], ARGV[w + 1] .. ':' .. string.format('%d', made[head[1]]))
    end
  end
  return count
end
`

// scheduleWriteScript creates, changes, pauses or resumes a schedule,
// if its version is still the one the caller read (compare and set).
//
//	KEYS[1] schedule HASH   KEYS[2] due ZSET   KEYS[3] msg HASH
//	KEYS[4] inflight ZSET   KEYS[5] attempts HASH   KEYS[6] counters HASH
//	ARGV[1] the version read (0: the schedule must not exist)
//	ARGV[2] def JSON   ARGV[3] rule JSON   ARGV[4] count (0: no limit)
//	ARGV[5] "1" paused, "0" running
//	ARGV[6] wake channel   ARGV[7] shard index
//	ARGV[8] skipped (missed occurrences a resume drops)
//	ARGV[9] last ms a resume publishes ("" to keep)
//	ARGV[10] n, then n occurrences from ARGV[11]: id, due ms, envelope;
//	the last is the schedule's next occurrence (its pending one), the
//	others missed ones a resume publishes
//	ARGV[11 + 3n] "1" when the caller gave a next occurrence
//	ARGV[12 + 3n], ARGV[13 + 3n] (optional) the fired count and the
//	created ms of a schedule restored from an export, when it is created
//	(ARGV[8] and ARGV[9] carry its skipped count and last ms)
//
// The pending occurrence stays when it is in flight or due (being fired:
// its firing goes on with the new def, from changed_ms); else it is
// removed, and the given ones are added (none while paused or in flight).
// Returns {1, version, changed_ms, kept} (kept: 1 when a pending
// occurrence being fired stayed), or {0, version} when the version
// changed meanwhile (nothing written).
// Complexity: O(n log N).
var scheduleWriteScript = redis.NewScript(nowMs + addOccurrences + `
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return {0, v} end
local n = tonumber(ARGV[10])
local has_next = ARGV[11 + 3 * n] == '1'
local pending = redis.call('HGET', KEYS[1], 'pending') or ''
local kept = 0
if pending ~= '' then
  local lease = redis.call('ZSCORE', KEYS[4], pending)
  local due = redis.call('ZSCORE', KEYS[2], pending)
  if lease or (due and tonumber(due) <= now) then
    kept = 1
  elseif due then
    redis.call('ZREM', KEYS[2], pending)
    redis.call('HDEL', KEYS[3], pending)
    redis.call('HDEL', KEYS[5], pending)
  end
end
if v == 0 then
  redis.call('HSET', KEYS[1], 'created_ms', ARGV[13 + 3 * n] or now, 'fired', ARGV[12 + 3 * n] or 0, 'skipped', 0)
end
redis.call('HSET', KEYS[1], 'version', v + 1, 'def', ARGV[2], 'rule', ARGV[3], 'count', ARGV[4], 'changed_ms', now)
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'paused', '1') else redis.call('HDEL', KEYS[1], 'paused') end
if kept == 1 then return {1, v + 1, now, 1} end
local count, fired = tonumber(ARGV[4]), tonumber(redis.call('HGET', KEYS[1], 'fired') or '0')
local missed = n
if has_next then missed = n - 1 end
if ARGV[5] == '1' then missed, has_next = 0, false end
if count > 0 then missed = math.max(0, math.min(missed, count - fired)) end
-- the latest missed ones when the count cuts them short
local first = n - (has_next and 1 or 0) - missed
local made = add_occurrences(11 + 3 * first, missed, 6)
redis.call('HINCRBY', KEYS[1], 'fired', missed)
redis.call('HINCRBY', KEYS[1], 'skipped', tonumber(ARGV[8]))
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'last_ms', ARGV[9]) end
fired = fired + missed
if has_next and (count == 0 or fired < count) then
  local a = 11 + 3 * (n - 1)
  add_occurrences(a, 1, 6)
  redis.call('HSET', KEYS[1], 'pending', ARGV[a], 'next_ms', ARGV[a + 1])
else
  redis.call('HSET', KEYS[1], 'pending', '', 'next_ms', '')
end
return {1, v + 1, now, 0}
`)

// scheduleFireScript fires a schedule's pending occurrence, which the
// caller claimed: it records the firing and adds the next occurrence (and
// the missed ones the policy publishes), or, when the policy skips it,
// removes it.
//
//	KEYS as scheduleWriteScript
//	ARGV[1] the occurrence's id   ARGV[2] the caller's lease token
//	ARGV[3] the schedule version the plan was made with
//	ARGV[4] "1" publish the occurrence, "0" drop it (skipped)
//	ARGV[5] skipped   ARGV[6] last ms (the latest occurrence published; "" none)
//	ARGV[7] wake channel   ARGV[8] shard index
//	ARGV[9] n, then n occurrences from ARGV[10]: id, due ms, envelope;
//	the last is the next occurrence when ARGV[10 + 3n] is "1"
//
// Returns {status, ...}: 1 done; 2 the schedule is gone, or paused, or
// the occurrence is not its pending one (a missed one a policy publishes,
// or a redelivery fired before): publish it, change nothing; 3 the
// caller's lease is lost (another scanner has it): do nothing; 0 the
// version changed: {0, version, rule JSON, changed_ms, def JSON}, plan
// again.
// Complexity: O(n log N).
var scheduleFireScript = redis.NewScript(nowMs + addOccurrences + `
local id = ARGV[1]
local lease = redis.call('ZSCORE', KEYS[4], id)
if not lease or lease ~= ARGV[2] then return {3} end
local s = redis.call('HMGET', KEYS[1], 'version', 'pending', 'paused', 'rule', 'changed_ms', 'count', 'fired', 'def')
if not s[1] then return {2} end
if s[2] ~= id then return {2} end
if s[3] == '1' then
  redis.call('HSET', KEYS[1], 'pending', '', 'next_ms', '')
  return {2}
end
if tonumber(s[1]) ~= tonumber(ARGV[3]) then return {0, tonumber(s[1]), s[4], tonumber(s[5] or '0'), s[8]} end
local count, fired = tonumber(s[6] or '0'), tonumber(s[7] or '0')
local n = tonumber(ARGV[9])
local has_next = ARGV[10 + 3 * n] == '1'
local missed = n
if has_next then missed = n - 1 end
if ARGV[4] == '1' then
  fired = fired + 1
else
  redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[5], id)
end
if count > 0 then missed = math.max(0, math.min(missed, count - fired)) end
local first = n - (has_next and 1 or 0) - missed
if missed > 0 then add_occurrences(10 + 3 * first, missed, 7) end
fired = fired + missed
if ARGV[5] ~= '0' then redis.call('HINCRBY', KEYS[1], 'skipped', tonumber(ARGV[5])) end
local pending, next_ms = '', ''
if has_next and (count == 0 or fired < count) then
  local a = 10 + 3 * (n - 1)
  add_occurrences(a, 1, 7)
  pending, next_ms = ARGV[a], ARGV[a + 1]
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'fired', fired, 'pending', pending, 'next_ms', next_ms, 'last_ms', ARGV[6])
else
  redis.call('HSET', KEYS[1], 'fired', fired, 'pending', pending, 'next_ms', next_ms)
end
return {1}
`)

// scheduleDeleteScript deletes a schedule and its pending occurrence,
// unless that is in flight or due (being fired: it is published, and its
// firing finds the schedule gone).
//
//	KEYS[1] schedule HASH   KEYS[2] due ZSET   KEYS[3] msg HASH
//	KEYS[4] inflight ZSET   KEYS[5] attempts HASH
//
// Returns 1 deleted, 0 no such schedule.
// Complexity: O(log N).
var scheduleDeleteScript = redis.NewScript(nowMs + `
local pending = redis.call('HGET', KEYS[1], 'pending')
if not redis.call('HGET', KEYS[1], 'version') then return 0 end
if pending and pending ~= '' and not redis.call('ZSCORE', KEYS[4], pending) then
  local due = redis.call('ZSCORE', KEYS[2], pending)
  if due and tonumber(due) > now then
    redis.call('ZREM', KEYS[2], pending)
    redis.call('HDEL', KEYS[3], pending)
    redis.call('HDEL', KEYS[5], pending)
  end
end
redis.call('DEL', KEYS[1])
return 1
`)
