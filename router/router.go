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
type file struct {
	DefaultExchange string    `yaml:"default_exchange"`
	Routes          yaml.Node `yaml:"routes"`
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
	t := &Table{defaultExchange: defaultExchange, routes: map[string]Destination{}}
	if err := checkName("default_exchange", defaultExchange); err != nil {
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
