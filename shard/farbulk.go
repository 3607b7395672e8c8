package shard

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Bulk jobs over the far tier. A bulk cancel or reschedule walks each
// shard's far buckets that overlap its due window before the shard's due
// set (farlist.go says why), a bucket at a time: it reads the bucket's
// live records, selects what the filter matches, and acts on them in
// script calls that act only while the index still names the record read
// (farBulkCancelScript; farRescheduleScript with the job's counter), so a
// record cancelled, replaced or promoted meanwhile is left to whoever
// has it now. Counts live in the job's counters, as for near messages, in
// the same call as the change.
//
// A reschedule moves each far message as Reschedule does: into the
// bucket of the new time when that is far, else into the due set. A
// message already due at that time (moved by an earlier run of the job)
// is left and not counted again.

// farBulkAct acts on live far records of shard i for job and returns a
// status per record, as bulkAct does (1 done, 0 gone meanwhile, 2 as
// asked already).
type farBulkAct func(ctx context.Context, i int, job string, fs FarSettings, recs []farHeld) ([]int64, error)

// farHeld is a live far record and its index entry, "<b>:<seq>".
type farHeld struct {
	FarRecord
	entry string
}

// bulkWalkFar acts on what f selects in shard i's far tier.
func (s *Store) bulkWalkFar(ctx context.Context, i int, job string, f BulkFilter, p *BulkProgress, progress func(BulkProgress), act farBulkAct) error {
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return err
	}
	var fromMs, toMs int64
	if !f.From.IsZero() {
		fromMs = f.From.UnixMilli()
	}
	if !f.To.IsZero() {
		toMs = f.To.Add(time.Millisecond - 1).UnixMilli() // buckets that start before To
	}
	buckets, err := s.farBuckets(ctx, i, fs, fromMs, toMs)
	if err != nil {
		return fmt.Errorf("bulk job: %w", err)
	}
	q := f.query(1)
	for _, fb := range buckets {
		recs, err := s.liveFarRecords(ctx, i, fs, fb.b)
		if err != nil {
			return fmt.Errorf("bulk job: %w", err)
		}
		p.Scanned += len(recs)
		var sel []farHeld
		for _, r := range recs {
			if (!f.From.IsZero() && r.DueMs < f.From.UnixMilli()) || (!f.To.IsZero() && !time.UnixMilli(r.DueMs).Before(f.To)) {
				continue
			}
			l := Listed{ID: r.ID}
			if f.Topic != "" || len(f.Within) > 0 {
				if env, err := DecodeEnvelope(r.Envelope); err == nil {
					l.Envelope = &env
				}
			}
			if q.matches(&l) {
				sel = append(sel, farHeld{FarRecord: r, entry: strconv.FormatInt(fb.b, 10) + ":" + strconv.FormatUint(r.Seq, 10)})
			}
		}
		if len(sel) == 0 {
			continue
		}
		sts, err := act(ctx, i, job, fs, sel)
		for _, st := range sts {
			if st == 1 || st == 3 {
				p.Done++
			}
		}
		if progress != nil {
			progress(*p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// farBulkCancel is a bulk cancel's farBulkAct.
func (s *Store) farBulkCancel(ctx context.Context, i int, job string, fs FarSettings, recs []farHeld) ([]int64, error) {
	fk := farKeysOf(s.ns, i)
	var calls []call
	for lo := 0; lo < len(recs); lo += maxCancelMany {
		part := recs[lo:min(lo+maxCancelMany, len(recs))]
		keys := append(make([]string, 0, 3+len(part)), fk.dir(), fk.meta(), BulkKey(s.ns, i, job))
		args := append(make([]any, 0, 1+2*len(part)), bulkTTL.Milliseconds())
		for _, r := range part {
			keys, args = append(keys, fk.index(r.ID, fs.IndexSlots)), append(args, r.ID, r.entry)
		}
		calls = append(calls, call{farBulkCancelScript, keys, args})
	}
	var out []int64
	for _, cmd := range s.run(ctx, calls...) {
		v, err := cmd.Int64Slice()
		if err != nil {
			return out, fmt.Errorf("bulk cancel of far messages in shard %d: %w", i, err)
		}
		out = append(out, v...)
	}
	return out, nil
}

// farBulkReschedule returns a bulk reschedule's farBulkAct: each record
// moves to due (unix ms), one farRescheduleScript call each, in one round
// trip.
func (s *Store) farBulkReschedule(due int64) farBulkAct {
	return func(ctx context.Context, i int, job string, fs FarSettings, recs []farHeld) ([]int64, error) {
		fk, ks := farKeysOf(s.ns, i), ShardKeys(s.ns, i)
		b := due / fs.BucketWidth.Milliseconds()
		out := make([]int64, len(recs))
		var calls []call
		var at []int
		for j, r := range recs {
			if r.DueMs == due {
				out[j] = 2
				continue
			}
			calls = append(calls, call{farRescheduleScript, []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason,
				ks.Counters, ks.Cancelled, fk.index(r.ID, fs.IndexSlots), fk.dir(), fk.meta(), fk.bucket(b), fk.compact(),
				BulkKey(s.ns, i, job)},
				[]any{r.ID, r.entry, r.Envelope, "at", due, b, fs.BucketWidth.Milliseconds(), fs.Horizon.Milliseconds(), fs.Since,
					farBlockRecords, s.wake, i, bulkTTL.Milliseconds()}})
			at = append(at, j)
		}
		for k, cmd := range s.run(ctx, calls...) {
			v, err := cmd.Int64Slice()
			if err != nil {
				return out, fmt.Errorf("bulk reschedule of far messages in shard %d: %w", i, err)
			}
			if len(v) == 2 && v[0] == 1 {
				out[at[k]] = 1
			}
		}
		return out, nil
	}
}
