package shard

import (
	"context"
	"errors"
	"fmt"
	"time"
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
	// sides, or a run of the move cut short after its copy): removed from
	// the source, the target's copy kept.
	There int
	// Changed were cancelled, rescheduled, claimed or replaced on the
	// source while their batch was under way: left as the change left
	// them, the copy this batch made cancelled (a rescheduled one is
	// copied by a later pass).
	Changed int
	// Left are not moved, each with why: the target refused the copy
	// (invalid there, over a quota, at capacity), or the envelope cannot
	// be read or is an occurrence of a recurring schedule.
	Left []error
}

// MovePage moves one page of shard i of s to the producer to (another
// Redis, or another namespace): up to n messages due later than keep
// after the Redis clock, starting after cursor. It copies them (deduped by
// id: an id the target has stays as the target has it), then removes from
// the source, in one script call, each that is still exactly as read;
// one changed meanwhile stays, and the copy made of it is cancelled. So,
// as long as no message of the page falls due before the call returns
// (keep is minutes, a call milliseconds), a message is live on one side
// only: the source until the removal, the target after it. It returns
// where the next page starts, and whether there may be more.
//
// Not here yet (the package doc's plan): the journal that lets a rerun
// finish a batch a killed mover left on both sides. Until then a mover
// killed between the copy and the removal leaves that batch on both
// sides; run it again before they fall due (at least keep later), and
// the rerun finds the copies there and removes the originals.
func (s *Store) MovePage(ctx context.Context, i int, after ListCursor, n int, keep time.Duration, to *Producer) (MoveResult, ListCursor, bool, error) {
	var r MoveResult
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return r, after, false, fmt.Errorf("move shard %d: %w", i, err)
	}
	if floor := nowMs + keep.Milliseconds(); after.DueMs <= floor {
		after = ListCursor{DueMs: floor + 1} // what falls due sooner is the source's to publish
	}
	page, next, more, err := s.List(ctx, i, after, min(max(n, 1), maxListPage))
	if err != nil || len(page) == 0 {
		return r, after, false, err
	}
	r.Read = len(page)
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
		if err != nil {
			r.Left = append(r.Left, fmt.Errorf("move %q in shard %d: %w", l.ID, i, err))
			continue
		}
		msgs, from = append(msgs, m), append(from, l)
	}
	if len(msgs) == 0 {
		return r, next, more, nil
	}
	res, err := to.EnqueueBatch(ctx, msgs)
	if err != nil {
		return r, after, false, fmt.Errorf("move shard %d: copy to the target: %w", i, err)
	}
	var args []any
	var out []int    // index in msgs of each message to remove
	made := []bool{} // whether this batch made its copy
	for j, x := range res {
		switch {
		case x.Err == nil, errors.Is(x.Err, ErrDuplicate), errors.Is(x.Err, ErrCancelled):
			args = append(args, from[j].ID, from[j].Due.UnixMilli(), from[j].raw)
			out, made = append(out, j), append(made, x.Err == nil)
		default:
			r.Left = append(r.Left, fmt.Errorf("move %q in shard %d: the target refused it: %w", from[j].ID, i, x.Err))
		}
	}
	if len(out) == 0 {
		return r, next, more, nil
	}
	ks := ShardKeys(s.ns, i)
	sts, err := s.run1(ctx, moveOutScript, []string{ks.Due, ks.Msg, ks.Attempts}, args...).Int64Slice()
	if err == nil && len(sts) != len(out) {
		err = fmt.Errorf("unexpected reply of %d statuses for %d messages", len(sts), len(out))
	}
	if err != nil {
		// Nothing known removed: the copies stay, and a rerun finds them
		// there and removes the originals.
		return r, after, false, fmt.Errorf("move shard %d: remove from the source: %w", i, err)
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
					return r, after, false, fmt.Errorf("move shard %d: cancel the copy of %q, changed on the source meanwhile: %w", i, msgs[j].ID, err)
				}
			}
		}
	}
	return r, next, more, nil
}
