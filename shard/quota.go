package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard/scope"
)

// Quotas keep one team (a scope, package scope) from filling a shared
// Redis: a most number of messages held and a most enqueued a second,
// set at runtime (Store.SetQuota: delayq quota, PUT /v1/quotas/{scope},
// the console) or in the scopes file (ApplyScopeQuotas, at a process's
// start), and kept in Redis.
//
// # The design
//
// A scope's messages spread over every shard, and in a Redis Cluster
// the shards are in other slots than any count of the scope, so no one
// script can both check a count and store a message. Counting is in two
// places, each exact where it is, joined by reservations:
//
//	quota         HASH {ns}: gen (the last generation), and per scope
//	              gen:<s>, max:<s>, rate:<s>, count:<s> (messages held or
//	              reserved), win:<s> ("<second>:<enqueued in it>"),
//	              refused:<s> and enqueued:<s> (for the metrics),
//	              adopted:<s> (the generation whose adoption is done)
//	quotadefs     HASH {ns}: scope -> its quota as JSON, with the scope's
//	              rules: what producers read (every second) to know which
//	              messages a quota concerns
//	quotares      ZSET {ns}: "<s>:<gen>|<reservation>|<granted>" -> deadline
//	quotaapplied:<s> HASH {ns}: shard -> its quotaout value applied,
//	              in:<shard> -> its quotain value applied (deleted with
//	              the quota, or when it starts a new generation)
//	quotacursor   HASH {ns}: per shard the sweep's cursor and when its
//	              next pass may start (two fields a shard: bounded by M)
//	quotalease, quotaadopt STRING {ns}: the maintenance's and the
//	              adoption's leases (SET NX PX: they expire)
//	scopeof       HASH {ns:i}: id -> "<s>:<gen>", the messages of a quota'd
//	              scope that the shard holds (a tag goes when its message
//	              does: the ack, or the sweep)
//	quotaheld     HASH {ns:i}: reservation -> messages it stored here
//	              (deleted by the maintenance once its reservation is
//	              settled and a minute old: quotaHeldKept)
//	quotaout      HASH {ns:i}: "<s>:<gen>" -> messages counted out (only grows)
//	quotain       HASH {ns:i}: "<s>:<gen>" -> messages the adoption counted in (only grows)
//	              (a field of a generation no longer current is deleted by
//	              the next maintenance round: a field a quota'd scope)
//
// An enqueue of n messages of a quota'd scope:
//
//  1. reserves (quotaReserveScript): what the quotas allow of n, at most,
//     is added to count:<s> and to the second's window, and recorded in
//     quotares with a deadline (reservationLifetime, Redis clock). What
//     is not granted is refused with a *QuotaError naming the quota;
//  2. stores the granted messages with the enqueue scripts' quota'd
//     variants (quotaWrap), which refuse the call past the deadline, tag
//     each message they store in scopeof, and add what they stored to
//     quotaheld under the reservation, in the same call;
//  3. settles (quotaSettleScript): what was granted but not stored
//     (duplicates, refusals) goes back to the count, and the reservation
//     leaves quotares. Only the first settle of a reservation counts.
//
// A message leaves the count when it is no longer held. A delivery (the
// ack script, which finds the acked messages' tags) counts itself out in
// the shard's quotaout at once, in the same call; every other way out
// (cancelled one by one, in a batch or in bulk, purged from the dead set,
// cleared) is found by a sweep: any process's maintenance round
// (Store.MaintainQuotas, in every scanner, once a second for the fleet)
// goes through each shard's scopeof tags, a page at a time for at most
// quotaSweepBudget a round, and counts out those whose message is gone
// (quotaSweepScript, one atomic check per id); a shard swept through
// waits 30 s before its next pass, so the sweep costs Redis a bounded
// share however many messages are tagged. The round then applies each
// shard's quotaout to the count (quotaApplyScript: the values only grow,
// and the count keeps what it applied per shard, so a round run twice or
// cut short applies each removal once). One hook in the ack and a sweep
// instead of a hook in each of the dozen scripts a message can leave by:
// the claim is unchanged, and so is the ack in a namespace without quotas
// (the store looks once a second whether one exists, and only then sends
// ackQuotaScript, which pays one EXISTS a shard for a shard without
// tags). The price is lag for the rarer ways out: a cancel
// frees its room at the shard's next pass: within 30 s and a pass. The
// sweep looks at about 14,000 tags a round, 2.9 µs of Redis each (go
// test -run XXX -bench BenchmarkQuotaSweep ./shard/, two shared cores):
// about 5 % of one Redis core while it sweeps, and a pass over 1,000,000
// quota'd messages takes some 70 rounds (70 s).
//
// The rule that keeps a team under its quota: the count is never below
// what the scope holds. It is raised before a store (the reservation)
// and lowered only after a removal (the ack, the sweep) or for what a settled
// reservation did not store. Between, the team is under its quota by
// what is reserved and not yet stored or settled, and by removals not
// yet swept.
//
// A producer killed between 1 and 3 leaves a reservation in quotares.
// Once its deadline has passed (and quotaClockSkew more, for the clocks
// of a Cluster's masters to differ), no script stores under it any more,
// and the maintenance round settles it with what the shards' quotaheld
// say it stored. Until then the team is under its quota by that
// reservation: at most a batch, for at most reservationLifetime +
// quotaClockSkew + a round (16 s). quotaheld entries go once their
// reservation is settled and a minute old.
//
// A quota's generation changes when it is deleted and set again, so tags
// and removals of the old one count nothing in the new one. A quota
// counts the messages enqueued once producers have read it (they read
// the quotas when their copy is a second old), and, by an adoption pass
// that a scanner runs when a quota is new (quotaadopt.go), what the
// scope held before: scheduled, held back and far messages (quotain,
// applied like quotaout). Not counted: messages in flight or dead while
// the pass walks by, and messages that come back without an enqueue (a
// consumer's retry, a redrive from the dead set, a recurring schedule's
// occurrences). On one Redis and on a Cluster the count is never below
// what is held of the counted messages, so a team never holds more than
// its quota of them; on one Redis with no producer killed, a team given
// more than its quota stores exactly its quota.
//
// The rate quota counts the messages granted in each second of the
// Redis clock (of the master holding quota), duplicates included.
//
// What counting costs (scripts/bench.sh -only quota, two shared cores,
// medians of three rounds, with a quota over without): the SDK's
// enqueue in batches of 2,000, 0.63-0.78 (a reservation and a settle a
// batch, the tag a message); saturated dispatch at k = 1, 1.016 (the
// ack's hook). A new quota's adoption walks the namespace once, and
// costs a drain under way about a sixth of its rate while it does.

// ErrQuota: a scope's quota refused the message; nothing was written. The
// error is a *QuotaError, which names the quota.
var ErrQuota = errors.New("over quota")

// ErrCorruptQuota: a stored quota definition does not parse (it names the
// key and field). Store.Quotas returns the others with it; producers go
// on with the others.
var ErrCorruptQuota = errors.New("corrupt quota")

// QuotaError says which quota refused a message, and when to try again.
type QuotaError struct {
	Scope string
	// Quota is "pending" (the most messages held) or "rate" (the most
	// enqueued a second).
	Quota      string
	Limit      int64
	Count      int64 // messages counted when refused (pending)
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	if e.Quota == "rate" {
		return fmt.Sprintf("%s: scope %s enqueues at most %d messages a second; retry after %s",
			ErrQuota, e.Scope, e.Limit, e.RetryAfter)
	}
	return fmt.Sprintf("%s: scope %s holds %d of its quota of %d pending messages; retry after %s",
		ErrQuota, e.Scope, e.Count, e.Limit, e.RetryAfter)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

// Quota is one scope's quota.
type Quota struct {
	Scope string `json:"scope"`
	// Rules are the scope's rules, as in the scopes file: "topic=billing.*
	// ids=billing-" (package scope). They decide which messages count.
	Rules      string `json:"rules"`
	MaxPending int64  `json:"max_pending"` // most messages held; 0 = no limit
	MaxRate    int64  `json:"max_rate"`    // most enqueued a second; 0 = no limit
	Gen        int64  `json:"gen"`         // set by Redis: a new quota has a new generation
	// Source is who set it last: "file" (the scopes file, at a process's
	// start: ApplyScopeQuotas), or the audit log's via and who.
	Source string `json:"source,omitempty"`
}

// QuotaUsage is a quota with what it counts.
type QuotaUsage struct {
	Quota
	// Count is the messages held and reserved (never below what the scope
	// holds of the messages counted).
	Count int64 `json:"count"`
	// Refused is the messages refused by the quota since it was set.
	Refused int64 `json:"refused"`
	// Enqueued is the messages stored under the quota since it was set
	// (counted when their reservation is settled).
	Enqueued int64 `json:"enqueued"`
	// Adopting: the messages the scope held when the quota was set are
	// being counted in (quotaadopt.go); Count is short of them until then.
	Adopting bool `json:"adopting,omitempty"`
}

// Quota keys (see the design above).
func quotaKey(ns string) string           { return "delayq:{" + ns + "}:quota" }
func quotaDefsKey(ns string) string       { return "delayq:{" + ns + "}:quotadefs" }
func quotaResKey(ns string) string        { return "delayq:{" + ns + "}:quotares" }
func quotaAppliedKey(ns, s string) string { return "delayq:{" + ns + "}:quotaapplied:" + s }
func quotaCursorKey(ns string) string     { return "delayq:{" + ns + "}:quotacursor" }
func quotaLeaseKey(ns string) string      { return "delayq:{" + ns + "}:quotalease" }
func quotaShardKey(ns string, i int, name string) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:" + name
}

const (
	// reservationLifetime is how long a reservation may wait for its
	// messages to be stored.
	reservationLifetime = 10 * time.Second
	// quotaClockSkew is how long past its deadline a reservation waits
	// before the maintenance settles it: the clocks of two Cluster masters
	// may differ by that much.
	quotaClockSkew = 5 * time.Second
	// quotaCacheTTL is the age at which a producer reads the quotas again.
	quotaCacheTTL = time.Second
	// quotaSweepPage is the tags a maintenance round looks at in a shard
	// in one call; a round goes on while quotaSweepBudget lasts. A shard
	// swept through starts again quotaSweepPasses maintenance intervals
	// after its last start (30 s at the scanners' 1 s).
	quotaSweepPage   = 500
	quotaSweepBudget = 50 * time.Millisecond
	quotaSweepPasses = 30
	// quotaHeldKept is how long a settled reservation's quotaheld entries
	// stay after its producer made it (by the producer's clock): past its
	// deadline and the clock skew, with room for the clocks of the
	// producer's and the maintainer's hosts to differ. It bounds quotaheld
	// to the reservations of a minute, one field a shard a batch.
	quotaHeldKept = time.Minute
)

// SetQuota creates or changes scope q.Scope's quota. The scope's rules
// may not overlap another quota'd scope's (a message counts in at most
// one). A negative limit is refused naming the field. A quota whose
// limits are both 0 limits nothing and counts: the scope's messages held,
// enqueued and refused, for its metrics.
func (s *Store) SetQuota(ctx context.Context, q Quota) error {
	switch {
	case q.MaxPending < 0:
		return invalid("max_pending", "quota %q: max_pending %d is below zero", q.Scope, q.MaxPending)
	case q.MaxRate < 0:
		return invalid("max_rate", "quota %q: max_rate %d is below zero", q.Scope, q.MaxRate)
	}
	sc, err := parseQuotaScope(q.Scope, q.Rules)
	if err != nil {
		return &InvalidError{Field: "rules", Reason: err.Error()}
	}
	q.Rules = strings.TrimPrefix(sc.String(), sc.Name)
	q.Rules = strings.TrimSpace(q.Rules)
	have, err := s.Quotas(ctx)
	if err != nil && !errors.Is(err, ErrCorruptQuota) { // a corrupt one may be this one, set again
		return err
	}
	var all []Quota // the others, then this one: an error names it second
	for _, o := range have {
		if o.Scope != q.Scope {
			all = append(all, o.Quota)
		}
	}
	if _, err := scope.ParseSet(strings.NewReader(quotaLines(append(all, q)))); err != nil {
		// the lines are the quotas', not a file's: name the scopes only
		msg := err.Error()
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			msg = rest
		}
		return &InvalidError{Field: "rules", Reason: fmt.Sprintf("quota %q: %s", q.Scope, msg)}
	}
	q.Gen = 0 // the script puts the generation in
	def, err := json.Marshal(q)
	if err != nil {
		return err
	}
	if err := s.run1(ctx, quotaSetScript, []string{quotaKey(s.ns), quotaDefsKey(s.ns), quotaAppliedKey(s.ns, q.Scope)},
		q.Scope, def, q.MaxPending, q.MaxRate).Err(); err != nil {
		return fmt.Errorf("set quota %q: %w", q.Scope, err)
	}
	s.quotas.forget()
	return nil
}

// QuotaFromFile is Quota.Source of a quota the scopes file gave.
const QuotaFromFile = "file"

// ApplyScopeQuotas writes the quotas the scopes file gives (scope.Scope's
// Quota) to Redis: a scope's quota is set when it has none, or when the
// one it has came from the file; one the file no longer gives, and that
// came from it, is deleted. A quota changed at runtime (delayq quota, the
// API, the console) stays until it is deleted. serve and scan call it at
// start; every process doing so at once writes the same values.
// Without a scopes file (set nil) it changes nothing.
func (s *Store) ApplyScopeQuotas(ctx context.Context, set *scope.Set) error {
	if set == nil {
		return nil
	}
	have, err := s.Quotas(ctx)
	if err != nil && !errors.Is(err, ErrCorruptQuota) {
		return err
	}
	stored := map[string]Quota{}
	for _, q := range have {
		stored[q.Scope] = q.Quota
	}
	var errs []error
	for _, sc := range set.All() {
		q, had := stored[sc.Name]
		delete(stored, sc.Name)
		if sc.Quota == nil || had && q.Source != QuotaFromFile {
			if sc.Quota == nil && had && q.Source == QuotaFromFile {
				errs = append(errs, s.DeleteQuota(ctx, sc.Name))
			}
			continue
		}
		rules := strings.TrimSpace(strings.TrimPrefix(sc.String(), sc.Name))
		if had && q.MaxPending == sc.Quota.MaxPending && q.MaxRate == sc.Quota.MaxRate && q.Rules == rules {
			continue
		}
		errs = append(errs, s.SetQuota(ctx, Quota{Scope: sc.Name, Rules: rules, MaxPending: sc.Quota.MaxPending,
			MaxRate: sc.Quota.MaxRate, Source: QuotaFromFile}))
	}
	for name, q := range stored { // scopes the file no longer defines
		if q.Source == QuotaFromFile {
			errs = append(errs, s.DeleteQuota(ctx, name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the scopes file's quotas: %w", err)
	}
	return nil
}

// parseQuotaScope reads a scope's name and rules as the scopes file has
// them.
func parseQuotaScope(name, rules string) (*scope.Scope, error) {
	set, err := scope.ParseSet(strings.NewReader(name + " " + rules))
	if err != nil {
		return nil, fmt.Errorf("quota %q: %w", name, err)
	}
	sc, ok := set.Get(name)
	if !ok {
		return nil, fmt.Errorf("quota %q: no scope", name)
	}
	return sc, nil
}

// DeleteQuota removes scope's quota; its messages are no longer counted
// nor limited. Deleting a quota that does not exist is not an error.
func (s *Store) DeleteQuota(ctx context.Context, name string) error {
	if err := s.run1(ctx, quotaSetScript, []string{quotaKey(s.ns), quotaDefsKey(s.ns), quotaAppliedKey(s.ns, name)},
		name, "", 0, 0).Err(); err != nil {
		return fmt.Errorf("delete quota %q: %w", name, err)
	}
	s.quotas.forget()
	return nil
}

// Quotas returns every quota with its count, by scope name. A stored
// definition that does not parse is left out, and the error (wrapping
// ErrCorruptQuota) names it, returned with the others.
func (s *Store) Quotas(ctx context.Context) ([]QuotaUsage, error) {
	defs, err := s.rdb.HGetAll(ctx, quotaDefsKey(s.ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("read quotas: %w", err)
	}
	qs, corrupt := parseQuotaDefs(defs)
	if len(qs) == 0 {
		return nil, corrupt
	}
	fields := make([]string, 0, 2*len(qs))
	for _, q := range qs {
		fields = append(fields, "count:"+q.Scope, "refused:"+q.Scope, "enqueued:"+q.Scope, "adopted:"+q.Scope)
	}
	v, err := s.rdb.HMGet(ctx, quotaKey(s.ns), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("read quota counts: %w", err)
	}
	out := make([]QuotaUsage, len(qs))
	for j, q := range qs {
		out[j].Quota = q
		out[j].Count, _ = strconv.ParseInt(fmt.Sprint(v[4*j]), 10, 64)
		out[j].Refused, _ = strconv.ParseInt(fmt.Sprint(v[4*j+1]), 10, 64)
		out[j].Enqueued, _ = strconv.ParseInt(fmt.Sprint(v[4*j+2]), 10, 64)
		out[j].Adopting = fmt.Sprint(v[4*j+3]) != strconv.FormatInt(q.Gen, 10)
	}
	return out, corrupt
}

// parseQuotaDefs reads quotadefs' values, sorted by scope. A value that
// does not parse is left out, and named (key and field) in the error
// returned with the others: producers go on with the quotas that parse
// (the corrupt one's scope is neither counted nor limited until it is set
// again), while Quotas (the CLI, the API, the metrics) and the scanners'
// maintenance report it.
func parseQuotaDefs(defs map[string]string) ([]Quota, error) {
	out := make([]Quota, 0, len(defs))
	var errs []error
	for name, v := range defs {
		var q Quota
		if err := json.Unmarshal([]byte(v), &q); err != nil || q.Scope != name || q.Gen <= 0 || q.MaxPending < 0 || q.MaxRate < 0 {
			errs = append(errs, fmt.Errorf("%w: the definition of %q (HASH quotadefs, field %q) is %q (set the quota again)", ErrCorruptQuota, name, name, v))
			continue
		}
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b Quota) int { return strings.Compare(a.Scope, b.Scope) })
	if _, err := scope.ParseSet(strings.NewReader(quotaLines(out))); err != nil {
		// Rules that do not parse, or two quotas set at once with rules
		// that overlap (SetQuota checks against the others, not against
		// a concurrent call): keep each that fits with those before it.
		var kept []Quota
		for _, q := range out {
			if _, err := scope.ParseSet(strings.NewReader(quotaLines(append(kept, q)))); err != nil {
				errs = append(errs, fmt.Errorf("%w: the quota of %q (HASH quotadefs) is left out: %w (set or delete it again)", ErrCorruptQuota, q.Scope, err))
				continue
			}
			kept = append(kept, q)
		}
		out = kept
	}
	return out, errors.Join(errs...)
}

// quotaCache is a producer's copy of the quotas, read again when
// quotaCacheTTL old. Shared by a Store's copies.
type quotaCache struct {
	mu   sync.Mutex
	at   time.Time
	set  *scope.Set
	defs map[string]*Quota
	// exists: whether the namespace has the quota HASH, as of existsAt
	// (the acks' choice of script), under its own lock: an ack never
	// waits behind a producer's read of the quotas
	existsMu sync.Mutex
	exists   bool
	existsAt time.Time
}

// quotasExist reports whether a quota was ever set in the namespace
// (the quota HASH exists), read again when quotaCacheTTL old; on an
// error it says yes (the ack's hook costs a little, and is right either
// way).
func (s *Store) quotasExist(ctx context.Context) bool {
	c := s.quotas
	c.existsMu.Lock()
	defer c.existsMu.Unlock()
	if c.existsAt.IsZero() || time.Since(c.existsAt) >= quotaCacheTTL {
		n, err := s.rdb.Exists(ctx, quotaKey(s.ns)).Result()
		c.exists, c.existsAt = err != nil || n > 0, time.Now()
	}
	return c.exists
}

func (c *quotaCache) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// quotaOf returns the quota message t counts in, or nil.
func (s *Store) quotaOf(ctx context.Context, t scope.Target) (*Quota, error) {
	set, defs, err := s.quotaSet(ctx)
	if err != nil || len(defs) == 0 {
		return nil, err
	}
	if sc := set.Of(t); sc != nil {
		return defs[sc.Name], nil
	}
	return nil, nil
}

// quotaSet returns the quotas as producers use them (the quota'd scopes,
// and each quota by scope), read again when quotaCacheTTL old.
func (s *Store) quotaSet(ctx context.Context) (*scope.Set, map[string]*Quota, error) {
	c := s.quotas
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= quotaCacheTTL {
		defs, err := s.rdb.HGetAll(ctx, quotaDefsKey(s.ns)).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("read quotas: %w", err)
		}
		qs, _ := parseQuotaDefs(defs) // one left out is reported by Quotas and the maintenance
		byName := make(map[string]*Quota, len(qs))
		for j := range qs {
			byName[qs[j].Scope] = &qs[j]
		}
		c.set, c.defs, c.at = quotaScopes(qs), byName, time.Now()
	}
	return c.set, c.defs, nil
}

// quotaScopes is the scopes of qs (valid, and not overlapping: what
// parseQuotaDefs keeps).
func quotaScopes(qs []Quota) *scope.Set {
	set, err := scope.ParseSet(strings.NewReader(quotaLines(qs)))
	if err != nil { // parseQuotaDefs leaves out what would make this fail
		panic("shard: quota scopes that parseQuotaDefs kept do not parse: " + err.Error())
	}
	return set
}

// quotaLines is qs as the lines of a scopes file.
func quotaLines(qs []Quota) string {
	lines := make([]string, len(qs))
	for j, q := range qs {
		lines[j] = q.Scope + " " + q.Rules
	}
	return strings.Join(lines, "\n")
}

// reservation is room reserved for messages of one quota, and what the
// calls that used it stored.
type reservation struct {
	q        *Quota
	member   string // in quotares
	id       string
	granted  int64
	deadline int64
	stored   int64
	unsure   bool // a call's reply was lost: the maintenance settles it
	// refusal is set on an upsert's stand-in for a reservation the quota
	// refused (no id): its calls may only replace messages of the scope,
	// and are refused with it otherwise.
	refusal *QuotaError
}

// replaceOnly is the stand-in of an upsert the pending quota refused: it
// may still replace a message of the scope, which adds nothing.
func replaceOnly(q *Quota, refused *QuotaError) *reservation {
	return &reservation{q: q, refusal: refused}
}

// newReservationID is "<unix ms>-<random>": the time lets the maintenance
// delete a settled reservation's quotaheld entries once old.
func newReservationID(now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(now.UnixMilli(), 10) + "-" + hex.EncodeToString(b[:])
}

// reserve asks q for room for n messages. It returns the reservation
// (nil when the quota is gone: nothing to count) and, when fewer than n
// were granted, the *QuotaError for the rest.
func (s *Store) reserve(ctx context.Context, q *Quota, n int) (*reservation, *QuotaError, error) {
	for try := 0; ; try++ {
		id := newReservationID(time.Now())
		v, err := s.run1(ctx, quotaReserveScript, []string{quotaKey(s.ns), quotaResKey(s.ns)},
			q.Scope, q.Gen, n, id, reservationLifetime.Milliseconds()).Slice()
		if err != nil {
			return nil, nil, fmt.Errorf("reserve quota of %s: %w", q.Scope, err)
		}
		r := reply{v: v, what: "quota reservation reply"}
		granted, why, count, limit, retry, deadline := r.int(0), r.int(1), r.int(2), r.int(3), r.int(4), r.int(5)
		if r.err != nil {
			return nil, nil, r.err
		}
		if granted < 0 { // the quota changed generation, or is gone
			if try > 0 {
				return nil, nil, fmt.Errorf("reserve quota of %s: its generation changed twice while reserving", q.Scope)
			}
			s.quotas.forget()
			nq, err := s.quotaByName(ctx, q.Scope)
			if err != nil || nq == nil {
				return nil, nil, err
			}
			q = nq
			continue
		}
		var qe *QuotaError
		if granted < int64(n) {
			qe = &QuotaError{Scope: q.Scope, Quota: "pending", Limit: limit, Count: count,
				RetryAfter: time.Duration(retry) * time.Millisecond}
			if why == 2 {
				qe.Quota = "rate"
			}
		}
		if granted == 0 {
			return nil, qe, nil
		}
		return &reservation{q: q, id: id, granted: granted, deadline: deadline,
			member: q.Scope + ":" + strconv.FormatInt(q.Gen, 10) + "|" + id + "|" + strconv.FormatInt(granted, 10)}, qe, nil
	}
}

// quotaByName returns scope's quota as producers read it, or nil.
func (s *Store) quotaByName(ctx context.Context, name string) (*Quota, error) {
	_, defs, err := s.quotaSet(ctx)
	return defs[name], err
}

// settle gives back what r granted and its calls did not store. A
// reservation with a lost reply is left to the maintenance, which reads
// what the shards stored under it.
func (s *Store) settle(ctx context.Context, rs ...*reservation) error {
	var calls []call
	for _, r := range rs {
		if r == nil || r.unsure || r.member == "" {
			continue
		}
		calls = append(calls, call{quotaSettleScript, []string{quotaKey(s.ns), quotaResKey(s.ns)},
			[]any{r.q.Scope, r.q.Gen, r.member, r.granted, r.stored}})
	}
	if len(calls) == 0 {
		return nil
	}
	var errs []error
	for _, c := range s.run(ctx, calls...) {
		if err := c.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("settle quota reservations (the maintenance settles them once due): %w", err)
	}
	return nil
}

// quotaWrapped are the quota'd variants of the enqueue scripts, and where
// each has its ids: the ARGV index of the first and the stride.
var quotaWrapped = map[*redis.Script]struct {
	script        *redis.Script
	first, stride int
}{
	enqueueScript:      {enqueueQuotaScript, 1, 0},
	enqueueManyScript:  {enqueueManyQuotaScript, 6, 4},
	farPlaceScript:     {farPlaceQuotaScript, 1, 0},
	farPlaceManyScript: {farPlaceManyQuotaScript, 8, 5},
}

var (
	enqueueQuotaScript      = quotaWrap(enqueuePreludes, enqueueBody)
	enqueueManyQuotaScript  = quotaWrap(enqueueManyPreludes, enqueueManyBody)
	farPlaceQuotaScript     = quotaWrap(farPlacePreludes, farPlaceBody)
	farPlaceManyQuotaScript = quotaWrap(farPlacePreludes, farPlaceManyBody)
)

// wrap turns an enqueue call of shard i into its quota'd variant under r.
func (r *reservation) wrap(ns string, i int, c call) call {
	w := quotaWrapped[c.script]
	n := any(1)
	if w.stride > 0 {
		n = c.args[0] // the scripts for many messages take n first
	}
	keys := append(c.keys[:len(c.keys):len(c.keys)],
		quotaShardKey(ns, i, "scopeof"), quotaShardKey(ns, i, "quotaheld"), quotaShardKey(ns, i, "quotaout"))
	args := append(c.args[:len(c.args):len(c.args)],
		r.q.Scope+":"+strconv.FormatInt(r.q.Gen, 10), r.id, r.deadline, w.first, w.stride, n)
	return call{w.script, keys, args}
}

// take reads a quota'd call's reply: the enqueue script's, with the
// number stored appended, which it adds to r. A failed call makes r
// unsure (the maintenance settles it from the shards).
func (r *reservation) take(v []any, err error) ([]any, error) {
	if r == nil {
		return v, err
	}
	if err != nil && r.refusal != nil && strings.HasPrefix(err.Error(), "QUOTA ") {
		return nil, r.refusal
	}
	if err != nil || len(v) == 0 {
		r.unsure = true
		if err == nil {
			err = fmt.Errorf("quota'd enqueue reply of no fields")
		}
		return nil, err
	}
	n, ok := v[len(v)-1].(int64)
	if !ok {
		r.unsure = true
		return nil, fmt.Errorf("quota'd enqueue reply: stored count %v is not an integer", v[len(v)-1])
	}
	r.stored += n
	return v[:len(v)-1], nil
}
