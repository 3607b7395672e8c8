package main_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBulkCancelSurvivesItsCaller: 100,000 of 200,000 scheduled messages
// (an id prefix) are cancelled in bulk while two scanners run; the first
// `delayq clear` is SIGKILLed half way (after its 200th page), the same
// command run again ends with the exact total, and none of the cancelled
// messages is delivered while every other one is.
func TestBulkCancelSurvivesItsCaller(t *testing.T) {
	w := newWorld(t, 8)
	w.consume()
	var in strings.Builder
	keep := make([]string, 0, 100_000)
	for i := range 100_000 {
		for _, prefix := range []string{"keep", "campaign-7"} {
			id := fmt.Sprintf("%s-%06d", prefix, i)
			fmt.Fprintf(&in, `{"id":%q,"exchange":%q,"routing_key":"rk","delay_ms":%d,"body":"x"}`+"\n",
				id, w.exchange, 40_000+i%10_000) // due 40-50 s ahead: after the cancels
			if prefix == "keep" {
				keep = append(keep, id)
			}
		}
	}
	start := time.Now()
	if out, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 || !strings.Contains(out, "enqueued 200000") {
		t.Fatalf("enqueue: exit %d %s %s", code, out, e)
	}
	w.scan()
	w.scan()
	cmd := exec.Command(bin, "clear", "--prefix", "campaign-7-", "--yes")
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_TEST_KILL_AT=page:200")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the first clear ended with %v, want SIGKILL after its 200th page:\n%s", err, out)
	}
	left := w.stats().Total.Scheduled
	if left <= 100_000 || left >= 200_000 {
		t.Fatalf("%d scheduled after the killed clear: want some of the campaign cancelled, not all", left)
	}
	stdout, e, code := w.delayq("", "clear", "--prefix", "campaign-7-", "--yes")
	if code != 0 || !strings.Contains(stdout, "cancelled 100000 (") || !strings.Contains(stdout, "by an earlier run of this job") {
		t.Fatalf("clear run again: exit %d %q %q, want cancelled 100000 with the earlier run's share", code, stdout, e)
	}
	if stdout, _, _ := w.delayq("", "clear", "--prefix", "campaign-7-", "--dry-run"); !strings.Contains(stdout, "would cancel 0 ") {
		t.Errorf("a dry run after the clear: %s", stdout)
	}
	if elapsed := time.Since(start); elapsed > 35*time.Second {
		t.Fatalf("enqueue and cancel took %s, past the first due time: the test proves nothing", elapsed)
	}
	t.Logf("killed with %d of 200000 still scheduled; run again: %s", left, strings.TrimSpace(stdout))
	w.waitDelivered(keep, 180*time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.got {
		if strings.HasPrefix(id, "campaign-7-") {
			t.Fatalf("%s was delivered after its cancel", id)
		}
	}
}

// TestBulkRescheduleFromTheCLI: delayq reschedule with a filter moves
// every message it selects to one time, after a count; a dry run moves
// nothing; bad combinations are usage errors.
func TestBulkRescheduleFromTheCLI(t *testing.T) {
	w := newWorld(t, 4)
	var in strings.Builder
	for i := range 100 {
		for _, prefix := range []string{"promo", "other"} {
			fmt.Fprintf(&in, `{"id":"%s-%03d","topic":"t","delay_ms":3600000}`+"\n", prefix, i)
		}
	}
	if _, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatal(e)
	}
	for _, args := range [][]string{
		{"reschedule", "promo-001", "--prefix", "promo-", "--delay", "2h"},
		{"reschedule", "--prefix", "promo-"},
		{"reschedule", "--delay", "2h", "--yes"},
		{"reschedule", "promo-001", "--delay", "2h", "--dry-run"},
		{"reschedule", "--to", "later", "--delay", "2h", "--yes"},
	} {
		if _, e, code := w.delayq("", args...); code != 2 {
			t.Errorf("delayq %v: exit %d, want 2 (usage)\n%s", args, code, e)
		}
	}
	if out, _, _ := w.delayq("", "reschedule", "--prefix", "promo-", "--delay", "2h", "--dry-run"); !strings.Contains(out, "would reschedule 100 ") {
		t.Errorf("dry run: %s", out)
	}
	out, e, code := w.delayq("", "reschedule", "--prefix", "promo-", "--delay", "2h", "--yes")
	if code != 0 || !strings.Contains(out, "rescheduled 100") || !strings.Contains(e, `"action": "bulk reschedule"`) {
		t.Fatalf("reschedule by prefix: exit %d %q %q", code, out, e)
	}
	for id, want := range map[string]time.Duration{"promo-042": 2 * time.Hour, "other-042": time.Hour} {
		var info struct {
			At string `json:"at"`
		}
		o, _, _ := w.delayq("", "inspect", id, "--json")
		must(t, json.Unmarshal([]byte(o), &info))
		at, err := time.Parse(time.RFC3339Nano, info.At)
		must(t, err)
		if d := time.Until(at); d < want-2*time.Minute || d > want {
			t.Errorf("%s is due in %s, want about %s", id, d, want)
		}
	}
}
