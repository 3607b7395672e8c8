package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard/schedule"
)

// ErrScheduleNotFound: no schedule has this name.
var ErrScheduleNotFound = errors.New("schedule not found")

// MaxScheduleName is the longest schedule name, in bytes: with "@" and a
// millisecond time it stays far below MaxIDLen as an occurrence's id.
const MaxScheduleName = 200

// Schedule is a recurring schedule: every occurrence of Spec in Zone
// (from Start, up to End and Count) publishes Message, as an ordinary
// delayq message whose id is OccurrenceID(Name, its time).
type Schedule struct {
	// Name is unique in the namespace: 1..200 bytes of letters, digits
	// and . _ : / -.
	Name string `json:"name"`
	// Spec: 5-field cron, 6 with a leading seconds field, @hourly, @daily,
	// @weekly, @monthly, @yearly, or @every <duration> (package schedule).
	Spec string `json:"spec"`
	// Zone is the IANA time zone the spec is read in ("" is UTC).
	Zone string `json:"zone,omitempty"`
	// Start: no occurrence before it, and @every counts from it (default:
	// when the schedule is created). End: none after it. Count: at most
	// that many are published in all (0: no limit).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	Count int       `json:"count,omitempty"`
	// Missed is the missed-run policy: schedule.MissedSkip (default),
	// MissedLatest or MissedAll, for occurrences fired more than Grace
	// (default schedule.DefaultGrace) after their time; MissedAll
	// publishes CatchUp at most (default schedule.DefaultCatchUp).
	Missed  string        `json:"missed,omitempty"`
	Grace   time.Duration `json:"grace,omitempty"`
	CatchUp int           `json:"catch_up,omitempty"`
	// Message is what each occurrence publishes. Its ID, Delay, At,
	// ExpiresAt and Retry must be empty: the schedule gives the id and the
	// time. MaxLateness applies to each occurrence.
	Message Message `json:"-"`
	// Restore, when set, is the state an export wrote (AppendScheduleLine):
	// a schedule created with it starts paused or not, with its counts of
	// occurrences fired and skipped, its last occurrence and its creation
	// time (where @every counts from) as they were. Ignored when the
	// schedule exists: an import run twice changes nothing.
	Restore *ScheduleState `json:"-"`
}

// ScheduleState is what a schedule has done so far, as an export carries
// it (Schedule.Restore).
type ScheduleState struct {
	Paused         bool
	Fired, Skipped int64
	Last           time.Time // zero: none published yet
	Created        time.Time
}

// ScheduleInfo is a schedule as stored, with its state.
type ScheduleInfo struct {
	Schedule
	Shard   int
	Version int64
	Paused  bool
	Next    time.Time // the pending occurrence's time; zero when none
	Pending string    // its id
	Last    time.Time // the latest occurrence published; zero when none
	Fired   int64     // occurrences published (handed to the fleet)
	Skipped int64     // missed occurrences the policy dropped
	Created time.Time
	Changed time.Time
	// Envelope is the stored message, as each occurrence copies it.
	Envelope *Envelope

	anchorMs int64 // where @every counts from (the stored rule's), 0 unknown
}

// anchor is where the schedule's @every counts from: its start, else its
// rule's anchor (its creation, as the producer's clock read it).
func (info *ScheduleInfo) anchor() time.Time {
	if info.Start.IsZero() && info.anchorMs > 0 {
		return time.UnixMilli(info.anchorMs)
	}
	if !info.Start.IsZero() {
		return info.Start
	}
	return info.Created
}

// OccurrenceID is the message id of the occurrence of schedule name at
// nominal: name@<unix ms>. One id per occurrence is what keeps racing
// scanners from publishing it twice.
func OccurrenceID(name string, nominal time.Time) string {
	return name + "@" + strconv.FormatInt(nominal.UnixMilli(), 10)
}

// ValidateScheduleName checks a schedule name; the error is an
// *InvalidError for the field "name".
func ValidateScheduleName(name string) error {
	if name == "" {
		return invalid("name", "empty")
	}
	if len(name) > MaxScheduleName {
		return invalid("name", "%d bytes, more than %d", len(name), MaxScheduleName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '/' || c == '-') {
			return invalid("name", "character %q at byte %d: use letters, digits and . _ : / -", c, i)
		}
	}
	return nil
}

// scheduleDef is what the HASH's def field holds: the schedule and its
// message as an envelope (the one each occurrence copies).
type scheduleDef struct {
	Schedule
	Envelope []byte `json:"envelope"`
}

// rule builds the schedule's rule; anchorMs is its start.
func (sc *Schedule) rule(anchorMs int64) schedule.Rule {
	r := schedule.Rule{Spec: sc.Spec, Zone: sc.Zone, AnchorMs: anchorMs, Missed: sc.Missed, CatchUp: sc.CatchUp,
		GraceMs: sc.Grace.Milliseconds()}
	if r.Missed == "" {
		r.Missed = schedule.MissedSkip
	}
	if sc.Grace == 0 {
		r.GraceMs = schedule.DefaultGrace.Milliseconds()
	}
	if !sc.End.IsZero() {
		r.EndMs = sc.End.UnixMilli()
	}
	return r
}

// check validates sc and builds its message's envelope; nowMs (the Redis
// clock) anchors a schedule without a start. The error is an
// *InvalidError naming the field.
func (sc *Schedule) check(maxBody int, nowMs int64) (schedule.Rule, schedule.Spec, Envelope, error) {
	var zero schedule.Spec
	if err := ValidateScheduleName(sc.Name); err != nil {
		return schedule.Rule{}, zero, Envelope{}, err
	}
	m := sc.Message
	switch {
	case m.ID != "":
		return schedule.Rule{}, zero, Envelope{}, invalid("message.id", "set by the schedule (name@time): leave it empty")
	case m.Delay != 0 || !m.At.IsZero():
		return schedule.Rule{}, zero, Envelope{}, invalid("message.delay", "set by the schedule: leave delay and at empty")
	case !m.ExpiresAt.IsZero():
		return schedule.Rule{}, zero, Envelope{}, invalid("message.expires_at", "one time cannot fit every occurrence: use max_lateness")
	case len(m.Retry) > 0:
		return schedule.Rule{}, zero, Envelope{}, invalid("message.retry", "not for schedules: each occurrence is its own message")
	case sc.Count < 0:
		return schedule.Rule{}, zero, Envelope{}, invalid("count", "%d is negative", sc.Count)
	case sc.Grace < 0:
		return schedule.Rule{}, zero, Envelope{}, invalid("grace", "%s is negative", sc.Grace)
	case !sc.Start.IsZero() && (sc.Start.Before(minAt) || !sc.Start.Before(maxAt)):
		return schedule.Rule{}, zero, Envelope{}, invalid("start", "%s is outside [%s, %s)", sc.Start.UTC().Format(time.RFC3339),
			minAt.Format("2006-01-02"), maxAt.Format("2006-01-02"))
	case !sc.End.IsZero() && !sc.Start.IsZero() && !sc.End.After(sc.Start):
		return schedule.Rule{}, zero, Envelope{}, invalid("end", "%s is not after the start %s", sc.End.UTC().Format(time.RFC3339),
			sc.Start.UTC().Format(time.RFC3339))
	case !sc.End.IsZero() && sc.End.UnixMilli() <= nowMs:
		return schedule.Rule{}, zero, Envelope{}, invalid("end", "%s has passed", sc.End.UTC().Format(time.RFC3339))
	}
	m.ID = sc.Name + "@0"
	env, err := m.envelope(maxBody, time.UnixMilli(nowMs))
	if err != nil {
		return schedule.Rule{}, zero, Envelope{}, prefixField("message.", err)
	}
	anchor := nowMs
	if !sc.Start.IsZero() {
		anchor = sc.Start.UnixMilli()
	}
	r := sc.rule(anchor)
	switch r.Missed {
	case schedule.MissedSkip, schedule.MissedLatest, schedule.MissedAll:
	default:
		return schedule.Rule{}, zero, Envelope{}, invalid("missed", "%q is not skip, latest or all", sc.Missed)
	}
	if sc.CatchUp < 0 || sc.CatchUp > schedule.MaxCatchUp {
		return schedule.Rule{}, zero, Envelope{}, invalid("catch_up", "%d is not in 0..%d", sc.CatchUp, schedule.MaxCatchUp)
	}
	if _, err := schedule.LoadZone(sc.Zone); err != nil {
		return schedule.Rule{}, zero, Envelope{}, invalid("zone", "%v", err)
	}
	sp, err := r.Check()
	if err != nil {
		return schedule.Rule{}, zero, Envelope{}, invalid("spec", "%v", err)
	}
	if _, err := r.First(sp, time.UnixMilli(max(nowMs, anchor))); err != nil {
		return schedule.Rule{}, zero, Envelope{}, invalid("spec", "%v", err)
	}
	return r, sp, env, nil
}

// prefixField puts prefix before the field of an *InvalidError.
func prefixField(prefix string, err error) error {
	var ie *InvalidError
	if errors.As(err, &ie) {
		return &InvalidError{Field: prefix + ie.Field, Reason: ie.Reason}
	}
	return err
}

// occurrence is the envelope of the occurrence at ms of a schedule whose
// message envelope is base.
func occurrence(base Envelope, name string, version int64, rule string, ms int64) (string, []byte) {
	base.Occurrence = OccurrenceRef{Schedule: name, Version: version, NominalMs: ms, Rule: rule}
	return OccurrenceID(name, time.UnixMilli(ms)), AppendEnvelope(make([]byte, 0, base.EncodedSize()), &base)
}

// scheduleKeys are the keys of the schedule scripts, in their order.
func (s *Store) scheduleKeys(i int, name string) []string {
	ks := ShardKeys(s.ns, i)
	return []string{ScheduleKey(s.ns, i, name), ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Counters}
}

// scheduleShard returns the shard of schedule name from the registry, or
// -1 when it has none.
func (s *Store) scheduleShard(ctx context.Context, name string) (int, error) {
	v, err := s.rdb.HGet(ctx, ScheduleRegistryKey(s.ns), name).Result()
	if errors.Is(err, redis.Nil) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("schedule %q: registry: %w", name, err)
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("schedule %q: registry %s: shard %q is not a shard index", name, ScheduleRegistryKey(s.ns), v)
	}
	return i, nil
}

// redisNowMs reads the Redis clock.
func (s *Store) redisNowMs(ctx context.Context) (int64, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redis time: %w", err)
	}
	return t.UnixMilli(), nil
}

// scheduleState is what the writes read before they plan.
type scheduleState struct {
	version        int64
	paused         bool
	lastMs, nextMs int64 // -1: none
	changedMs      int64
	def            scheduleDef
	pending        string
	fired, skipped int64
	createdMs      int64
	rule           string
	found          bool
}

func (s *Store) readSchedule(ctx context.Context, i int, name string) (scheduleState, error) {
	h, err := s.rdb.HGetAll(ctx, ScheduleKey(s.ns, i, name)).Result()
	if err != nil {
		return scheduleState{}, fmt.Errorf("schedule %q: %w", name, err)
	}
	return stateOf(h, name)
}

// stateOf reads a schedule's HASH.
func stateOf(h map[string]string, name string) (scheduleState, error) {
	st := scheduleState{lastMs: -1, nextMs: -1}
	if h["version"] == "" {
		return st, nil
	}
	st.found = true
	num := func(f string, def int64) int64 {
		if v, err := strconv.ParseInt(h[f], 10, 64); err == nil {
			return v
		}
		return def
	}
	st.version, st.lastMs, st.nextMs, st.changedMs = num("version", 0), num("last_ms", -1), num("next_ms", -1), num("changed_ms", 0)
	st.fired, st.skipped, st.createdMs = num("fired", 0), num("skipped", 0), num("created_ms", 0)
	st.paused, st.pending, st.rule = h["paused"] == "1", h["pending"], h["rule"]
	if err := json.Unmarshal([]byte(h["def"]), &st.def); err != nil {
		return st, fmt.Errorf("%w: schedule %q: def: %v", ErrCorrupt, name, err)
	}
	return st, nil
}

// UpsertSchedule creates schedule sc, or changes the one of that name.
// A change takes effect from its next occurrence: an occurrence being
// fired (claimed, or due) when it comes is published under the old
// definition, and the next one follows the new, from the change on; so a
// change never doubles or drops an occurrence. A paused schedule stays
// paused. The error is an *InvalidError naming the field when sc is
// wrong (nothing is stored then).
func (p *Producer) UpsertSchedule(ctx context.Context, sc Schedule) (ScheduleInfo, error) {
	for attempt := 0; ; attempt++ {
		info, retry, err := p.upsertSchedule(ctx, sc)
		if !retry || attempt == 8 {
			return info, err
		}
	}
}

func (p *Producer) upsertSchedule(ctx context.Context, sc Schedule) (ScheduleInfo, bool, error) {
	s := p.store
	fail := func(err error) (ScheduleInfo, bool, error) {
		return ScheduleInfo{}, false, fmt.Errorf("schedule %q: %w", sc.Name, err)
	}
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return fail(err)
	}
	r, sp, env, err := sc.check(p.maxBody, nowMs)
	if err != nil {
		return fail(err)
	}
	if err := p.noteTopics(ctx, &sc.Message); err != nil {
		return fail(err)
	}
	i, err := p.scheduleShardFor(ctx, sc.Name)
	if err != nil {
		return fail(err)
	}
	st, err := s.readSchedule(ctx, i, sc.Name)
	if err != nil {
		return fail(err)
	}
	restore := sc.Restore
	if st.found {
		restore = nil // the schedule's own state stays
	}
	if st.found && sc.Start.IsZero() { // keep the anchor of the first version
		r.AnchorMs = st.def.anchorMs(st.createdMs)
	}
	lastMs, paused, skipped, last := st.lastMs, st.paused, int64(0), ""
	if restore != nil {
		if sc.Start.IsZero() && !restore.Created.IsZero() {
			r.AnchorMs = restore.Created.UnixMilli()
		}
		paused, skipped = restore.Paused, restore.Skipped
		if !restore.Last.IsZero() {
			lastMs = restore.Last.UnixMilli()
			last = strconv.FormatInt(lastMs, 10)
		}
	}
	if !sc.Start.IsZero() {
		r.AnchorMs = sc.Start.UnixMilli()
	}
	ruleJSON := r.JSON()
	from := nowMs
	if lastMs >= from {
		from = lastMs + 1
	}
	next, err := r.First(sp, time.UnixMilli(from))
	hasNext := err == nil
	if err != nil && !errors.Is(err, schedule.ErrNoOccurrence) {
		return fail(err)
	}
	if !hasNext && !st.found && restore == nil { // a restored one may have ended
		return fail(invalid("spec", "%v", err))
	}
	def := scheduleDef{Schedule: sc, Envelope: AppendEnvelope(nil, &env)}
	def.Schedule.Message, def.Schedule.Restore = Message{}, nil
	defJSON, _ := json.Marshal(def)
	args := []any{st.version, defJSON, ruleJSON, sc.Count, boolArg(paused), s.wake, i, skipped, last, 0}
	if hasNext {
		id, occ := occurrence(env, sc.Name, st.version+1, ruleJSON, next.UnixMilli())
		args = append(args[:len(args)-1], 1, id, next.UnixMilli(), occ, "1")
	} else {
		args = append(args, "0")
	}
	switch {
	case restore != nil:
		created := nowMs
		if !restore.Created.IsZero() {
			created = restore.Created.UnixMilli()
		}
		args = append(args, restore.Fired, created)
	case !st.found: // created when the anchor was read, to the millisecond
		args = append(args, 0, nowMs)
	}
	v, err := s.run1(ctx, scheduleWriteScript, s.scheduleKeys(i, sc.Name), args...).Int64Slice()
	if err != nil {
		return fail(err)
	}
	if v[0] == 0 {
		return ScheduleInfo{}, true, nil // changed meanwhile: read again
	}
	info, err := s.ScheduleInfo(ctx, sc.Name)
	return info, false, err
}

// anchorMs is where a stored schedule's @every counts from.
func (d *scheduleDef) anchorMs(createdMs int64) int64 {
	if !d.Start.IsZero() {
		return d.Start.UnixMilli()
	}
	return createdMs
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// scheduleShardFor returns the shard of schedule name, registering one
// for a new name: the shard its name hashes to under the producer's M.
// The registry (one HASH in the namespace's slot, HSETNX) gives each name
// one shard under any M, so two producers under different Ms never make
// two schedules of one name.
func (p *Producer) scheduleShardFor(ctx context.Context, name string) (int, error) {
	i, err := p.store.scheduleShard(ctx, name)
	if err != nil || i >= 0 {
		return i, err
	}
	m, err := p.shards.ShardCount()
	if err != nil {
		return 0, fmt.Errorf("shard count: %w", err)
	}
	if _, err := p.pinned(ctx, m); err != nil {
		return 0, err
	}
	key := ScheduleRegistryKey(p.store.ns)
	if err := p.store.rdb.HSetNX(ctx, key, name, Of(name, m)).Err(); err != nil {
		return 0, fmt.Errorf("registry %s: %w", key, err)
	}
	return p.store.scheduleShard(ctx, name)
}

// DeleteSchedule deletes schedule name and its pending occurrence (one
// being fired is still published). ErrScheduleNotFound when there is none.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	i, err := s.scheduleShard(ctx, name)
	if err != nil {
		return err
	}
	if i < 0 {
		return fmt.Errorf("schedule %q: %w", name, ErrScheduleNotFound)
	}
	keys := s.scheduleKeys(i, name)
	n, err := s.run1(ctx, scheduleDeleteScript, keys[:5]).Int64()
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	if err := s.rdb.HDel(ctx, ScheduleRegistryKey(s.ns), name).Err(); err != nil {
		return fmt.Errorf("delete schedule %q: registry: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("schedule %q: %w", name, ErrScheduleNotFound)
	}
	return nil
}

// PauseSchedule pauses schedule name: its pending occurrence is removed
// (unless it is being fired: then it is published), and none follows
// until ResumeSchedule.
func (s *Store) PauseSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	return s.setPaused(ctx, name, true)
}

// ResumeSchedule resumes schedule name. The occurrences that fell in the
// pause are missed runs: its policy decides which are published (skip:
// none; latest: the last; all: each, up to its catch-up bound); then it
// goes on with its next occurrence.
func (s *Store) ResumeSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	return s.setPaused(ctx, name, false)
}

func (s *Store) setPaused(ctx context.Context, name string, paused bool) (ScheduleInfo, error) {
	for attempt := 0; attempt < 8; attempt++ {
		i, st, err := s.findSchedule(ctx, name)
		if err != nil {
			return ScheduleInfo{}, err
		}
		if st.paused == paused {
			return s.ScheduleInfo(ctx, name)
		}
		defJSON, _ := json.Marshal(st.def)
		args := []any{st.version, defJSON, st.rule, st.def.Count, boolArg(paused), s.wake, i}
		if paused {
			args = append(args, 0, "", 0, "0")
		} else {
			occ, err := s.resumePlan(ctx, st, name)
			if err != nil {
				return ScheduleInfo{}, err
			}
			args = append(args, occ...)
		}
		v, err := s.run1(ctx, scheduleWriteScript, s.scheduleKeys(i, name), args...).Int64Slice()
		if err != nil {
			return ScheduleInfo{}, fmt.Errorf("schedule %q: %w", name, err)
		}
		if v[0] == 1 {
			return s.ScheduleInfo(ctx, name)
		}
	}
	return ScheduleInfo{}, fmt.Errorf("schedule %q: changed too often while being paused or resumed; try again", name)
}

// resumePlan returns the write script's ARGV from 8 on for a resume: the
// missed occurrences since the last one published (or the pause, when it
// came before any), and the next.
func (s *Store) resumePlan(ctx context.Context, st scheduleState, name string) ([]any, error) {
	r, sp, err := schedule.ParseRule(st.rule)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", ErrCorrupt, name, err)
	}
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return nil, err
	}
	after := st.lastMs
	if after < 0 {
		after = r.AnchorMs - 1
	}
	plan, err := r.Resume(sp, after, nowMs)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", name, err)
	}
	var env Envelope
	if env, err = DecodeEnvelope(st.def.Envelope); err != nil {
		return nil, fmt.Errorf("schedule %q: its message: %w", name, err)
	}
	last := ""
	if len(plan.CatchUp) > 0 {
		last = strconv.FormatInt(plan.CatchUp[len(plan.CatchUp)-1], 10)
	}
	n := len(plan.CatchUp)
	if plan.NextMs >= 0 {
		n++
	}
	args := []any{plan.Skipped, last, n}
	for _, ms := range plan.CatchUp {
		id, occ := occurrence(env, name, st.version+1, st.rule, ms)
		args = append(args, id, ms, occ)
	}
	if plan.NextMs >= 0 {
		id, occ := occurrence(env, name, st.version+1, st.rule, plan.NextMs)
		return append(args, id, plan.NextMs, occ, "1"), nil
	}
	return append(args, "0"), nil
}

// ScheduleInfo returns schedule name as stored, with its state.
func (s *Store) ScheduleInfo(ctx context.Context, name string) (ScheduleInfo, error) {
	i, st, err := s.findSchedule(ctx, name)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return st.info(i)
}

// findSchedule reads schedule name from the shard the registry gives.
func (s *Store) findSchedule(ctx context.Context, name string) (int, scheduleState, error) {
	i, err := s.scheduleShard(ctx, name)
	if err != nil {
		return 0, scheduleState{}, err
	}
	if i < 0 {
		return 0, scheduleState{}, fmt.Errorf("schedule %q: %w", name, ErrScheduleNotFound)
	}
	st, err := s.readSchedule(ctx, i, name)
	if err != nil {
		return 0, scheduleState{}, err
	}
	if !st.found {
		return 0, scheduleState{}, fmt.Errorf("schedule %q: %w (registered in shard %d, not stored there yet: an upsert finishes it)", name, ErrScheduleNotFound, i)
	}
	return i, st, nil
}

func (st *scheduleState) info(i int) (ScheduleInfo, error) {
	info := ScheduleInfo{Schedule: st.def.Schedule, Shard: i, Version: st.version, Paused: st.paused, Pending: st.pending,
		Fired: st.fired, Skipped: st.skipped, Created: time.UnixMilli(st.createdMs), Changed: time.UnixMilli(st.changedMs)}
	var rule struct {
		AnchorMs int64 `json:"anchor_ms"`
	}
	if json.Unmarshal([]byte(st.rule), &rule) == nil {
		info.anchorMs = rule.AnchorMs
	}
	if st.nextMs >= 0 && st.pending != "" {
		info.Next = time.UnixMilli(st.nextMs)
	}
	if st.lastMs >= 0 {
		info.Last = time.UnixMilli(st.lastMs)
	}
	if len(st.def.Envelope) > 0 {
		env, err := DecodeEnvelope(st.def.Envelope)
		if err != nil {
			return info, fmt.Errorf("schedule %q: its message: %w", st.def.Name, err)
		}
		info.Message = env.message()
		info.Envelope = &env
	}
	return info, nil
}

// Schedules lists the namespace's schedules by name. A name registered
// but not stored (a create cut short) is left out.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	reg, err := s.rdb.HGetAll(ctx, ScheduleRegistryKey(s.ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("schedules: registry: %w", err)
	}
	names := make([]string, 0, len(reg))
	for n := range reg {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]ScheduleInfo, 0, len(names))
	for chunk := range slices.Chunk(names, 256) {
		cmds := make([]*redis.MapStringStringCmd, len(chunk))
		shards := make([]int, len(chunk))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, n := range chunk {
				shards[j], _ = strconv.Atoi(reg[n])
				cmds[j] = p.HGetAll(ctx, ScheduleKey(s.ns, shards[j], n))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("schedules: %w", err)
		}
		for j, n := range chunk {
			st, err := stateOf(cmds[j].Val(), n)
			if err != nil {
				return nil, err
			}
			if !st.found {
				continue
			}
			info, err := st.info(shards[j])
			if err != nil {
				return nil, err
			}
			out = append(out, info)
		}
	}
	return out, nil
}

// ScheduleCount is how many schedules the namespace's registry names.
func (s *Store) ScheduleCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.HLen(ctx, ScheduleRegistryKey(s.ns)).Result()
	if err != nil {
		return 0, fmt.Errorf("schedules: registry: %w", err)
	}
	return n, nil
}

// message is the Message an envelope was made from (no id, no time).
func (e *Envelope) message() Message {
	m := Message{Topic: e.Topic, Exchange: e.Exchange, RoutingKey: e.RoutingKey, ContentType: e.ContentType,
		Properties: e.Properties, Body: e.Body, MaxLateness: time.Duration(e.MaxLatenessMs) * time.Millisecond}
	if len(e.Headers) > 0 {
		m.Headers = make(amqp.Table, len(e.Headers))
		for _, h := range e.Headers {
			m.Headers[h.Key] = h.Value
		}
	}
	return m
}

// Fired is what firing an occurrence did.
type Fired struct {
	Publish bool // publish the occurrence
	Skipped int  // missed occurrences its policy dropped (this one among them when !Publish)
	CatchUp int  // missed occurrences its policy publishes besides this one, stored as messages due now
}

// FireOccurrence fires the occurrence c of shard i, claimed at nowMs (the
// Redis clock) with envelope env, before it is published: it records the
// firing and stores the schedule's next occurrence (and the missed ones
// its policy publishes) in the same script call, so the next one exists
// before this one is published and a crash anywhere after the claim
// neither loses nor doubles one (the lease brings this one back; firing
// it again finds the schedule moved on and changes nothing). It reports
// whether to publish c: not when the policy skips it as missed (it is
// removed) or another scanner holds its lease now. A schedule changed
// since the occurrence was made is planned again with its new rule.
func (s *Store) FireOccurrence(ctx context.Context, i int, c *Claimed, env *Envelope, nowMs int64) (Fired, error) {
	o := env.Occurrence
	rule, version, fromMs := o.Rule, o.Version, int64(0)
	keys := s.scheduleKeys(i, o.Schedule)
	for attempt := 0; attempt < 4; attempt++ {
		r, sp, err := schedule.ParseRule(rule)
		if err != nil {
			return Fired{Publish: true}, fmt.Errorf("%w: occurrence %q: its schedule's rule: %v (published; the schedule does not go on)", ErrCorrupt, c.ID, err)
		}
		plan, err := r.Fire(sp, o.NominalMs, fromMs, nowMs)
		if err != nil {
			return Fired{Publish: true}, fmt.Errorf("occurrence %q: %w (published; the schedule does not go on)", c.ID, err)
		}
		last := ""
		switch {
		case len(plan.CatchUp) > 0:
			last = strconv.FormatInt(plan.CatchUp[len(plan.CatchUp)-1], 10)
		case plan.Publish:
			last = strconv.FormatInt(o.NominalMs, 10)
		}
		n := len(plan.CatchUp)
		if plan.NextMs >= 0 {
			n++
		}
		args := make([]any, 0, 11+3*n)
		args = append(args, c.ID, strconv.FormatInt(c.Token, 10), version, boolArg(plan.Publish), plan.Skipped, last, s.wake, i, n)
		for _, ms := range plan.CatchUp {
			id, occ := occurrence(*env, o.Schedule, version, rule, ms)
			args = append(args, id, ms, occ)
		}
		if plan.NextMs >= 0 {
			id, occ := occurrence(*env, o.Schedule, version, rule, plan.NextMs)
			args = append(args, id, plan.NextMs, occ, "1")
		} else {
			args = append(args, "0")
		}
		v, err := s.run1(ctx, scheduleFireScript, keys, args...).Slice()
		if err != nil {
			return Fired{}, fmt.Errorf("fire occurrence %q: %w", c.ID, err)
		}
		r0, _ := v[0].(int64)
		switch r0 {
		case 1:
			return Fired{Publish: plan.Publish, Skipped: plan.Skipped, CatchUp: len(plan.CatchUp)}, nil
		case 2:
			return Fired{Publish: true}, nil
		case 3:
			return Fired{}, nil
		}
		if len(v) < 5 {
			return Fired{}, fmt.Errorf("fire occurrence %q: unexpected reply %v", c.ID, v)
		}
		version, _ = v[1].(int64)
		rule, _ = v[2].(string)
		fromMs, _ = v[3].(int64)
		defJSON, _ := v[4].(string)
		var def scheduleDef // the message may have changed too
		if err := json.Unmarshal([]byte(defJSON), &def); err != nil {
			return Fired{Publish: true}, fmt.Errorf("%w: occurrence %q: its schedule's def: %v (published; the schedule does not go on)", ErrCorrupt, c.ID, err)
		}
		base, err := DecodeEnvelope(def.Envelope)
		if err != nil {
			return Fired{Publish: true}, fmt.Errorf("occurrence %q: its schedule's message: %w (published; the schedule does not go on)", c.ID, err)
		}
		env = &base
	}
	return Fired{}, fmt.Errorf("fire occurrence %q: its schedule changed four times meanwhile; the lease brings it back", c.ID)
}
