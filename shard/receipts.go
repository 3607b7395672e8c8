package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claim receipts: the claims whose replies were lost.
//
// A claim is the one call whose effect outlives a lost reply. Redis leases
// the messages; if the reply never comes back (Redis killed after it ran
// the call and wrote it to its AOF, a connection broken after the write)
// no scanner knows it holds them, and they were published only when their
// lease expired: in TestRedisRestartUnderLoad's burst, 110 messages of
// 3,000 came 5.9 s after Redis returned, with an 8 s lease.
//
// So a claim made for a Claimant leaves a receipt in Redis. When it leases
// anything it also writes one STRING in its shard's slot,
//
//	delayq:{ns:i}:claimed:<claimant>:<place> = "<nonce>\n<deadline>\n<id>\n<id>…"
//
// expiring with the lease (SET … PX lease). The claimant is random per
// Claimant (one per goroutine that sends claims), place is the claim's
// rank among the claims of its shard in its round trip (a shard can be
// claimed twice in one pipeline), and the nonce is new for every claim. A
// claim whose call failed with no answer from Redis (any error but one
// Redis replied with) leaves the Claimant a Receipt; Store.Recover, once
// Redis answers again, presents them: the unclaim script re-queues each id
// of the record whose lease still carries the recorded deadline, at the
// time it was scheduled for, with its delivery count unchanged (it was
// never published), and announces the shard's new head.
//
// It is exact, never a guess. Only the claimant that wrote a record reads
// it (the key names the claimant), and only with the nonce of the claim
// whose reply was lost: so the ids are the ones that claim leased. A lease
// that still has the recorded deadline was not reaped meanwhile (a new
// claim would set a later one), so no other scanner holds it. A receipt
// whose record is gone (the claim never ran, or its lease expired and the
// reaper has it) re-queues nothing.
//
// go-redis sends a command again after a connection error; for a claim
// that would run it twice and lose the first reply with no error to show.
// So claims go as commands go-redis never sends twice (noRetry): the
// caller sees the error, and retries with its own backoff.
//
// Cost: a SET of a short string per claim that leases something, in the
// call that leases; the keys are at most one per claimant, shard and
// place, each gone with its lease. On a 2-core machine, go test -run XXX
// -bench 'BenchmarkClaimSteady/batch=1/' -benchtime 300x -count 2
// ./shard/, three runs: 56-65 µs of Redis a claim without receipts,
// 62-71 with (about 6 µs, a tenth more); at batch 8 and 32 the
// difference is within the runs' noise (66-81 against 76-83 µs). That is
// the price of a Redis crash costing no message a lease of lateness.
//
// A receipt is kept until it is presented with an answer, or its lease
// has passed: after a restart Redis answers LOADING while it reads its
// AOF, and a receipt dropped on that error left its messages leased (in
// TestRedisRestartUnderLoad, in about half the runs, 2-54 messages came
// back only at their lease). Now each of that test's runs has every
// message leased at the kill back as a first delivery within a second of
// Redis's return (0-102 of them a run put back by receipts).
//
// Not covered: the flow releaser's claims of held messages
// (claimHeldScript) come back after their lease, as before; so do claims
// made without a Claimant (ClaimShards, ClaimHolding).

// receiptPrelude writes a claim's receipt: receipt(key, nonce, deadline,
// ids, lease ms) with an empty nonce writes nothing.
const receiptPrelude = `
local function receipt(key, nonce, deadline, ids, lease)
  if not nonce or nonce == '' or #ids == 0 then return end
  redis.call('SET', key, nonce .. '\n' .. string.format('%d', deadline) .. '\n' .. table.concat(ids, '\n'), 'PX', lease)
end
`

// unclaimScript presents a receipt: it re-queues what the lost claim
// leased.
//
//	KEYS[1] due ZSET   KEYS[2] inflight ZSET   KEYS[3] attempts HASH
//	KEYS[4] the receipt STRING
//	ARGV[1] the claim's nonce   ARGV[2] wake channel   ARGV[3] shard index
//
// When the receipt holds that nonce, every id of it still leased with the
// recorded deadline goes back to the due set at the time it was scheduled
// for (its attempts entry, which the claim wrote, keeps it and the count
// of earlier deliveries), and the receipt is deleted; a new head of the
// due set is announced on the wake channel, as an enqueue does.
// Returns the number of ids re-queued. Complexity: O(n log N) for the n
// ids of the receipt.
var unclaimScript = redis.NewScript(nowMs + metaOf + `
local r = redis.call('GET', KEYS[4])
if not r then return 0 end
local parts = {}
for p in string.gmatch(r, '[^\n]+') do parts[#parts + 1] = p end
if parts[1] ~= ARGV[1] or #parts < 3 then return 0 end
redis.call('DEL', KEYS[4])
local ids = {}
for j = 3, #parts do ids[#ids + 1] = parts[j] end
local scores = redis.call('ZMSCORE', KEYS[2], unpack(ids))
local dl = tonumber(parts[2])
local mine = {}
for j, id in ipairs(ids) do
  if scores[j] and tonumber(scores[j]) == dl then mine[#mine + 1] = id end
end
if #mine == 0 then return 0 end
local metas = redis.call('HMGET', KEYS[3], unpack(mine))
local before = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
local back, first = {}, nil
for j, id in ipairs(mine) do
  local _, s = meta_of(metas[j])
  s = s or now
  back[2 * j - 1], back[2 * j] = s, id
  if not first or s < first then first = s end
end
redis.call('ZREM', KEYS[2], unpack(mine))
redis.call('ZADD', KEYS[1], unpack(back))
if before[2] == nil or first < tonumber(before[2]) then
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. ':' .. string.format('%d', first))
end
return #mine
`)

// Claimant names a sender of claims whose lost replies can be recovered:
// claims made for it (Store.ClaimFor) leave receipts, and the ones whose
// replies were lost are kept until Store.Recover presents them. One
// Claimant sends one round trip of claims at a time; give each goroutine
// that sends claims its own. Its methods are safe for concurrent use.
type Claimant struct {
	id  string
	seq uint64 // the last nonce; under mu

	mu   sync.Mutex
	lost []Receipt
}

// Receipt is the record of a claim whose reply was lost.
type Receipt struct {
	Shard int
	key   string
	nonce string
	until time.Time // after this the record has expired with its lease
}

// maxReceipts is the most receipts a Claimant keeps; beyond it the
// oldest are dropped, and their messages come back when their lease
// expires. A claimer that fails that many claims in a lease is sending
// into an outage, where each round trip leaves at most its pipeline's.
const maxReceipts = 4096

// NewClaimant returns a Claimant with a random name.
func NewClaimant() *Claimant {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return &Claimant{id: hex.EncodeToString(b[:])}
}

// Lost returns how many receipts wait for Store.Recover.
func (c *Claimant) Lost() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lost)
}

// nonces returns n new nonces.
func (c *Claimant) nonces(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, n)
	for j := range out {
		c.seq++
		out[j] = strconv.FormatUint(c.seq, 36)
	}
	return out
}

// keep adds receipts, dropping the oldest beyond maxReceipts.
func (c *Claimant) keep(rs ...Receipt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = append(c.lost, rs...)
	if n := len(c.lost) - maxReceipts; n > 0 {
		c.lost = append(c.lost[:0], c.lost[n:]...)
	}
}

// take removes and returns the receipts whose records may still exist.
func (c *Claimant) take(now time.Time) []Receipt {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Receipt
	for _, r := range c.lost {
		if now.Before(r.until) {
			out = append(out, r)
		}
	}
	c.lost = nil
	return out
}

// receiptKey is the key of the receipt of claimant c's claim at place p
// among its claims of shard i in one round trip.
func receiptKey(ns string, i int, c *Claimant, p int) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:claimed:" + c.id + ":" + strconv.Itoa(p)
}

// receiptsFor returns, for claims of shards by c, each claim's receipt
// key and nonce (its place counting the earlier claims of its shard).
func receiptsFor(ns string, c *Claimant, shards []int) ([]string, []string) {
	keys := make([]string, len(shards))
	places := map[int]int{}
	for j, i := range shards {
		keys[j] = receiptKey(ns, i, c, places[i])
		places[i]++
	}
	return keys, c.nonces(len(shards))
}

// lostReply reports whether a claim's error leaves its outcome unknown:
// anything but an error Redis answered with (and a context that ended
// before the call went out, which costs a receipt that finds nothing).
func lostReply(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re) && !errors.Is(err, ErrRedisFull)
}

// Recover presents the receipts of c's claims whose replies were lost,
// re-queuing what those claims leased (see the top of receipts.go), and
// returns how many messages it re-queued. Receipts whose call fails are
// kept for the next Recover, whatever the error: with no answer from
// Redis the call may not have run, and an error Redis answered with
// (LOADING while it reads its AOF after a restart, BUSY behind a long
// script, NOSCRIPT twice, a failover's READONLY) means it did not run,
// so the record is still there. Receipts older than their lease are
// dropped, their records gone with it.
func (s *Store) Recover(ctx context.Context, c *Claimant) (int, error) {
	rs := c.take(time.Now())
	if len(rs) == 0 {
		return 0, nil
	}
	calls := make([]call, len(rs))
	for j, r := range rs {
		ks := ShardKeys(s.ns, r.Shard)
		calls[j] = call{script: unclaimScript, keys: []string{ks.Due, ks.Inflight, ks.Attempts, r.key},
			args: []any{r.nonce, s.wake, r.Shard}}
	}
	n := 0
	var first error
	var again []Receipt
	for j, cmd := range s.run(ctx, calls...) {
		m, err := cmd.Int()
		if err != nil {
			if first == nil {
				first = fmt.Errorf("recover lost claims of shard %d: %w", rs[j].Shard, err)
			}
			again = append(again, rs[j])
			continue
		}
		n += m
	}
	c.keep(again...)
	return n, first
}
