package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// utc parses a UTC instant written in the test.
func utc(t *testing.T, s string) time.Time {
	t.Helper()
	u, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The expected instants are written by hand from the zones' rules and
// checked against the system's tz database with zdump, not computed by
// the code under test:
//
//	zdump -v -c 2026,2027 America/New_York Europe/Berlin Australia/Lord_Howe America/Santiago
//
//	America/New_York    Sun Mar  8 07:00:00 2026 UT = Sun Mar  8 03:00:00 2026 EDT (from 01:59:59 EST)
//	America/New_York    Sun Nov  1 06:00:00 2026 UT = Sun Nov  1 01:00:00 2026 EST (from 01:59:59 EDT)
//	Europe/Berlin       Sun Mar 29 01:00:00 2026 UT = Sun Mar 29 03:00:00 2026 CEST (from 01:59:59 CET)
//	Europe/Berlin       Sun Oct 25 01:00:00 2026 UT = Sun Oct 25 02:00:00 2026 CET (from 02:59:59 CEST)
//	Australia/Lord_Howe Sat Apr  4 15:00:00 2026 UT = Sun Apr  5 01:30:00 2026 +1030 (from 01:59:59 +11)
//	Australia/Lord_Howe Sat Oct  3 15:30:00 2026 UT = Sun Oct  4 02:30:00 2026 +11 (from 01:59:59 +1030)
//	America/Santiago    Sun Apr  5 03:00:00 2026 UT = Sat Apr  4 23:00:00 2026 -04 (from 23:59:59 -03)
//	America/Santiago    Sun Sep  6 04:00:00 2026 UT = Sun Sep  6 01:00:00 2026 -03 (from 23:59:59 -04)
var dstCases = []struct {
	name, zone, spec, from string
	want                   []string // UTC
}{
	// Spring forward: the skipped wall-clock time happens at the first
	// instant after the gap, once.
	{"New York daily 02:30 on the spring-forward day", "America/New_York", "30 2 * * *", "2026-03-07 00:00",
		[]string{"2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30"}},
	{"New York */15 across the gap fires once at 03:00", "America/New_York", "*/15 * * * *", "2026-03-08 06:30",
		[]string{"2026-03-08 06:45", "2026-03-08 07:00", "2026-03-08 07:15"}},
	{"Berlin daily 02:30 on the spring-forward day", "Europe/Berlin", "30 2 * * *", "2026-03-28 00:00",
		[]string{"2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"}},
	{"Lord Howe daily 02:15 in its 30-minute gap", "Australia/Lord_Howe", "15 2 * * *", "2026-10-02 12:00",
		[]string{"2026-10-02 15:45", "2026-10-03 15:30", "2026-10-04 15:15"}},
	{"Lord Howe */15 across its gap", "Australia/Lord_Howe", "*/15 * * * *", "2026-10-03 15:20",
		[]string{"2026-10-03 15:30", "2026-10-03 15:45"}},
	{"Santiago daily midnight, which its spring-forward day lacks", "America/Santiago", "0 0 * * *", "2026-09-05 00:00",
		[]string{"2026-09-05 04:00", "2026-09-06 04:00", "2026-09-07 03:00"}},
	// Fall back: the repeated wall-clock time happens once, at its first
	// instant.
	{"New York */15 through the repeated hour", "America/New_York", "*/15 * * * *", "2026-11-01 04:45",
		[]string{"2026-11-01 05:00", "2026-11-01 05:15", "2026-11-01 05:30", "2026-11-01 05:45", "2026-11-01 07:00"}},
	{"New York daily 01:30 on the fall-back day", "America/New_York", "30 1 * * *", "2026-10-31 00:00",
		[]string{"2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30"}},
	{"New York */15 from inside the repeated hour's second pass", "America/New_York", "*/15 * * * *", "2026-11-01 06:20",
		[]string{"2026-11-01 07:00", "2026-11-01 07:15"}},
	{"Berlin hourly through the repeated hour", "Europe/Berlin", "0 * * * *", "2026-10-24 23:30",
		[]string{"2026-10-25 00:00", "2026-10-25 02:00", "2026-10-25 03:00"}},
	{"Berlin daily 02:30 on the fall-back day", "Europe/Berlin", "30 2 * * *", "2026-10-24 12:00",
		[]string{"2026-10-25 00:30", "2026-10-26 01:30"}},
	{"Lord Howe daily 01:45 in its repeated half hour", "Australia/Lord_Howe", "45 1 * * *", "2026-04-04 12:00",
		[]string{"2026-04-04 14:45", "2026-04-05 15:15"}},
	{"Santiago daily 23:30, repeated on its fall-back evening", "America/Santiago", "30 23 * * *", "2026-04-04 12:00",
		[]string{"2026-04-05 02:30", "2026-04-06 03:30"}},
	// Seconds field and descriptors.
	{"six fields: every 20 s", "UTC", "*/20 * * * * *", "2026-01-01 00:00",
		[]string{"2026-01-01 00:00:20", "2026-01-01 00:00:40", "2026-01-01 00:01"}},
	{"@daily in Berlin across its spring forward", "Europe/Berlin", "@daily", "2026-03-28 12:00",
		[]string{"2026-03-28 23:00", "2026-03-29 22:00"}},
}

func TestNextAcrossDaylightSaving(t *testing.T) {
	for _, c := range dstCases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, c.zone)
			if err != nil {
				t.Fatal(err)
			}
			at := parseUTC(t, c.from)
			for i, w := range c.want {
				n, err := s.Next(at, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				if want := parseUTC(t, w); !n.Equal(want) {
					t.Fatalf("occurrence %d after %s: %s (%s), want %s", i+1, at.UTC(), n.UTC(), n, want)
				}
				at = n
			}
		})
	}
}

func parseUTC(t *testing.T, s string) time.Time {
	t.Helper()
	if strings.Count(s, ":") == 2 {
		u, err := time.Parse("2006-01-02 15:04:05", s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	return utc(t, s)
}

// An @every interval is an absolute duration: daylight saving changes
// nothing.
func TestEveryIgnoresDaylightSaving(t *testing.T) {
	s, err := Parse("@every 1h", "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	anchor := utc(t, "2026-03-08 05:00") // 00:00 EST
	at := anchor
	for _, w := range []string{"2026-03-08 06:00", "2026-03-08 07:00", "2026-03-08 08:00"} {
		if at, err = s.Next(at, anchor); err != nil || !at.Equal(utc(t, w)) {
			t.Fatalf("got %s %v, want %s", at, err, w)
		}
	}
	if n, _ := s.Next(anchor.Add(-time.Hour), anchor); !n.Equal(anchor) {
		t.Fatalf("before the anchor: %s, want the anchor", n)
	}
}

// Over a whole year of a zone with daylight saving, occurrences only move
// forward, each on a quarter hour of the wall clock (the end of a gap is
// one: 03:00).
func TestNextOverAYear(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Australia/Lord_Howe", "America/Santiago"} {
		s, err := Parse("*/15 * * * *", zone)
		if err != nil {
			t.Fatal(err)
		}
		at := utc(t, "2026-01-01 00:00")
		n := 0
		for at.UTC().Year() < 2027 {
			next, err := s.Next(at, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if !next.After(at) {
				t.Fatalf("%s: %s after %s", zone, next, at)
			}
			if m := next.In(s.Zone()).Minute(); m%15 != 0 {
				t.Fatalf("%s: %s is not on a quarter hour", zone, next.In(s.Zone()))
			}
			at = next
			n++
		}
		// 365 days of 96 quarter hours, less those a spring-forward gap
		// skips (they collapse into the one at the gap's end): four in New
		// York and Santiago, two in Lord Howe; a repeated one counts once.
		want := 365*96 - 4
		if zone == "Australia/Lord_Howe" {
			want = 365*96 - 2
		}
		if n != want {
			t.Errorf("%s: %d occurrences in 2026, want %d", zone, n, want)
		}
	}
}

func TestParseRefusesWithAReason(t *testing.T) {
	for _, c := range []struct{ spec, zone, want string }{
		{"61 * * * *", "UTC", "61"},
		{"* * * *", "UTC", "expected"},
		{"0 9 * * *", "Mars/Olympus", "unknown time zone"},
		{"0 9 * * *", "Local", "differs between machines"},
		{"@every 500ms", "UTC", "shortest"},
		{"@every soon", "UTC", "duration"},
		{"TZ=Europe/Berlin 0 9 * * *", "UTC", "zone"},
		{"", "UTC", "empty"},
	} {
		if _, err := Parse(c.spec, c.zone); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q, %q) = %v, want an error about %q", c.spec, c.zone, err, c.want)
		}
	}
}

func TestNoOccurrence(t *testing.T) {
	s, err := Parse("0 0 30 2 *", "UTC") // February 30
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(utc(t, "2026-01-01 00:00"), time.Time{}); !errors.Is(err, ErrNoOccurrence) {
		t.Fatalf("got %v, want ErrNoOccurrence", err)
	}
}

func TestLatest(t *testing.T) {
	s, err := Parse("@every 1s", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	anchor := utc(t, "2026-01-01 00:00")
	after, until := anchor.Add(10*time.Second), anchor.Add(20*time.Second+500*time.Millisecond)
	occ, total, err := s.Latest(after, until, anchor, 3)
	if err != nil || total != 10 || len(occ) != 3 || !occ[2].Equal(anchor.Add(20*time.Second)) || !occ[0].Equal(anchor.Add(18*time.Second)) {
		t.Fatalf("Latest: %v total %d %v", occ, total, err)
	}
	// A month of an every-second schedule: the latest one, and the count.
	until = anchor.Add(30 * 24 * time.Hour)
	occ, total, err = s.Latest(anchor, until, anchor, 1)
	if err != nil || len(occ) != 1 || !occ[0].Equal(until) || total != maxCount {
		t.Fatalf("a month: %v total %d %v", occ, total, err)
	}
	c, _ := Parse("0 9 * * *", "Europe/Berlin")
	occ, total, err = c.Latest(utc(t, "2026-03-01 00:00"), utc(t, "2026-04-01 00:00"), time.Time{}, 2)
	if err != nil || total != 31 || len(occ) != 2 || !occ[1].Equal(utc(t, "2026-03-31 07:00")) || !occ[0].Equal(utc(t, "2026-03-30 07:00")) {
		t.Fatalf("Berlin in March: %v total %d %v", occ, total, err)
	}
}
