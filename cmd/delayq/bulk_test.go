package main_test

import (
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
	if code != 0 || !strings.Contains(stdout, "cancelled 100000 (") || !strings.Contains(stdout, "by an earlier run of this filter") {
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
