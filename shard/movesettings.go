package shard

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The live move of a namespace's settings (see "Moving to another Redis"
// in the package doc): what operators set at runtime and Redis keeps
// goes with the messages, so the target's fleet releases, shares and
// counts them as the source's did. Each setting the target has already
// stays as the target has it (set there by hand, or by its fleet's routes
// file). Two calls, around the messages:
//
//   - MoveSettings, first: flow limits and pauses, release classes, the
//     far tier's settings (so far messages are placed far on arrival).
//     None of them refuses a message.
//   - MoveQuotas, last: a quota set on the target before the messages
//     arrive would count the move's copies against its rate, and refuse
//     them; set after, its scanners adopt what arrived (quotaadopt.go).

// SettingsMoved is what MoveSettings or MoveQuotas did.
type SettingsMoved struct {
	Copied []string // each "kind name" copied to the target
	There  []string // each the target had: its own stays
	Left   []error  // not copied, each with why (the source's own refused, or the target's)
}

// MoveSettings copies the flows, classes and far tier settings of s to
// the target store to, each the target does not have.
func (s *Store) MoveSettings(ctx context.Context, to *Store) (SettingsMoved, error) {
	var r SettingsMoved
	flows, err := s.Flows(ctx)
	if err != nil {
		r.Left = append(r.Left, fmt.Errorf("flows: %w", err)) // the good ones still go
	}
	for _, f := range flows {
		if _, ok, err := to.Flow(ctx, f.Topic); err != nil {
			return r, fmt.Errorf("move settings: the target's flow of %q: %w", f.Topic, err)
		} else if ok {
			r.There = append(r.There, "flow "+f.Topic)
			continue
		}
		if f.Rate > 0 || f.Burst > 0 {
			if _, err := to.SetLimit(ctx, f.Topic, f.Rate, f.Burst, "move"); err != nil {
				r.Left = append(r.Left, fmt.Errorf("flow %q: %w", f.Topic, err))
				continue
			}
		}
		if f.PausedUntilMs != 0 {
			until := time.Time{}
			if f.PausedUntilMs != PauseForever {
				until = time.UnixMilli(f.PausedUntilMs)
			}
			if _, err := to.Pause(ctx, f.Topic, until, "move"); err != nil && !errors.Is(err, ErrPauseOver) {
				r.Left = append(r.Left, fmt.Errorf("flow %q: its pause: %w", f.Topic, err))
				continue
			}
		}
		r.Copied = append(r.Copied, "flow "+f.Topic)
	}
	classes, err := s.Classes(ctx)
	if err != nil {
		r.Left = append(r.Left, fmt.Errorf("classes: %w", err))
	}
	theirs, err := to.Classes(ctx)
	if err != nil {
		return r, fmt.Errorf("move settings: the target's classes: %w", err)
	}
	for _, c := range classes {
		switch {
		case c.DeletedMs != 0: // draining on the source: nothing of it goes
		case classNamed(theirs, c.Name):
			r.There = append(r.There, "class "+c.Name)
		default:
			if _, err := to.SetClass(ctx, c, "move"); err != nil {
				r.Left = append(r.Left, fmt.Errorf("class %q: %w", c.Name, err))
				continue
			}
			r.Copied = append(r.Copied, "class "+c.Name)
		}
	}
	fs, on, err := s.readFar(ctx)
	if err != nil {
		r.Left = append(r.Left, fmt.Errorf("far tier: %w", err))
	} else if on {
		if _, theirsOn, err := to.readFar(ctx); err != nil {
			return r, fmt.Errorf("move settings: the target's far tier: %w", err)
		} else if theirsOn {
			r.There = append(r.There, "far tier")
		} else if err := to.TurnFarOn(ctx, FarSettings{Horizon: fs.Horizon, BucketWidth: fs.BucketWidth, IndexSlots: fs.IndexSlots}); err != nil {
			r.Left = append(r.Left, fmt.Errorf("far tier: %w", err))
		} else {
			r.Copied = append(r.Copied, "far tier")
		}
	}
	return r, nil
}

// classNamed reports whether cs has a live class called name.
func classNamed(cs []Class, name string) bool {
	for _, c := range cs {
		if c.Name == name && c.DeletedMs == 0 {
			return true
		}
	}
	return false
}

// MoveQuotas copies the quotas of s to the target store to, each the
// target does not have; the target's scanners count what it holds of the
// scope's messages (adoption).
func (s *Store) MoveQuotas(ctx context.Context, to *Store) (SettingsMoved, error) {
	var r SettingsMoved
	quotas, err := s.Quotas(ctx)
	if err != nil {
		r.Left = append(r.Left, fmt.Errorf("quotas: %w", err))
	}
	theirs, err := to.Quotas(ctx)
	if err != nil && !errors.Is(err, ErrCorruptQuota) {
		return r, fmt.Errorf("move quotas: the target's: %w", err)
	}
	have := map[string]bool{}
	for _, q := range theirs {
		have[q.Scope] = true
	}
	for _, q := range quotas {
		if have[q.Scope] {
			r.There = append(r.There, "quota "+q.Scope)
			continue
		}
		if err := to.SetQuota(ctx, Quota{Scope: q.Scope, Rules: q.Rules, MaxPending: q.MaxPending, MaxRate: q.MaxRate, Source: "move"}); err != nil {
			r.Left = append(r.Left, fmt.Errorf("quota %q: %w", q.Scope, err))
			continue
		}
		r.Copied = append(r.Copied, "quota "+q.Scope)
	}
	return r, nil
}
