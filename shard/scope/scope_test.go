package scope_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/shard/scope"
)

const file = `# teams
billing  topic=billing.*  topic=invoice  ids=billing-  ids=inv-
search   exchange=search/*  exchange=/search-jobs
ops      topic=ops.*
`

func parse(t *testing.T, s string) *scope.Set {
	t.Helper()
	set, err := scope.ParseSet(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestScopeContains(t *testing.T) {
	set := parse(t, file)
	billing, _ := set.Get("billing")
	search, _ := set.Get("search")
	ops, _ := set.Get("ops")
	for _, c := range []struct {
		sc   *scope.Scope
		t    scope.Target
		want bool
	}{
		{billing, scope.Target{ID: "billing-1", Topic: "billing.refund"}, true},
		{billing, scope.Target{ID: "inv-7", Topic: "invoice"}, true},
		{billing, scope.Target{ID: "inv-7", Topic: "invoice.x"}, false},    // exact topic
		{billing, scope.Target{ID: "x-1", Topic: "billing.refund"}, false}, // id prefix
		{billing, scope.Target{ID: "billing-1", Exchange: "billing.refund", RoutingKey: "k"}, false},
		{search, scope.Target{ID: "a", Exchange: "search", RoutingKey: "any.key"}, true},
		{search, scope.Target{ID: "a", Exchange: "", RoutingKey: "search-jobs"}, true},
		{search, scope.Target{ID: "a", Exchange: "", RoutingKey: "other"}, false},
		{search, scope.Target{ID: "a", Topic: "search"}, false},
		{ops, scope.Target{ID: "anything", Topic: "ops.page"}, true},
		{ops, scope.Target{ID: "anything", Topic: "opsx"}, false},
	} {
		if got := c.sc.Contains(c.t); got != c.want {
			t.Errorf("%s contains %+v: %v, want %v", c.sc.Name, c.t, got, c.want)
		}
		if of := set.Of(c.t); c.want && of != c.sc {
			t.Errorf("Of(%+v) = %v, want %s", c.t, of, c.sc.Name)
		}
	}
	if set.Of(scope.Target{ID: "z", Topic: "nobody.s"}) != nil {
		t.Error("a message of no scope has one")
	}
}

// Bad files are refused naming the line and what is wrong.
func TestParseSetRefuses(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"a topic=\n", "line 1: rule \"topic=\": empty pattern"},
		{"a\n", "line 1: scope \"a\" has no rules"},
		{"a topic=x*y\n", "a * may only end it"},
		{"a ids=\n", "empty prefix"},
		{"a ids=b*\n", "an id prefix is literal"},
		{"a color=red\n", "unknown rule \"color\""},
		{"a topic\n", "want topic=PATTERN"},
		{"a exchange=\n", "empty pattern"},
		{"a exchange=x/\n", "empty pattern"},
		{"a/b topic=x\n", "scope name \"a/b\""},
		{"a topic=x\n\nb topic=y\na topic=z\n", "line 4: scope \"a\" is defined on line 1 already"},
		{"a topic=billing.*\n# c\nb topic=billing.refund\n", "line 3: scope \"b\" overlaps scope \"a\" (line 1)"},
		{"a topic=bill*\nb topic=billing.*\n", "overlaps"},
		{"a ids=x-\nb topic=q\n", "overlaps"}, // a has every destination, b every id
		{"a topic=t ids=ab\nb topic=t ids=a\n", "overlaps"},
		{"a exchange=e\nb exchange=e/k\n", "overlaps"},
		{"a exchange=e*/k.*\nb exchange=ex/k.1\n", "overlaps"},
		{"a topic=t pending=-5\n", "line 1: rule \"pending=-5\": a quota is a whole number of messages, 0 or more"},
		{"a topic=t rate=fast\n", "rule \"rate=fast\": a quota is a whole number"},
		{"a pending=5\n", "scope \"a\" has no rules"},
	} {
		_, err := scope.ParseSet(strings.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.file, err, c.want)
		}
	}
	// Not overlapping: disjoint ids, disjoint topics, topic against exchange.
	parse(t, "a topic=t ids=a-\nb topic=t ids=b-\nc topic=u\nd exchange=u\ne topic=v*\nf topic=w*\n")
	// A quota on a line; the rules read without it.
	set := parse(t, "billing topic=billing.* pending=100 rate=0 ids=b-\nsearch topic=search.*\n")
	if b, _ := set.Get("billing"); b.Quota == nil || b.Quota.MaxPending != 100 || b.Quota.MaxRate != 0 || b.String() != "billing topic=billing.* ids=b-" {
		t.Errorf("billing's quota %+v, rules %q", b.Quota, b.String())
	}
	if s, _ := set.Get("search"); s.Quota != nil {
		t.Errorf("search has no quota, parsed %+v", s.Quota)
	}
}

func TestCaller(t *testing.T) {
	set := parse(t, file)
	billing, _ := set.Get("billing")
	ops, _ := set.Get("ops")
	c := scope.Caller{Holder: "billing-api", Grants: []scope.Grant{{Role: scope.RoleProduce, Scope: billing}, {Role: scope.RoleRead, Scope: ops}}}
	mine := scope.Target{ID: "billing-9", Topic: "billing.refund"}
	theirs := scope.Target{ID: "x", Topic: "ops.page"}
	switch {
	case !c.Can(scope.RoleProduce, mine), !c.Can(scope.RoleRead, mine):
		t.Error("produce in billing cannot produce or read billing's message")
	case c.Can(scope.RoleOperate, mine):
		t.Error("produce may operate")
	case !c.Can(scope.RoleRead, theirs), c.Can(scope.RoleProduce, theirs):
		t.Error("read in ops: wrong on ops' message")
	case c.Global(scope.RoleRead), !c.Scoped(), c.Max() != scope.RoleProduce:
		t.Error("a scoped caller is global, or its max is wrong")
	case !c.CanTopic(scope.RoleProduce, "billing.x"), c.CanTopic(scope.RoleProduce, "ops.x"):
		t.Error("CanTopic")
	case len(c.Scopes(scope.RoleProduce)) != 1 || len(c.Scopes(scope.RoleRead)) != 2:
		t.Error("Scopes")
	}
	all := scope.Everyone("local")
	if !all.Global(scope.RoleAdmin) || all.Scoped() || !all.Can(scope.RoleAdmin, theirs) {
		t.Error("Everyone is not an admin of everything")
	}
	if (scope.Caller{}).Can(scope.RoleRead, mine) || (scope.Caller{}).Scoped() {
		t.Error("the zero caller may read")
	}
	for _, s := range []string{"read", "produce", "operate", "admin"} {
		if r, err := scope.ParseRole(s); err != nil || r.String() != s {
			t.Errorf("role %q: %v %v", s, r, err)
		}
	}
	if _, err := scope.ParseRole("root"); err == nil {
		t.Error("role root accepted")
	}
}

// FuzzParseSet: any file either parses into scopes no message is in two
// of, or is refused naming a line; a parsed scope's String reads back as
// itself.
func FuzzParseSet(f *testing.F) {
	f.Add(file)
	f.Add("a topic=x*\nb topic=y ids=q\n")
	f.Add("a exchange=/k*\n")
	f.Fuzz(func(t *testing.T, s string) {
		set, err := scope.ParseSet(strings.NewReader(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "scopes") {
				t.Fatalf("error without its place: %v", err)
			}
			return
		}
		for _, sc := range set.All() {
			back, err := scope.ParseSet(strings.NewReader(sc.String()))
			if err != nil || len(back.All()) != 1 || back.All()[0].String() != sc.String() {
				t.Fatalf("%q reads back as %v, %v", sc.String(), back, err)
			}
		}
		// Probe: a message made of a scope's own words is in at most one.
		for _, sc := range set.All() {
			for _, w := range strings.Fields(sc.String()) {
				_, v, _ := strings.Cut(w, "=")
				v = strings.TrimSuffix(v, "*")
				for _, tg := range []scope.Target{{ID: v, Topic: v}, {ID: v, Exchange: v, RoutingKey: v}} {
					n := 0
					for _, o := range set.All() {
						if o.Contains(tg) {
							n++
						}
					}
					if n > 1 {
						t.Fatalf("%+v is in %d scopes of %q", tg, n, s)
					}
				}
			}
		}
	})
}

// BenchmarkOf: the scope of a message among 100 scopes, as a scanner
// looks it up for each message it publishes (go test -bench Of
// ./shard/scope/).
func BenchmarkOf(b *testing.B) {
	var file strings.Builder
	for i := range 100 {
		fmt.Fprintf(&file, "team%d topic=team%d.* ids=t%d-\n", i, i, i)
	}
	set, err := scope.ParseSet(strings.NewReader(file.String()))
	if err != nil {
		b.Fatal(err)
	}
	targets := make([]scope.Target, 64)
	for j := range targets {
		targets[j] = scope.Target{ID: fmt.Sprintf("t%d-%d", j, j), Topic: fmt.Sprintf("team%d.event", j)}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if set.Of(targets[i%len(targets)]) == nil {
			b.Fatal("no scope")
		}
	}
}
