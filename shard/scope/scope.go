package scope

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Target is what a check needs of a message: its id and destination (a
// topic, or an exchange and routing key).
type Target struct {
	ID, Topic, Exchange, RoutingKey string
}

// pattern is a name (exact) or a prefix followed by * (prefix).
type pattern struct {
	text   string
	prefix bool
}

func parsePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, fmt.Errorf("empty pattern")
	}
	body, star := strings.CutSuffix(s, "*")
	if strings.Contains(body, "*") {
		return pattern{}, fmt.Errorf("pattern %q: a * may only end it", s)
	}
	return pattern{text: body, prefix: star}, nil
}

func (p pattern) match(s string) bool {
	if p.prefix {
		return strings.HasPrefix(s, p.text)
	}
	return s == p.text
}

// overlaps reports whether some name matches both p and q.
func (p pattern) overlaps(q pattern) bool {
	switch {
	case p.prefix && q.prefix:
		return strings.HasPrefix(p.text, q.text) || strings.HasPrefix(q.text, p.text)
	case p.prefix:
		return p.match(q.text)
	case q.prefix:
		return q.match(p.text)
	}
	return p.text == q.text
}

func (p pattern) String() string {
	if p.prefix {
		return p.text + "*"
	}
	return p.text
}

// exchangeRule matches messages addressed to an exchange and routing key.
type exchangeRule struct {
	exchange pattern
	key      pattern // "*" when the rule names no key
}

// Quota is a quota a scopes file line gives: the most messages the
// scope may hold and enqueue a second (0: no limit).
type Quota struct {
	MaxPending, MaxRate int64
}

// Scope is a team's share of a namespace (doc.go).
type Scope struct {
	Name string
	Line int // its line in the scopes file
	// Quota is the scope's quota as the file gives it (pending=N,
	// rate=N), or nil: shard.Store.ApplyScopeQuotas writes it to Redis,
	// where a change made at runtime then stays.
	Quota     *Quota
	topics    []pattern
	exchanges []exchangeRule
	ids       []string
}

// Contains reports whether message t is in the scope: its destination
// matches a topic or exchange rule (any, with none), and its id one of the
// prefixes (any, with none).
func (s *Scope) Contains(t Target) bool {
	return s.HasDestination(t) && s.HasID(t.ID)
}

// HasDestination reports whether t's destination is the scope's, whatever
// its id.
func (s *Scope) HasDestination(t Target) bool {
	if len(s.topics) == 0 && len(s.exchanges) == 0 {
		return true
	}
	if t.Topic != "" {
		return s.HasTopic(t.Topic)
	}
	for _, r := range s.exchanges {
		if r.exchange.match(t.Exchange) && r.key.match(t.RoutingKey) {
			return true
		}
	}
	return false
}

// HasDestinationRules reports whether the scope limits destinations (a
// scope of id prefixes alone covers every destination).
func (s *Scope) HasDestinationRules() bool { return len(s.topics)+len(s.exchanges) > 0 }

// HasTopic reports whether topic is one of the scope's (every topic is,
// for a scope without destination rules).
func (s *Scope) HasTopic(topic string) bool {
	if len(s.topics) == 0 && len(s.exchanges) == 0 {
		return true
	}
	for _, p := range s.topics {
		if p.match(topic) {
			return true
		}
	}
	return false
}

// HasID reports whether id starts with one of the scope's prefixes (every
// id does, for a scope without ids rules).
func (s *Scope) HasID(id string) bool {
	if len(s.ids) == 0 {
		return true
	}
	for _, p := range s.ids {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// HasIDRules reports whether the scope limits ids (a scope of destination
// rules alone covers every id).
func (s *Scope) HasIDRules() bool { return len(s.ids) > 0 }

// String is the scope as its line reads.
func (s *Scope) String() string {
	f := []string{s.Name}
	for _, p := range s.topics {
		f = append(f, "topic="+p.String())
	}
	for _, r := range s.exchanges {
		e := "exchange=" + r.exchange.String()
		if r.exchange.String() == "" || !(r.key.prefix && r.key.text == "") {
			e += "/" + r.key.String() // the default exchange is always written with its key
		}
		f = append(f, e)
	}
	for _, p := range s.ids {
		f = append(f, "ids="+p)
	}
	return strings.Join(f, " ")
}

// overlaps reports whether some message is in both s and o (doc.go).
func (s *Scope) overlaps(o *Scope) bool {
	return s.destinationsOverlap(o) && idsOverlap(s.ids, o.ids)
}

func (s *Scope) destinationsOverlap(o *Scope) bool {
	if len(s.topics)+len(s.exchanges) == 0 || len(o.topics)+len(o.exchanges) == 0 {
		return true
	}
	for _, p := range s.topics {
		for _, q := range o.topics {
			if p.overlaps(q) {
				return true
			}
		}
	}
	for _, r := range s.exchanges {
		for _, q := range o.exchanges {
			if r.exchange.overlaps(q.exchange) && r.key.overlaps(q.key) {
				return true
			}
		}
	}
	return false
}

func idsOverlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, p := range a {
		for _, q := range b {
			if strings.HasPrefix(p, q) || strings.HasPrefix(q, p) {
				return true
			}
		}
	}
	return false
}

// Set is the scopes of a namespace, none of which overlap. A nil *Set has
// no scopes. It is not changed once parsed, and safe for concurrent use.
type Set struct {
	scopes []*Scope
	// byDest caches, for a destination, the scopes it may be in (those
	// whose destination rules match it), so Of checks ids only: a
	// scanner looks up every message it publishes. Up to maxCached
	// destinations; past them Of checks every scope.
	byDest sync.Map // "t\x00topic" or "x\x00exchange\x00key" -> []*Scope
	cached atomic.Int64
}

const maxCached = 10_000

// Get returns the scope called name.
func (s *Set) Get(name string) (*Scope, bool) {
	if s == nil {
		return nil, false
	}
	for _, sc := range s.scopes {
		if sc.Name == name {
			return sc, true
		}
	}
	return nil, false
}

// Of returns the scope message t is in, or nil: at most one is (the scopes
// do not overlap).
func (s *Set) Of(t Target) *Scope {
	if s == nil || len(s.scopes) == 0 {
		return nil
	}
	key := "t\x00" + t.Topic
	if t.Topic == "" {
		key = "x\x00" + t.Exchange + "\x00" + t.RoutingKey
	}
	var cands []*Scope
	if v, ok := s.byDest.Load(key); ok {
		cands = v.([]*Scope)
	} else {
		for _, sc := range s.scopes {
			if sc.HasDestination(t) {
				cands = append(cands, sc)
			}
		}
		if s.cached.Load() < maxCached {
			if _, had := s.byDest.LoadOrStore(key, cands); !had {
				s.cached.Add(1)
			}
		}
	}
	for _, sc := range cands {
		if sc.HasID(t.ID) {
			return sc
		}
	}
	return nil
}

// All returns the scopes in the file's order.
func (s *Set) All() []*Scope {
	if s == nil {
		return nil
	}
	return slices.Clone(s.scopes)
}

// MaxScopes is the most scopes a file may define: each is a label value of
// the per-scope metrics.
const MaxScopes = 1000

// ParseSet reads a scopes file (doc.go): one "NAME RULE..." a line, blank
// lines and lines starting with # skipped. Errors name the line.
func ParseSet(r io.Reader) (*Set, error) {
	set := &Set{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseScope(line, n)
		if err != nil {
			return nil, fmt.Errorf("scopes line %d: %w", n, err)
		}
		for _, o := range set.scopes {
			if o.Name == s.Name {
				return nil, fmt.Errorf("scopes line %d: scope %q is defined on line %d already", n, s.Name, o.Line)
			}
			if o.overlaps(s) {
				return nil, fmt.Errorf("scopes line %d: scope %q overlaps scope %q (line %d): a message could be in both (%s; %s)",
					n, s.Name, o.Name, o.Line, s, o)
			}
		}
		if len(set.scopes) == MaxScopes {
			return nil, fmt.Errorf("scopes line %d: more than %d scopes", n, MaxScopes)
		}
		set.scopes = append(set.scopes, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scopes: %w", err)
	}
	return set, nil
}

// parseScope reads one line of the scopes file.
func parseScope(line string, n int) (*Scope, error) {
	f := strings.Fields(line)
	s := &Scope{Name: f[0], Line: n}
	if err := validName(s.Name); err != nil {
		return nil, err
	}
	if len(f) == 1 {
		return nil, fmt.Errorf("scope %q has no rules: want topic=PATTERN, exchange=EXCHANGE[/KEY-PATTERN] or ids=PREFIX", s.Name)
	}
	for _, rule := range f[1:] {
		k, v, ok := strings.Cut(rule, "=")
		if !ok {
			return nil, fmt.Errorf("rule %q: want topic=PATTERN, exchange=EXCHANGE[/KEY-PATTERN] or ids=PREFIX", rule)
		}
		switch k {
		case "topic":
			p, err := parsePattern(v)
			if err != nil {
				return nil, fmt.Errorf("rule %q: %w", rule, err)
			}
			s.topics = append(s.topics, p)
		case "exchange":
			ex, key, hasKey := strings.Cut(v, "/")
			if v == "" || (hasKey && key == "") {
				return nil, fmt.Errorf("rule %q: empty pattern (the default exchange is exchange=/KEY-PATTERN)", rule)
			}
			r := exchangeRule{exchange: pattern{text: ex}, key: pattern{prefix: true}}
			if ex != "" {
				p, err := parsePattern(ex)
				if err != nil {
					return nil, fmt.Errorf("rule %q: %w", rule, err)
				}
				r.exchange = p
			}
			if hasKey {
				p, err := parsePattern(key)
				if err != nil {
					return nil, fmt.Errorf("rule %q: %w", rule, err)
				}
				r.key = p
			}
			s.exchanges = append(s.exchanges, r)
		case "pending", "rate":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("rule %q: a quota is a whole number of messages, 0 or more", rule)
			}
			if s.Quota == nil {
				s.Quota = &Quota{}
			}
			if k == "pending" {
				s.Quota.MaxPending = n
			} else {
				s.Quota.MaxRate = n
			}
			continue
		case "ids":
			if v == "" {
				return nil, fmt.Errorf("rule %q: empty prefix", rule)
			}
			if strings.Contains(v, "*") {
				return nil, fmt.Errorf("rule %q: an id prefix is literal: no *", rule)
			}
			s.ids = append(s.ids, v)
		default:
			return nil, fmt.Errorf("rule %q: unknown rule %q, want topic, exchange, ids, pending or rate", rule, k)
		}
	}
	if len(s.topics)+len(s.exchanges)+len(s.ids) == 0 {
		return nil, fmt.Errorf("scope %q has no rules: want topic=PATTERN, exchange=EXCHANGE[/KEY-PATTERN] or ids=PREFIX", s.Name)
	}
	return s, nil
}

// validName checks a scope's name: it is a metric label value and appears
// in audit lines and URLs.
func validName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("scope name %q: longer than 64 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("scope name %q: use letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}
