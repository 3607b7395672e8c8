package router_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/delayq/delayq/router"
)

const yamlTable = `# routes
default_exchange: delayq.topics
routes:
  order.cancel: {exchange: orders, routing_key: order.cancel}
  trial.end:
    exchange: ""
    routing_key: trial-reminders
`

func TestResolve(t *testing.T) {
	tab, err := router.Parse([]byte(yamlTable), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ topic, ex, rk, wantEx, wantRK string }{
		{"", "x", "k", "x", "k"},       // explicit wins
		{"", "", "queue", "", "queue"}, // default exchange, by queue name
		{"order.cancel", "", "", "orders", "order.cancel"},
		{"trial.end", "", "", "", "trial-reminders"},
		{"other", "", "", "delayq.topics", "other"}, // default exchange of the table
	} {
		d, err := tab.Resolve(c.topic, c.ex, c.rk)
		if err != nil || d.Exchange != c.wantEx || d.RoutingKey != c.wantRK {
			t.Errorf("Resolve(%q, %q, %q) = %+v, %v", c.topic, c.ex, c.rk, d, err)
		}
	}
	if tab.Len() != 2 {
		t.Errorf("Len = %d", tab.Len())
	}
	bare, _ := router.New("", nil)
	if _, err := bare.Resolve("other", "", ""); !errors.Is(err, router.ErrNoRoute) {
		t.Errorf("no default: %v, want ErrNoRoute", err)
	}
	over, _ := router.Parse([]byte(yamlTable), "override")
	if d, _ := over.Resolve("other", "", ""); d.Exchange != "override" {
		t.Errorf("DELAYQ_DEFAULT_EXCHANGE did not override: %+v", d)
	}
}

func TestParseJSON(t *testing.T) {
	tab, err := router.Parse([]byte(`{"routes": {"a": {"exchange": "x", "routing_key": "k"}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := tab.Resolve("a", "", ""); d.Exchange != "x" || d.RoutingKey != "k" {
		t.Errorf("got %+v", d)
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	for name, c := range map[string]struct{ in, want string }{
		"unknown top field":   {"routes: {}\ncolour: red\n", "line 2"},
		"unknown route field": {"routes:\n  a:\n    exchange: x\n    queue: q\n", `line 4: route "a": unknown field "queue"`},
		"duplicate":           {"routes:\n  a: {exchange: x}\n  a: {exchange: y}\n", "line 3"},
		"not a map":           {"routes:\n  a: orders\n", `line 2: route "a"`},
		"no target":           {"routes:\n  a: {exchange: \"\"}\n", `line 2: route "a": the default exchange`},
		"routes list":         {"routes: [a, b]\n", "line 1: routes"},
		"bad yaml":            {"routes: {a: [\n", "yaml"},
		"long name":           {"routes:\n  a: {exchange: " + strings.Repeat("x", 300) + "}\n", "exchange"},
		"bad expired":         {"routes:\n  a: {exchange: x, expired: later}\n", `line 2: route "a": expired "later": want dead or publish`},
		"negative rate":       {"routes:\n  a: {exchange: x, rate: -5}\n", `line 2: route "a": rate -5: want messages a second`},
		"rate not a number":   {"routes:\n  a:\n    exchange: x\n    rate: fast\n", "line 4"},
		"negative burst":      {"routes:\n  a: {exchange: x, rate: 5, burst: -1}\n", `line 2: route "a": burst -1`},
		"burst without rate":  {"routes:\n  a: {exchange: x, burst: 10}\n", `line 2: route "a": burst 10 without a rate`},
		"classes list":        {"classes: [a]\n", "line 1: classes"},
		"class field":         {"classes:\n  a:\n    topics: [x]\n    share: 3\n", `line 4: class "a": unknown field "share"`},
		"negative weight":     {"classes:\n  a: {topics: [x], weight: -1}\n", `line 2: class "a": invalid weight: -1`},
		"class without topic": {"classes:\n  a: {weight: 2}\n", `line 2: class "a": invalid topics`},
		"strict and weight":   {"classes:\n  a: {topics: [x], weight: 2, strict: true}\n", `line 2: class "a": strict or a weight`},
		"class name":          {"classes:\n  Big: {topics: [x]}\n", `line 2: class "Big": invalid name`},
		"pattern in two":      {"classes:\n  a: {topics: [pay.*]}\n  b: {topics: [x, pay.timeout]}\n", `line 3: class "b": topic pattern "pay.timeout" overlaps "pay.*" of class "a" (line 2)`},
		"default with topics": {"classes:\n  default: {topics: [x]}\n", `line 2: class "default": invalid topics`},
	} {
		_, err := router.Parse([]byte(c.in), "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to contain %q", name, err, c.want)
		}
	}
}

func TestExpiredPolicy(t *testing.T) {
	tb, err := router.Parse([]byte("routes:\n  a: {exchange: x, expired: publish}\n  b: {exchange: y}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := tb.Resolve("a", "", ""); d.Expired != router.ExpiredPublish {
		t.Errorf("a: %+v", d)
	}
	if d, _ := tb.Resolve("b", "", ""); d.Expired != "" {
		t.Errorf("b: %+v", d)
	}
}

func TestRouteLimits(t *testing.T) {
	tb, err := router.Parse([]byte("routes:\n  sms: {exchange: x, rate: 200, burst: 50}\n  slow: {exchange: x, rate: 0.5}\n  b: {exchange: y}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	rs := tb.Routes()
	if d := rs["sms"]; d.Rate != 200 || d.Burst != 50 {
		t.Errorf("sms: %+v", d)
	}
	if d := rs["slow"]; d.Rate != 0.5 || d.Burst != 0 {
		t.Errorf("slow: %+v", d)
	}
	if d := rs["b"]; d.Rate != 0 || len(rs) != 3 {
		t.Errorf("b: %+v of %d routes", d, len(rs))
	}
	delete(rs, "sms") // a copy
	if _, ok := tb.Routes()["sms"]; !ok {
		t.Error("Routes returned the table's own map")
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(p, []byte("routes:\n  a: {exchange: x, bogus: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := router.Load(p, "")
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Load error %v should name the file and line", err)
	}
	if _, err := router.Load(filepath.Join(t.TempDir(), "missing.yaml"), ""); err == nil {
		t.Error("missing file accepted")
	}
	// The example shipped in configs/ must load.
	if _, err := router.Load("../configs/routes.example.yaml", ""); err != nil {
		t.Errorf("configs/routes.example.yaml: %v", err)
	}
}

func TestClasses(t *testing.T) {
	tb, err := router.Parse([]byte("routes: {}\nclasses:\n  urgent: {topics: [auth.*, pay.timeout], weight: 3}\n  first: {topics: [otp], strict: true}\n  default: {weight: 2}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	cs := tb.Classes()
	if u := cs["urgent"].Shard("urgent"); u.Weight != 3 || len(u.Topics) != 2 || u.Strict {
		t.Errorf("urgent: %+v", u)
	}
	if f := cs["first"].Shard("first"); !f.Strict || f.Weight != 1 {
		t.Errorf("first: %+v", f)
	}
	if d := cs["default"].Shard("default"); d.Weight != 2 || d.Topics == nil || len(d.Topics) != 0 {
		t.Errorf("default: %+v", d)
	}
}
