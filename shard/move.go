package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the live move's batch (see "Moving to another Redis" in
// the package doc): copy a page of a source shard to the target, then
// remove from the source what is still as it was copied.

// MoveResult is what one MovePage did.
type MoveResult struct {
	Read int // messages of the page (due later than the margin)
	// Moved were copied to the target and removed from the source.
	Moved int
	// There were on the target already (a producer that writes to both
	// sides, or a run of the move cut short after its copy), or cancelled
	// there ahead of their arrival (a tombstone of CancelAhead, as the
	// ingress leaves): removed from the source, the target's state kept.
	There int
	// Changed were cancelled, rescheduled, claimed or replaced on the
	// source while their batch was under way: left as the change left
	// them, the copy this batch made cancelled (a rescheduled one is
	// copied by a later pass).
	Changed int
	// Occurrences are occurrences of recurring schedules, left to the
	// source's fleet: their schedules make them (MoveSchedules).
	Occurrences int
	// Left are not moved, each with why: the target refused the copy
	// (invalid there, over a quota, at capacity), or the envelope cannot
	// be read or is an occurrence of a recurring schedule.
	Left []error
}

// MoveOptions are a move's settings besides its target.
type MoveOptions struct {
	// Keep: what falls due within it of the Redis clock stays on the
	// source, for its fleet to publish.
	Keep time.Duration
	// AtStep, when set, is called with StepMoveCopied after a batch's copy
	// and before its removal from the source: the crash tests' hook.
	AtStep func(step string)
	// Pace, when set, is called before each batch of up to n messages is
	// read, and may wait (delayq move --rate); its error stops the move
	// there. A batch of the due set is read after the wait, so a wait
	// never brings what it copies within Keep.
	Pace func(ctx context.Context, n int) error
}

// StepMoveCopied is the step between a batch's copy to the target and its
// removal from the source (MoveOptions.AtStep).
const StepMoveCopied = "copied"

// MoveJournalKey is shard i's journal of the move: the ids of the batch
// under way (a STRING, one id a line), written before the batch is copied
// and deleted once the source has given it up, in the shard's slot.
func MoveJournalKey(ns string, i int) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:movejournal"
}

// moveJournalTTL is how long a journal of a batch cut short waits for a
// rerun; after it, what it named is moved (or not) by the passes alone.
const moveJournalTTL = 24 * time.Hour

// MovePage moves one page of shard i of s to the producer to (another
// Redis, or another namespace): up to n messages due later than o.Keep
// after the Redis clock, starting after cursor. It copies them (deduped by
// id: an id the target has stays as the target has it), then removes from
// the source, in one script call, each that is still exactly as read;
// one changed meanwhile stays, and the copy made of it is cancelled. So,
// as long as no message of the page falls due before the call returns
// (Keep is seconds to minutes, a call milliseconds), a message is live on
// one side only: the source until the removal, the target after it.
//
// The batch's ids are in the shard's journal (MoveJournalKey) from before
// the copy until after the removal. A move killed in between left that
// batch on both sides; the next MovePage of the shard finishes the journal
// first, whatever the ids' due times now: each id still scheduled on the
// source is copied again over the target's copy (rescheduled meanwhile, it
// goes at its new time) and removed from the source; the copy of each id
// gone from the source since (cancelled there, or published by its fleet)
// is cancelled on the target. So the batch is published by one side only
// as long as the rerun comes before it falls due.
//
// A target at its memory limit refuses copies: the rest of the batch is
// moved, the refused messages stay on the source, and the error wraps
// ErrRedisFull, for the move to stop there. It returns where the next page
// starts, and whether there may be more.
func (s *Store) MovePage(ctx context.Context, i int, after ListCursor, n int, to *Producer, o MoveOptions) (MoveResult, ListCursor, bool, error) {
	var r MoveResult
	if err := s.finishJournal(ctx, i, to, o, &r); err != nil {
		return r, after, false, err
	}
	if o.Pace != nil {
		if err := o.Pace(ctx, n); err != nil {
			return r, after, false, err
		}
	}
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return r, after, false, fmt.Errorf("move shard %d: %w", i, err)
	}
	if floor := nowMs + o.Keep.Milliseconds(); after.DueMs <= floor {
		after = ListCursor{DueMs: floor + 1} // what falls due sooner is the source's to publish
	}
	page, next, more, err := s.List(ctx, i, after, min(max(n, 1), maxListPage))
	if err != nil || len(page) == 0 {
		return r, after, false, err
	}
	r.Read += len(page)
	if err := s.moveListed(ctx, i, page, to, o, &r, false); err != nil {
		return r, after, false, err
	}
	return r, next, more, nil
}

// finishJournal moves what shard i's journal names, if it has one: a batch
// a killed move left on both sides.
func (s *Store) finishJournal(ctx context.Context, i int, to *Producer, o MoveOptions, r *MoveResult) error {
	v, err := s.rdb.Get(ctx, MoveJournalKey(s.ns, i)).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("move shard %d: read its journal: %w", i, err)
	}
	ids := strings.Split(v, "\n")
	ks := ShardKeys(s.ns, i)
	pipe := s.rdb.Pipeline()
	dues := pipe.ZMScore(ctx, ks.Due, ids...)
	envs := pipe.HMGet(ctx, ks.Msg, ids...)
	metas := pipe.HMGet(ctx, ks.Attempts, ids...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("move shard %d: read its journal's messages: %w", i, err)
	}
	var page []Listed
	for j, id := range ids {
		raw, ok := envs.Val()[j].(string)
		if dues.Val()[j] == 0 || !ok {
			var info Info
			if far, err := s.inspectFar(ctx, i, id, &info); err != nil {
				return fmt.Errorf("move shard %d: look for %q in its far tier: %w", i, id, err)
			} else if far { // still far here: copied again, removed as read now
				l := Listed{ID: id, Shard: i, Due: info.At, Far: true, raw: info.farEnvelope, farEntry: info.farEntry,
					Envelope: info.Envelope, Corrupt: info.Corrupt}
				if m, ok := metas.Val()[j].(string); ok {
					a, _, _ := strings.Cut(m, ":")
					l.Attempts, _ = strconv.Atoi(a)
				}
				page = append(page, l)
				continue
			}
			// No longer scheduled here (cancelled, claimed by the source's
			// fleet): the copy the killed batch made must go, else the
			// target publishes it too.
			if err := to.Cancel(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
				r.Left = append(r.Left, fmt.Errorf("move %q in shard %d: gone from the source after a killed batch copied it; its copy: %w", id, i, err))
			} else if err == nil {
				r.Changed++
			}
			continue
		}
		l := Listed{ID: id, Shard: i, Due: time.UnixMilli(int64(dues.Val()[j])), raw: []byte(raw)}
		if env, err := DecodeEnvelope(l.raw); err != nil {
			l.Corrupt = err
		} else {
			l.Envelope = &env
		}
		if m, ok := metas.Val()[j].(string); ok {
			a, _, _ := strings.Cut(m, ":")
			l.Attempts, _ = strconv.Atoi(a)
		}
		page = append(page, l)
	}
	r.Read += len(page)
	if len(page) > 0 {
		// Replacing the target's copy: the killed batch's may be of before
		// a reschedule on the source since.
		if err := s.moveListed(ctx, i, page, to, o, r, true); err != nil {
			return err
		}
	}
	if err := s.rdb.Del(ctx, MoveJournalKey(s.ns, i)).Err(); err != nil {
		return fmt.Errorf("move shard %d: end its journal: %w", i, err)
	}
	return nil
}

// moveListed moves page, read from shard i: journal, copy (with upsert,
// replacing what the target has), removal of what is unchanged, cancel of
// the copies of what changed, journal ended.
func (s *Store) moveListed(ctx context.Context, i int, page []Listed, to *Producer, o MoveOptions, r *MoveResult, upsert bool) error {
	msgs := make([]Message, 0, len(page))
	from := make([]*Listed, 0, len(page))
	for j := range page {
		l := &page[j]
		if l.Envelope == nil {
			r.Left = append(r.Left, fmt.Errorf("move %q in shard %d: %w", l.ID, i, l.Corrupt))
			continue
		}
		line, err := AppendLine(nil, l.ID, l.Due.UnixMilli(), l.Attempts, l.Envelope)
		var m Message
		if err == nil {
			m, err = ParseLine(line)
		}
		if errors.Is(err, ErrOccurrence) {
			r.Occurrences++ // its schedule's: published by the source's fleet
			continue
		}
		if err != nil {
			r.Left = append(r.Left, fmt.Errorf("move %q in shard %d: %w", l.ID, i, err))
			continue
		}
		msgs, from = append(msgs, m), append(from, l)
	}
	if len(msgs) == 0 {
		return nil
	}
	ids := make([]string, len(from))
	for j, l := range from {
		ids[j] = l.ID
	}
	if err := s.rdb.Set(ctx, MoveJournalKey(s.ns, i), strings.Join(ids, "\n"), moveJournalTTL).Err(); err != nil {
		return fmt.Errorf("move shard %d: write its journal: %w", i, err)
	}
	copyBatch := to.EnqueueBatch
	if upsert {
		copyBatch = to.UpsertBatch
	}
	res, err := copyBatch(ctx, msgs)
	if err != nil && !IsRedisFull(err) {
		// Not known which copies were made: the journal stays, and the
		// next MovePage of the shard finishes it.
		return fmt.Errorf("move shard %d: copy to the target: %w", i, err)
	}
	// A target at its limit refused some script calls whole (Redis checks
	// maxmemory at a script's first write, so a refused call wrote
	// nothing): each result says which copies were made.
	if o.AtStep != nil {
		o.AtStep(StepMoveCopied)
	}
	var out []int    // index in msgs of each message to remove
	made := []bool{} // whether this batch made its copy
	var full error   // the target at its memory limit: the move stops after this batch
	for j, x := range res {
		switch {
		case x.Err == nil, errors.Is(x.Err, ErrDuplicate), errors.Is(x.Err, ErrCancelled):
			out, made = append(out, j), append(made, x.Err == nil)
		case IsRedisFull(x.Err):
			full = cmp.Or(full, x.Err)
		default:
			r.Left = append(r.Left, fmt.Errorf("move %q in shard %d: the target refused it: %w", from[j].ID, i, x.Err))
		}
	}
	if len(out) > 0 {
		sts, err := s.moveOut(ctx, i, from, out)
		if err != nil {
			// Nothing known removed: the journal stays, and the next
			// MovePage of the shard finishes it.
			return fmt.Errorf("move shard %d: remove from the source: %w", i, err)
		}
		for k, j := range out {
			switch {
			case sts[k] == 1 && made[k]:
				r.Moved++
			case sts[k] == 1:
				r.There++
			default:
				r.Changed++
				if made[k] {
					if err := to.Cancel(ctx, msgs[j].ID); err != nil && !errors.Is(err, ErrNotFound) {
						return fmt.Errorf("move shard %d: cancel the copy of %q, changed on the source meanwhile: %w", i, msgs[j].ID, err)
					}
				}
			}
		}
	}
	if err := s.rdb.Del(ctx, MoveJournalKey(s.ns, i)).Err(); err != nil {
		return fmt.Errorf("move shard %d: end its journal: %w", i, err)
	}
	if full != nil {
		return fmt.Errorf("move shard %d: the target is full, what it refused stays on the source: %w", i, full)
	}
	return nil
}

// moveOut removes from shard i each of from[out] still exactly as read, in
// one round trip: a near one if still due at the same time with the same
// envelope (moveOutScript), a far one if its index still names the record
// read (farBulkCancelScript, counting in the shard's MoveFarCountKey). It
// returns a status per message: 1 removed, 0 changed meanwhile.
func (s *Store) moveOut(ctx context.Context, i int, from []*Listed, out []int) ([]int64, error) {
	ks := ShardKeys(s.ns, i)
	var nearArgs []any
	var near, far []int // positions in out
	for k, j := range out {
		if from[j].Far {
			far = append(far, k)
		} else {
			near, nearArgs = append(near, k), append(nearArgs, from[j].ID, from[j].Due.UnixMilli(), from[j].raw)
		}
	}
	var calls []call
	if len(near) > 0 {
		calls = append(calls, call{moveOutScript, []string{ks.Due, ks.Msg, ks.Attempts}, nearArgs})
	}
	var fs FarSettings
	if len(far) > 0 {
		var err error
		if fs, _, err = s.farSettings(ctx); err != nil {
			return nil, err
		}
	}
	fk := farKeysOf(s.ns, i)
	for lo := 0; lo < len(far); lo += maxCancelMany {
		part := far[lo:min(lo+maxCancelMany, len(far))]
		keys := append(make([]string, 0, 3+len(part)), fk.dir(), fk.meta(), MoveFarCountKey(s.ns, i))
		args := append(make([]any, 0, 1+2*len(part)), moveFarCountTTL.Milliseconds())
		for _, k := range part {
			l := from[out[k]]
			keys, args = append(keys, fk.index(l.ID, fs.IndexSlots)), append(args, l.ID, l.farEntry)
		}
		calls = append(calls, call{farBulkCancelScript, keys, args})
	}
	sts := make([]int64, len(out))
	c := 0
	for _, cmd := range s.run(ctx, calls...) {
		v, err := cmd.Int64Slice()
		if err != nil {
			return nil, err
		}
		var at []int
		if c == 0 && len(near) > 0 {
			at = near
		} else {
			lo := (c - min(len(near), 1)) * maxCancelMany
			at = far[lo:min(lo+maxCancelMany, len(far))]
		}
		if len(v) != len(at) {
			return nil, fmt.Errorf("unexpected reply of %d statuses for %d messages", len(v), len(at))
		}
		for k, p := range at {
			sts[p] = v[k]
		}
		c++
	}
	return sts, nil
}

// MoveFarCountKey is shard i's count of the far messages the move removed
// from it (HASH field done), kept an hour after the last.
func MoveFarCountKey(ns string, i int) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:movefar"
}

// moveFarCountTTL is how long MoveFarCountKey lives after its last count.
const moveFarCountTTL = time.Hour

// MoveFar moves shard i's far tier (the messages due beyond the far
// horizon, see "The far-future tier") to the target, a bucket at a time,
// n messages a batch, as MovePage moves the due set: journal, copy,
// removal of each record still the one read (a record cancelled,
// rescheduled, replaced or promoted meanwhile stays as that left it, and
// its copy is cancelled; a promoted one goes over with the due set on a
// later pass), journal ended. What falls due within o.Keep stays. It
// finishes the shard's journal first. Nothing when the tier is off.
func (s *Store) MoveFar(ctx context.Context, i int, n int, to *Producer, o MoveOptions) (MoveResult, error) {
	var r MoveResult
	if err := s.finishJournal(ctx, i, to, o, &r); err != nil {
		return r, err
	}
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return r, err
	}
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return r, fmt.Errorf("move shard %d: %w", i, err)
	}
	buckets, err := s.farBuckets(ctx, i, fs, 0, 0)
	if err != nil {
		return r, fmt.Errorf("move shard %d: %w", i, err)
	}
	for _, fb := range buckets {
		recs, err := s.liveFarRecords(ctx, i, fs, fb.b)
		if err != nil {
			return r, fmt.Errorf("move shard %d: %w", i, err)
		}
		prefix := strconv.FormatInt(fb.b, 10) + ":"
		var page []Listed
		for _, rec := range recs {
			if rec.DueMs <= nowMs+o.Keep.Milliseconds() {
				continue // the source's to publish
			}
			l := Listed{ID: rec.ID, Shard: i, Due: time.UnixMilli(rec.DueMs), Far: true,
				raw: slices.Clone(rec.Envelope), farEntry: prefix + strconv.FormatUint(rec.Seq, 10)}
			if env, err := DecodeEnvelope(l.raw); err != nil {
				l.Corrupt = err
			} else {
				l.Envelope = &env
			}
			page = append(page, l)
		}
		for chunk := range slices.Chunk(page, max(n, 1)) {
			// Read before the wait: a far record is published only once
			// promoted, which a wait cannot skip (a record promoted
			// meanwhile fails the removal's check).
			if o.Pace != nil {
				if err := o.Pace(ctx, len(chunk)); err != nil {
					return r, err
				}
			}
			if err := s.readAttempts(ctx, i, chunk); err != nil {
				return r, err
			}
			r.Read += len(chunk)
			if err := s.moveListed(ctx, i, chunk, to, o, &r, false); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// readAttempts reads the deliveries so far of page's messages of shard i
// (a far message may have had some: a retry's next try placed far).
func (s *Store) readAttempts(ctx context.Context, i int, page []Listed) error {
	ids := make([]string, len(page))
	for j := range page {
		ids[j] = page[j].ID
	}
	metas, err := s.rdb.HMGet(ctx, ShardKeys(s.ns, i).Attempts, ids...).Result()
	if err != nil {
		return fmt.Errorf("move shard %d: read attempts: %w", i, err)
	}
	for j, m := range metas {
		if v, ok := m.(string); ok {
			a, _, _ := strings.Cut(v, ":")
			page[j].Attempts, _ = strconv.Atoi(a)
		}
	}
	return nil
}
