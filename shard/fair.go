package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is fair release across classes (see "Fair release across
// classes" in the package doc for the design): the classes, kept in
// Redis, the claim that sets a backlog apart by class, and what the
// releasers and the readers (cancel, reschedule, inspect) need of the
// backlog sets.

// Class is a release class: the topics it names share the fleet's
// releases with the other classes' by its weight when the fleet is behind.
type Class struct {
	Name string
	// Topics are its patterns: a topic, or a prefix ending in "*". The
	// default class has none: it holds every topic no other class names.
	Topics []string
	// Weight is its share among the weighted classes (1..MaxClassWeight);
	// 0 releases only when no other class has anything due waiting.
	Weight int
	// Strict classes release before every weighted class (their Weight is
	// not used); among them, the earliest due message goes first.
	Strict    bool
	ChangedMs int64  // when it was last changed (Redis clock)
	Source    string // who changed it last: "routes", or the audit log's via and who
	// DeletedMs is when it was deleted (0: live). A deleted class names no
	// topic any more; it is kept until what waits in its backlog is
	// released, then forgotten.
	DeletedMs int64

	raw string // the stored value, for the compare-and-set of changes
}

// DefaultClass is the class of every topic no other class names. Its
// weight is 1 until set.
const DefaultClass = "default"

// Limits of classes.
const (
	MaxClassWeight = 1000
	MaxClasses     = 32 // in a namespace, the default class included
	MaxClassTopics = 64 // patterns of one class
)

// FairAfter is how late the earliest due message of a shard must be for
// its claims to set its due messages apart by class (the shard is then
// behind until its backlog sets are empty). Below it, claims lease in due
// order as they do without classes: a fleet that keeps up pays nothing.
const FairAfter = 500 * time.Millisecond

// maxFairPerClaim is the most due entries one claim of a shard that is
// behind sets apart.
const maxFairPerClaim = 128

// ErrOverlap is returned for a class whose patterns overlap another's.
var ErrOverlap = errors.New("patterns of two classes overlap")

// ClassesKey is the namespace's HASH of classes: name -> "<changed ms>
// <JSON>". Only classPutScript writes it.
func ClassesKey(ns string) string { return "delayq:{" + ns + "}:classes" }

// BacklogKey is the ZSET of shard i holding class c's due messages set
// apart while the shard is behind (id -> due ms), in the shard's slot.
// The releasers empty it (Redis deletes an empty key); nothing else
// bounds it but the backlog itself, which was in the due set before.
func BacklogKey(ns string, i int, class string) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:class:" + class
}

// releasedField is the field of a shard's counters HASH counting a
// class's releases from its backlog (the fleet's rates, rates.go).
func releasedField(class string) string { return "released:" + class }

var className = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidateClass checks a class's name, patterns and weight.
func ValidateClass(c Class) error {
	if !className.MatchString(c.Name) {
		return invalid("name", "%q: want 1 to 64 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", c.Name)
	}
	if c.Weight < 0 || c.Weight > MaxClassWeight {
		return invalid("weight", "%d: want 0 (only when no other class waits) to %d", c.Weight, MaxClassWeight)
	}
	if c.Name == DefaultClass {
		if len(c.Topics) > 0 {
			return invalid("topics", "the default class holds every topic no other class names: it takes no patterns")
		}
		return nil
	}
	if len(c.Topics) == 0 {
		return invalid("topics", "class %q names no topic: want at least one pattern", c.Name)
	}
	if len(c.Topics) > MaxClassTopics {
		return invalid("topics", "%d patterns: want at most %d", len(c.Topics), MaxClassTopics)
	}
	for j, p := range c.Topics {
		field := fmt.Sprintf("topics[%d]", j)
		if err := ValidateFlowTopic(p); err != nil {
			return invalid(field, "%q: want a topic, or a prefix ending in *", p)
		}
		if strings.Contains(strings.TrimSuffix(p, "*"), "*") {
			return invalid(field, "%q: * may only end a pattern", p)
		}
		for _, q := range c.Topics[:j] {
			if PatternsOverlap(p, q) {
				return invalid(field, "%q overlaps %q of the same class", p, q)
			}
		}
	}
	return nil
}

// PatternsOverlap reports whether some topic matches both patterns (a
// topic, or a prefix ending in *).
func PatternsOverlap(p, q string) bool {
	pp, qp := strings.HasSuffix(p, "*"), strings.HasSuffix(q, "*")
	p, q = strings.TrimSuffix(p, "*"), strings.TrimSuffix(q, "*")
	switch {
	case pp && qp:
		return strings.HasPrefix(p, q) || strings.HasPrefix(q, p)
	case pp:
		return strings.HasPrefix(q, p)
	case qp:
		return strings.HasPrefix(p, q)
	}
	return p == q
}

// matches reports whether topic matches pattern p.
func matches(p, topic string) bool {
	if pre, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(topic, pre)
	}
	return p == topic
}

// String describes the class as stats and the audit log show it.
func (c Class) String() string {
	var b strings.Builder
	switch {
	case c.Strict:
		b.WriteString("strict")
	case c.Weight == 0:
		b.WriteString("weight 0 (when no other class waits)")
	default:
		b.WriteString("weight " + strconv.Itoa(c.Weight))
	}
	if len(c.Topics) > 0 {
		b.WriteString(", topics " + strings.Join(c.Topics, " "))
	}
	if c.DeletedMs > 0 {
		b.WriteString(", deleted (its backlog drains)")
	}
	return b.String()
}

// classJSON is a class as stored (after "<changed ms> ").
type classJSON struct {
	Weight    int      `json:"weight"`
	Strict    bool     `json:"strict,omitempty"`
	Topics    []string `json:"topics"`
	Source    string   `json:"source"`
	DeletedMs int64    `json:"deleted_ms,omitempty"`
}

func (c Class) encode() (string, error) {
	b, err := json.Marshal(classJSON{Weight: c.Weight, Strict: c.Strict, Topics: c.Topics, Source: c.Source, DeletedMs: c.DeletedMs})
	return string(b), err
}

// parseClass decodes a value of the classes HASH.
func parseClass(name, v string) (Class, error) {
	c := Class{Name: name, raw: v}
	ms, js, ok := strings.Cut(v, " ")
	var err error
	if c.ChangedMs, err = strconv.ParseInt(ms, 10, 64); !ok || err != nil {
		return c, fmt.Errorf("class %q: value %q: want \"<changed ms> <JSON>\"", name, v)
	}
	var d classJSON
	if err := json.Unmarshal([]byte(js), &d); err != nil {
		return c, fmt.Errorf("class %q: value %q: %w", name, v, err)
	}
	c.Weight, c.Strict, c.Topics, c.Source, c.DeletedMs = d.Weight, d.Strict, d.Topics, d.Source, d.DeletedMs
	if c.DeletedMs == 0 {
		if err := ValidateClass(c); err != nil {
			return c, fmt.Errorf("class %q: %w", name, err)
		}
	}
	return c, nil
}

// Classes reads every class, sorted by name, deleted ones (still
// draining) included. The default class is in it only when it was set. A
// value that cannot be read is left out and named in the error, which
// wraps them all; the good classes still come back with it.
func (s *Store) Classes(ctx context.Context) ([]Class, error) {
	m, err := s.rdb.HGetAll(ctx, ClassesKey(s.ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("read classes: %w", err)
	}
	out := make([]Class, 0, len(m))
	var bad []error
	for name, v := range m {
		c, err := parseClass(name, v)
		if err != nil {
			bad = append(bad, fmt.Errorf("key %s: %w", ClassesKey(s.ns), err))
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Class) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(bad, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return out, errors.Join(bad...)
}

// SetClass stores class c (its name, patterns, weight, strictness),
// replacing what was there (a deleted class comes back to life). source
// says who changed it (the audit log's via and who). Patterns that
// overlap another class's are refused with ErrOverlap, naming both.
func (s *Store) SetClass(ctx context.Context, c Class, source string) (Class, error) {
	c.Source = cleanSource(source)
	c.DeletedMs = 0
	out, _, err := s.putClass(ctx, c, func(old *Class) bool { return true })
	return out, err
}

// SetRoutesClass stores a class from a routes file: only when it does not
// exist yet, or was set by a routes file, so a change made at runtime
// stays. It reports whether it changed anything.
func (s *Store) SetRoutesClass(ctx context.Context, c Class) (Class, bool, error) {
	c.Source, c.DeletedMs = "routes", 0
	return s.putClass(ctx, c, func(old *Class) bool { return old == nil || old.Source == "routes" })
}

// DeleteClass deletes class name: its topics go to the default class at
// once; what waits in its backlog is still released as it (the scanners
// forget the class when that is drained). Deleting the default class sets
// it back to weight 1. ErrNotFound when there is no such class.
func (s *Store) DeleteClass(ctx context.Context, name, source string) error {
	for range 8 {
		old, err := s.rdb.HGet(ctx, ClassesKey(s.ns), name).Result()
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("class %q: %w", name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("delete class %q: %w", name, err)
		}
		c, err := parseClass(name, old)
		if err != nil && c.ChangedMs == 0 {
			c = Class{Name: name} // unreadable: delete it all the same
		}
		if c.DeletedMs > 0 {
			return fmt.Errorf("class %q: %w", name, ErrNotFound)
		}
		var js string
		if name != DefaultClass { // the default class's backlog is always released: no tombstone
			c.Topics, c.Source, c.DeletedMs = nil, cleanSource(source), time.Now().UnixMilli()
			if js, err = c.encode(); err != nil {
				return err
			}
		}
		v, err := s.run1(ctx, classPutScript, []string{ClassesKey(s.ns)}, name, old, js).Slice()
		if err != nil {
			return fmt.Errorf("delete class %q: %w", name, err)
		}
		if len(v) > 0 && v[0] == int64(1) {
			return nil
		}
	}
	return fmt.Errorf("delete class %q: changed by others eight times over; try again", name)
}

// ForgetClass removes deleted class c once nothing waits in its backlog
// (the caller has looked) and it is still as read. It reports whether it
// removed it.
func (s *Store) ForgetClass(ctx context.Context, c Class) (bool, error) {
	if c.DeletedMs == 0 || c.raw == "" {
		return false, nil
	}
	v, err := s.run1(ctx, classPutScript, []string{ClassesKey(s.ns)}, c.Name, c.raw, "").Slice()
	if err != nil {
		return false, fmt.Errorf("forget class %q: %w", c.Name, err)
	}
	return len(v) > 0 && v[0] == int64(1), nil
}

func cleanSource(source string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, source)
}

// putClass stores c when ok(the class as read, nil if none) says so,
// compare-and-set against concurrent changes.
func (s *Store) putClass(ctx context.Context, c Class, ok func(old *Class) bool) (Class, bool, error) {
	if c.Topics == nil {
		c.Topics = []string{}
	}
	if err := ValidateClass(c); err != nil {
		return Class{}, false, err
	}
	js, err := c.encode()
	if err != nil {
		return Class{}, false, err
	}
	for range 8 {
		old, err := s.rdb.HGet(ctx, ClassesKey(s.ns), c.Name).Result()
		switch {
		case errors.Is(err, redis.Nil):
			old = ""
		case err != nil:
			return Class{}, false, fmt.Errorf("set class %q: %w", c.Name, err)
		}
		if old == "" {
			n, err := s.rdb.HLen(ctx, ClassesKey(s.ns)).Result()
			if err != nil {
				return Class{}, false, fmt.Errorf("set class %q: %w", c.Name, err)
			}
			if n >= MaxClasses-1 && c.Name != DefaultClass {
				return Class{}, false, invalid("name", "%q: a namespace has at most %d classes, the default included (delete one first)", c.Name, MaxClasses)
			}
		} else if oc, perr := parseClass(c.Name, old); perr == nil && !ok(&oc) {
			return oc, false, nil
		}
		if old == "" && !ok(nil) {
			return Class{}, false, nil
		}
		v, err := s.run1(ctx, classPutScript, []string{ClassesKey(s.ns)}, c.Name, old, js).Slice()
		if err != nil {
			return Class{}, false, fmt.Errorf("set class %q: %w", c.Name, err)
		}
		r := reply{v: v, what: "class reply"}
		switch r.int(0) {
		case 1:
			out, err := parseClass(c.Name, r.str(1))
			if r.err != nil {
				err = r.err
			}
			return out, true, err
		case -1:
			return Class{}, false, fmt.Errorf("%w: %w", &InvalidError{Field: "topics", Reason: fmt.Sprintf(
				"%q overlaps %q of class %q: a topic belongs to one class", r.str(3), r.str(2), r.str(1))}, ErrOverlap)
		}
	}
	return Class{}, false, fmt.Errorf("set class %q: changed by others eight times over; try again", c.Name)
}

// ClassPlan is what claims need of the live classes: their patterns, in a
// fixed order, the default class last. A nil plan is a namespace without
// classes, whose claims set nothing apart by class.
type ClassPlan struct {
	Classes []Class // live, by name, the default class last (its stored weight, or 1)

	patterns string // every class's but the default's, as claimFairScript reads them
}

// NewClassPlan returns the plan of classes (as Classes reads them), or nil
// when no class names a topic: the default class alone shares nothing.
func NewClassPlan(classes []Class) *ClassPlan {
	p := &ClassPlan{}
	def := Class{Name: DefaultClass, Weight: 1, Topics: []string{}}
	named := false
	for _, c := range classes {
		switch {
		case c.DeletedMs > 0:
		case c.Name == DefaultClass:
			def = c
		default:
			p.Classes = append(p.Classes, c)
			named = true
		}
	}
	if !named {
		return nil
	}
	p.Classes = append(p.Classes, def)
	var b strings.Builder
	for _, c := range p.Classes[:len(p.Classes)-1] {
		b.WriteString(strconv.Itoa(len(c.Topics)) + ";")
		for _, t := range c.Topics {
			b.WriteString(strconv.Itoa(len(t)) + ":" + t)
		}
	}
	p.patterns = b.String()
	return p
}

// Of is the class of topic ("" for a message without a topic: the default
// class).
func (p *ClassPlan) Of(topic string) string {
	if p == nil {
		return DefaultClass
	}
	for _, c := range p.Classes {
		for _, pat := range c.Topics {
			if matches(pat, topic) {
				return c.Name
			}
		}
	}
	return DefaultClass
}

// fairClaim is the claimFairScript call of shard i.
func (s *Store) fairClaim(i, k int, lease time.Duration, topics []string, p *ClassPlan, rkey, nonce string) call {
	ks := ShardKeys(s.ns, i)
	if rkey == "" {
		rkey = ks.Due // no nonce: never written
	}
	keys := append(make([]string, 0, 5+len(topics)+len(p.Classes)), ks.Due, ks.Msg, ks.Inflight, ks.Attempts, rkey)
	args := append(make([]any, 0, 10+len(topics)), k, lease.Milliseconds(), MaxReap, k+1,
		nonce, maxFairPerClaim, FairAfter.Milliseconds(), len(topics))
	for _, t := range topics {
		keys, args = append(keys, HeldKey(s.ns, i, t)), append(args, t)
	}
	args = append(args, len(p.Classes), p.patterns)
	for _, c := range p.Classes {
		keys = append(keys, BacklogKey(s.ns, i, c.Name))
	}
	return call{script: claimFairScript, keys: keys, args: args}
}

// ClaimFair is ClaimFor in a namespace with classes (plan from
// NewClassPlan; nil claims as ClaimFor): a claim of a shard that is behind
// (its earliest due message more than FairAfter late, or anything waiting
// in its backlog sets) leases nothing and sets up to 128 due messages
// apart into their classes' backlog sets instead (ClaimResult.Held counts
// them), for the releasers (ClaimBacklog); otherwise it claims as
// ClaimFor does.
func (s *Store) ClaimFair(ctx context.Context, c *Claimant, shards []int, k int, lease time.Duration, topics []string, plan *ClassPlan) ([]ClaimResult, []error) {
	return s.claimWith(ctx, c, shards, k, lease, topics, plan)
}

// ClaimBacklog leases up to n due messages of class's backlog in shard i,
// in due order: what a releaser does with its turn. It counts them as the
// class's releases in the shard's counters.
func (s *Store) ClaimBacklog(ctx context.Context, i int, class string, n int, lease time.Duration) (HeldClaim, error) {
	ks := ShardKeys(s.ns, i)
	v, err := s.run1(ctx, claimHeldScript, []string{BacklogKey(s.ns, i, class), ks.Msg, ks.Inflight, ks.Attempts, ks.Counters},
		max(n, 1), lease.Milliseconds(), releasedField(class)).Slice()
	if err != nil {
		return HeldClaim{}, fmt.Errorf("claim the backlog of class %q in shard %d: %w", class, i, err)
	}
	if len(v) < 4 || (len(v)-4)%5 != 0 {
		return HeldClaim{}, fmt.Errorf("claim the backlog of class %q in shard %d: unexpected reply of %d fields", class, i, len(v))
	}
	r := reply{v: v, what: "backlog claim reply"}
	hc := HeldClaim{NowMs: r.int(0), HeadMs: r.int(1), Left: r.int(2), Msgs: parseClaimed(&r, v, 4)}
	if r.err != nil {
		return HeldClaim{}, fmt.Errorf("claim the backlog of class %q in shard %d: %w", class, i, r.err)
	}
	return hc, nil
}

// BacklogIn reads what shards hold in the backlogs of classes, in one
// pipeline: by class, one Held per shard, in the order of shards (Due
// counts what is due at nowMs: all of it but clock skew).
func (s *Store) BacklogIn(ctx context.Context, classes []string, shards []int, nowMs int64) (map[string][]Held, error) {
	return s.setsIn(ctx, classes, shards, nowMs, func(i int, c string) string { return BacklogKey(s.ns, i, c) })
}

// backlogClasses are the names of every class whose backlog sets may hold
// something: the stored classes (deleted ones included) and the default.
func (s *Store) backlogClasses(ctx context.Context) ([]string, error) {
	names, err := s.rdb.HKeys(ctx, ClassesKey(s.ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("read classes: %w", err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	if !slices.Contains(names, DefaultClass) {
		names = append(names, DefaultClass)
	}
	slices.Sort(names)
	return names, nil
}

// changeBacklog cancels (mode "cancel") or reschedules ("delay", "at") a
// message of shard i that waits in a class's backlog. It reports whether
// it found it there.
func (s *Store) changeBacklog(ctx context.Context, i int, id, mode string, ms int64) (int64, bool, error) {
	names, err := s.backlogClasses(ctx)
	if err != nil || len(names) == 0 {
		return 0, false, err
	}
	ks := ShardKeys(s.ns, i)
	keys := []string{BacklogKey(s.ns, i, names[0]), ks.Msg, ks.Attempts, ks.Due}
	for _, n := range names[1:] {
		keys = append(keys, BacklogKey(s.ns, i, n))
	}
	v, err := s.run1(ctx, cancelHeldScript, keys, id, mode, ms, s.wake, i).Slice()
	if err != nil {
		return 0, false, err
	}
	r := reply{v: v, what: "backlog change reply"}
	if len(v) != 2 {
		return 0, false, fmt.Errorf("unexpected reply of %d fields", len(v))
	}
	return r.int(1), r.int(0) == 1, r.err
}

// inBacklog reports whether message id of shard i waits in a class's
// backlog: the class and its due time.
func (s *Store) inBacklog(ctx context.Context, i int, id string) (string, int64, bool, error) {
	names, err := s.backlogClasses(ctx)
	if err != nil || len(names) == 0 {
		return "", 0, false, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.FloatCmd, len(names))
	for j, n := range names {
		cmds[j] = pipe.ZScore(ctx, BacklogKey(s.ns, i, n), id)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, false, err
	}
	for j, c := range cmds {
		if c.Err() == nil {
			return names[j], int64(c.Val()), true, nil
		}
	}
	return "", 0, false, nil
}

// ClassStatus is a class and what waits in its backlog, namespace-wide.
type ClassStatus struct {
	Class
	Backlog  int64 // messages set apart, due, waiting for the class's turn
	OldestMs int64 // due time of the earliest; -1 if none
	NowMs    int64 // the clock the status was read by
}

// WaitedFor is how long the earliest message of the backlog has waited.
func (c ClassStatus) WaitedFor() time.Duration {
	if c.OldestMs < 0 || c.OldestMs > c.NowMs {
		return 0
	}
	return time.Duration(c.NowMs-c.OldestMs) * time.Millisecond
}

// NoClasses reports whether statuses (ClassStatuses) are those of a
// namespace without classes: the default class alone, never set, with
// nothing waiting.
func NoClasses(sts []ClassStatus) bool {
	return len(sts) == 1 && sts[0].ChangedMs == 0 && sts[0].Backlog == 0
}

// ClassStatuses reads every class (the default one always, weight 1 when
// not set) and what shards [0, m) hold in its backlog. An error naming a
// class value that cannot be read comes with the others.
func (s *Store) ClassStatuses(ctx context.Context, m int) ([]ClassStatus, error) {
	classes, cerr := s.Classes(ctx)
	if classes == nil && cerr != nil {
		return nil, cerr
	}
	if !slices.ContainsFunc(classes, func(c Class) bool { return c.Name == DefaultClass }) {
		classes = append(classes, Class{Name: DefaultClass, Weight: 1, Topics: []string{}})
		slices.SortFunc(classes, func(a, b Class) int { return strings.Compare(a.Name, b.Name) })
	}
	names := make([]string, len(classes))
	for j, c := range classes {
		names[j] = c.Name
	}
	shards := make([]int, m)
	for i := range shards {
		shards[i] = i
	}
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read classes: %w", err)
	}
	bl, err := s.BacklogIn(ctx, names, shards, nowMs)
	if err != nil {
		return nil, err
	}
	out := make([]ClassStatus, len(classes))
	for j, c := range classes {
		st := ClassStatus{Class: c, OldestMs: -1, NowMs: nowMs}
		for _, h := range bl[c.Name] {
			st.Backlog += h.Count
			if h.Count > 0 && (st.OldestMs < 0 || h.HeadMs < st.OldestMs) {
				st.OldestMs = h.HeadMs
			}
		}
		out[j] = st
	}
	return out, cerr
}
