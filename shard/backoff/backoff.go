package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a doubling wait: the first is Min, each one after doubles, up
// to Max, and each is spread by Jitter. The zero value waits nothing; New
// sets the bounds.
type Backoff struct {
	min, max, next time.Duration
}

// New returns a Backoff from floor to ceiling (a ceiling below the floor
// is raised to it).
func New(floor, ceiling time.Duration) *Backoff {
	return &Backoff{min: floor, max: max(floor, ceiling), next: floor}
}

// Next returns the wait before the next try (jittered) and doubles the one
// after it.
func (b *Backoff) Next() time.Duration {
	d := Jitter(b.next)
	b.next = min(2*b.next, b.max)
	return d
}

// Reset starts again from the floor, after a try that succeeded.
func (b *Backoff) Reset() { b.next = b.min }

// Wait sleeps Next(), or until ctx ends, when it returns ctx.Err().
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Jitter spreads d over [d/2, d], so that the processes of a fleet that
// lost a server do not retry in lockstep.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends, when it returns ctx.Err() at once.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
