package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Turning the far tier on and off, and what an operator sees of it.
//
// The upgrade order (configs/README.md) is enforced here, where it can
// be: far buckets are promoted by the scanners, each promoting the shards
// it takes the wake-ups of, so a scanner of a version without the tier
// would leave its shards' far messages where they are, late without
// bound. Scanners that promote announce it in their fleet membership
// (FarMemberID), and TurnFarOn refuses while a live member does not
// (ErrFarNotSupported, naming them). A scanner of an older version started
// after the tier is on cannot be refused by anyone; the alert
// DelayqFarPromotionBehind fires for it.
//
// Off is a horizon beyond any due time (farOffHorizon): nothing more is
// placed far, and every bucket is within the horizon, so the scanners
// promote what is left, a bounded amount per pass, as usual; the tier's
// keys go with the last bucket. Width and slots stay, so the tier can be
// turned on again with the same ones. A fleet may be downgraded to a
// version without the tier once FarStatus says no message is far.

// ErrFarNotSupported: a live scanner process cannot promote far messages
// (an older version); upgrade every process before turning the tier on.
var ErrFarNotSupported = errors.New("a live scanner cannot promote far messages")

// farMemberMark ends the fleet membership id of a scanner that promotes
// far buckets.
const farMemberMark = "+far"

// farOffHorizon is the horizon of a tier turned off: later than any due
// time a message can have.
const farOffHorizon = 200 * 365 * 24 * time.Hour

// FarMemberID is the fleet membership id (Heartbeat) of a scanner process
// named id that promotes far buckets.
func FarMemberID(id string) string { return id + farMemberMark }

// FarStatus is what an operator sees of the far tier.
type FarStatus struct {
	On       bool        // settings exist (messages may be far)
	Placing  bool        // new messages beyond the horizon go far (on, and not turned off)
	Settings FarSettings // when On
	Far      int64       // messages waiting far, all shards
	Buckets  int64       // far buckets, all shards
	// NextBucket is the start of the earliest far bucket (zero: none):
	// it is promoted once it starts within the horizon.
	NextBucket time.Time
	// Scanners are the live scanner processes; Older are those of them
	// that cannot promote far buckets.
	Scanners, Older []string
}

// FarStatus reads the tier's settings and counts over shards [0, m), and
// the live scanners.
func (s *Store) FarStatus(ctx context.Context, m int) (FarStatus, error) {
	var st FarStatus
	fs, on, err := s.readFar(ctx)
	if err != nil {
		return st, err
	}
	st.On, st.Settings, st.Placing = on, fs, on && fs.Horizon < farOffHorizon
	if st.Scanners, st.Older, err = s.farScanners(ctx); err != nil {
		return st, err
	}
	if !on {
		return st, nil
	}
	counts, err := s.farCounts(ctx, m)
	if err != nil {
		return st, err
	}
	for _, n := range counts {
		st.Far += n
	}
	cards := make([]*redis.IntCmd, m)
	heads := make([]*redis.ZSliceCmd, m)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range m {
			fk := farKeysOf(s.ns, i)
			cards[i] = p.ZCard(ctx, fk.dir())
			heads[i] = p.ZRangeWithScores(ctx, fk.dir(), 0, 0)
		}
		return nil
	}); err != nil {
		return st, fmt.Errorf("far buckets: %w", err)
	}
	for i := range m {
		st.Buckets += cards[i].Val()
		if z := heads[i].Val(); len(z) == 1 {
			t := time.UnixMilli(int64(z[0].Score))
			if st.NextBucket.IsZero() || t.Before(st.NextBucket) {
				st.NextBucket = t
			}
		}
	}
	return st, nil
}

// farScanners returns the live scanner processes and those of them that
// cannot promote far buckets.
func (s *Store) farScanners(ctx context.Context) (live, older []string, err error) {
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("scanners: %w", err)
	}
	live, err = s.rdb.ZRangeByScore(ctx, ScannersKey(s.ns), &redis.ZRangeBy{Min: fmt.Sprint(now.UnixMilli()), Max: "+inf"}).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("scanners: %w", err)
	}
	for _, id := range live {
		if !strings.HasSuffix(id, farMemberMark) {
			older = append(older, id)
		}
	}
	return live, older, nil
}

// TurnFarOn turns the tier on with fs (zero fields: the defaults, or the
// settings already set), or changes its horizon, after checking that
// every live scanner promotes far buckets (else ErrFarNotSupported).
func (s *Store) TurnFarOn(ctx context.Context, fs FarSettings) error {
	_, older, err := s.farScanners(ctx)
	if err != nil {
		return err
	}
	if len(older) > 0 {
		return fmt.Errorf("%w: %d of the live scanner processes (%s) run a version without the far tier; upgrade every process first (configs/README.md)",
			ErrFarNotSupported, len(older), strings.Join(older, ", "))
	}
	old, on, err := s.readFar(ctx)
	if err != nil {
		return err
	}
	if on {
		if fs.BucketWidth == 0 {
			fs.BucketWidth = old.BucketWidth
		}
		if fs.IndexSlots == 0 {
			fs.IndexSlots = old.IndexSlots
		}
		if fs.Horizon == 0 && old.Horizon < farOffHorizon {
			fs.Horizon = old.Horizon
		}
	}
	if fs.Horizon >= farOffHorizon {
		return invalid("horizon", "%s: at most %s", fs.Horizon, farOffHorizon-time.Hour)
	}
	return s.EnableFar(ctx, fs)
}

// TurnFarOff stops placing messages far, and has the scanners promote
// every far bucket from their next pass on: each is within the horizon
// then (see the top of farcontrol.go). Off already, or never on, it does
// nothing.
func (s *Store) TurnFarOff(ctx context.Context) error {
	old, on, err := s.readFar(ctx)
	if err != nil || !on {
		return err
	}
	old.Horizon = farOffHorizon
	return s.EnableFar(ctx, old)
}
