package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The live move of what is not a scheduled message (see "Moving to
// another Redis" in the package doc): recurring schedules, handed over
// one at a time, and dead messages, copied a page at a time.
//
// A schedule is handed over so that each occurrence is published by one
// side: the target's copy is made with the source's state, its last
// occurrence being the source's pending one (which the source keeps and
// publishes: its firing finds the schedule gone and publishes it all the
// same); then one script on the source deletes the schedule, keeping that
// occurrence, if it is still the version and pending occurrence read. A
// schedule changed meanwhile (set, paused, resumed, or its pending one
// fired) has the target's copy deleted and is handed over on a later
// pass. The source's journal of schedules names each one whose copy the
// move made and has not handed over yet: a rerun after a kill deletes
// that copy and makes it again from the source's state then, so only the
// occurrences due between the kill and the rerun can be published by
// both. A schedule the target has that the move did not make (set there
// by an operator) stays as the target has it; the source's is deleted,
// its pending occurrence kept.

// StepMoveScheduleCopied is the step between a schedule's copy to the
// target and its handover on the source (MoveOptions.AtStep).
const StepMoveScheduleCopied = "schedule-copied"

// MoveScheduleJournalKey is shard i's journal of the schedules the move
// copied and has not handed over yet: a HASH of their names, in the slot
// of their schedule keys. The handover deletes a name (and a schedule
// changed meanwhile has it deleted); what a mover cut short leaves goes
// with the HASH's TTL, 24 h after its last write (moveJournalTTL).
func MoveScheduleJournalKey(ns string, i int) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:movejournal:schedules"
}

// StateMoveResult is what a move of schedules or dead messages did.
type StateMoveResult struct {
	Moved   int     // copied to the target and removed from the source
	There   int     // the target had it: the target's kept, the source's removed
	Changed int     // changed on the source meanwhile: left there, for a later pass
	Left    []error // not moved, each with why
}

// scheduleHandoverScript deletes a schedule the move copied, if it is
// still the version and pending occurrence read, keeping that occurrence
// (the source's fleet publishes it), and ends its journal entry.
//
//	KEYS[1] schedule HASH   KEYS[2] the shard's schedule journal HASH
//	ARGV[1] version read   ARGV[2] pending occurrence read ("" none)   ARGV[3] name
//
// Returns 1 handed over, 0 changed since the read (nothing written).
// Complexity: O(1).
var scheduleHandoverScript = redis.NewScript(`
if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') ~= tonumber(ARGV[1]) then return 0 end
if (redis.call('HGET', KEYS[1], 'pending') or '') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[3])
return 1
`)

// MoveSchedules hands every recurring schedule of s over to the target
// (see above), a schedule changed meanwhile tried again up to three times.
func (s *Store) MoveSchedules(ctx context.Context, to *Producer, o MoveOptions) (StateMoveResult, error) {
	var r StateMoveResult
	names, err := s.rdb.HKeys(ctx, ScheduleRegistryKey(s.ns)).Result()
	if err != nil {
		return r, fmt.Errorf("move schedules: registry: %w", err)
	}
	for _, name := range names {
		for attempt := 0; ; attempt++ {
			outcome, err := s.moveSchedule(ctx, name, to, o)
			if err != nil {
				return r, err
			}
			if outcome == "changed" && attempt < 3 {
				continue
			}
			switch outcome {
			case "moved":
				r.Moved++
			case "there":
				r.There++
			case "changed":
				r.Changed++
			}
			break
		}
	}
	return r, nil
}

// moveSchedule hands schedule name over: "moved", "there", "changed", or
// "" (no longer on the source).
func (s *Store) moveSchedule(ctx context.Context, name string, to *Producer, o MoveOptions) (string, error) {
	i, st, err := s.findSchedule(ctx, name)
	if errors.Is(err, ErrScheduleNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("move schedule %q: %w", name, err)
	}
	jk := MoveScheduleJournalKey(s.ns, i)
	ours, err := s.rdb.HExists(ctx, jk, name).Result()
	if err != nil {
		return "", fmt.Errorf("move schedule %q: read the journal: %w", name, err)
	}
	_, err = to.store.ScheduleInfo(ctx, name)
	there := err == nil
	if err != nil && !errors.Is(err, ErrScheduleNotFound) {
		return "", fmt.Errorf("move schedule %q: the target: %w", name, err)
	}
	handover := func() (bool, error) {
		ok, err := s.run1(ctx, scheduleHandoverScript, []string{ScheduleKey(s.ns, i, name), jk}, st.version, st.pending, name).Int()
		if err != nil {
			return false, fmt.Errorf("move schedule %q: hand it over: %w", name, err)
		}
		if ok == 1 {
			if err := s.rdb.HDel(ctx, ScheduleRegistryKey(s.ns), name).Err(); err != nil {
				return false, fmt.Errorf("move schedule %q: registry: %w", name, err)
			}
		}
		return ok == 1, nil
	}
	if there && !ours { // the target's own: it stays
		ok, err := handover()
		if err != nil || !ok {
			return "changed", err
		}
		return "there", nil
	}
	if there { // the copy of a killed run: made again from the state now
		if err := to.store.DeleteSchedule(ctx, name); err != nil && !errors.Is(err, ErrScheduleNotFound) {
			return "", fmt.Errorf("move schedule %q: the copy a killed move made: %w", name, err)
		}
	}
	info, err := st.info(i)
	if err != nil {
		return "", fmt.Errorf("move schedule %q: %w", name, err)
	}
	sc := info.Schedule
	restore := &ScheduleState{Paused: st.paused, Fired: st.fired, Skipped: st.skipped, Created: info.Created}
	if sc.Start.IsZero() {
		restore.Created = info.anchor() // where @every counts from
	}
	if st.lastMs >= 0 {
		restore.Last = time.UnixMilli(st.lastMs)
	}
	if st.pending != "" && st.nextMs >= 0 { // the source publishes it: the target's first comes after
		restore.Last, restore.Fired = time.UnixMilli(st.nextMs), st.fired+1
	}
	sc.Restore = restore
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, jk, name, "1")
	pipe.Expire(ctx, jk, moveJournalTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", fmt.Errorf("move schedule %q: write the journal: %w", name, err)
	}
	if _, err := to.UpsertSchedule(ctx, sc); err != nil {
		return "", fmt.Errorf("move schedule %q: copy to the target: %w", name, err)
	}
	if o.AtStep != nil {
		o.AtStep(StepMoveScheduleCopied)
	}
	ok, err := handover()
	if err != nil {
		return "", err
	}
	if !ok { // changed since the read: the copy goes, a later try makes it again
		if err := to.store.DeleteSchedule(ctx, name); err != nil && !errors.Is(err, ErrScheduleNotFound) {
			return "", fmt.Errorf("move schedule %q: changed on the source meanwhile; its copy: %w", name, err)
		}
		if err := s.rdb.HDel(ctx, jk, name).Err(); err != nil {
			return "", fmt.Errorf("move schedule %q: end the journal: %w", name, err)
		}
		return "changed", nil
	}
	return "moved", nil
}

// moveDeadOutScript removes from a shard the dead messages the move copied,
// each only if it is still dead since the time read (one redriven, purged
// or replaced meanwhile stays as that left it).
//
//	KEYS[1] dead ZSET   KEYS[2] reason HASH   KEYS[3] msg HASH   KEYS[4] attempts HASH
//	ARGV: for each message, its id and the since ms read
//
// Returns one status per message: 1 removed, 0 changed. Complexity:
// O(n log N).
var moveDeadOutScript = redis.NewScript(`
local out = {}
for j = 1, #ARGV, 2 do
  local id = ARGV[j]
  local since = redis.call('ZSCORE', KEYS[1], id)
  if since and tonumber(since) == tonumber(ARGV[j + 1]) then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`)

// StepMoveDeadCopied is the step between a page of dead messages' copy to
// the target and their removal from the source (MoveOptions.AtStep).
const StepMoveDeadCopied = "dead-copied"

// MoveDeadJournalKey is shard i's journal of the dead messages the move
// copied and has not removed from the source yet: a STRING of lines
// "<id>\t<since ms>" (an id holds no control character), written before
// the copy and deleted after the removal, with moveJournalTTL.
func MoveDeadJournalKey(ns string, i int) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:movejournal:dead"
}

// MoveDeadPage moves the next n dead messages of shards [0, shards) after
// the cursor to the target's dead sets (deduped by id: one the target has
// stays as the target has it), then removes each from the source if it
// is still dead since the time read; the copy of one redriven, purged or
// replaced meanwhile is purged. The page's ids are in their shards'
// journals (MoveDeadJournalKey) from before the copy until after the
// removal; it settles the journals a killed move left first
// (SettleDeadJournals). It returns the cursor after the page and whether
// more may follow.
func (s *Store) MoveDeadPage(ctx context.Context, shards int, after DeadCursor, n int, to *Producer, o MoveOptions) (StateMoveResult, DeadCursor, bool, error) {
	r, err := s.SettleDeadJournals(ctx, shards, to)
	if err != nil {
		return r, after, false, err
	}
	page, next, more, err := s.DeadPage(ctx, shards, after, n)
	if err != nil || len(page) == 0 {
		return r, after, false, err
	}
	var msgs []Message
	var from []Dead
	err = s.readDead(ctx, page, func(d Dead, line []byte, err error) {
		var m Message
		if err == nil {
			m, err = ParseLine(line)
		}
		if err != nil {
			r.Left = append(r.Left, fmt.Errorf("move dead %q in shard %d: %w", d.ID, d.Shard, err))
			return
		}
		msgs, from = append(msgs, m), append(from, d)
	})
	if err != nil || len(msgs) == 0 {
		return r, next, more, err
	}
	journal := map[int][]string{}
	for _, d := range from {
		journal[d.Shard] = append(journal[d.Shard], d.ID+"\t"+strconv.FormatInt(d.Since.UnixMilli(), 10))
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh, lines := range journal {
			p.Set(ctx, MoveDeadJournalKey(s.ns, sh), strings.Join(lines, "\n"), moveJournalTTL)
		}
		return nil
	}); err != nil {
		return r, after, false, fmt.Errorf("move dead messages: write the journals: %w", err)
	}
	res, err := to.EnqueueBatch(ctx, msgs)
	if err != nil && !IsRedisFull(err) {
		// Not known which copies were made: the journals stay, and the
		// next page settles them.
		return r, after, false, fmt.Errorf("move dead messages: copy to the target: %w", err)
	}
	if o.AtStep != nil {
		o.AtStep(StepMoveDeadCopied)
	}
	byShard := map[int][]int{}
	made := make([]bool, len(msgs))
	var full error
	for j, x := range res {
		switch {
		case x.Err == nil, errors.Is(x.Err, ErrDuplicate):
			byShard[from[j].Shard] = append(byShard[from[j].Shard], j)
			made[j] = x.Err == nil
		case IsRedisFull(x.Err):
			full = errors.Join(full, x.Err)
		default:
			r.Left = append(r.Left, fmt.Errorf("move dead %q in shard %d: the target refused it: %w", from[j].ID, from[j].Shard, x.Err))
		}
	}
	var calls []call
	var order []int
	for sh, js := range byShard {
		ks := ShardKeys(s.ns, sh)
		args := make([]any, 0, 2*len(js))
		for _, j := range js {
			args = append(args, from[j].ID, from[j].Since.UnixMilli())
		}
		calls, order = append(calls, call{moveDeadOutScript, []string{ks.Dead, ks.Reason, ks.Msg, ks.Attempts}, args}), append(order, sh)
	}
	for c, cmd := range s.run(ctx, calls...) {
		js := byShard[order[c]]
		sts, err := cmd.Int64Slice()
		if err == nil && len(sts) != len(js) {
			err = fmt.Errorf("unexpected reply of %d statuses for %d messages", len(sts), len(js))
		}
		if err != nil {
			return r, after, false, fmt.Errorf("move dead messages: remove from the source: %w", err)
		}
		for k, j := range js {
			switch {
			case sts[k] == 1 && made[j]:
				r.Moved++
			case sts[k] == 1:
				r.There++
			default:
				r.Changed++
				if made[j] {
					if err := to.Purge(ctx, from[j].ID); err != nil && !errors.Is(err, ErrNotFound) {
						return r, after, false, fmt.Errorf("move dead %q: changed on the source meanwhile; its copy: %w", from[j].ID, err)
					}
				}
			}
		}
	}
	if err := s.endDeadJournals(ctx, slices.Collect(maps.Keys(journal))); err != nil {
		return r, after, false, err
	}
	if full != nil {
		return r, after, false, fmt.Errorf("move dead messages: the target is full, what it refused stays on the source: %w", full)
	}
	return r, next, more, nil
}

// SettleDeadJournals ends the journals of dead messages that a move cut
// short left in shards [0, shards): each id is dead on both sides, or was
// redriven or purged on the source after its copy. The copy of one no
// longer dead on the source since the time read (redriven, purged, or
// dead again since) is purged from the target, and counted as changed;
// one still as read is left to the next page, which finds it on the
// target and removes the source's. A move runs it before any message, so
// that a message redriven on the source goes over as scheduled rather than
// meeting its dead copy on the target (which would take it for a
// duplicate). One round trip when there is no journal.
func (s *Store) SettleDeadJournals(ctx context.Context, shards int, to *Producer) (StateMoveResult, error) {
	var r StateMoveResult
	gets := make([]*redis.StringCmd, shards)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			gets[i] = p.Get(ctx, MoveDeadJournalKey(s.ns, i))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return r, fmt.Errorf("move dead messages: read the journals: %w", err)
	}
	var ended []int
	for i, g := range gets {
		v, err := g.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return r, fmt.Errorf("move dead messages: read shard %d's journal: %w", i, err)
		}
		var ids []string
		var since []int64
		for _, line := range strings.Split(v, "\n") {
			id, ms, ok := strings.Cut(line, "\t")
			n, err := strconv.ParseInt(ms, 10, 64)
			if !ok || err != nil {
				return r, fmt.Errorf("move dead messages: shard %d's journal %s: line %q is not <id>\\t<since ms>", i, MoveDeadJournalKey(s.ns, i), line)
			}
			ids, since = append(ids, id), append(since, n)
		}
		now, err := s.rdb.ZMScore(ctx, ShardKeys(s.ns, i).Dead, ids...).Result()
		if err != nil {
			return r, fmt.Errorf("move dead messages: shard %d's journal: read its dead set: %w", i, err)
		}
		for j, id := range ids {
			if int64(now[j]) == since[j] {
				continue // still as copied: the next page moves it
			}
			if err := to.Purge(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
				return r, fmt.Errorf("move dead %q: changed on the source after a killed move copied it; its copy: %w", id, err)
			}
			r.Changed++
		}
		ended = append(ended, i)
	}
	return r, s.endDeadJournals(ctx, ended)
}

// endDeadJournals deletes the dead journals of shards.
func (s *Store) endDeadJournals(ctx context.Context, shards []int) error {
	if len(shards) == 0 {
		return nil
	}
	keys := make([]string, len(shards))
	for k, i := range shards {
		keys[k] = MoveDeadJournalKey(s.ns, i)
	}
	// One DEL a key: in Redis Cluster each shard's journal is in its own slot.
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, k)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("move dead messages: end the journals: %w", err)
	}
	return nil
}

// readDead reads the envelope and deliveries of each dead message of page
// and calls fn with its export line (appendDeadLine), or why it has none.
func (s *Store) readDead(ctx context.Context, page []Dead, fn func(d Dead, line []byte, err error)) error {
	envs := make([]*redis.StringCmd, len(page))
	metas := make([]*redis.StringCmd, len(page))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, d := range page {
			ks := ShardKeys(s.ns, d.Shard)
			envs[j], metas[j] = p.HGet(ctx, ks.Msg, d.ID), p.HGet(ctx, ks.Attempts, d.ID)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read dead messages: %w", err)
	}
	for j, d := range page {
		raw, err := envs[j].Bytes()
		var env Envelope
		if err == nil {
			env, err = DecodeEnvelope(raw)
		}
		if err != nil {
			fn(d, nil, fmt.Errorf("%w: %v", ErrCorrupt, err))
			continue
		}
		a, _, _ := strings.Cut(metas[j].Val(), ":")
		attempts, _ := strconv.Atoi(a)
		line, err := appendDeadLine(nil, d, attempts, &env)
		fn(d, line, err)
	}
	return nil
}

// MoveJournalAge returns how long the oldest journal of a move in shards
// [0, m) has waited (0: none): a message batch, schedule or page of dead
// messages a mover copied and did not finish. A running move's journals
// live for the moments of a batch; one that ages was left by a mover cut
// short, and its batch is on both sides until the move runs again. One
// pipelined round trip, three PTTLs a shard.
func (s *Store) MoveJournalAge(ctx context.Context, m int) (time.Duration, error) {
	cmds := make([]*redis.DurationCmd, 0, 3*m)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range m {
			cmds = append(cmds, p.PTTL(ctx, MoveJournalKey(s.ns, i)), p.PTTL(ctx, MoveScheduleJournalKey(s.ns, i)), p.PTTL(ctx, MoveDeadJournalKey(s.ns, i)))
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("move journals: %w", err)
	}
	var oldest time.Duration
	for _, c := range cmds {
		if left := c.Val(); left > 0 { // -2: none, -1: no TTL (not the move's)
			oldest = max(oldest, moveJournalTTL-left)
		}
	}
	return oldest, nil
}
