package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestScheduleFromTheCLI: preview without Redis, set from flags and from
// a file (a bad line named, the others set), show, list, pause, resume,
// delete; bad input exits 2 naming the field and stores nothing.
func TestScheduleFromTheCLI(t *testing.T) {
	w := newWorld(t, 2)
	out, _, code := w.delayq("", "schedule", "preview", "30 2 * * *", "--zone", "America/New_York", "-n", "2")
	if code != 0 || !strings.Contains(out, "in America/New_York") || !strings.Contains(out, "02:30:00 E") {
		t.Fatalf("preview: exit %d %q", code, out)
	}
	// --start: the days around next March's change, not the next days.
	out, _, code = w.delayq("", "schedule", "preview", "0 10 * * *", "--zone", "Europe/Berlin", "--start", "2031-03-29T00:00:00Z", "-n", "3")
	if code != 0 || !strings.Contains(out, "2031-03-29T09:00:00Z") || !strings.Contains(out, "2031-03-30 10:00:00 CEST") ||
		strings.Contains(out, "2031-03-28") || strings.Count(out, "2031-03-") != 6 {
		t.Errorf("preview --start: exit %d %q", code, out)
	}
	out, _, code = w.delayq("", "schedule", "preview", "@every 1h", "--start", "2031-01-01T00:30:00Z", "--end", "2031-01-01T02:00:00Z", "-n", "5")
	if code != 0 || strings.Count(out, "2031-01-01T") != 2 || !strings.Contains(out, "2031-01-01T01:30:00Z") {
		t.Errorf("preview --start --end: exit %d %q", code, out)
	}
	if _, e, code := w.delayq("", "schedule", "preview", "@daily", "--topic", "t"); code != 2 || !strings.Contains(e, "not --topic") {
		t.Errorf("preview with a flag it ignores: exit %d %q, want 2 naming it", code, e)
	}
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"schedule", "set", "z", "@daily", "--zone", "Mars/Olympus", "--topic", "t"}, "invalid zone"},
		{[]string{"schedule", "set", "m", "61 * * * *", "--topic", "t"}, "invalid spec"},
		{[]string{"schedule", "set", "f", "0 0 30 2 *", "--topic", "t"}, "invalid spec"},
		{[]string{"schedule", "set", "e", "@daily", "--start", "48h", "--end", "24h", "--topic", "t"}, "invalid end"},
		{[]string{"schedule", "set", "bad name", "@daily", "--topic", "t"}, "invalid name"},
		{[]string{"schedule", "set", "d", "@daily"}, "invalid message.destination"},
		{[]string{"schedule", "set", "s", "@daily", "--topic", "t", "--start", "soon"}, "invalid start"},
		{[]string{"schedule", "preview", "@daily", "--start", "soon"}, "invalid start"},
	} {
		if _, e, code := w.delayq("", c.args...); code != 2 || !strings.Contains(e, c.field) {
			t.Errorf("%v: exit %d %q, want 2 naming %s", c.args, code, e, c.field)
		}
	}
	if out, _, code := w.delayq("", "schedule"); code != 0 || !strings.Contains(out, "no schedules") {
		t.Fatalf("after bad input: exit %d %q", code, out)
	}
	out, e, code := w.delayq("", "schedule", "set", "billing", "0 0 1 * *", "--zone", "Europe/Berlin", "--topic", "billing.run",
		"--missed", "latest", "-n", "2")
	if code != 0 || !strings.Contains(out, "billing.run") || !strings.Contains(out, "00:00:00 CE") || !strings.Contains(e, "schedule set") {
		t.Fatalf("set: exit %d %q %q", code, out, e)
	}
	file := filepath.Join(t.TempDir(), "schedules.jsonl")
	lines := `{"name":"tick","spec":"@every 15m","message":{"topic":"t","body":"x"}}
{"name":"bad","spec":"@every 15m","message":{"topic":"t"},"colour":"red"}
{"name":"weekly","spec":"@weekly","zone":"Australia/Lord_Howe","message":{"exchange":"ex","routing_key":"rk"}}
`
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	out, e, code = w.delayq("", "schedule", "set", "--file", file)
	if code != 1 || !strings.Contains(out, "2 schedule(s) set, 1 line(s) refused") || !strings.Contains(e, "line 2") || !strings.Contains(e, "colour") {
		t.Fatalf("set --file: exit %d %q %q", code, out, e)
	}
	out, _, code = w.delayq("", "schedule")
	if code != 0 || !strings.Contains(out, "billing") || !strings.Contains(out, "tick") || !strings.Contains(out, "weekly") || strings.Contains(out, "bad") {
		t.Fatalf("list: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "schedule", "pause", "tick"); code != 0 || !strings.Contains(out, "paused") {
		t.Errorf("pause: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "schedule", "resume", "tick"); code != 0 || !strings.Contains(out, "running") || !strings.Contains(out, "tick@") {
		t.Errorf("resume: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "schedule", "show", "tick", "--json"); code != 0 || !strings.Contains(out, `"spec": "@every 15m"`) {
		t.Errorf("show --json: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "schedule", "delete", "tick"); code != 0 {
		t.Errorf("delete: exit %d %q", code, out)
	}
	if _, e, code = w.delayq("", "schedule", "show", "tick"); code != 1 || !strings.Contains(e, "schedule not found") {
		t.Errorf("show after delete: exit %d %q", code, e)
	}
}

// TestSchedulesSurviveKillsAndAResize: 200 every-second schedules and 50
// six-field cron schedules on 3 scanner processes for 60 s, two of them
// SIGKILLed and M resized 8 -> 16 meanwhile: every occurrence in the
// window published (one message id each; a second delivery only as a
// redelivery of that id), none early, none missing.
func TestSchedulesSurviveKillsAndAResize(t *testing.T) {
	w := newWorld(t, 8, "DELAYQ_LEASE=3s")
	w.withConsul(t)
	w.consume()
	w.setM(8)
	scanners := []*proc{w.scan(), w.scan(), w.scan()}
	var lines strings.Builder
	specs := map[string]string{}
	for j := range 200 {
		name := fmt.Sprintf("every-%d", j)
		specs[name] = "@every 1s"
		fmt.Fprintf(&lines, `{"name":%q,"spec":"@every 1s","message":{"exchange":%q,"routing_key":"rk"}}`+"\n", name, w.exchange)
	}
	for j := range 50 {
		name := fmt.Sprintf("cron-%d", j)
		specs[name] = "*/2 * * * * *"
		fmt.Fprintf(&lines, `{"name":%q,"spec":"*/2 * * * * *","message":{"exchange":%q,"routing_key":"rk"}}`+"\n", name, w.exchange)
	}
	if out, e, code := w.delayq(lines.String(), "schedule", "set", "--file", "-"); code != 0 {
		t.Fatalf("schedule set: exit %d %s %s", code, out, e)
	}
	from := time.Now().Add(2 * time.Second) // all created by then
	run := 60 * time.Second
	at := func(d time.Duration) { time.Sleep(time.Until(from.Add(d))) } // the faults come at set times: the test is about them
	at(15 * time.Second)
	scanners[0].kill()
	scanners = append(scanners, w.scan())
	at(25 * time.Second)
	w.setM(16)
	at(35 * time.Second)
	scanners[1].kill()
	scanners = append(scanners, w.scan())
	at(run)
	to := time.Now()
	scraped := scanners[len(scanners)-1].scrape(t)
	for _, want := range []string{`delayq_schedules{namespace="` + w.ns + `"} 250`, `delayq_schedules_up{namespace="` + w.ns + `"} 1`,
		"delayq_schedule_occurrences_total "} {
		if !strings.Contains(scraped, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for name := range specs {
		if _, e, code := w.delayq("", "schedule", "delete", name); code != 0 {
			t.Fatalf("delete %s: %s", name, e)
		}
	}
	// @every counts from each schedule's creation, not from whole seconds:
	// map each schedule's published times onto its own phase.
	shardtest.WaitFor(t, 30*time.Second, func() bool { return w.missingOccurrences(specs, from, to) == "" },
		func() string { return w.missingOccurrences(specs, from, to) })
	w.mu.Lock()
	defer w.mu.Unlock()
	redelivered := 0
	for id, rs := range w.got {
		name, msText, ok := strings.Cut(id, "@")
		if _, known := specs[name]; !ok || !known {
			continue
		}
		var ms int64
		fmt.Sscan(msText, &ms)
		if rs[0].at.UnixMilli() < ms || rs[0].dueMs != ms {
			t.Errorf("%s: received %s, due header %d: early or wrong", id, rs[0].at.Format(time.StampMilli), rs[0].dueMs)
		}
		for _, r := range rs[1:] {
			if r.attempt < 2 {
				t.Errorf("%s delivered again as a first attempt: doubled", id)
			}
			redelivered++
		}
	}
	t.Logf("%d occurrences of %d schedules in %s, %d redelivered after the kills; %d scanners run", len(w.got), len(specs), to.Sub(from).Round(time.Second), redelivered, len(scanners))
}

// missingOccurrences says which schedules lack an occurrence between
// their first one after from and their last one before to - 1 s ("" when
// none does).
func (w *world) missingOccurrences(specs map[string]string, from, to time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	byName := map[string][]int64{}
	for id := range w.got {
		name, msText, ok := strings.Cut(id, "@")
		if _, known := specs[name]; !ok || !known {
			continue
		}
		var ms int64
		fmt.Sscan(msText, &ms)
		byName[name] = append(byName[name], ms)
	}
	var miss []string
	for name, spec := range specs {
		step := int64(1000)
		if spec != "@every 1s" {
			step = 2000
		}
		got := map[int64]bool{}
		first := int64(-1)
		for _, ms := range byName[name] {
			got[ms] = true
			if ms >= from.UnixMilli() && (first < 0 || ms < first) {
				first = ms
			}
		}
		if first < 0 || first > from.UnixMilli()+step {
			miss = append(miss, fmt.Sprintf("%s: no occurrence at the start (first %d)", name, first))
			continue
		}
		for ms := first; ms <= to.Add(-time.Second).UnixMilli(); ms += step {
			if !got[ms] {
				miss = append(miss, fmt.Sprintf("%s@%d", name, ms))
			}
		}
	}
	if len(miss) > 10 {
		return fmt.Sprintf("%d missing, e.g. %v", len(miss), miss[:10])
	}
	if len(miss) > 0 {
		return fmt.Sprintf("missing: %v", miss)
	}
	return ""
}

// TestScheduleFiringSurvivesAKill: a scanner SIGKILLs itself right after
// firing an occurrence (its next one stored, itself not yet published),
// once with one schedule and once in the middle of a burst (300
// schedules firing at the same instant every second, killed at the 450th
// firing); another scanner publishes what it had in hand once the lease
// expires, and the schedules go on: every occurrence once, none early,
// none missing, the last of them within 6 s of its time.
func TestScheduleFiringSurvivesAKill(t *testing.T) {
	for _, c := range []struct {
		name      string
		schedules int
		killAt    int
	}{{"one schedule", 1, 3}, {"a burst", 300, 450}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, 4, "DELAYQ_LEASE=2s")
			w.consume()
			// Every schedule's phase, far enough out that a loaded machine
			// writes all 300 before it (one written after its start would
			// begin a second later).
			start := time.Now().Add(5 * time.Second).Truncate(time.Second)
			specs := map[string]string{}
			var lines strings.Builder
			for j := range c.schedules {
				name := fmt.Sprintf("crash-%d", j)
				specs[name] = "@every 1s"
				fmt.Fprintf(&lines, `{"name":%q,"spec":"@every 1s","start_ms":%d,"message":{"exchange":%q,"routing_key":"rk"}}`+"\n",
					name, start.UnixMilli(), w.exchange)
			}
			if out, e, code := w.delayq(lines.String(), "schedule", "set", "--file", "-"); code != 0 {
				t.Fatalf("schedule set: %s %s", out, e)
			}
			killed := w.scan(fmt.Sprintf("DELAYQ_TEST_KILL_AT=fired:%d", c.killAt))
			select {
			case <-killed.done:
				killed.done <- nil
			case <-time.After(30 * time.Second):
				t.Fatalf("the scanner did not kill itself at firing %d", c.killAt)
			}
			at := time.Now()
			w.scan()
			// From the first occurrence to 5 s after the kill (the lease of
			// what was in hand expires 2 s after it was claimed).
			to := at.Add(5 * time.Second)
			shardtest.WaitFor(t, 30*time.Second, func() bool { return w.missingOccurrences(specs, start, to) == "" },
				func() string { return w.missingOccurrences(specs, start, to) })
			w.mu.Lock()
			defer w.mu.Unlock()
			recovered := 0 // first delivered by the second scanner after the lease expired
			var latest time.Duration
			for id, rs := range w.got {
				name, msText, _ := strings.Cut(id, "@")
				if _, ok := specs[name]; !ok {
					continue
				}
				var ms int64
				fmt.Sscan(msText, &ms)
				late := rs[0].at.Sub(time.UnixMilli(ms))
				if late < 0 {
					t.Errorf("%s delivered %s early", id, -late)
				}
				if ms <= to.UnixMilli() {
					latest = max(latest, late)
				}
				if rs[0].attempt >= 2 {
					recovered++
				}
			}
			t.Logf("%d occurrences, %d first delivered after the kill's lease expired, the latest %s after its time",
				len(w.got), recovered, latest.Round(time.Millisecond))
			if recovered == 0 {
				t.Error("no occurrence came back after the kill: the kill did not catch one in hand")
			}
			if latest > 6*time.Second {
				t.Errorf("an occurrence arrived %s after its time, want within 6 s (lease 2 s)", latest)
			}
		})
	}
}
