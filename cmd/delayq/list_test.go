package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestListCancelAndClear: list pages through what is scheduled (by topic,
// by id prefix, across pages with --after), cancel -f cancels a file of
// ids, and clear cancels a topic, then everything, only once confirmed.
func TestListCancelAndClear(t *testing.T) {
	w := newWorld(t, 4)
	var b strings.Builder
	for i := range 250 {
		topic := "order.cancel"
		if i%5 == 0 {
			topic = "trial.end"
		}
		fmt.Fprintf(&b, `{"id":"L-%03d","topic":%q,"delay_ms":%d,"body":"x"}`+"\n", i, topic, 3600000+i)
	}
	if out, e, code := w.delayq(b.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, e)
	}
	type page struct {
		Messages []struct {
			ID, Topic, Due string
			Shard          int
		} `json:"messages"`
		Next string `json:"next"`
	}
	list := func(args ...string) page {
		t.Helper()
		out, e, code := w.delayq("", append([]string{"list", "--json"}, args...)...)
		var p page
		if err := json.Unmarshal([]byte(out), &p); code != 0 || err != nil {
			t.Fatalf("list %v: %d %v %s %s", args, code, err, out, e)
		}
		return p
	}
	// Every message once, page after page of 40.
	seen := map[string]bool{}
	args := []string{"--limit", "40"}
	for pages := 0; ; pages++ {
		p := list(args...)
		for _, m := range p.Messages {
			if seen[m.ID] {
				t.Fatalf("%s listed twice", m.ID)
			}
			seen[m.ID] = true
		}
		if p.Next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("listing does not end")
		}
		args = []string{"--limit", "40", "--after", p.Next}
	}
	if len(seen) != 250 {
		t.Fatalf("listed %d of 250", len(seen))
	}
	if p := list("--topic", "trial.end", "--limit", "1000"); len(p.Messages) != 50 || p.Next != "" {
		t.Errorf("--topic trial.end: %d messages, next %q; want 50", len(p.Messages), p.Next)
	}
	if p := list("--prefix", "L-01", "--limit", "1000"); len(p.Messages) != 10 {
		t.Errorf("--prefix L-01: %d messages, want 10", len(p.Messages))
	}
	if out, _, _ := w.delayq("", "list", "--limit", "3"); !strings.Contains(out, "3 shown; more with --after") || !strings.Contains(out, "DESTINATION") {
		t.Errorf("list as a table:\n%s", out)
	}

	// cancel -f: a file of ids, one script call per shard and 64.
	ids := "L-001\nL-002\n\nL-003\nnobody\n"
	if out, e, code := w.delayq(ids, "cancel", "-f", "-"); code != 1 || !strings.Contains(out, "cancelled 3") || !strings.Contains(e, `"nobody": message not found`) {
		t.Errorf("cancel -f: %d %q %q", code, out, e)
	}

	// clear: refused without a terminal or --yes, then by topic, then all.
	if _, e, code := w.delayq("", "clear", "--topic", "trial.end"); code != 2 || !strings.Contains(e, "--yes") {
		t.Errorf("clear without --yes: %d %q", code, e)
	}
	// Bad filters change nothing and say what is wrong.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--yes"}, "invalid filter: it selects every scheduled message"},
		{[]string{"--all", "--topic", "a", "--yes"}, "all goes alone"},
		{[]string{"--from", "soon", "--yes"}, `--invalid from: "soon": give a duration from now`},
		{[]string{"--from", "2h", "--to", "1h", "--yes"}, "invalid to:"},
		{[]string{"--topic", "a", "--dead", "--yes"}, "--dead goes with --all"},
	} {
		if _, e, code := w.delayq("", append([]string{"clear"}, c.args...)...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("clear %v: %d %q, want exit 2 saying %q", c.args, code, e, c.want)
		}
	}
	// Filters combine: every one given must hold. A dry run counts.
	if out, e, code := w.delayq("", "clear", "--topic", "trial.end", "--prefix", "nobody", "--yes"); code != 0 || !strings.Contains(out, "cancelled 0") {
		t.Errorf("clear --topic --prefix: %d %q %q", code, out, e)
	}
	if out, e, code := w.delayq("", "clear", "--topic", "trial.end", "--to", "100h", "--dry-run"); code != 0 || !strings.Contains(out, "would cancel 50 ") {
		t.Errorf("clear --dry-run: %d %q %q", code, out, e)
	}
	if out, e, code := w.delayq("", "clear", "--topic", "trial.end", "--yes"); code != 0 || !strings.Contains(out, "cancelled 50") ||
		!strings.Contains(e, `"action": "bulk cancel", "target": "topic=\"trial.end\"", "count": 50`) {
		t.Errorf("clear --topic: %d %q %q", code, out, e)
	}
	if p := list("--topic", "trial.end"); len(p.Messages) != 0 {
		t.Errorf("after clear --topic, %d trial.end messages remain", len(p.Messages))
	}
	if out, e, code := w.delayq("", "clear", "--all", "--dead", "--yes"); code != 0 || !strings.Contains(out, "cancelled 197") {
		t.Errorf("clear --all: %d %q %q", code, out, e)
	}
	if p := list(); len(p.Messages) != 0 {
		t.Errorf("after clear --all, %d messages remain", len(p.Messages))
	}
}
