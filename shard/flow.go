package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// This file is flow control at release: a topic's rate limit and pause
// (see "Flow control at release" in the package doc for the design).

// Flow is how the fleet releases one topic's messages.
type Flow struct {
	Topic string
	// Rate is the most messages of the topic the whole fleet releases a
	// second; 0 is no limit.
	Rate float64
	// Burst is how many more than Rate any one-second window may take
	// (messages that waited while the topic was quiet go at once, up to
	// Burst).
	Burst int
	// PausedUntilMs is when a pause ends by the Redis clock (unix ms):
	// 0 not paused, PauseForever until resumed.
	PausedUntilMs int64
	ChangedMs     int64  // when it was last changed (Redis clock)
	Source        string // who changed it last: "routes", or the audit log's via and who

	raw string // the stored value, for FlowForget
}

// PauseForever is Flow.PausedUntilMs of a pause that lasts until resumed.
const PauseForever = -1

// Limits on a flow's values.
const (
	MaxFlowRate  = 1_000_000
	MaxFlowBurst = 1_000_000
)

// The window a topic's limit holds over: at most Rate + Burst messages of
// the topic are released in any window of Flow.Window, which is longer
// than a second by what the burst allows, so that the spread of the
// latency between a release and its delivery (claim, publish, confirm,
// consumer) does not crowd the releases of more than a second into one of
// the consumer's seconds.
const (
	// MinFlowWindow is the window of a limit with a burst below Rate/20;
	// the price is a steady drain at Rate x 1s/MinFlowWindow.
	MinFlowWindow = 1050 * time.Millisecond
	// MaxFlowWindow is the window of a limit with a burst of Rate/4 or
	// more.
	MaxFlowWindow = 1250 * time.Millisecond
)

// ErrPauseOver is returned for a pause whose end has already passed.
var ErrPauseOver = errors.New("the pause's end has passed")

// Paused reports whether the flow is paused at nowMs.
func (f Flow) Paused(nowMs int64) bool {
	return f.PausedUntilMs == PauseForever || f.PausedUntilMs > nowMs
}

// Limited reports whether the flow has a rate limit.
func (f Flow) Limited() bool { return f.Rate > 0 }

// bucketCap is the most tokens the topic's bucket holds: Burst, but at
// least what 20 ms of Rate and 1, so a releaser that asks every few
// milliseconds is not starved by rounding. The window log still holds the
// limit at Rate + Burst.
func (f Flow) bucketCap() int {
	return max(f.Burst, int(math.Ceil(f.Rate/50)), 1)
}

// Window is the window the limit holds over: (Rate + Burst) / Rate
// seconds, the longest that still lets Rate through, between MinFlowWindow
// and MaxFlowWindow.
func (f Flow) Window() time.Duration {
	if f.Rate <= 0 {
		return MinFlowWindow
	}
	w := time.Duration(float64(time.Second) * (f.Rate + float64(f.Burst)) / f.Rate).Truncate(time.Millisecond)
	return min(max(w, MinFlowWindow), MaxFlowWindow)
}

// windowMost is the most messages of the topic any Window releases.
func (f Flow) windowMost() int { return max(int(f.Rate)+f.Burst, 1) }

// pace is the rate the topic's bucket refills at: Rate, or less when the
// window would not let Rate through (Burst below Rate/20), so that the
// releases stay even instead of stopping each window for the window log
// to let the oldest grants go; consumers see a steady stream.
func (f Flow) pace() float64 {
	return min(f.Rate, float64(f.windowMost())/f.Window().Seconds())
}

// String describes the flow as stats and the audit log show it.
func (f Flow) String() string {
	var parts []string
	if f.Rate > 0 {
		p := "limit " + strconv.FormatFloat(f.Rate, 'f', -1, 64) + "/s"
		if f.Burst > 0 {
			p += fmt.Sprintf(" burst %d", f.Burst)
		}
		parts = append(parts, p)
	} else {
		parts = append(parts, "no limit")
	}
	switch {
	case f.PausedUntilMs == PauseForever:
		parts = append(parts, "paused until resumed")
	case f.PausedUntilMs > 0:
		parts = append(parts, "paused until "+time.UnixMilli(f.PausedUntilMs).UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}

// ValidateFlowTopic checks a topic name for a flow: what a route's topic
// may be (non-empty, no surrounding spaces, valid UTF-8 of at most 255
// bytes).
func ValidateFlowTopic(topic string) error {
	switch {
	case topic == "" || strings.TrimSpace(topic) != topic:
		return invalid("topic", "%q: want a non-empty name without surrounding spaces", topic)
	case len(topic) > MaxNameLen || !utf8.ValidString(topic):
		return invalid("topic", "%q: want valid UTF-8 of at most %d bytes", topic, MaxNameLen)
	}
	return nil
}

// ValidateLimit checks a rate and a burst.
func ValidateLimit(rate float64, burst int) error {
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 || rate > MaxFlowRate:
		return invalid("rate", "%v: want messages a second, from 0 (no limit) to %d", rate, MaxFlowRate)
	case rate > 0 && rate < 0.001:
		return invalid("rate", "%v: want at least 0.001 a second, or 0 for no limit", rate)
	case burst < 0 || burst > MaxFlowBurst:
		return invalid("burst", "%d: want 0 to %d messages", burst, MaxFlowBurst)
	}
	return nil
}

// ParseRate reads a rate as the CLI, the API and the console take it:
// a number of messages a second ("200", "0.5", "200/s"), or a number a
// minute or an hour ("30/m", "100/h"); "0" or "none" is no limit.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "none" {
		return 0, nil
	}
	per := 1.0
	for _, u := range []struct {
		suffix string
		per    float64
	}{{"/s", 1}, {"/m", 60}, {"/h", 3600}} {
		if strings.HasSuffix(t, u.suffix) {
			t, per = strings.TrimSuffix(t, u.suffix), u.per
			break
		}
	}
	r, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
		return 0, invalid("rate", "%q: want a number of messages a second (200, 0.5, 200/s, 30/m, 100/h) or none", s)
	}
	if r < 0 {
		return 0, invalid("rate", "%q: want 0 (no limit) or more", s)
	}
	r /= per
	if err := ValidateLimit(r, 0); err != nil {
		return 0, err
	}
	return r, nil
}

// FlowKey is the namespace's HASH of flows: topic -> "<rate> <burst>
// <paused until ms> <changed ms> <source>". Every scanner process reads
// it (FlowRefresh); only flowSetScript and flowForgetScript write it.
func FlowKey(ns string) string { return "delayq:{" + ns + "}:flow" }

// HeldKey is the ZSET of shard i holding the due messages of a topic
// under flow control (id -> due ms), in the shard's slot.
func HeldKey(ns string, i int, topic string) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:held:" + topic
}

// bucketKeys are a topic's token bucket HASH and grant log LIST, in a
// slot of their own.
func bucketKeys(ns, topic string) (bucket, log string) {
	p := "delayq:{" + ns + ":flow:" + topic + "}:"
	return p + "bucket", p + "log"
}

// parseFlow decodes a value of the flow HASH.
func parseFlow(topic, v string) (Flow, error) {
	f := Flow{Topic: topic, raw: v}
	parts := strings.SplitN(v, " ", 5)
	if len(parts) != 5 {
		return f, fmt.Errorf("flow of topic %q in %s: value %q: want 5 space-separated fields", topic, "the flow hash", v)
	}
	var err1, err2, err3, err4 error
	f.Rate, err1 = strconv.ParseFloat(parts[0], 64)
	f.Burst, err2 = strconv.Atoi(parts[1])
	f.PausedUntilMs, err3 = strconv.ParseInt(parts[2], 10, 64)
	f.ChangedMs, err4 = strconv.ParseInt(parts[3], 10, 64)
	f.Source = parts[4]
	for j, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return f, fmt.Errorf("flow of topic %q: field %s of %q: %w", topic, []string{"rate", "burst", "paused until", "changed"}[j], v, err)
		}
	}
	if err := ValidateLimit(f.Rate, f.Burst); err != nil {
		return f, fmt.Errorf("flow of topic %q: %w", topic, err)
	}
	return f, nil
}

// Flows reads every topic's flow, sorted by topic. A value that cannot be
// read is left out and named in the error, which wraps them all; the good
// flows still come back with it.
func (s *Store) Flows(ctx context.Context) ([]Flow, error) {
	m, err := s.rdb.HGetAll(ctx, FlowKey(s.ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("read flows: %w", err)
	}
	out := make([]Flow, 0, len(m))
	var bad []error
	for t, v := range m {
		f, err := parseFlow(t, v)
		if err != nil {
			bad = append(bad, fmt.Errorf("key %s: %w", FlowKey(s.ns), err))
			continue
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Flow) int { return strings.Compare(a.Topic, b.Topic) })
	slices.SortFunc(bad, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return out, errors.Join(bad...)
}

// Flow reads one topic's flow; a topic without one has no limit and no
// pause (ok false).
func (s *Store) Flow(ctx context.Context, topic string) (f Flow, ok bool, err error) {
	v, err := s.rdb.HGet(ctx, FlowKey(s.ns), topic).Result()
	if errors.Is(err, redis.Nil) {
		return Flow{Topic: topic}, false, nil
	}
	if err != nil {
		return Flow{}, false, fmt.Errorf("read flow of topic %q: %w", topic, err)
	}
	f, err = parseFlow(topic, v)
	return f, err == nil, err
}

// SetLimit sets a topic's rate limit (rate 0: no limit) and burst; a pause
// stays as it was. source says who changed it (the audit log's via and
// who).
func (s *Store) SetLimit(ctx context.Context, topic string, rate float64, burst int, source string) (Flow, error) {
	if err := ValidateLimit(rate, burst); err != nil {
		return Flow{}, err
	}
	f, _, err := s.setFlow(ctx, topic, "limit", rate, burst, 0, source)
	return f, err
}

// SetRoutesLimit sets a topic's limit from a routes file: only when the
// topic has no flow yet, or its flow came from a routes file, so a change
// made at runtime stays. It reports whether it changed anything.
func (s *Store) SetRoutesLimit(ctx context.Context, topic string, rate float64, burst int) (Flow, bool, error) {
	if err := ValidateLimit(rate, burst); err != nil {
		return Flow{}, false, fmt.Errorf("limit of topic %q: %w", topic, err)
	}
	return s.setFlow(ctx, topic, "routes", rate, burst, 0, "routes")
}

// Pause stops releasing a topic's messages until until (by the Redis
// clock), or until resumed when until is zero. A time already past is
// refused with ErrPauseOver.
func (s *Store) Pause(ctx context.Context, topic string, until time.Time, source string) (Flow, error) {
	ms := int64(PauseForever)
	if !until.IsZero() {
		ms = until.UnixMilli()
	}
	f, _, err := s.setFlow(ctx, topic, "pause", 0, 0, ms, source)
	return f, err
}

// Resume ends a topic's pause: its held messages drain at its limit.
func (s *Store) Resume(ctx context.Context, topic, source string) (Flow, error) {
	f, _, err := s.setFlow(ctx, topic, "resume", 0, 0, 0, source)
	return f, err
}

func (s *Store) setFlow(ctx context.Context, topic, op string, rate float64, burst int, untilMs int64, source string) (Flow, bool, error) {
	if err := ValidateFlowTopic(topic); err != nil {
		return Flow{}, false, err
	}
	source = strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, source)
	v, err := s.run1(ctx, flowSetScript, []string{FlowKey(s.ns)}, topic, op,
		strconv.FormatFloat(rate, 'f', -1, 64), burst, untilMs, source).Slice()
	if err != nil {
		return Flow{}, false, fmt.Errorf("%s topic %q: %w", op, topic, err)
	}
	r := reply{v: v, what: "flow reply"}
	if len(v) != 2 {
		return Flow{}, false, fmt.Errorf("%s topic %q: unexpected reply of %d fields", op, topic, len(v))
	}
	status := r.int(0)
	if status == -1 {
		return Flow{}, false, fmt.Errorf("%w: %w", &InvalidError{Field: "until", Reason: fmt.Sprintf("%s has passed (Redis clock %s)",
			time.UnixMilli(untilMs).UTC().Format(time.RFC3339Nano), time.UnixMilli(r.int(1)).UTC().Format(time.RFC3339Nano))}, ErrPauseOver)
	}
	raw := r.str(1)
	if r.err != nil {
		return Flow{}, false, fmt.Errorf("%s topic %q: %w", op, topic, r.err)
	}
	f, err := parseFlow(topic, raw)
	return f, status == 1, err
}

// ForgetFlow removes a topic's flow when it no longer controls anything
// (no limit, no pause, at nowMs) and it is still as f was read; the
// caller has checked that nothing of the topic is held. It reports
// whether it removed it.
func (s *Store) ForgetFlow(ctx context.Context, f Flow, nowMs int64) (bool, error) {
	if f.Limited() || f.Paused(nowMs) || f.raw == "" {
		return false, nil
	}
	n, err := s.run1(ctx, flowForgetScript, []string{FlowKey(s.ns)}, f.Topic, f.raw).Int()
	if err != nil {
		return false, fmt.Errorf("forget flow of topic %q: %w", f.Topic, err)
	}
	return n == 1, nil
}

// Grant is what a topic's bucket granted a releaser.
type Grant struct {
	N     int           // messages it may release now
	Wait  time.Duration // when N is 0: how long until one could be granted; -1 paused until resumed
	AtMs  int64         // the Redis clock of the grant
	entry string        // the grant's log entry, for Refund
}

// TakeGrant asks the topic's bucket for up to want messages (want >= 1)
// under flow f: at most what the limit allows now, for the whole fleet.
func (s *Store) TakeGrant(ctx context.Context, f Flow, want int) (Grant, error) {
	b, l := bucketKeys(s.ns, f.Topic)
	v, err := s.run1(ctx, grantScript, []string{b, l}, max(want, 1), strconv.FormatFloat(f.pace(), 'f', -1, 64),
		f.bucketCap(), f.windowMost(), f.Window().Milliseconds(), f.PausedUntilMs).Slice()
	if err != nil {
		return Grant{}, fmt.Errorf("grant for topic %q: %w", f.Topic, err)
	}
	r := reply{v: v, what: "grant reply"}
	if len(v) != 3 {
		return Grant{}, fmt.Errorf("grant for topic %q: unexpected reply of %d fields", f.Topic, len(v))
	}
	g := Grant{N: int(r.int(0)), AtMs: r.int(2)}
	if w := r.int(1); w < 0 {
		g.Wait = -1
	} else {
		g.Wait = time.Duration(w) * time.Millisecond
	}
	if r.err != nil {
		return Grant{}, fmt.Errorf("grant for topic %q: %w", f.Topic, r.err)
	}
	if g.N > 0 && f.Limited() {
		g.entry = fmt.Sprintf("%d:%d", r.int(2), g.N)
	}
	return g, nil
}

// Refund gives back unused of grant g's messages (the releaser found
// fewer held than it was granted), so the fleet may release them after
// all.
func (s *Store) Refund(ctx context.Context, f Flow, g Grant, unused int) error {
	if g.entry == "" || unused <= 0 {
		return nil
	}
	b, l := bucketKeys(s.ns, f.Topic)
	if err := s.run1(ctx, refundScript, []string{b, l}, g.entry, min(unused, g.N), f.bucketCap()).Err(); err != nil {
		return fmt.Errorf("refund to topic %q: %w", f.Topic, err)
	}
	return nil
}

// PreHoldKey is shard i's cursor of PreHold (a HASH: score, id).
func PreHoldKey(ns string, i int) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:prehold"
}

// PreHoldResult is what one PreHold call did in a shard.
type PreHoldResult struct {
	Read, Moved int
	More        bool // it stopped at its most: call again
}

// PreHold sets apart, in each of shards, the entries of topics (the
// topics under flow control) that fall due within lookahead, reading at
// most n entries a shard after the shard's cursor (preHoldScript), in
// one pipeline. Set apart early, a limited backlog no longer stands
// between the claims and what falls due behind it.
func (s *Store) PreHold(ctx context.Context, shards []int, topics []string, lookahead time.Duration, n int) ([]PreHoldResult, []error) {
	res, errs := make([]PreHoldResult, len(shards)), make([]error, len(shards))
	if len(topics) == 0 {
		return res, errs
	}
	calls := make([]call, len(shards))
	for j, i := range shards {
		ks := ShardKeys(s.ns, i)
		keys := append(make([]string, 0, 3+len(topics)), ks.Due, ks.Msg, PreHoldKey(s.ns, i))
		args := append(make([]any, 0, 3+len(topics)), lookahead.Milliseconds(), max(n, 1), len(topics))
		for _, t := range topics {
			keys, args = append(keys, HeldKey(s.ns, i, t)), append(args, t)
		}
		calls[j] = call{preHoldScript, keys, args}
	}
	for j, c := range s.run(ctx, calls...) {
		v, err := c.Int64Slice()
		if err == nil && len(v) != 3 {
			err = fmt.Errorf("unexpected reply of %d fields", len(v))
		}
		if err != nil {
			errs[j] = fmt.Errorf("set apart ahead in shard %d: %w", shards[j], err)
			continue
		}
		res[j] = PreHoldResult{Read: int(v[0]), Moved: int(v[1]), More: v[2] == 1}
	}
	return res, errs
}

// maxHoldPerClaim is the most due entries one claim sets apart.
const maxHoldPerClaim = 128

// HeldClaim is the reply of one ClaimHeld.
type HeldClaim struct {
	NowMs  int64
	HeadMs int64 // due time of the earliest message still held; -1 if none
	Left   int64 // messages still held in the shard
	Msgs   []Claimed
}

// ClaimHeld leases up to n held messages of topic in shard i, in due
// order: what a releaser does with a grant.
func (s *Store) ClaimHeld(ctx context.Context, i int, topic string, n int, lease time.Duration) (HeldClaim, error) {
	ks := ShardKeys(s.ns, i)
	v, err := s.run1(ctx, claimHeldScript, []string{HeldKey(s.ns, i, topic), ks.Msg, ks.Inflight, ks.Attempts},
		max(n, 1), lease.Milliseconds()).Slice()
	if err != nil {
		return HeldClaim{}, fmt.Errorf("claim held %q of shard %d: %w", topic, i, err)
	}
	if len(v) < 4 || (len(v)-4)%5 != 0 {
		return HeldClaim{}, fmt.Errorf("claim held %q of shard %d: unexpected reply of %d fields", topic, i, len(v))
	}
	r := reply{v: v, what: "held claim reply"}
	hc := HeldClaim{NowMs: r.int(0), HeadMs: r.int(1), Left: r.int(2), Msgs: parseClaimed(&r, v, 4)}
	if r.err != nil {
		return HeldClaim{}, fmt.Errorf("claim held %q of shard %d: %w", topic, i, r.err)
	}
	return hc, nil
}

// Held is what one shard holds of one topic.
type Held struct {
	Shard  int
	Count  int64 // held, due or set apart ahead of their due time (PreHold)
	Due    int64 // of Count, those due by the time read
	HeadMs int64 // due time of its earliest; -1 if none
}

// HeldIn reads what shards hold of each topic, in one pipeline: by
// topic, one Held per shard, in the order of shards; Due counts what is
// due at nowMs.
func (s *Store) HeldIn(ctx context.Context, topics []string, shards []int, nowMs int64) (map[string][]Held, error) {
	return s.setsIn(ctx, topics, shards, nowMs, func(i int, t string) string { return HeldKey(s.ns, i, t) })
}

// setsIn reads, in one pipeline, the size, due count and head of the ZSET
// key(i, name) for each name and shard i (HeldIn, BacklogIn).
func (s *Store) setsIn(ctx context.Context, topics []string, shards []int, nowMs int64, key func(int, string) string) (map[string][]Held, error) {
	if len(topics) == 0 || len(shards) == 0 {
		return map[string][]Held{}, nil
	}
	pipe := s.rdb.Pipeline()
	type pair struct {
		n, due *redis.IntCmd
		head   *redis.ZSliceCmd
	}
	cmds := make([][]pair, len(topics))
	for t, topic := range topics {
		cmds[t] = make([]pair, len(shards))
		for j, i := range shards {
			k := key(i, topic)
			cmds[t][j] = pair{pipe.ZCard(ctx, k), pipe.ZCount(ctx, k, "-inf", strconv.FormatInt(nowMs, 10)), pipe.ZRangeWithScores(ctx, k, 0, 0)}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read held or set apart messages: %w", err)
	}
	out := make(map[string][]Held, len(topics))
	for t, topic := range topics {
		hs := make([]Held, len(shards))
		for j, c := range cmds[t] {
			hs[j] = Held{Shard: shards[j], Count: c.n.Val(), Due: c.due.Val(), HeadMs: -1}
			if z := c.head.Val(); len(z) > 0 {
				hs[j].HeadMs = int64(z[0].Score)
			}
		}
		out[topic] = hs
	}
	return out, nil
}

// FlowStatus is a topic's flow and what it holds back, namespace-wide.
type FlowStatus struct {
	Flow
	Held     int64 // messages held back (due, waiting for the limit or the pause)
	OldestMs int64 // due time of the earliest held message; -1 if none
	NowMs    int64 // the clock the status was read by
}

// HeldFor is how long the earliest held message has waited (0 if none).
func (f FlowStatus) HeldFor() time.Duration {
	if f.OldestMs < 0 || f.OldestMs > f.NowMs {
		return 0
	}
	return time.Duration(f.NowMs-f.OldestMs) * time.Millisecond
}

// FlowStatuses reads every flow and what shards [0, m) hold of each. An
// error naming a flow value that cannot be read comes with the others.
func (s *Store) FlowStatuses(ctx context.Context, m int) ([]FlowStatus, error) {
	flows, ferr := s.Flows(ctx)
	if flows == nil {
		return nil, ferr
	}
	topics := make([]string, len(flows))
	for j, f := range flows {
		topics[j] = f.Topic
	}
	shards := make([]int, m)
	for i := range shards {
		shards[i] = i
	}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("read flows: %w", err)
	}
	held, err := s.HeldIn(ctx, topics, shards, now.UnixMilli())
	if err != nil {
		return nil, err
	}
	out := make([]FlowStatus, len(flows))
	for j, f := range flows {
		st := FlowStatus{Flow: f, OldestMs: -1, NowMs: now.UnixMilli()}
		for _, h := range held[f.Topic] {
			st.Held += h.Due // what was set apart ahead of its time is not held back yet
			if h.Due > 0 && (st.OldestMs < 0 || h.HeadMs < st.OldestMs) {
				st.OldestMs = h.HeadMs
			}
		}
		out[j] = st
	}
	return out, ferr
}

// heldTopic says whether message id of shard i is held, and of which
// topic: its envelope's topic's held set has it.
func (s *Store) heldTopic(ctx context.Context, i int, id string) (string, bool, error) {
	raw, err := s.rdb.HGet(ctx, ShardKeys(s.ns, i).Msg, id).Bytes()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	env, err := DecodeEnvelope(raw)
	if err != nil || env.Topic == "" {
		return "", false, nil //nolint:nilerr // a corrupt envelope is never held: the claim hands it on
	}
	_, err = s.rdb.ZScore(ctx, HeldKey(s.ns, i, env.Topic), id).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return env.Topic, true, nil
}

// changeHeld cancels (mode "cancel") or reschedules ("delay", "at") a
// held message of shard i. It reports whether the message was held.
func (s *Store) changeHeld(ctx context.Context, i int, id, mode string, ms int64) (int64, bool, error) {
	topic, ok, err := s.heldTopic(ctx, i, id)
	if err != nil || !ok {
		return 0, false, err
	}
	ks := ShardKeys(s.ns, i)
	v, err := s.run1(ctx, cancelHeldScript, []string{HeldKey(s.ns, i, topic), ks.Msg, ks.Attempts, ks.Due},
		id, mode, ms, s.wake, i).Slice()
	if err != nil {
		return 0, false, err
	}
	r := reply{v: v, what: "held change reply"}
	if len(v) != 2 {
		return 0, false, fmt.Errorf("unexpected reply of %d fields", len(v))
	}
	done, due := r.int(0) == 1, r.int(1)
	return due, done, r.err
}
