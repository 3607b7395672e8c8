package router

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/delayq/delayq/shard"
)

// ErrNoRoute means a topic has no route and the table has no default
// exchange.
var ErrNoRoute = errors.New("no route for topic")

// Destination is where a message is published.
type Destination struct {
	Exchange   string `yaml:"exchange"`
	RoutingKey string `yaml:"routing_key"`
	// Expired says what becomes of a message of the topic claimed past its
	// deadline: "" or ExpiredDead, the dead set (reason expired); or
	// ExpiredPublish, published all the same, with the header
	// x-delayq-late-ms saying how late, for consumers that decide.
	Expired string `yaml:"expired"`
	// Rate and Burst are the topic's release limit (messages a second, and
	// how many more one second may release after a quiet spell); 0: none.
	// The scanners store it in Redis at start (shard.Store.SetRoutesLimit),
	// where every scanner of the namespace obeys it; a limit changed at
	// runtime (CLI, HTTP, console) stays until changed again.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
}

// The values of Destination.Expired.
const (
	ExpiredDead    = "dead"
	ExpiredPublish = "publish"
)

// Table maps topics to destinations. The zero Table routes only explicit
// destinations.
type Table struct {
	defaultExchange string
	routes          map[string]Destination
	classes         map[string]Class
}

// Class is a release class as the routes file names it (shard.Class):
// its topic patterns and its weight (1 when left out), or strict. The
// scanners store it in Redis at start (shard.Store.SetRoutesClass); a
// class changed at runtime (CLI, HTTP, console) stays until changed
// again.
type Class struct {
	Topics []string `yaml:"topics"`
	Weight *int     `yaml:"weight"`
	Strict bool     `yaml:"strict"`
}

// Shard is the class as shard stores it, named name.
func (c Class) Shard(name string) shard.Class {
	sc := shard.Class{Name: name, Topics: c.Topics, Weight: 1, Strict: c.Strict}
	if c.Weight != nil {
		sc.Weight = *c.Weight
	}
	if sc.Topics == nil {
		sc.Topics = []string{}
	}
	return sc
}

// Classes returns a copy of the release classes, by name.
func (t *Table) Classes() map[string]Class {
	if t == nil {
		return nil
	}
	return maps.Clone(t.classes)
}

// New returns a table with the given default exchange ("" for none) and
// routes. It validates like Load.
func New(defaultExchange string, routes map[string]Destination) (*Table, error) {
	t := &Table{defaultExchange: defaultExchange, routes: make(map[string]Destination, len(routes))}
	if err := checkName("default_exchange", defaultExchange); err != nil {
		return nil, err
	}
	for topic, d := range routes {
		if err := checkRoute(topic, d); err != nil {
			return nil, err
		}
		t.routes[topic] = d
	}
	return t, nil
}

// Resolve returns the destination of a message with the given topic, or its
// explicit exchange and routing key when topic is "".
func (t *Table) Resolve(topic, exchange, routingKey string) (Destination, error) {
	if topic == "" {
		return Destination{Exchange: exchange, RoutingKey: routingKey}, nil
	}
	if t != nil {
		if d, ok := t.routes[topic]; ok {
			return d, nil
		}
		if t.defaultExchange != "" {
			return Destination{Exchange: t.defaultExchange, RoutingKey: topic}, nil
		}
	}
	return Destination{}, fmt.Errorf("%w %q", ErrNoRoute, topic)
}

// Routes returns a copy of the topic routes.
func (t *Table) Routes() map[string]Destination {
	if t == nil {
		return nil
	}
	return maps.Clone(t.routes)
}

// Len returns the number of topic routes.
func (t *Table) Len() int { return len(t.routes) }

// DefaultExchange returns the exchange for topics without a route.
func (t *Table) DefaultExchange() string { return t.defaultExchange }

// file is the routes file format (YAML; JSON is valid YAML):
//
//	default_exchange: delayq.topics   # optional
//	routes:
//	  order.cancel: {exchange: orders, routing_key: order.cancel}
//	  trial.end:    {exchange: "", routing_key: trial-reminders}  # a queue, via the default exchange
//	  meeting.remind: {exchange: notify, routing_key: remind, expired: publish}  # past its deadline: published, with x-delayq-late-ms
//	  sms.send:     {exchange: notify, routing_key: sms, rate: 200, burst: 50}  # at most 200 a second (+50 after a quiet spell), fleet-wide
//	classes:    # optional: who goes first, by weight, when the fleet is behind
//	  urgent:  {topics: [auth.code, payment.*], weight: 3}
//	  first:   {topics: [otp.send], strict: true}
//	  default: {weight: 1}   # every topic no other class names
type file struct {
	DefaultExchange string    `yaml:"default_exchange"`
	Routes          yaml.Node `yaml:"routes"`
	Classes         yaml.Node `yaml:"classes"`
}

// Load reads a routes file. defaultExchange, when not "", overrides the
// file's default_exchange (DELAYQ_DEFAULT_EXCHANGE).
func Load(path, defaultExchange string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("routes file: %w", err)
	}
	t, err := Parse(b, defaultExchange)
	if err != nil {
		return nil, fmt.Errorf("routes file %s: %w", path, err)
	}
	return t, nil
}

// Parse reads a routes table from YAML or JSON bytes. Unknown fields,
// duplicate topics and invalid names are errors that give the line.
func Parse(b []byte, defaultExchange string) (*Table, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f file
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if defaultExchange == "" {
		defaultExchange = f.DefaultExchange
	}
	t := &Table{defaultExchange: defaultExchange, routes: map[string]Destination{}, classes: map[string]Class{}}
	if err := checkName("default_exchange", defaultExchange); err != nil {
		return nil, err
	}
	if err := t.parseClasses(&f.Classes); err != nil {
		return nil, err
	}
	switch f.Routes.Kind {
	case 0: // no routes
		return t, nil
	case yaml.MappingNode:
	default:
		return nil, fmt.Errorf("line %d: routes: want a mapping of topic to {exchange, routing_key}", f.Routes.Line)
	}
	for i := 0; i+1 < len(f.Routes.Content); i += 2 {
		k, v := f.Routes.Content[i], f.Routes.Content[i+1]
		topic := k.Value
		if _, dup := t.routes[topic]; dup {
			return nil, fmt.Errorf("line %d: route %q defined twice", k.Line, topic)
		}
		var d Destination
		if v.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: route %q: want {exchange, routing_key}", v.Line, topic)
		}
		if err := v.Decode(&d); err != nil {
			return nil, fmt.Errorf("line %d: route %q: %w", v.Line, topic, err)
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			if f := v.Content[j].Value; !slices.Contains(routeFields, f) {
				return nil, fmt.Errorf("line %d: route %q: unknown field %q (want %s)", v.Content[j].Line, topic, f,
					strings.Join(routeFields, ", "))
			}
		}
		if err := checkRoute(topic, d); err != nil {
			return nil, fmt.Errorf("line %d: %w", k.Line, err)
		}
		t.routes[topic] = d
	}
	return t, nil
}

// classFields are the fields of a class.
var classFields = []string{"topics", "weight", "strict"}

// parseClasses reads the classes: each valid (shard.ValidateClass), no
// pattern in two of them; an error gives the line.
func (t *Table) parseClasses(n *yaml.Node) error {
	switch n.Kind {
	case 0:
		return nil
	case yaml.MappingNode:
	default:
		return fmt.Errorf("line %d: classes: want a mapping of class name to {topics, weight, strict}", n.Line)
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if _, dup := t.classes[name]; dup {
			return fmt.Errorf("line %d: class %q defined twice", k.Line, name)
		}
		if v.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: class %q: want {topics, weight, strict}", v.Line, name)
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			if f := v.Content[j].Value; !slices.Contains(classFields, f) {
				return fmt.Errorf("line %d: class %q: unknown field %q (want %s)", v.Content[j].Line, name, f, strings.Join(classFields, ", "))
			}
		}
		var c Class
		if err := v.Decode(&c); err != nil {
			return fmt.Errorf("line %d: class %q: %w", v.Line, name, err)
		}
		if c.Strict && c.Weight != nil {
			return fmt.Errorf("line %d: class %q: strict or a weight, not both", v.Line, name)
		}
		if err := shard.ValidateClass(c.Shard(name)); err != nil {
			return fmt.Errorf("line %d: class %q: %w", k.Line, name, err)
		}
		for other, oc := range t.classes {
			for _, p := range c.Topics {
				for _, q := range oc.Topics {
					if shard.PatternsOverlap(p, q) {
						return fmt.Errorf("line %d: class %q: topic pattern %q overlaps %q of class %q (line %d): a topic belongs to one class",
							k.Line, name, p, q, other, lines[other])
					}
				}
			}
		}
		t.classes[name], lines[name] = c, k.Line
	}
	return nil
}

// routeFields are the fields of a route.
var routeFields = []string{"exchange", "routing_key", "expired", "rate", "burst"}

func checkRoute(topic string, d Destination) error {
	if topic == "" || strings.TrimSpace(topic) != topic {
		return fmt.Errorf("route %q: topic must be non-empty without surrounding spaces", topic)
	}
	if err := checkName("route "+topic+": topic", topic); err != nil {
		return err
	}
	if err := checkName("route "+topic+": exchange", d.Exchange); err != nil {
		return err
	}
	if err := checkName("route "+topic+": routing_key", d.RoutingKey); err != nil {
		return err
	}
	if d.Exchange == "" && d.RoutingKey == "" {
		return fmt.Errorf("route %q: the default exchange (\"\") needs a routing_key naming a queue", topic)
	}
	if d.Expired != "" && d.Expired != ExpiredDead && d.Expired != ExpiredPublish {
		return fmt.Errorf("route %q: expired %q: want %s or %s", topic, d.Expired, ExpiredDead, ExpiredPublish)
	}
	if math.IsNaN(d.Rate) || math.IsInf(d.Rate, 0) || d.Rate < 0 {
		return fmt.Errorf("route %q: rate %v: want messages a second, 0 or more", topic, d.Rate)
	}
	if d.Burst < 0 {
		return fmt.Errorf("route %q: burst %d: want 0 or more", topic, d.Burst)
	}
	if d.Burst > 0 && d.Rate == 0 {
		return fmt.Errorf("route %q: burst %d without a rate: a burst is what a limited topic may add to its rate", topic, d.Burst)
	}
	return nil
}

func checkName(what, s string) error {
	if len(s) > 255 || !utf8.ValidString(s) {
		return fmt.Errorf("%s: want valid UTF-8 of at most 255 bytes", what)
	}
	return nil
}
