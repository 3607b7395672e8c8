package schedule

import (
	"slices"
	"testing"
	"time"
)

func every(t *testing.T, missed string, graceMs int64) (Rule, Spec) {
	t.Helper()
	r := Rule{Spec: "@every 1s", AnchorMs: 1_000_000, GraceMs: graceMs, Missed: missed}
	sp, err := r.Check()
	if err != nil {
		t.Fatal(err)
	}
	return r, sp
}

func TestFireOnTime(t *testing.T) {
	r, sp := every(t, MissedSkip, 500)
	p, err := r.Fire(sp, 1_005_000, 0, 1_005_400)
	if err != nil || !p.Publish || p.NextMs != 1_006_000 || p.Skipped != 0 || len(p.CatchUp) != 0 {
		t.Fatalf("%+v %v", p, err)
	}
}

// The fleet was down for 10 occurrences (1,005,000 .. 1,014,000) and
// comes back at 1,015,400 with a grace of 500 ms: the one at 1,015,000 is
// late but not missed, so it is the next.
func TestFireMissedPolicies(t *testing.T) {
	for _, c := range []struct {
		missed    string
		catchUp   int
		publish   bool
		published []int64
		skipped   int
	}{
		{MissedSkip, 0, false, nil, 10},
		{MissedLatest, 0, false, []int64{1_014_000}, 9},
		{MissedAll, 0, true, []int64{1_006_000, 1_007_000, 1_008_000, 1_009_000, 1_010_000, 1_011_000, 1_012_000, 1_013_000, 1_014_000}, 0},
		{MissedAll, 3, false, []int64{1_012_000, 1_013_000, 1_014_000}, 7},
	} {
		r, sp := every(t, c.missed, 500)
		r.CatchUp = c.catchUp
		p, err := r.Fire(sp, 1_005_000, 0, 1_015_400)
		if err != nil {
			t.Fatal(err)
		}
		if p.Publish != c.publish || !slices.Equal(p.CatchUp, c.published) || p.Skipped != c.skipped || p.NextMs != 1_015_000 {
			t.Errorf("%s (catch-up %d): %+v, want publish %v, catch-up %v, skipped %d, next 1015000", c.missed, c.catchUp, p,
				c.publish, c.published, c.skipped)
		}
	}
}

// latest with a single missed occurrence publishes that one.
func TestFireLatestAlone(t *testing.T) {
	r, sp := every(t, MissedLatest, 500)
	p, err := r.Fire(sp, 1_005_000, 0, 1_005_800)
	if err != nil || !p.Publish || len(p.CatchUp) != 0 || p.Skipped != 0 || p.NextMs != 1_006_000 {
		t.Fatalf("%+v %v", p, err)
	}
}

// After a change of the rule at fromMs, the next occurrence is the new
// rule's first after the change, not after the occurrence being fired.
func TestFireAfterAChange(t *testing.T) {
	r := Rule{Spec: "*/10 * * * * *", Missed: MissedSkip, GraceMs: 60_000}
	sp, err := r.Check()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	p, err := r.Fire(sp, at+3_000, at+25_000, at+25_100)
	if err != nil || !p.Publish || p.NextMs != at+30_000 {
		t.Fatalf("%+v %v", p, err)
	}
}

func TestResume(t *testing.T) {
	r, sp := every(t, MissedLatest, 500)
	// Paused after 1,004,000 was published, resumed at 1,015,400.
	p, err := r.Resume(sp, 1_004_000, 1_015_400)
	if err != nil || !slices.Equal(p.CatchUp, []int64{1_014_000}) || p.Skipped != 9 || p.NextMs != 1_015_000 {
		t.Fatalf("%+v %v", p, err)
	}
	r.Missed = MissedSkip
	if p, _ = r.Resume(sp, 1_004_000, 1_015_400); len(p.CatchUp) != 0 || p.Skipped != 10 {
		t.Fatalf("skip: %+v", p)
	}
}

func TestEnd(t *testing.T) {
	r, sp := every(t, MissedSkip, 500)
	r.EndMs = 1_006_000
	if p, _ := r.Fire(sp, 1_006_000, 0, 1_006_000); !p.Publish || p.NextMs != -1 {
		t.Fatalf("at the end: %+v", p)
	}
	if f, err := r.First(sp, time.UnixMilli(1_006_500)); err == nil {
		t.Fatalf("after the end: %s", f)
	}
}
