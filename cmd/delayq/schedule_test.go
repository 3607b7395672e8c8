package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
