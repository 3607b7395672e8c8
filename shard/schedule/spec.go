package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest @every interval.
const MinEvery = time.Second

// horizon is how far ahead Next looks for an occurrence before it says
// there is none (robfig/cron's parser-side limit is the same: 5 years).
const horizon = 5 * 366 * 24 * time.Hour

// parser reads 5-field cron, an optional leading seconds field, and the
// descriptors @yearly, @annually, @monthly, @weekly, @daily, @midnight and
// @hourly. @every is read here (it is an absolute interval, not a
// calendar rule), and a CRON_TZ= or TZ= prefix is refused: the zone is the
// schedule's Zone.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ErrNoOccurrence: the spec matches no instant in the next five years
// (February 30, say), or none before the schedule's end.
var ErrNoOccurrence = errors.New("no occurrence")

// Spec is a parsed schedule spec in its time zone: a calendar rule (cron
// fields or a descriptor) read on the zone's wall clock, or an absolute
// interval (@every) from an anchor.
type Spec struct {
	text  string
	every time.Duration      // @every; 0 for a calendar rule
	rule  *cron.SpecSchedule // calendar rule, its Location UTC (see Next)
	loc   *time.Location     // the zone the rule is read in
}

// Parse reads spec in the IANA time zone zone ("" is UTC). The error says
// what is wrong with which of the two.
func Parse(spec, zone string) (Spec, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return Spec{}, err
	}
	text := strings.Join(strings.Fields(spec), " ")
	s := Spec{text: text, loc: loc}
	switch {
	case text == "":
		return Spec{}, errors.New("empty")
	case strings.HasPrefix(text, "TZ=") || strings.HasPrefix(text, "CRON_TZ="):
		return Spec{}, errors.New("a time zone prefix is not part of the spec: give the zone on its own")
	case strings.HasPrefix(text, "@every"):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(text, "@every")))
		if err != nil {
			return Spec{}, fmt.Errorf("@every wants a duration such as 15m or 1h30m: %w", err)
		}
		if d < MinEvery {
			return Spec{}, fmt.Errorf("@every %s: the shortest interval is %s", d, MinEvery)
		}
		s.every = d
		return s, nil
	}
	sched, err := parser.Parse(text)
	if err != nil {
		return Spec{}, err
	}
	rule, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return Spec{}, fmt.Errorf("%q is not a calendar rule", text)
	}
	r := *rule
	r.Location = time.UTC // wall-clock arithmetic; the zone is applied by Next
	s.rule = &r
	return s, nil
}

// LoadZone loads an IANA time zone ("" and "UTC" are UTC; "Local" is
// refused: it means a different zone on each machine).
func LoadZone(zone string) (*time.Location, error) {
	switch zone {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errors.New(`"Local" differs between machines: name an IANA zone such as Europe/Berlin`)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (an IANA name such as Europe/Berlin or America/New_York)", zone)
	}
	return loc, nil
}

// String is the spec as parsed (spaces collapsed).
func (s Spec) String() string { return s.text }

// Zone is the spec's time zone.
func (s Spec) Zone() *time.Location { return s.loc }

// Every is the interval of an @every spec, 0 for a calendar rule.
func (s Spec) Every() time.Duration { return s.every }

// Next returns the first occurrence strictly after t. anchor is where an
// @every interval counts from (occurrences are anchor + k*interval);
// calendar rules ignore it. It returns ErrNoOccurrence when there is none
// within five years.
//
// A calendar rule is read on the zone's wall clock, and daylight saving
// is resolved this way:
//   - a wall-clock time that a spring-forward gap skips happens at the
//     first instant after the gap; several such times, and the wall-clock
//     time at the gap's end itself, are one occurrence (a daily 02:30 in
//     New York happens at 03:00 EDT on the day of the change, and
//     */15 * * * * once at 03:00);
//   - a wall-clock time that a fall-back repeats happens once, at its
//     first instant (the earlier offset).
//
// So each matching wall-clock time gives one instant, and the instants
// never go backwards as the wall clock advances.
func (s Spec) Next(t, anchor time.Time) (time.Time, error) {
	if s.every > 0 {
		if t.Before(anchor) {
			return anchor, nil
		}
		k := t.Sub(anchor)/s.every + 1
		return anchor.Add(k * s.every), nil
	}
	if s.rule == nil {
		return time.Time{}, errors.New("schedule: Next on a zero Spec")
	}
	// Walk the matching wall-clock times after t's own (robfig's Next on a
	// clock with no daylight saving: UTC), map each to its instant, and
	// take the first after t. A wall-clock time before t's maps to an
	// instant at or before t (the mapping never goes backwards), so the
	// walk starts at t's wall clock; in the second pass of a repeated hour
	// it steps over that hour's times, at most an hour of them.
	c := wallClock(t.In(s.loc))
	end := c.Add(horizon)
	for c.Before(end) {
		c = s.rule.Next(c)
		if c.IsZero() {
			break
		}
		if u := instant(c, s.loc); u.After(t) {
			return u, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q in %s: %w in the five years after %s", s.text, s.loc, ErrNoOccurrence, t.UTC().Format(time.RFC3339))
}

// Latest returns the latest n occurrences in (after, until], oldest
// first, and how many occurrences that span holds in all (it stops
// counting at 100,000). It looks back from until in
// growing windows, so a long span (a fleet restored from a month-old
// backup, an every-second schedule) costs what the occurrences it returns
// cost, not what the span holds.
func (s Spec) Latest(after, until, anchor time.Time, n int) (occ []time.Time, total int, err error) {
	if n <= 0 || !until.After(after) {
		return nil, 0, nil
	}
	for w := time.Minute; ; w *= 8 {
		from := until.Add(-w)
		if !from.After(after) {
			from = after
		}
		occ, total, err = s.window(from, until, anchor, n)
		if err != nil || len(occ) >= n || from.Equal(after) {
			break
		}
	}
	if err != nil || total < n || !after.Before(until) {
		return occ, total, err
	}
	// The window held n; count the rest of the span, up to the cap.
	if s.every > 0 {
		return occ, int(min(s.index(until, anchor)-s.index(after, anchor), maxCount)), nil
	}
	t := after
	total = 0
	for total < maxCount {
		next, err := s.Next(t, anchor)
		if errors.Is(err, ErrNoOccurrence) || err == nil && next.After(until) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		total++
		t = next
	}
	return occ, total, nil
}

// maxCount is where Latest stops counting.
const maxCount = 100_000

// index is how many occurrences of an @every spec are at or before t.
func (s Spec) index(t, anchor time.Time) int64 {
	if t.Before(anchor) {
		return 0
	}
	return int64(t.Sub(anchor)/s.every) + 1
}

// window returns the latest n occurrences in (from, until] and how many
// there are.
func (s Spec) window(from, until, anchor time.Time, n int) (occ []time.Time, total int, err error) {
	t := from
	for {
		next, err := s.Next(t, anchor)
		if errors.Is(err, ErrNoOccurrence) || err == nil && next.After(until) {
			return occ, total, nil
		}
		if err != nil {
			return nil, 0, err
		}
		total++
		if len(occ) == n {
			occ = occ[1:]
		}
		occ = append(occ, next)
		t = next
	}
}

// wallClock is t's wall-clock reading as the same reading in UTC.
func wallClock(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	return time.Date(y, mo, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

// instant maps a wall-clock reading c (given in UTC) in loc to the instant
// it names: the only one; the earlier of two (a fall-back repeats it); or,
// when a spring-forward gap skips it, the first instant after the gap.
// time.Date leaves the choice in both odd cases unspecified, so the
// offsets of the zones around c are tried one by one.
func instant(c time.Time, loc *time.Location) time.Time {
	wall := c.Unix()
	probe := time.Unix(wall, 0).In(loc) // an instant near c; its zone and the neighbours
	start, end := probe.ZoneBounds()
	offsets := []int{offset(probe)}
	if !start.IsZero() {
		offsets = append(offsets, offset(start.Add(-time.Second)))
	}
	if !end.IsZero() {
		offsets = append(offsets, offset(end))
	}
	var best time.Time
	for _, o := range offsets {
		u := time.Unix(wall-int64(o), int64(c.Nanosecond())).In(loc)
		if offset(u) == o && (best.IsZero() || u.Before(best)) {
			best = u
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: with the smaller offset (the one before a spring forward)
	// the reading names an instant just after the change; the change is
	// where that instant's zone starts.
	small := offsets[0]
	for _, o := range offsets[1:] {
		small = min(small, o)
	}
	after := time.Unix(wall-int64(small), 0).In(loc)
	s, _ := after.ZoneBounds()
	return s
}

func offset(t time.Time) int {
	_, o := t.Zone()
	return o
}
