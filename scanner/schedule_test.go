package scanner_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/schedule"
	"github.com/delayq/delayq/shard/shardtest"
)

// occurrences are the nominal times (unix ms) of schedule name's
// occurrences delivered so far, in order, each checked: never early, its
// headers naming the schedule and its time, its id name@time.
func (f *fleet) occurrences(name string) []int64 {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int64
	for id, ds := range f.got {
		at, ok := strings.CutPrefix(id, name+"@")
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			f.t.Errorf("occurrence id %q", id)
			continue
		}
		d := ds[0]
		if got, _ := d.raw.Headers[shard.HeaderSchedule].(string); got != name {
			f.t.Errorf("%s: %s header %q", id, shard.HeaderSchedule, got)
		}
		if got, _ := d.raw.Headers[shard.HeaderNominalMs].(int64); got != ms {
			f.t.Errorf("%s: %s header %d", id, shard.HeaderNominalMs, got)
		}
		if d.at.UnixMilli() < ms {
			f.t.Errorf("%s delivered %d ms early", id, ms-d.at.UnixMilli())
		}
		out = append(out, ms)
	}
	slices.Sort(out)
	return out
}

// Two scanner processes fire every-second and six-field cron schedules:
// every occurrence once, in order, none early, none missing.
func TestSchedulesFireEveryOccurrenceOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 8}, rabbit.URL)
	newFleetSharing(t, f, scanner.Config{Goroutines: 8})
	msg := shard.Message{Exchange: f.exchange, RoutingKey: "rk", Body: []byte("tick")}
	specs := map[string]string{}
	for j := range 20 {
		specs[fmt.Sprintf("every-%d", j)] = "@every 1s"
	}
	for j := range 5 {
		specs[fmt.Sprintf("cron-%d", j)] = "*/2 * * * * *"
	}
	created := time.Now()
	for name, spec := range specs {
		if _, err := f.prod.UpsertSchedule(t.Context(), shard.Schedule{Name: name, Spec: spec, Message: msg}); err != nil {
			t.Fatal(err)
		}
	}
	until := created.Add(5 * time.Second)
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		for name := range specs {
			occ := f.occurrences(name)
			if len(occ) == 0 || occ[len(occ)-1] < until.UnixMilli() {
				return false
			}
		}
		return true
	}, func() string { return "the schedules did not fire for 5 s" })
	for name, spec := range specs {
		occ := f.occurrences(name)
		step := int64(1000)
		if strings.HasPrefix(spec, "*/2") {
			step = 2000
			if occ[0]%2000 != 0 {
				t.Errorf("%s: first occurrence %d is not on an even second", name, occ[0])
			}
		}
		for j := 1; j < len(occ); j++ {
			if occ[j]-occ[j-1] != step {
				t.Errorf("%s: %d then %d: want one every %d ms", name, occ[j-1], occ[j], step)
			}
		}
	}
}

// The fleet stopped across ten occurrences of every-second schedules:
// skip publishes none of them, latest the last, all each of them; the
// schedules go on after.
func TestMissedRunPolicies(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 8}, rabbit.URL)
	msg := shard.Message{Exchange: f.exchange, RoutingKey: "rk"}
	// Three seconds out: the fleet's first claims come after the start of
	// every test in the package, when a loaded machine is slowest.
	start := time.Now().Add(3 * time.Second).Truncate(time.Second)
	policies := []string{schedule.MissedSkip, schedule.MissedLatest, schedule.MissedAll}
	for _, p := range policies {
		if _, err := f.prod.UpsertSchedule(t.Context(), shard.Schedule{Name: p, Spec: "@every 1s", Start: start, Missed: p,
			Grace: 500 * time.Millisecond, Message: msg}); err != nil {
			t.Fatal(err)
		}
	}
	// Fires start+0 .. start+2, stops before start+3.
	time.Sleep(time.Until(start.Add(2300 * time.Millisecond))) // the outage is by the clock: the test is about time
	stopCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.scanner.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		if occ := f.occurrences(p); len(occ) != 3 || occ[0] != start.UnixMilli() {
			t.Fatalf("%s before the outage: %v, want the 3 from %d", p, occ, start.UnixMilli())
		}
	}
	// Down for start+3 .. start+12; back at start+12.6, so at the first
	// claim (within 400 ms) those ten are more than the grace late, and
	// start+13 is not yet due.
	time.Sleep(time.Until(start.Add(12600 * time.Millisecond)))
	startScanner(t, f, scanner.Config{Goroutines: 8}, rabbit.URL, f.store)
	after := start.Add(15 * time.Second).UnixMilli()
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		for _, p := range policies {
			if occ := f.occurrences(p); len(occ) == 0 || occ[len(occ)-1] < after {
				return false
			}
		}
		return true
	}, func() string { return "the schedules did not go on after the outage" })
	want := map[string]int{schedule.MissedSkip: 0, schedule.MissedLatest: 1, schedule.MissedAll: 10}
	from, to := start.Add(3*time.Second).UnixMilli(), start.Add(12*time.Second).UnixMilli()
	for _, p := range policies {
		in := 0
		occ := f.occurrences(p)
		for _, ms := range occ {
			if ms >= from && ms <= to {
				in++
			}
		}
		if in != want[p] {
			t.Errorf("%s: %d of the ten missed occurrences published, want %d (%v)", p, in, want[p], occ)
		}
		if p == schedule.MissedLatest && !slices.Contains(occ, to) {
			t.Errorf("latest: the last missed occurrence (%d) not published: %v", to, occ)
		}
		if !slices.Contains(occ, after) {
			t.Errorf("%s: %d after the outage not published: %v", p, after, occ)
		}
	}
}

// A schedule's spec changed 20 times in 10 s, between even and odd
// seconds, while other messages flow: each occurrence published is one of
// the spec in force at its time, none doubled, none of a spec's dropped
// while it was in force.
func TestScheduleChangesNeverDoubleOrDrop(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 8}, rabbit.URL)
	msg := shard.Message{Exchange: f.exchange, RoutingKey: "rk"}
	specs := []string{"*/2 * * * * *", "1-59/2 * * * * *"} // even seconds, odd seconds
	parity := func(ms int64) int { return int(ms/1000) % 2 }
	var changes []int64 // Redis time of each change
	load := f.enqueueAt("load", "t", 2000, time.Now().Add(time.Second), func(m *shard.Message) {
		m.At = time.Time{}
		m.Delay = time.Second + time.Duration(len(m.ID)%10)*time.Second
	})
	for k := range 20 {
		info, err := f.prod.UpsertSchedule(t.Context(), shard.Schedule{Name: "flip", Spec: specs[k%2], Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, info.Changed.UnixMilli())
		time.Sleep(500 * time.Millisecond) // the changes are by the clock: the test is about them
	}
	end := changes[len(changes)-1]
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		occ := f.occurrences("flip")
		return len(occ) > 0 && occ[len(occ)-1] >= end
	}, func() string { return "no occurrence after the last change" })
	if err := f.store.DeleteSchedule(t.Context(), "flip"); err != nil {
		t.Fatal(err)
	}
	occ := f.occurrences("flip")
	t.Logf("%d occurrences published across 20 changes", len(occ))
	if len(occ) < 3 {
		t.Fatalf("only %d occurrences: %v", len(occ), occ)
	}
	published := map[int64]bool{}
	for _, ms := range occ {
		published[ms] = true
	}
	inForce := func(ms int64) int { // the change in force at ms
		k := 0
		for k+1 < len(changes) && changes[k+1] <= ms {
			k++
		}
		return k
	}
	for _, ms := range occ {
		if ms < changes[0] {
			t.Errorf("occurrence %d before the schedule was created (%d)", ms, changes[0])
			continue
		}
		k := inForce(ms)
		// The next change's own plan may start a few ms before that change
		// takes effect in Redis (it reads the clock first).
		next := k+1 < len(changes) && ms >= changes[k+1]-50 && parity(ms) == (k+1)%2
		// One due in the very millisecond of a change is the old spec's:
		// a change keeps a pending occurrence already due (due <= now:
		// scheduleWriteScript), which its firing publishes.
		tie := k > 0 && ms == changes[k] && parity(ms) == (k-1)%2
		if parity(ms) != k%2 && !next && !tie {
			t.Errorf("occurrence %d: spec %q was in force (changed at %d)", ms, specs[k%2], changes[k])
		}
	}
	// Every second of a spec, well inside the time it was in force.
	for k := range len(changes) - 1 {
		for s := (changes[k] + 50 + 999) / 1000 * 1000; s <= changes[k+1]-50; s += 1000 {
			if parity(s) == k%2 && !published[s] {
				t.Errorf("occurrence %d of spec %q (in force %d..%d) not published: %v", s, specs[k%2], changes[k], changes[k+1], occ)
			}
		}
	}
	f.waitAll(load, 30*time.Second)
}

// Daylight saving through the whole path (schedule, fleet, broker): each
// schedule's chain starts just before a change of 2026 (it is resumed
// with its last occurrence set back to then, and a grace longer than
// that, so nothing counts as missed) and runs up to now as fast as the
// fleet fires; the occurrences around the change are the instants
// written by hand (zdump, see package schedule's tests).
func TestScheduleDaylightSavingThroughTheFleet(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 8}, rabbit.URL)
	msg := shard.Message{Exchange: f.exchange, RoutingKey: "rk"}
	utc := func(s string) int64 {
		u, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return u.UnixMilli()
	}
	cases := []struct {
		name, zone, spec, from, to string
		want                       []string
	}{
		{"ny-spring", "America/New_York", "30 2 * * *", "2026-03-06 12:00", "2026-03-10 00:00",
			[]string{"2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30"}},
		{"ny-spring-15", "America/New_York", "*/15 * * * *", "2026-03-08 06:30", "2026-03-08 07:20",
			[]string{"2026-03-08 06:45", "2026-03-08 07:00", "2026-03-08 07:15"}},
		{"berlin-spring", "Europe/Berlin", "30 2 * * *", "2026-03-28 00:00", "2026-03-31 00:00",
			[]string{"2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"}},
		{"lordhowe-fall", "Australia/Lord_Howe", "45 1 * * *", "2026-04-04 12:00", "2026-04-06 12:00",
			[]string{"2026-04-04 14:45", "2026-04-05 15:15"}},
		{"santiago-fall", "America/Santiago", "30 23 * * *", "2026-04-04 12:00", "2026-04-06 12:00",
			[]string{"2026-04-05 02:30", "2026-04-06 03:30"}},
		{"ny-fall", "America/New_York", "*/15 * * * *", "2026-11-01 04:40", "2026-11-01 07:20",
			[]string{"2026-11-01 04:45", "2026-11-01 05:00", "2026-11-01 05:15", "2026-11-01 05:30", "2026-11-01 05:45", "2026-11-01 07:00", "2026-11-01 07:15"}},
		{"berlin-fall", "Europe/Berlin", "0 * * * *", "2026-10-24 23:30", "2026-10-25 03:30",
			[]string{"2026-10-25 00:00", "2026-10-25 02:00", "2026-10-25 03:00"}},
		{"lordhowe-spring", "Australia/Lord_Howe", "*/15 * * * *", "2026-10-03 15:20", "2026-10-03 16:00",
			[]string{"2026-10-03 15:30", "2026-10-03 15:45", "2026-10-03 16:00"}},
		{"santiago-spring", "America/Santiago", "0 0 * * *", "2026-09-04 12:00", "2026-09-07 12:00",
			[]string{"2026-09-05 04:00", "2026-09-06 04:00", "2026-09-07 03:00"}},
	}
	for _, c := range cases {
		info, err := f.prod.UpsertSchedule(t.Context(), shard.Schedule{Name: c.name, Spec: c.spec, Zone: c.zone,
			Grace: 400 * 24 * time.Hour, Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.PauseSchedule(t.Context(), c.name); err != nil {
			t.Fatal(err)
		}
		if err := redisSrv.Client(t).HSet(t.Context(), shard.ScheduleKey(f.ns, info.Shard, c.name), "last_ms", utc(c.from)).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.ResumeSchedule(t.Context(), c.name); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		shardtest.WaitFor(t, 30*time.Second, func() bool {
			occ := f.occurrences(c.name)
			return len(occ) > 0 && occ[len(occ)-1] > utc(c.to)
		}, func() string { return c.name + ": the chain did not pass " + c.to })
		if err := f.store.DeleteSchedule(t.Context(), c.name); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ms := range f.occurrences(c.name) {
			if ms > utc(c.from) && ms <= utc(c.to) {
				got = append(got, time.UnixMilli(ms).UTC().Format("2006-01-02 15:04"))
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s (%s in %s): %v, want %v", c.name, c.spec, c.zone, got, c.want)
		}
	}
}

// In real time, in a zone half an hour off UTC: a six-field spec naming
// a wall-clock second a few seconds from now fires at that instant.
func TestScheduleFiresAtItsWallClockInRealTime(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, scanner.Config{Goroutines: 4}, rabbit.URL)
	loc, err := time.LoadLocation("Asia/Kolkata") // +05:30
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(4 * time.Second).Truncate(time.Second).In(loc)
	spec := fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
	if _, err := f.prod.UpsertSchedule(t.Context(), shard.Schedule{Name: "kolkata", Spec: spec, Zone: "Asia/Kolkata",
		Message: shard.Message{Exchange: f.exchange, RoutingKey: "rk"}}); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 15*time.Second, func() bool { return len(f.occurrences("kolkata")) == 1 },
		func() string { return "the occurrence at " + at.Format(time.RFC3339) + " did not arrive" })
	if occ := f.occurrences("kolkata"); occ[0] != at.UnixMilli() {
		t.Fatalf("fired for %s, want %s", time.UnixMilli(occ[0]).In(loc), at)
	}
}
