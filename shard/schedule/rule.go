package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The missed-run policies (Rule.Missed): what firing does with
// occurrences whose time passed more than the grace ago (the fleet was
// down, the schedule paused, Redis restored from an old backup).
const (
	// MissedSkip publishes none of them: the schedule goes on with its
	// next occurrence that is not missed. The default.
	MissedSkip = "skip"
	// MissedLatest publishes the most recent missed one, once.
	MissedLatest = "latest"
	// MissedAll publishes each of them, the latest CatchUp at most.
	MissedAll = "all"
)

// DefaultGrace is how late an occurrence may be fired before it counts as
// missed, unless the schedule says otherwise.
const DefaultGrace = time.Minute

// DefaultCatchUp is the most missed occurrences MissedAll publishes,
// unless the schedule says otherwise; MaxCatchUp is the most it may say.
const (
	DefaultCatchUp = 100
	MaxCatchUp     = 10_000
)

// Rule is what firing an occurrence needs to know of its schedule: it
// travels with each occurrence (as JSON), so a scanner computes the next
// one without reading the schedule.
type Rule struct {
	Spec     string `json:"spec"`
	Zone     string `json:"zone,omitempty"`
	AnchorMs int64  `json:"anchor_ms"`        // @every counts from here; the first occurrence is at or after it
	EndMs    int64  `json:"end_ms,omitempty"` // no occurrence after it; 0: none
	GraceMs  int64  `json:"grace_ms"`         // later than this after its time, an occurrence is missed
	Missed   string `json:"missed"`           // MissedSkip, MissedLatest, MissedAll
	CatchUp  int    `json:"catch_up,omitempty"`
}

// ParseRule reads a Rule from its JSON and checks it.
func ParseRule(s string) (Rule, Spec, error) {
	var r Rule
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, Spec{}, fmt.Errorf("schedule rule: %w", err)
	}
	sp, err := r.Check()
	return r, sp, err
}

// JSON is the rule's JSON form.
func (r Rule) JSON() string {
	b, _ := json.Marshal(r) // strings and numbers only: cannot fail
	return string(b)
}

// Check parses the rule's spec in its zone and checks its other fields.
// The error names the field.
func (r Rule) Check() (Spec, error) {
	sp, err := Parse(r.Spec, r.Zone)
	if err != nil {
		return sp, err
	}
	switch r.Missed {
	case MissedSkip, MissedLatest, MissedAll:
	default:
		return sp, fmt.Errorf("missed: %q is not skip, latest or all", r.Missed)
	}
	if r.GraceMs < 0 {
		return sp, fmt.Errorf("grace: %s is negative", time.Duration(r.GraceMs)*time.Millisecond)
	}
	if r.CatchUp < 0 || r.CatchUp > MaxCatchUp {
		return sp, fmt.Errorf("catch_up: %d is not in 0..%d", r.CatchUp, MaxCatchUp)
	}
	return sp, nil
}

// First returns the rule's first occurrence at or after t (and at or
// after the anchor), or ErrNoOccurrence when there is none before the end.
func (r Rule) First(sp Spec, t time.Time) (time.Time, error) {
	anchor := time.UnixMilli(r.AnchorMs)
	if t.Before(anchor) {
		t = anchor
	}
	return r.next(sp, t.Add(-time.Millisecond))
}

// next is the occurrence after t, within the end.
func (r Rule) next(sp Spec, t time.Time) (time.Time, error) {
	n, err := sp.Next(t, time.UnixMilli(r.AnchorMs))
	if err != nil {
		return n, err
	}
	if r.EndMs > 0 && n.UnixMilli() > r.EndMs {
		return time.Time{}, fmt.Errorf("%w before the end %s", ErrNoOccurrence, time.UnixMilli(r.EndMs).UTC().Format(time.RFC3339))
	}
	return n, nil
}

// Plan is what firing one occurrence does (Fire).
type Plan struct {
	// Publish: the occurrence itself is published (it is not missed, or
	// the policy keeps it).
	Publish bool
	// CatchUp are other missed occurrences the policy publishes, each as
	// a message of its own due at its time (so at once), oldest first.
	CatchUp []int64
	// Skipped is how many missed occurrences the policy drops, this one
	// among them when Publish is false (at most 100,000 are counted).
	Skipped int
	// NextMs is the schedule's next occurrence, the first that is not
	// missed at nowMs; -1 when the schedule has none (its end, or no
	// occurrence in five years).
	NextMs int64
}

// Fire plans the firing of the occurrence at nominalMs, claimed at nowMs
// (the Redis clock): it is on time when it is at most the grace late;
// else it and the other missed occurrences since are published or
// skipped as the policy says, and the schedule goes on with its first
// occurrence that is not missed. The occurrences after it are the rule's
// from fromMs on (the time of the rule's last change, when that came
// after the occurrence was made).
func (r Rule) Fire(sp Spec, nominalMs, fromMs, nowMs int64) (Plan, error) {
	after := max(nominalMs, fromMs-1)
	if nominalMs >= nowMs-r.GraceMs {
		p := Plan{Publish: true, NextMs: -1}
		return p, r.setNext(sp, &p, after)
	}
	return r.missed(sp, after, nowMs, true)
}

// Resume plans a resume at nowMs of a schedule whose last occurrence
// published was at afterMs: the occurrences since are missed runs, which
// the policy publishes or skips, and the schedule goes on with its first
// occurrence that is not missed.
func (r Rule) Resume(sp Spec, afterMs, nowMs int64) (Plan, error) {
	return r.missed(sp, afterMs, nowMs, false)
}

// missed plans the occurrences after afterMs that are missed at nowMs
// (self: plus the one being fired, which is older than all of them).
func (r Rule) missed(sp Spec, afterMs, nowMs int64, self bool) (Plan, error) {
	p := Plan{NextMs: -1}
	cutoff := nowMs - r.GraceMs // occurrences before it are missed
	keep := 0
	switch r.Missed {
	case MissedLatest:
		keep = 1
	case MissedAll:
		keep = r.CatchUp
		if keep == 0 {
			keep = DefaultCatchUp
		}
	}
	later, total, err := sp.Latest(time.UnixMilli(afterMs), time.UnixMilli(cutoff-1), time.UnixMilli(r.AnchorMs), max(keep, 1))
	if err != nil {
		return p, err
	}
	later = later[len(later)-min(keep, len(later)):]
	for _, t := range later {
		if ms := t.UnixMilli(); r.EndMs == 0 || ms <= r.EndMs {
			p.CatchUp = append(p.CatchUp, ms)
		}
	}
	kept := len(p.CatchUp)
	if self {
		total++
		if kept < keep { // room for the one being fired too: it is the oldest
			p.Publish = true
			kept++
		}
	}
	p.Skipped = total - kept
	return p, r.setNext(sp, &p, max(afterMs, cutoff-1))
}

// setNext sets p.NextMs to the occurrence after afterMs, if any.
func (r Rule) setNext(sp Spec, p *Plan, afterMs int64) error {
	n, err := r.next(sp, time.UnixMilli(afterMs))
	switch {
	case err == nil:
		p.NextMs = n.UnixMilli()
	case !errors.Is(err, ErrNoOccurrence):
		return err
	}
	return nil
}
