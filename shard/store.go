package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store runs the scripts of one namespace. It is safe for concurrent use.
// The caller owns the Redis client and closes it after the Store is done.
type Store struct {
	rdb  redis.UniversalClient
	ns   string
	wake string
	far  *farCache // the far tier's settings, shared by copies (far.go)
	// quotas is the producers' copy of the quotas, shared by copies
	// (quota.go)
	quotas *quotaCache

	replicas       int           // WithReplicas
	replicaTimeout time.Duration // WithReplicas
}

// WithReplicas returns a Store whose acknowledged writes (enqueue, cancel,
// reschedule, retry, redrive, purge, ack) return only after n replicas
// have them (Redis WAIT, at most timeout). When fewer confirm in time, the
// call returns ErrNotReplicated: the write is on the master, but a
// failover may lose it. n = 0 turns waiting off. WAIT counts the replicas
// of one server: use it with a single master (and Sentinel), not with
// Redis Cluster.
func (s *Store) WithReplicas(n int, timeout time.Duration) *Store {
	c := *s
	c.replicas, c.replicaTimeout = n, timeout
	return &c
}

// NewStore returns a Store for namespace ns: 1..64 characters of
// [A-Za-z0-9._-].
func NewStore(rdb redis.UniversalClient, ns string) (*Store, error) {
	if err := ValidateNamespace(ns); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, ns: ns, wake: WakeChannel(ns), far: &farCache{}, quotas: &quotaCache{}}, nil
}

// ValidateNamespace checks a namespace name.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > 64 {
		return fmt.Errorf("namespace %q: want 1 to 64 characters", ns)
	}
	for _, r := range ns {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("namespace %q: character %q not allowed (use A-Z a-z 0-9 . _ -)", ns, r)
		}
	}
	return nil
}

// Namespace returns the store's namespace.
func (s *Store) Namespace() string { return s.ns }

// Lease identifies one claim of a message: ack, release and dead-letter act
// only while the lease with this token is still held.
type Lease struct {
	ID    string
	Token int64 // the lease deadline in unix ms, as the claim script set it
}

// Claimed is one message handed out by Claim.
type Claimed struct {
	Lease
	// DueMs is the time the message was scheduled (or last rescheduled)
	// for: a redelivery after an expired lease or a failed publish keeps it.
	DueMs    int64
	Envelope []byte // raw envelope; nil if the msg hash had none (corrupt state)
	Attempt  int    // 1 on the first delivery, 2 on the first redelivery, ...
}

// ClaimResult is the reply of one claim.
type ClaimResult struct {
	NowMs  int64 // Redis clock when the script ran
	HeadMs int64 // due time of the earliest message still scheduled; -1 if none
	// LeaseHeadMs is the deadline of the shard's earliest lease (-1 if
	// none): when it passes, a claim on the shard re-queues that message.
	// At most NowMs when more leases expired than this claim re-queued.
	LeaseHeadMs int64
	Reaped      int // expired leases re-queued by this call
	// Held is how many due messages of topics under flow control this
	// claim set apart for their releasers (ClaimHolding).
	Held int
	Msgs []Claimed
}

// NextWorkMs is when the shard next has work for a claim: the earlier of
// the next due message and the next lease to expire; -1 if neither exists.
func (r ClaimResult) NextWorkMs() int64 {
	switch {
	case r.HeadMs < 0:
		return r.LeaseHeadMs
	case r.LeaseHeadMs < 0:
		return r.HeadMs
	}
	return min(r.HeadMs, r.LeaseHeadMs)
}

// MaxReap is the most expired leases one claim re-queues. A crashed
// scanner may leave thousands; each claim re-queues this many, says in its
// reply that more have expired, and the visit goes on, so they all come
// back within a few round trips while no call does unbounded work.
const MaxReap = 128

// Claim runs the claim script on shard i: re-queue up to MaxReap expired
// leases, then lease up to k due messages for lease.
func (s *Store) Claim(ctx context.Context, i, k int, lease time.Duration) (ClaimResult, error) {
	if k < 1 {
		return ClaimResult{}, fmt.Errorf("claim shard %d: batch size %d < 1", i, k)
	}
	res, errs := s.ClaimShards(ctx, []int{i}, k, lease)
	return res[0], errs[0]
}

// ClaimShards runs one claim (as Claim) on each shard of shards, all in
// one pipelined round trip, and returns a result and an error per claim.
// Each claim is still its own atomic script call of at most k messages;
// the pipeline only saves round trips and syscalls, on both sides. A shard
// may appear more than once. On a lost connection, claims that ran but
// whose replies were lost stay leased and come back when the lease
// expires; ClaimFor recovers them sooner.
func (s *Store) ClaimShards(ctx context.Context, shards []int, k int, lease time.Duration) ([]ClaimResult, []error) {
	return s.ClaimFor(ctx, nil, shards, k, lease, nil)
}

// ClaimHolding is ClaimShards in a namespace with topics under flow
// control (limited or paused): each claim sets the due messages of those
// topics apart in their held sets (HeldKey), up to 128 a claim, and claims
// the others, so that a topic that waits never blocks the messages behind
// it. With no topics it is ClaimShards, at the same cost.
func (s *Store) ClaimHolding(ctx context.Context, shards []int, k int, lease time.Duration, topics []string) ([]ClaimResult, []error) {
	return s.ClaimFor(ctx, nil, shards, k, lease, topics)
}

// ClaimFor is ClaimHolding for claimant c: each claim that leases
// something leaves a receipt, and a claim whose reply is lost leaves c a
// Receipt, which Recover presents once Redis answers again (receipts.go).
// A nil c claims as ClaimHolding. Claims are never sent twice by the Redis
// client: a failed one is the caller's to retry.
func (s *Store) ClaimFor(ctx context.Context, c *Claimant, shards []int, k int, lease time.Duration, topics []string) ([]ClaimResult, []error) {
	return s.claimWith(ctx, c, shards, k, lease, topics, nil)
}

// claimWith is ClaimFor, and ClaimFair with a plan of classes.
func (s *Store) claimWith(ctx context.Context, c *Claimant, shards []int, k int, lease time.Duration, topics []string, plan *ClassPlan) ([]ClaimResult, []error) {
	res, errs := make([]ClaimResult, len(shards)), make([]error, len(shards))
	if k < 1 {
		for j, i := range shards {
			errs[j] = fmt.Errorf("claim shard %d: batch size %d < 1", i, k)
		}
		return res, errs
	}
	var rkeys, nonces []string
	if c != nil {
		rkeys, nonces = receiptsFor(s.ns, c, shards)
	}
	calls := make([]call, len(shards))
	for j, i := range shards {
		ks := ShardKeys(s.ns, i)
		if plan != nil {
			var rkey, nonce string
			if c != nil {
				rkey, nonce = rkeys[j], nonces[j]
			}
			calls[j] = s.fairClaim(i, k, lease, topics, plan, rkey, nonce)
			continue
		}
		if len(topics) == 0 {
			keys := []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts}
			args := []any{k, lease.Milliseconds(), MaxReap, k + 1}
			if c != nil {
				keys, args = append(keys, rkeys[j]), append(args, nonces[j])
			}
			calls[j] = call{script: claimScript, keys: keys, args: args}
			continue
		}
		keys := append(make([]string, 0, 5+len(topics)), ks.Due, ks.Msg, ks.Inflight, ks.Attempts)
		args := append(make([]any, 0, 6+len(topics)), k, lease.Milliseconds(), MaxReap, maxHoldPerClaim, len(topics))
		for _, t := range topics {
			keys, args = append(keys, HeldKey(s.ns, i, t)), append(args, t)
		}
		if c != nil {
			keys, args = append(keys, rkeys[j]), append(args, nonces[j])
		}
		calls[j] = call{script: claimHoldScript, keys: keys, args: args}
	}
	var lost []Receipt
	until := time.Now().Add(lease)
	for j, cmd := range s.run(ctx, calls...) {
		v, err := cmd.Slice()
		if err != nil {
			errs[j] = fmt.Errorf("claim shard %d: %w", shards[j], err)
			if c != nil && lostReply(err) {
				lost = append(lost, Receipt{Shard: shards[j], key: rkeys[j], nonce: nonces[j], until: until})
			}
			continue
		}
		if len(topics) == 0 && plan == nil {
			res[j], errs[j] = parseClaim(shards[j], v, 4)
		} else {
			res[j], errs[j] = parseClaim(shards[j], v, 5)
		}
	}
	if len(lost) > 0 {
		c.keep(lost...)
	}
	return res, errs
}

// parseClaim decodes the claim script's reply for shard i: o = 4 fields
// before the messages, or 5 from claimHoldScript (the fifth: how many it
// set apart).
func parseClaim(i int, v []any, o int) (ClaimResult, error) {
	var res ClaimResult
	r := reply{v: v, what: "claim reply"}
	if len(v) < o || (len(v)-o)%5 != 0 {
		return res, fmt.Errorf("claim shard %d: unexpected reply of %d fields", i, len(v))
	}
	res.NowMs, res.HeadMs, res.Reaped, res.LeaseHeadMs = r.int(0), r.int(1), int(r.int(2)), r.int(3)
	if o == 5 {
		res.Held = int(r.int(4))
	}
	res.Msgs = parseClaimed(&r, v, o)
	if r.err != nil {
		return ClaimResult{}, fmt.Errorf("claim shard %d: %w", i, r.err)
	}
	return res, nil
}

// parseClaimed decodes the five fields a claim gives each message it
// leased, from v[o] on.
func parseClaimed(r *reply, v []any, o int) []Claimed {
	n := (len(v) - o) / 5
	if n == 0 {
		return nil
	}
	msgs := make([]Claimed, n)
	for j := range msgs {
		p := o + 5*j
		msgs[j] = Claimed{
			Lease:    Lease{ID: r.str(p), Token: r.int(p + 1)},
			DueMs:    r.int(p + 2),
			Envelope: r.optBytes(p + 3),
			Attempt:  int(r.int(p+4)) + 1,
		}
	}
	return msgs
}

// Ack ends the life of confirmed messages of shard i and returns how many
// were still leased by the caller (the others will be delivered again).
// They count as published in the fleet's rates, with no lateness.
func (s *Store) Ack(ctx context.Context, i int, leases ...Lease) (int, error) {
	cs := make([]Confirmed, len(leases))
	for j, l := range leases {
		cs[j] = Confirmed{Lease: l, Late: -1}
	}
	return s.AckShards(ctx, map[int][]Confirmed{i: cs})
}

// Confirmed is a lease whose publish the broker confirmed, with its
// lateness for the fleet's rates (Store.Rates).
type Confirmed struct {
	Lease
	// Late is the confirm time minus the due time. Negative: not counted
	// in the lateness buckets (a message its topic's limit held back, whose
	// lateness the operator chose).
	Late time.Duration
}

// LatenessClasses are the upper bounds (ms) of the lateness buckets the
// fleet's rates count publishes in; later ones count in "inf".
var LatenessClasses = []int64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000}

// lateArgs are the ack script's first arguments for the leases of a
// round trip: how many classes, then each class with its count.
func lateArgs(leases map[int][]Confirmed) []any {
	var counts [16]int // by index into LatenessClasses; the last: beyond
	for _, ls := range leases {
		for _, l := range ls {
			if l.Late >= 0 {
				counts[latenessIndex(l.Late)]++
			}
		}
	}
	args := make([]any, 1, 1+2*MaxAckBatch+8)
	k := 0
	for j, n := range counts[:len(LatenessClasses)+1] {
		if n > 0 {
			c := "inf"
			if j < len(LatenessClasses) {
				c = strconv.FormatInt(LatenessClasses[j], 10)
			}
			args = append(args, c, n)
			k++
		}
	}
	args[0] = k
	return args
}

// latenessIndex is the index of d's bucket in LatenessClasses, or its
// length for a d beyond the last.
func latenessIndex(d time.Duration) int {
	ms := d.Milliseconds()
	for j, c := range LatenessClasses {
		if ms <= c {
			return j
		}
	}
	return len(LatenessClasses)
}

// latenessClass names the bucket of d: its upper bound in ms, "inf", or
// "" for a negative d (not counted).
func latenessClass(d time.Duration) string {
	if d < 0 {
		return ""
	}
	if j := latenessIndex(d); j < len(LatenessClasses) {
		return strconv.FormatInt(LatenessClasses[j], 10)
	}
	return "inf"
}

// MaxAckBatch is the most leases of one shard one ack script call
// settles, and maxAckCall the most of all its shards, so that no call
// runs long (about a millisecond of Redis for maxAckCall); AckShards
// splits larger batches.
const (
	MaxAckBatch = 64
	maxAckCall  = 256
)

// AckShards acks the leases of several shards in one pipelined round trip
// and returns how many were still held. On a single Redis server a call
// takes several shards' leases (up to maxAckCall; a script call's own
// cost is paid per call, so a flush of a few leases in each of many shards
// costs one call, not one a shard); on Redis Cluster each call is one
// shard's. A flush of 4 leases in each of 16 shards costs Redis 8.7-8.8 µs
// a message packed, 10.7-11.3 in a call a shard (go test -run '^$' -bench
// 'BenchmarkAck/shards' ./shard/ on the two-core benchmark VM, two runs of
// each build). When calls fail, the error is an *AckError holding their
// leases: Redis may or may not have run them, and sending them again is
// safe (a lease acked already is not found, and counts as not held). With
// ErrNotReplicated every ack took effect on the master (they count, and
// are not in the AckError), but fewer replicas than asked for have it: the
// messages come back only if the master fails over before they do.
func (s *Store) AckShards(ctx context.Context, leases map[int][]Confirmed) (int, error) {
	acked, _, err := s.ackShards(ctx, leases)
	return acked, err
}

// AckResent is AckShards for acks sent again after their call failed,
// and also returns how many were neither acked nor in Redis any more:
// gone, most likely because the failed call ran before Redis went away.
// acked + gone short of the count sent is how many leases were lost.
func (s *Store) AckResent(ctx context.Context, leases map[int][]Confirmed) (acked, gone int, err error) {
	return s.ackShards(ctx, leases)
}

func (s *Store) ackShards(ctx context.Context, leases map[int][]Confirmed) (int, int, error) {
	_, perShard := s.rdb.(*redis.ClusterClient)
	type part struct {
		shard int
		ls    []Confirmed
	}
	var calls []call
	var batches [][]part
	var keys []string
	var args []any
	var parts []part
	n := 0
	// With quotas, the ack counts acked messages out of them (quota.go);
	// a quota set in the last second may miss the hook: the sweep then
	// counts those out.
	script, quotas := ackScript, s.quotasExist(ctx)
	if quotas {
		script = ackQuotaScript
	}
	end := func() {
		if len(keys) > 0 {
			calls = append(calls, call{script, keys, args})
			batches = append(batches, parts)
		}
		keys, args, parts, n = nil, []any{0}, nil, 0
	}
	// Every lateness class of the round trip goes with its first call: the
	// rates sum all shards' counters, so where they are counted does not
	// matter, and a busy scanner's flush pays a few HINCRBYs in all.
	keys, args = nil, lateArgs(leases)
	for i, ls := range leases {
		ks := ShardKeys(s.ns, i)
		for len(ls) > 0 {
			m := min(len(ls), MaxAckBatch)
			if n > 0 && (perShard || n+m > maxAckCall) {
				end()
			}
			keys = append(keys, ks.Msg, ks.Inflight, ks.Attempts, ks.Counters)
			if quotas {
				keys = append(keys, quotaShardKey(s.ns, i, "scopeof"), quotaShardKey(s.ns, i, "quotaout"))
			}
			parts = append(parts, part{i, ls[:m]})
			args = append(args, m)
			for _, l := range ls[:m] {
				args = append(args, l.ID, l.Token)
			}
			n += m
			ls = ls[m:]
		}
	}
	end()
	if len(calls) == 0 {
		return 0, 0, nil
	}
	total, gone := 0, 0
	var failed *AckError
	var notReplicated error
	for j, c := range s.run(ctx, calls...) {
		v, err := c.Int64Slice()
		switch {
		case errors.Is(err, ErrNotReplicated):
			v = ackCounts(c.Val()) // done on the master
			if notReplicated == nil {
				notReplicated = err
			}
		case err != nil:
			if failed == nil {
				failed = &AckError{Failed: map[int][]Confirmed{}}
			}
			var shards []int
			for _, p := range batches[j] {
				failed.Failed[p.shard] = append(failed.Failed[p.shard], p.ls...)
				failed.N += len(p.ls)
				shards = append(shards, p.shard)
			}
			if failed.Err == nil {
				failed.Err = fmt.Errorf("ack messages of shard(s) %v: %w", shards, err)
			}
		}
		if len(v) == 2 {
			total, gone = total+int(v[0]), gone+int(v[1])
		}
	}
	if failed != nil {
		return total, gone, failed
	}
	if notReplicated != nil {
		return total, gone, fmt.Errorf("ack: %w", notReplicated)
	}
	return total, gone, nil
}

// AckError is AckShards' error when some of its script calls failed
// (Redis unreachable, restarting, at its memory limit): Failed holds those
// calls' leases, N of them, to send again; Err is the first call's error.
type AckError struct {
	Failed map[int][]Confirmed
	N      int
	Err    error
}

func (e *AckError) Error() string {
	return fmt.Sprintf("%d acks not done: %v", e.N, e.Err)
}

func (e *AckError) Unwrap() error { return e.Err }

// Release gives a lease of shard i back after a publish failed in a way
// that may succeed later (connection lost, timeout, flow control): the
// message is due again after delay, as a redelivery. It reports false if
// the lease was already lost.
func (s *Store) Release(ctx context.Context, i int, l Lease, delay time.Duration) (bool, error) {
	out, err := s.release(ctx, i, l, delay, 0, "")
	return out == Released, err
}

// ReleaseOutcome is what Refuse did.
type ReleaseOutcome int

// The outcomes of Release and Refuse.
const (
	LeaseLost ReleaseOutcome = iota // the lease had expired: nothing changed
	Released                        // due again after the delay
	Buried                          // refused limit times: now in the dead set
)

// Refuse gives back a lease whose publish the broker refused (a nack, an
// unroutable return, a missing exchange): due again after delay, unless
// this was the limit-th refusal of the message, which sends it to the dead
// set with reason. Refusals are counted across deliveries; a reschedule
// or redrive starts the count again.
func (s *Store) Refuse(ctx context.Context, i int, l Lease, delay time.Duration, limit int, reason string) (ReleaseOutcome, error) {
	if limit < 1 {
		return LeaseLost, fmt.Errorf("refuse %q in shard %d: limit %d < 1", l.ID, i, limit)
	}
	return s.release(ctx, i, l, delay, limit, reason)
}

func (s *Store) release(ctx context.Context, i int, l Lease, delay time.Duration, limit int, reason string) (ReleaseOutcome, error) {
	ks := ShardKeys(s.ns, i)
	n, err := s.run1(ctx, releaseScript, []string{ks.Due, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters},
		l.ID, l.Token, delay.Milliseconds(), limit, reason, s.wake, i).Int()
	if err != nil {
		return LeaseLost, fmt.Errorf("release %q in shard %d: %w", l.ID, i, err)
	}
	return ReleaseOutcome(n), nil
}

// DeadLetter moves a leased message of shard i to the dead set with a
// reason. It reports false if the lease was already lost.
func (s *Store) DeadLetter(ctx context.Context, i int, l Lease, reason string) (bool, error) {
	ks := ShardKeys(s.ns, i)
	n, err := s.run1(ctx, deadLetterScript, []string{ks.Inflight, ks.Dead, ks.Reason, ks.Counters},
		l.ID, l.Token, reason).Int()
	if err != nil {
		return false, fmt.Errorf("dead-letter %q in shard %d: %w", l.ID, i, err)
	}
	return n == 1, nil
}

// enqueue runs the enqueue script for one message of shard i and returns
// its due time, or ErrDuplicate, ErrInFlight, ErrCapacity.
// With far settings (the far tier is on), an id live far counts too.
// With a reservation r, it runs the quota'd variant (quota.go).
func (s *Store) enqueue(ctx context.Context, i int, m encodedMessage, upsert bool, shardCap int, far *FarSettings, r *reservation) (int64, error) {
	ks := ShardKeys(s.ns, i)
	up := "0"
	if upsert {
		up = "1"
	}
	keys := []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters, ks.Cancelled}
	if far != nil {
		keys = append(keys, s.farNearKeys(i, m.id, far)...)
	}
	c := call{enqueueScript, keys, []any{m.id, m.env, m.mode, m.ms, up, s.wake, i, shardCap}}
	if r != nil {
		c = r.wrap(s.ns, i, c)
	}
	return enqueueStatus(r.take(s.run(ctx, c)[0].Slice()))
}

// encodedMessage is one message as the enqueue scripts take it: its id,
// its envelope (AppendEnvelope), and when it is due (mode and ms, as
// validateWhen gives them).
type encodedMessage struct {
	id   string
	env  []byte
	mode string
	ms   int64
}

// enqueueChunk is one enqueueManyScript call: messages of one shard, and
// that shard's share of MaxPending (0 = none).
type enqueueChunk struct {
	shard, shardCap int
	msgs            []encodedMessage
	res             *reservation // the quota'd variant, under this reservation (quota.go)
}

// enqueueChunks runs one enqueueManyScript call per chunk, in one round
// trip; a command per chunk.
// With far settings (the far tier is on), ids live far count too.
func (s *Store) enqueueChunks(ctx context.Context, chunks []enqueueChunk, upsert bool, far *FarSettings) []*redis.Cmd {
	up := "0"
	if upsert {
		up = "1"
	}
	calls := make([]call, len(chunks))
	for c, ch := range chunks {
		ks := ShardKeys(s.ns, ch.shard)
		args := make([]any, 0, 5+4*len(ch.msgs))
		args = append(args, len(ch.msgs), s.wake, ch.shard, ch.shardCap, up)
		for _, m := range ch.msgs {
			args = append(args, m.id, m.env, m.mode, m.ms)
		}
		keys := []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters, ks.Cancelled}
		if far != nil {
			fk := farKeysOf(s.ns, ch.shard)
			keys = append(keys, fk.dir(), fk.meta())
			for _, m := range ch.msgs {
				keys = append(keys, fk.index(m.id, far.IndexSlots))
			}
		}
		calls[c] = call{enqueueManyScript, keys, args}
		if ch.res != nil {
			calls[c] = ch.res.wrap(s.ns, ch.shard, calls[c])
		}
	}
	return s.run(ctx, calls...)
}

// retry runs the retry script for message id of shard i (Producer.Retry).
func (s *Store) retry(ctx context.Context, i int, id string, env []byte, mode string, arg any) ([]any, error) {
	ks := ShardKeys(s.ns, i)
	return s.run1(ctx, retryScript, []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters},
		id, env, mode, arg, s.wake, i).Slice()
}

// enqueueStatus maps the enqueue script's reply to (due, error).
func enqueueStatus(v []any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	r := reply{v: v, what: "enqueue reply"}
	if len(v) != 2 {
		return 0, fmt.Errorf("unexpected enqueue reply of %d fields", len(v))
	}
	status, due := r.int(0), r.int(1)
	if r.err != nil {
		return 0, r.err
	}
	switch status {
	case 1, 2, 3: // 3: stored by this very write, which ran again (enqueueManyScript)
		return due, nil
	case 0:
		return 0, ErrDuplicate
	case -1:
		return 0, ErrInFlight
	case -2:
		return 0, ErrCapacity
	case -3:
		return 0, ErrCancelled
	}
	return 0, fmt.Errorf("unexpected enqueue status %d", status)
}

// Cancel removes a scheduled message from shard i.
func (s *Store) Cancel(ctx context.Context, i int, id string) error {
	return s.CancelAhead(ctx, i, id, 0)
}

// CancelAhead is Cancel that, when nothing is scheduled under id in shard
// i, leaves a tombstone there: for window, an enqueue of id into shard i
// is refused with ErrCancelled. It still returns ErrNotFound then. No
// tombstone when window <= 0 or the message is in flight.
func (s *Store) CancelAhead(ctx context.Context, i int, id string, window time.Duration) error {
	ks := ShardKeys(s.ns, i)
	keys := []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Cancelled}
	fs, on, err := s.farSettings(ctx)
	if err != nil {
		return fmt.Errorf("cancel %q in shard %d: %w", id, i, err)
	}
	if on {
		keys = append(keys, s.farNearKeys(i, id, &fs)...)
	}
	n, err := s.run1(ctx, cancelScript, keys, id, max(window.Milliseconds(), 0)).Int()
	switch {
	case err != nil:
		return fmt.Errorf("cancel %q in shard %d: %w", id, i, err)
	case n == 0:
		// Not in the due set: it may wait in its topic's held set.
		if _, held, err := s.changeHeld(ctx, i, id, "cancel", 0); err != nil {
			return fmt.Errorf("cancel %q in shard %d: %w", id, i, err)
		} else if held {
			return nil
		}
		// Or in its class's backlog, set apart while the shard is behind.
		if _, waits, err := s.changeBacklog(ctx, i, id, "cancel", 0); err != nil {
			return fmt.Errorf("cancel %q in shard %d: %w", id, i, err)
		} else if waits {
			return nil
		}
		return fmt.Errorf("cancel %q: %w", id, ErrNotFound)
	case n == -1:
		return fmt.Errorf("cancel %q: %w", id, ErrInFlight)
	}
	return nil
}

// Reschedule moves the due time of a scheduled message of shard i; mode is
// "delay" (ms after Redis TIME) or "at" (absolute unix ms). It looks near,
// then far, then near again when the far tier is on: a promotion between
// the first two looks moves the message near (never back), where the
// third finds it.
func (s *Store) reschedule(ctx context.Context, i int, id, mode string, ms int64) (int64, error) {
	due, err := s.rescheduleOnce(ctx, i, id, mode, ms)
	if errors.Is(err, ErrNotFound) {
		if _, far, ferr := s.farSettings(ctx); ferr == nil && far {
			return s.rescheduleOnce(ctx, i, id, mode, ms)
		}
	}
	return due, err
}

// rescheduleOnce is reschedule's one look at each tier.
func (s *Store) rescheduleOnce(ctx context.Context, i int, id, mode string, ms int64) (int64, error) {
	ks := ShardKeys(s.ns, i)
	v, err := s.run1(ctx, rescheduleScript, []string{ks.Due, ks.Inflight, ks.Attempts},
		id, mode, ms, s.wake, i).Slice()
	if err != nil {
		return 0, fmt.Errorf("reschedule %q in shard %d: %w", id, i, err)
	}
	r := reply{v: v, what: "reschedule reply"}
	if len(v) != 2 {
		return 0, fmt.Errorf("reschedule %q: unexpected reply of %d fields", id, len(v))
	}
	status, due := r.int(0), r.int(1)
	switch {
	case r.err != nil:
		return 0, fmt.Errorf("reschedule %q: %w", id, r.err)
	case status == 0:
		if due, held, err := s.changeHeld(ctx, i, id, mode, ms); err != nil {
			return 0, fmt.Errorf("reschedule %q in shard %d: %w", id, i, err)
		} else if held {
			return due, nil
		}
		if due, waits, err := s.changeBacklog(ctx, i, id, mode, ms); err != nil {
			return 0, fmt.Errorf("reschedule %q in shard %d: %w", id, i, err)
		} else if waits {
			return due, nil
		}
		if due, far, err := s.rescheduleFar(ctx, i, id, mode, ms); err != nil {
			return 0, fmt.Errorf("reschedule %q in shard %d: %w", id, i, err)
		} else if far {
			return due, nil
		}
		return 0, fmt.Errorf("reschedule %q: %w", id, ErrNotFound)
	case status == -1:
		return 0, fmt.Errorf("reschedule %q: %w", id, ErrInFlight)
	}
	return due, nil
}

// State is where a message is in its life.
type State string

// The states Inspect reports.
const (
	StateScheduled State = "scheduled"
	StateInFlight  State = "inflight"
	StateDead      State = "dead"
	// StateHeld: due, and waiting for its topic's rate limit or pause to
	// let it go (flow control at release).
	StateHeld State = "held"
	// StateBacklog: due, set apart in its class's backlog while the fleet
	// is behind, waiting for the class's turn (fair release, fair.go).
	StateBacklog State = "backlog"
	StateUnknown State = "unknown" // never enqueued, or delivered, or cancelled
)

// Info is what Inspect knows about a message.
type Info struct {
	ID    string
	Shard int
	State State
	// At is the due time (scheduled), the lease deadline (in flight) or the
	// time it died (dead); zero when unknown.
	At time.Time
	// Scheduled is the time the message is (or, in flight or dead, was)
	// scheduled for: what x-delayq-due-ms says when it is published. Zero
	// when unknown.
	Scheduled time.Time
	Attempts  int       // deliveries so far that were not acked (redeliveries)
	Envelope  *Envelope // nil when unknown or corrupt
	Corrupt   error     // why Envelope could not be decoded, if it could not
	Reason    string    // why it is dead
	NowMs     int64     // Redis clock when inspected
	Far       bool      // scheduled, waiting in the far-future tier (doc.go)
	Class     string    // the class whose backlog it waits in (StateBacklog)

	farEntry    string // its far index entry, "<b>:<seq>" (Far)
	farEnvelope []byte // its record's envelope, as stored (Far)
}

// Inspect reports the state of message id in shard i. With the far tier
// on, a message found nowhere is looked for once more: a promotion between
// the look near and the look far moves it near (never back).
func (s *Store) Inspect(ctx context.Context, i int, id string) (Info, error) {
	info, err := s.inspectOnce(ctx, i, id)
	if err == nil && info.State == StateUnknown {
		if _, far, ferr := s.farSettings(ctx); ferr == nil && far {
			return s.inspectOnce(ctx, i, id)
		}
	}
	return info, err
}

// inspectOnce is Inspect's one look at each tier.
func (s *Store) inspectOnce(ctx context.Context, i int, id string) (Info, error) {
	ks := ShardKeys(s.ns, i)
	v, err := s.run1(ctx, inspectScript,
		[]string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason}, id).Slice()
	if err != nil {
		return Info{}, fmt.Errorf("inspect %q in shard %d: %w", id, i, err)
	}
	if len(v) != 7 {
		return Info{}, fmt.Errorf("inspect %q: unexpected reply of %d fields", id, len(v))
	}
	r := reply{v: v, what: "inspect reply"}
	info := Info{ID: id, Shard: i, NowMs: r.int(0), State: State(r.str(1)), Attempts: int(r.int(3))}
	if ms := r.int(2); ms > 0 {
		info.At = time.UnixMilli(ms)
	}
	if ms := r.int(4); ms > 0 {
		info.Scheduled = time.UnixMilli(ms)
	}
	if raw := r.optBytes(5); raw != nil {
		if env, err := DecodeEnvelope(raw); err != nil {
			info.Corrupt = err
		} else {
			info.Envelope = &env
		}
	}
	info.Reason = string(r.optBytes(6))
	if r.err != nil {
		return Info{}, fmt.Errorf("inspect %q: %w", id, r.err)
	}
	if info.State == StateUnknown && info.Envelope != nil && info.Envelope.Topic != "" {
		due, err := s.rdb.ZScore(ctx, HeldKey(s.ns, i, info.Envelope.Topic), id).Result()
		switch {
		case err == nil:
			info.State, info.At = StateHeld, time.UnixMilli(int64(due))
			if int64(due) > info.NowMs { // set apart ahead of its time (PreHold)
				info.State = StateScheduled
			}
			if info.Scheduled.IsZero() {
				info.Scheduled = info.At
			}
		case !errors.Is(err, redis.Nil):
			return Info{}, fmt.Errorf("inspect %q in shard %d: %w", id, i, err)
		}
	}
	if info.State == StateUnknown && (info.Envelope != nil || info.Corrupt != nil) {
		if class, due, waits, err := s.inBacklog(ctx, i, id); err != nil {
			return Info{}, fmt.Errorf("inspect %q in shard %d: %w", id, i, err)
		} else if waits {
			info.State, info.At, info.Class = StateBacklog, time.UnixMilli(due), class
			if info.Scheduled.IsZero() {
				info.Scheduled = info.At
			}
		}
	}
	if info.State == StateUnknown {
		if _, err := s.inspectFar(ctx, i, id, &info); err != nil {
			return Info{}, fmt.Errorf("inspect %q in shard %d: %w", id, i, err)
		}
	}
	return info, nil
}

// Stats are one shard's counts.
type Stats struct {
	Shard     int
	Scheduled int64 // in the due set (including those due now)
	DueNow    int64 // due but not yet claimed: the backlog
	InFlight  int64
	Dead      int64
	HeadMs    int64 // due time of the earliest scheduled message; -1 if none
	NowMs     int64 // Redis clock
	Enqueued  int64 // messages ever created in the shard
	// Far: scheduled messages waiting in the far-future tier, not in the
	// due set (not counted in Scheduled); HeadMs does not see them.
	Far int64
}

// OldestOverdue is how long the earliest scheduled message has been due
// (0 if none is due).
func (st Stats) OldestOverdue() time.Duration {
	if st.HeadMs < 0 || st.HeadMs > st.NowMs {
		return 0
	}
	return time.Duration(st.NowMs-st.HeadMs) * time.Millisecond
}

// Stats counts shards [0, m) in one pipeline.
func (s *Store) Stats(ctx context.Context, m int) ([]Stats, error) {
	calls := make([]call, m)
	for i := range calls {
		ks := ShardKeys(s.ns, i)
		calls[i] = call{statsScript, []string{ks.Due, ks.Inflight, ks.Dead, ks.Counters}, nil}
	}
	cmds := s.run(ctx, calls...)
	out := make([]Stats, m)
	for i, c := range cmds {
		v, err := c.Slice()
		switch {
		case err != nil:
			return nil, fmt.Errorf("stats of shard %d: %w", i, err)
		case len(v) != 7:
			return nil, fmt.Errorf("stats of shard %d: unexpected reply of %d fields", i, len(v))
		}
		r := reply{v: v, what: "stats reply"}
		out[i] = Stats{Shard: i, NowMs: r.int(0), Scheduled: r.int(1), DueNow: r.int(2),
			InFlight: r.int(3), Dead: r.int(4), HeadMs: r.int(5), Enqueued: r.int(6)}
		if r.err != nil {
			return nil, fmt.Errorf("stats of shard %d: %w", i, r.err)
		}
	}
	far, err := s.farCounts(ctx, m)
	if err != nil {
		return nil, err
	}
	for i, n := range far {
		out[i].Far = n
	}
	return out, nil
}

// reply reads typed fields out of a script's array reply and keeps the
// first type error.
type reply struct {
	v    []any
	what string
	err  error
}

func (r *reply) bad(i int, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s field %d: want %s, got %T %v", r.what, i, want, r.v[i], r.v[i])
	}
}

func (r *reply) int(i int) int64 {
	switch x := r.v[i].(type) {
	case int64:
		return x
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
	}
	r.bad(i, "integer")
	return 0
}

func (r *reply) str(i int) string {
	if x, ok := r.v[i].(string); ok {
		return x
	}
	r.bad(i, "string")
	return ""
}

// optBytes returns a bulk string field, or nil when it is a Redis nil.
func (r *reply) optBytes(i int) []byte {
	switch x := r.v[i].(type) {
	case nil:
		return nil
	case string:
		return []byte(x)
	}
	r.bad(i, "string or nil")
	return nil
}

// Heartbeat keeps scanner process id a live member of the namespace's
// fleet for ttl (0: it leaves now) and returns the live members, id
// included, in order.
func (s *Store) Heartbeat(ctx context.Context, id string, ttl time.Duration) ([]string, error) {
	v, err := s.run1(ctx, heartbeatScript, []string{ScannersKey(s.ns)}, id, max(ttl.Milliseconds(), 0)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("scanner heartbeat: %w", err)
	}
	return v, nil
}

// ackCounts reads the ack script's reply, {acked, gone}, from a command
// whose error was set after it ran (ErrNotReplicated).
func ackCounts(v any) []int64 {
	a, _ := v.([]any)
	out := make([]int64, 0, 2)
	for _, x := range a {
		n, _ := x.(int64)
		out = append(out, n)
	}
	return out
}
