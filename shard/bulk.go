package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard/scope"
)

// A bulk cancel walks the shards a page at a time (List: pages of at
// most 500 entries) and cancels what its filter selects in script calls of
// at most maxCancelMany ids, so no call does more work than a claim. Its
// count lives in Redis, beside the messages it cancels: each call adds the
// messages it cancelled to a counter of its shard (BulkKey), in the same
// script, so a caller that dies between two calls loses no count and
// cannot count a message twice. Running the same filter again (after a
// crash, or from another terminal) goes on with the same counters: the
// messages already cancelled are gone, the walk finds the rest, and the
// total is right. The job's record (BulkJobKey) says what it is and
// whether it finished, for any process to read (BulkStatus: the HTTP API
// answers from it whichever instance runs the job); once done, the next
// run of that filter starts a new count.
//
// Messages that flow control holds back (a limited or paused topic's due
// messages, in their topic's held set of the shard) are selected too: after
// each shard's due set, the walk reads the held sets of the topics under
// flow control that the filter can match, in (due, id) order a page at a
// time (heldPageScript), so pausing a wrong campaign and then cancelling
// it by topic or prefix cancels what the pause held back.

// BulkFilter selects the scheduled messages a bulk cancel acts on: every
// condition given must hold. One that selects everything must say so
// (All).
type BulkFilter struct {
	Topic, Prefix string
	// From and To bound the due time to [From, To) (zero: open), as
	// BrowseQuery's do.
	From, To time.Time
	All      bool
	// Within, when set, limits the job to the messages of these scopes
	// (a caller limited to them: package scope), whatever the rest
	// selects; it is part of the job's name.
	Within []*scope.Scope
}

// Validate checks the filter: a window that ends before it starts, or no
// condition at all without All, is an *InvalidError naming the field.
func (f BulkFilter) Validate() error {
	narrow := f.Topic != "" || f.Prefix != "" || !f.From.IsZero() || !f.To.IsZero()
	switch {
	case !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From):
		return invalid("to", "%s is before from (%s)", f.To.UTC().Format(time.RFC3339Nano), f.From.UTC().Format(time.RFC3339Nano))
	case !narrow && !f.All:
		return invalid("filter", "it selects every scheduled message: give a topic, an id prefix or a due window, or say all")
	case narrow && f.All:
		return invalid("filter", "all goes alone: it selects every scheduled message")
	}
	return nil
}

// String is the filter for people and audit logs, e.g.
// `topic="order.cancel" prefix="campaign-7-" due in [2030-01-01T09:00:00Z, open)`.
func (f BulkFilter) String() string {
	within := ""
	if len(f.Within) > 0 {
		names := make([]string, len(f.Within))
		for j, sc := range f.Within {
			names[j] = sc.Name
		}
		within = " within=" + strings.Join(names, ",")
	}
	if f.All {
		return "all" + within
	}
	var parts []string
	if f.Topic != "" {
		parts = append(parts, "topic="+strconv.Quote(f.Topic))
	}
	if f.Prefix != "" {
		parts = append(parts, "prefix="+strconv.Quote(f.Prefix))
	}
	if !f.From.IsZero() || !f.To.IsZero() {
		end := func(t time.Time) string {
			if t.IsZero() {
				return "open"
			}
			return t.UTC().Format(time.RFC3339Nano)
		}
		parts = append(parts, fmt.Sprintf("due in [%s, %s)", end(f.From), end(f.To)))
	}
	return strings.Join(parts, " ") + within
}

// inScope reports whether a message of the held set of topic, id, is in
// one of f.Within (every one is, without Within).
func (f BulkFilter) inScope(id, topic string) bool {
	return withinAny(f.Within, scope.Target{ID: id, Topic: topic})
}

// withinAny reports whether t is in one of scopes (true for none).
func withinAny(scopes []*scope.Scope, t scope.Target) bool {
	if len(scopes) == 0 {
		return true
	}
	for _, sc := range scopes {
		if sc.Contains(t) {
			return true
		}
	}
	return false
}

// Job names the bulk cancel of this filter: its counters and its record
// (BulkStatus).
func (f BulkFilter) Job() string {
	h := sha256.Sum256([]byte("cancel\x00" + f.String()))
	return hex.EncodeToString(h[:8])
}

func (f BulkFilter) query(limit int) BrowseQuery {
	return BrowseQuery{Shard: -1, Topic: f.Topic, Prefix: f.Prefix, From: f.From, To: f.To, Within: f.Within, Limit: limit, MaxScan: 500}
}

// BulkKey is the counter HASH of bulk job in shard i of ns (done: the
// messages it cancelled or rescheduled there). It expires a day after its
// last write.
func BulkKey(ns string, i int, job string) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:bulk:" + job
}

// BulkJobKey is the record of bulk cancel job of ns, a HASH: filter (its
// text), matched (what the dry run before it counted, when the caller
// gave it), state (running, done), action (cancel, reschedule) and, for a
// reschedule, due (the unix ms it moves messages to). It expires a day
// after its last write.
func BulkJobKey(ns, job string) string { return "delayq:{" + ns + "}:bulk:" + job }

// BulkJob is a bulk job as any process can read it from Redis.
type BulkJob struct {
	ID     string
	Action string // "cancel" or "reschedule"
	Filter string
	// DueMs is the time a reschedule moves messages to (unix ms).
	DueMs int64
	// State is "running" (started and not finished: under way, or its
	// caller died and the same filter must be run again), "done", or ""
	// (no such job, or expired).
	State   string
	Matched int // the count before it started; 0 when not given
	Done    int // cancelled (or rescheduled) so far
}

// BulkStatus reads job's record and its counters over shards [0, shards).
func (s *Store) BulkStatus(ctx context.Context, shards int, job string) (BulkJob, error) {
	j := BulkJob{ID: job}
	rec, err := s.rdb.HGetAll(ctx, BulkJobKey(s.ns, job)).Result()
	if err != nil {
		return j, fmt.Errorf("bulk job %s: %w", job, err)
	}
	j.Action, j.Filter, j.State = rec["action"], rec["filter"], rec["state"]
	j.Matched, _ = strconv.Atoi(rec["matched"])
	j.DueMs, _ = strconv.ParseInt(rec["due"], 10, 64)
	if j.State == "" {
		return j, nil
	}
	j.Done, err = s.bulkTotal(ctx, shards, job)
	return j, err
}

// bulkTTL is how long a bulk cancel's counters outlive its last write.
const bulkTTL = 24 * time.Hour

// BulkProgress is where a bulk cancel stands.
type BulkProgress struct {
	// Done counts the messages the job cancelled (or rescheduled), in this
	// run and in earlier runs of the same job that did not finish.
	Done int
	// Before is the part of Done that earlier runs did.
	Before int
	// InFlight counts messages the filter selected that were being
	// published and so could not be cancelled (this run only).
	InFlight int
	// Scanned counts the entries this run read.
	Scanned int
}

// CountMatching is a bulk cancel's dry run: how many scheduled messages
// of shards [0, shards) f selects now (pages of at most 500 entries), held
// ones included.
func (s *Store) CountMatching(ctx context.Context, shards int, f BulkFilter) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	n := 0
	q := f.query(10000)
	for {
		page, next, err := s.Browse(ctx, shards, q)
		if err != nil {
			return n, err
		}
		n += len(page)
		if next == nil {
			break
		}
		q.After = *next
	}
	apart, err := s.apartSets(ctx, f)
	if err != nil {
		return n, err
	}
	for _, a := range apart {
		for i := range shards {
			err := s.walkSet(ctx, i, a.key(s.ns, i), a.topic, f, func(ids []string) ([]bool, error) {
				n += len(ids)
				stayed := make([]bool, len(ids))
				for k := range stayed {
					stayed[k] = true // counted, not moved
				}
				return stayed, nil
			})
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// BulkCancel cancels the scheduled messages of shards [0, shards) that f
// selects, and calls progress (if not nil) after each page. matched, when
// above 0, is what a dry run counted just before, kept in the job's record
// for whoever follows it (BulkStatus). A run that stops early (an error,
// ctx, a crash) can be started again with the same filter: it goes on,
// and its result counts what the earlier run cancelled too. Messages in
// flight are left alone and counted.
func (s *Store) BulkCancel(ctx context.Context, shards int, f BulkFilter, matched int, progress func(BulkProgress)) (BulkProgress, error) {
	if err := f.Validate(); err != nil {
		return BulkProgress{}, err
	}
	return s.bulkRun(ctx, shards, f, f.Job(), matched, []any{"action", "cancel"}, progress, s.farBulkCancel, func(ctx context.Context, i int, job, set string, ids []string) ([]int64, error) {
		ks := ShardKeys(s.ns, i)
		if set == "" { // the same script: it removes the ids from the set it is given
			set = ks.Due
		}
		return s.bulkShard(ctx, i, bulkCancelScript, []string{set, ks.Msg, ks.Inflight, ks.Attempts, BulkKey(s.ns, i, job)},
			[]any{bulkTTL.Milliseconds()}, ids)
	})
}

// BulkReschedule makes the scheduled messages of shards [0, shards) that
// f selects due at one time: at, or (at zero) delay after the Redis clock
// when the job first started. That time is kept in the job's record, so a
// run stopped early and started again with the same filter and the same
// at or delay goes on to the same time and counts what the earlier run
// moved; a message already due at that time is not moved or counted
// again. Otherwise as BulkCancel.
func (s *Store) BulkReschedule(ctx context.Context, shards int, f BulkFilter, delay time.Duration, at time.Time, matched int,
	progress func(BulkProgress)) (BulkProgress, error) {
	if err := f.Validate(); err != nil {
		return BulkProgress{}, err
	}
	mode, ms, err := validateWhen(delay, at)
	if err != nil {
		return BulkProgress{}, err
	}
	job := f.rescheduleJob(mode, ms)
	rec, err := s.rdb.HMGet(ctx, BulkJobKey(s.ns, job), "state", "due").Result()
	if err != nil {
		return BulkProgress{}, fmt.Errorf("bulk reschedule: %w", err)
	}
	state, _ := rec[0].(string)
	dueText, _ := rec[1].(string)
	due, err := strconv.ParseInt(dueText, 10, 64)
	if state == "" || state == "done" || err != nil { // a new job: fix its time now
		due = ms
		if mode == "delay" {
			now, err := s.RedisNow(ctx)
			if err != nil {
				return BulkProgress{}, err
			}
			due = now + ms
		}
	}
	return s.bulkRun(ctx, shards, f, job, matched, []any{"action", "reschedule", "due", due}, progress, s.farBulkReschedule(due), func(ctx context.Context, i int, job, set string, ids []string) ([]int64, error) {
		ks := ShardKeys(s.ns, i)
		if set != "" {
			return s.bulkShard(ctx, i, bulkRescheduleHeldScript, []string{set, ks.Due, ks.Inflight, ks.Attempts,
				BulkKey(s.ns, i, job)}, []any{bulkTTL.Milliseconds(), due, s.wake, i}, ids)
		}
		return s.bulkShard(ctx, i, bulkRescheduleScript, []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, BulkKey(s.ns, i, job)},
			[]any{bulkTTL.Milliseconds(), due, s.wake, i}, ids)
	})
}

// RescheduleJob names the bulk reschedule of this filter to at, or delay
// after its start (as BulkReschedule takes them).
func (f BulkFilter) RescheduleJob(delay time.Duration, at time.Time) (string, error) {
	mode, ms, err := validateWhen(delay, at)
	if err != nil {
		return "", err
	}
	return f.rescheduleJob(mode, ms), nil
}

// rescheduleJob names a bulk reschedule: the filter and the time asked
// for (the delay itself, not the time it gave).
func (f BulkFilter) rescheduleJob(mode string, ms int64) string {
	h := sha256.Sum256([]byte("reschedule\x00" + f.String() + "\x00" + mode + "\x00" + strconv.FormatInt(ms, 10)))
	return hex.EncodeToString(h[:8])
}

// bulkAct acts on ids of shard i for job, found in the due set (set "")
// or in the set of key set (a topic's held set, a class's backlog), and
// returns one status per id: 1 done (counted), 0 not scheduled there, -1
// in flight (left alone), 2 already as asked (left, not counted), 3 done
// and left where it is (counted).
type bulkAct func(ctx context.Context, i int, job, set string, ids []string) ([]int64, error)

// bulkRun runs a bulk job over every shard: its record, its counts kept
// from an unfinished earlier run, the walks (far tier, due set, held
// sets), and the done mark.
func (s *Store) bulkRun(ctx context.Context, shards int, f BulkFilter, job string, matched int, extra []any,
	progress func(BulkProgress), far farBulkAct, act bulkAct) (BulkProgress, error) {
	var p BulkProgress
	state, err := s.rdb.HGet(ctx, BulkJobKey(s.ns, job), "state").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return p, fmt.Errorf("bulk job: %w", err)
	}
	if state == "done" { // a finished run of this job: count anew
		if err := s.bulkReset(ctx, shards, job); err != nil {
			return p, err
		}
	}
	rec := append([]any{"filter", f.String(), "state", "running"}, extra...)
	if matched > 0 {
		rec = append(rec, "matched", matched)
	}
	if _, err := s.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.HSet(ctx, BulkJobKey(s.ns, job), rec...)
		tx.PExpire(ctx, BulkJobKey(s.ns, job), bulkTTL)
		return nil
	}); err != nil {
		return p, fmt.Errorf("bulk job: record it: %w", err)
	}
	if p.Before, err = s.bulkTotal(ctx, shards, job); err != nil {
		return p, err
	}
	p.Done = p.Before
	apart, err := s.apartSets(ctx, f)
	if err != nil {
		return p, err
	}
	for i := range shards {
		// The far tier first: promotion moves messages from far to near
		// only, so one it promotes meanwhile is met by the near walk.
		if err := s.bulkWalkFar(ctx, i, job, f, &p, progress, far); err != nil {
			return p, err
		}
		if err := s.bulkWalk(ctx, i, job, f, &p, progress, act); err != nil {
			return p, err
		}
		for _, a := range apart {
			if err := s.bulkWalkSet(ctx, i, a.key(s.ns, i), a.topic, job, f, &p, progress, act); err != nil {
				return p, err
			}
		}
	}
	if _, err := s.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.HSet(ctx, BulkJobKey(s.ns, job), "state", "done")
		tx.PExpire(ctx, BulkJobKey(s.ns, job), bulkTTL)
		return nil
	}); err != nil {
		return p, fmt.Errorf("bulk job: mark done: %w", err)
	}
	total, err := s.bulkTotal(ctx, shards, job)
	if err != nil {
		return p, err
	}
	p.Done = total // with what a concurrent run of the same job did
	return p, nil
}

// bulkWalk acts on what f selects in shard i, a page of List at a time.
// The next page starts after the last entry the walk left where it was:
// after one it cancelled or moved, List would start over at that entry's
// due time, and read again what the walk already passed.
func (s *Store) bulkWalk(ctx context.Context, i int, job string, f BulkFilter, p *BulkProgress, progress func(BulkProgress), act bulkAct) error {
	q := f.query(500)
	after := ListCursor{}
	if !f.From.IsZero() {
		after.DueMs = f.From.UnixMilli()
	}
	for {
		entries, _, more, err := s.List(ctx, i, after, 500)
		if err != nil {
			return fmt.Errorf("bulk job: %w", err)
		}
		p.Scanned += len(entries)
		var ids []string
		var at []int // index in entries of each id
		for j := range entries {
			l := &entries[j]
			if !f.To.IsZero() && !l.Due.Before(f.To) {
				more = false // due order: the rest of the shard is later
				entries = entries[:j]
				break
			}
			if q.matches(l) {
				ids, at = append(ids, l.ID), append(at, j)
			}
		}
		stayed := make([]bool, len(entries))
		for j := range stayed {
			stayed[j] = true
		}
		if len(ids) > 0 {
			sts, err := act(ctx, i, job, "", ids)
			for k, st := range sts {
				switch st {
				case 1:
					p.Done++
					stayed[at[k]] = false
				case 3: // done, and still in the set (the quotas' adoption)
					p.Done++
				case 0:
					stayed[at[k]] = false
				case -1:
					p.InFlight++
				}
			}
			if err != nil {
				return err
			}
		}
		kept := after
		for j := len(entries) - 1; j >= 0; j-- {
			if stayed[j] {
				kept = ListCursor{ID: entries[j].ID, DueMs: entries[j].Due.UnixMilli()}
				break
			}
		}
		if progress != nil {
			progress(*p)
		}
		if !more {
			return nil
		}
		after = kept
	}
}

// bulkShard runs script over ids of shard i in calls of at most
// maxCancelMany, with keys (all in the shard's slot), then args before the
// ids; it returns one status per id.
func (s *Store) bulkShard(ctx context.Context, i int, script *redis.Script, keys []string, args []any, ids []string) ([]int64, error) {
	var calls []call
	for lo := 0; lo < len(ids); lo += maxCancelMany {
		a := append([]any{}, args...)
		for _, id := range ids[lo:min(lo+maxCancelMany, len(ids))] {
			a = append(a, id)
		}
		calls = append(calls, call{script, keys, a})
	}
	var out []int64
	for _, cmd := range s.run(ctx, calls...) {
		v, err := cmd.Int64Slice()
		if err != nil {
			return out, fmt.Errorf("bulk job in shard %d: %w", i, err)
		}
		out = append(out, v...)
	}
	return out, nil
}

// bulkTotal sums job's counters over the shards (one pipeline).
func (s *Store) bulkTotal(ctx context.Context, shards int, job string) (int, error) {
	cmds := make([]*redis.StringCmd, shards)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGet(ctx, BulkKey(s.ns, i, job), "done")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("bulk cancel: read counts: %w", err)
	}
	total := 0
	for _, c := range cmds {
		n, _ := strconv.Atoi(c.Val())
		total += n
	}
	return total, nil
}

// bulkReset deletes job's counters and its done mark.
func (s *Store) bulkReset(ctx context.Context, shards int, job string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range shards {
			p.Del(ctx, BulkKey(s.ns, i, job))
		}
		p.Del(ctx, BulkJobKey(s.ns, job))
		return nil
	})
	if err != nil {
		return fmt.Errorf("bulk cancel: reset counts: %w", err)
	}
	return nil
}

// apartSet is where messages wait apart from the due set: a topic's held
// sets, or (class set) a class's backlogs.
type apartSet struct{ topic, class string }

func (a apartSet) key(ns string, i int) string {
	if a.class != "" {
		return BacklogKey(ns, i, a.class)
	}
	return HeldKey(ns, i, a.topic)
}

// apartSets are the sets apart that f can select from: the held sets of
// the topics with a flow, and every class's backlog (whose topics a walk
// reads from the envelopes).
func (s *Store) apartSets(ctx context.Context, f BulkFilter) ([]apartSet, error) {
	held, err := s.heldTopics(ctx, f)
	if err != nil {
		return nil, err
	}
	classes, err := s.backlogClasses(ctx)
	if err != nil {
		return nil, fmt.Errorf("bulk job: %w", err)
	}
	out := make([]apartSet, 0, len(held)+len(classes))
	for _, t := range held {
		out = append(out, apartSet{topic: t})
	}
	for _, c := range classes {
		out = append(out, apartSet{class: c})
	}
	return out, nil
}

// heldTopics are the topics with a flow (held sets) that f can select.
// A topic's name is read even when its flow's value cannot be.
func (s *Store) heldTopics(ctx context.Context, f BulkFilter) ([]string, error) {
	topics, err := s.rdb.HKeys(ctx, FlowKey(s.ns)).Result()
	if err != nil {
		return nil, fmt.Errorf("bulk job: read the flows: %w", err)
	}
	slices.Sort(topics)
	if f.Topic != "" {
		topics = slices.DeleteFunc(topics, func(t string) bool { return t != f.Topic })
	}
	if len(f.Within) > 0 {
		topics = slices.DeleteFunc(topics, func(t string) bool {
			return !slices.ContainsFunc(f.Within, func(sc *scope.Scope) bool { return sc.HasTopic(t) })
		})
	}
	return topics, nil
}

// bulkWalkSet acts on what f selects in the set key of shard i: the
// held set of topic, or (topic "") a class's backlog.
func (s *Store) bulkWalkSet(ctx context.Context, i int, key, topic, job string, f BulkFilter, p *BulkProgress, progress func(BulkProgress), act bulkAct) error {
	return s.walkSet(ctx, i, key, topic, f, func(ids []string) ([]bool, error) {
		stayed := make([]bool, len(ids))
		sts, err := act(ctx, i, job, key, ids)
		for k := range ids {
			stayed[k] = true // unless the reply says otherwise
			if k < len(sts) {
				stayed[k] = sts[k] == 2 || sts[k] == 3 || sts[k] == -1
				switch sts[k] {
				case 1, 3:
					p.Done++
				case -1:
					p.InFlight++
				}
			}
		}
		if progress != nil {
			progress(*p)
		}
		return stayed, err
	})
}

// walkSet calls do with the ids f selects in the set key of shard i (the
// held set of topic; or, topic "", a class's backlog, whose entries'
// topics are read from their envelopes), a page of at most 500 entries at
// a time in (due, id) order; do says which of them stayed in the set, so
// the next page starts after the last entry that stayed.
func (s *Store) walkSet(ctx context.Context, i int, key, topic string, f BulkFilter, do func(ids []string) ([]bool, error)) error {
	curID, curScore := "", "-inf"
	if !f.From.IsZero() {
		curScore = strconv.FormatInt(f.From.UnixMilli(), 10)
	}
	for {
		v, err := s.run1(ctx, heldPageScript, []string{key}, curID, curScore, 500).StringSlice()
		if err != nil {
			return fmt.Errorf("bulk job: set %s: %w", key, err)
		}
		last := len(v) < 1000
		type entry struct {
			id, score string
			match     int // index in ids, or -1
		}
		var page []entry
		var ids []string
		for j := 0; j+1 < len(v); j += 2 {
			if ms, err := strconv.ParseInt(v[j+1], 10, 64); err == nil && !f.To.IsZero() && ms >= f.To.UnixMilli() {
				last = true // due order: the rest is later
				break
			}
			page = append(page, entry{id: v[j], score: v[j+1], match: -1})
		}
		topics := make([]string, len(page))
		if topic == "" && (f.Topic != "" || len(f.Within) > 0) { // a backlog of many topics: read them
			all := make([]string, len(page))
			for j, e := range page {
				all[j] = e.id
			}
			if topics, err = s.topicsOf(ctx, i, all); err != nil {
				return fmt.Errorf("bulk job: set %s: %w", key, err)
			}
		}
		for j := range page {
			e := &page[j]
			t := topic
			if t == "" {
				t = topics[j]
				if f.Topic != "" && t != f.Topic {
					continue
				}
			}
			if strings.HasPrefix(e.id, f.Prefix) && f.inScope(e.id, t) {
				e.match = len(ids)
				ids = append(ids, e.id)
			}
		}
		var stayed []bool
		if len(ids) > 0 {
			if stayed, err = do(ids); err != nil {
				return err
			}
		}
		for _, e := range page {
			if e.match < 0 || stayed[e.match] {
				curID, curScore = e.id, e.score
			}
		}
		if last {
			return nil
		}
	}
}

// topicsOf reads the topics of messages ids of shard i from their
// envelopes ("" for one gone or unreadable).
func (s *Store) topicsOf(ctx context.Context, i int, ids []string) ([]string, error) {
	out := make([]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	vs, err := s.rdb.HMGet(ctx, ShardKeys(s.ns, i).Msg, ids...).Result()
	if err != nil {
		return nil, err
	}
	for j, v := range vs {
		if raw, ok := v.(string); ok {
			if env, err := DecodeEnvelope([]byte(raw)); err == nil {
				out[j] = env.Topic
			}
		}
	}
	return out, nil
}
