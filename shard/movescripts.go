package shard

import "github.com/redis/go-redis/v9"

// The scripts of the live move (move.go).

// moveOutScript removes from the source shard the messages a batch of the
// move has copied to the target, each only if it is still exactly as the
// move read it: scheduled at the same time, with the same envelope. One
// changed meanwhile (cancelled, rescheduled, claimed, replaced) stays as
// the change left it.
//
//	KEYS[1] due ZSET   KEYS[2] msg HASH   KEYS[3] attempts HASH
//	ARGV: for each message, its id, the due ms read, the envelope read
//
// Returns one status per message: 1 removed, 0 changed (left).
// Complexity: O(n log N) for n messages.
var moveOutScript = redis.NewScript(`
local out = {}
for j = 1, #ARGV, 3 do
  local id = ARGV[j]
  local due = redis.call('ZSCORE', KEYS[1], id)
  if due and tonumber(due) == tonumber(ARGV[j + 1]) and redis.call('HGET', KEYS[2], id) == ARGV[j + 2] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`)
