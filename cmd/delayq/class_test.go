package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestClassesFromTheCLI: bad classes exit 2 naming the field and change
// nothing; a class set is listed, in stats and in the metrics; a routes
// file's classes are stored when a scanner starts (a class changed at
// runtime stays, with a warning; one the file dropped is deleted); a bad
// class in the file stops the scanner, naming its line.
func TestClassesFromTheCLI(t *testing.T) {
	w := newWorld(t, 2)
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"class", "set", "Urgent", "--topics", "auth.*"}, "invalid name"},
		{[]string{"class", "set", "urgent", "--topics", "auth.*", "--weight", "-1"}, "invalid weight"},
		{[]string{"class", "set", "urgent", "--weight", "3"}, "invalid topics"},
		{[]string{"class", "set", "urgent", "--topics", "a*b"}, "invalid topics[0]"},
		{[]string{"class", "set", "urgent", "--topics", "x", "--strict", "--weight", "2"}, "strict or has a weight"},
		{[]string{"class", "delete"}, "takes the class's name"},
	} {
		if _, e, code := w.delayq("", c.args...); code != 2 || !strings.Contains(e, c.field) {
			t.Errorf("%v: exit %d %q, want 2 naming %s", c.args, code, e, c.field)
		}
	}
	if out, _, code := w.delayq("", "class"); code != 0 || !strings.Contains(out, "no release classes") {
		t.Fatalf("class after bad input: exit %d %q", code, out)
	}
	out, e, code := w.delayq("", "class", "set", "urgent", "--topics", "auth.*,pay.timeout", "--weight", "3")
	if code != 0 || !strings.Contains(out, "urgent: weight 3, topics auth.* pay.timeout") || !strings.Contains(e, `"action": "class set"`) {
		t.Fatalf("class set: exit %d %q %q", code, out, e)
	}
	if _, e, code := w.delayq("", "class", "set", "other", "--topics", "pay.*"); code != 2 || !strings.Contains(e, `overlaps "pay.timeout" of class "urgent"`) {
		t.Errorf("an overlapping class: exit %d %q", code, e)
	}
	if out, _, code = w.delayq("", "class"); code != 0 || !strings.Contains(out, "urgent") || !strings.Contains(out, "weight 3") ||
		!strings.Contains(out, "default") {
		t.Errorf("class: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "stats"); code != 0 || !strings.Contains(out, "class urgent: weight 3, topics auth.* pay.timeout; 0 in its backlog") {
		t.Errorf("stats: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "class", "delete", "urgent"); code != 0 || !strings.Contains(out, "class urgent deleted") {
		t.Errorf("class delete: exit %d %q", code, out)
	}
	if _, e, code := w.delayq("", "class", "delete", "urgent"); code == 0 || !strings.Contains(e, "not found") {
		t.Errorf("class delete twice: exit %d %q", code, e)
	}

	routes := filepath.Join(t.TempDir(), "routes.yaml")
	write := func(body string) {
		if err := os.WriteFile(routes, []byte("routes: {}\nclasses:\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	classes := func() map[string]httpapi.Class {
		out, e, code := w.delayq("", "class", "--json")
		var cs []httpapi.Class
		if err := json.Unmarshal([]byte(out), &cs); code != 0 || err != nil {
			t.Fatalf("class --json: exit %d %v %s %s", code, err, out, e)
		}
		m := map[string]httpapi.Class{}
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	write("  fast: {topics: [otp], strict: true}\n  bulk: {topics: [campaign.*], weight: 0}\n")
	p := w.scan("DELAYQ_ROUTES_FILE="+routes, "DELAYQ_DEFAULT_EXCHANGE="+w.exchange)
	waitForLog(t, p.log, "delayq scan running")
	cs := classes()
	if c := cs["fast"]; !c.Strict || c.ChangedBy != "routes" || cs["bulk"].Weight != 0 {
		t.Fatalf("classes after start: %+v", cs)
	}
	var scraped string
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		scraped = p.scrape(t)
		return strings.Contains(scraped, `delayq_class_weight{class="fast",namespace="`+w.ns+`"} -1`)
	}, func() string { return "no delayq_class_weight of -1 for fast:\n" + scraped })
	for _, want := range []string{`delayq_class_backlog{class="bulk",namespace="` + w.ns + `"} 0`, `delayq_class_up{namespace="` + w.ns + `"} 1`} {
		if !strings.Contains(scraped, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	p.kill()
	if _, e, code := w.delayq("", "class", "set", "fast", "--topics", "otp", "--weight", "5"); code != 0 {
		t.Fatalf("class set: %s", e)
	}
	write("  fast: {topics: [otp], strict: true}\n")
	p = w.scan("DELAYQ_ROUTES_FILE="+routes, "DELAYQ_DEFAULT_EXCHANGE="+w.exchange)
	waitForLog(t, p.log, "the routes file's class is not applied", `"class": "fast"`, `"changed_by": "cli"`)
	waitForLog(t, p.log, `"action": "class delete"`, "class bulk")
	cs = classes()
	if c := cs["fast"]; c.Weight != 5 || c.Strict {
		t.Errorf("fast after a restart with the file's class: %+v, want the runtime weight 5 kept", c)
	}
	if c, ok := cs["bulk"]; ok && !c.Deleted {
		t.Errorf("bulk after it left the file: %+v, want deleted", c)
	}
	p.kill()
	write("  a: {topics: [pay.*]}\n  b: {topics: [pay.timeout]}\n")
	p = w.scan("DELAYQ_ROUTES_FILE=" + routes)
	select {
	case err := <-p.done:
		if err == nil || !strings.Contains(p.log.String(), `line 4: class "b": topic pattern "pay.timeout" overlaps "pay.*" of class "a" (line 3)`) {
			t.Errorf("scan with overlapping classes: %v, %s", err, p.log)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("scan with overlapping classes still runs: %s", p.log)
	}
}
