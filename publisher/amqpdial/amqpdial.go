package amqpdial

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The defaults of both AMQP sides.
const (
	// MinBackoff and MaxBackoff bound the wait between reconnect attempts,
	// which doubles after each failure (shard/backoff).
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 5 * time.Second
	// DialTimeout bounds one connection attempt to one node.
	DialTimeout = 10 * time.Second
	// Heartbeat is the AMQP heartbeat interval: a node that stops
	// answering is noticed within about two of them.
	Heartbeat = 10 * time.Second
)

// Backoff returns the reconnect bounds to use for the configured ones:
// MinBackoff for a floor that is not positive, and at least the floor (or
// MaxBackoff, when the ceiling is below the floor) for the ceiling.
func Backoff(floor, ceiling time.Duration) (time.Duration, time.Duration) {
	if floor <= 0 {
		floor = MinBackoff
	}
	if ceiling < floor {
		ceiling = max(MaxBackoff, floor)
	}
	return floor, ceiling
}

// Config is the connection configuration of both sides: the heartbeat,
// the name the RabbitMQ management UI shows (none when empty), TLS for
// amqps:// (nil: the system's roots) and a dial bounded by DialTimeout.
func Config(name string, tlsConfig *tls.Config) amqp.Config {
	props := amqp.NewConnectionProperties()
	if name != "" {
		props.SetClientConnectionName(name)
	}
	return amqp.Config{
		Dial:            amqp.DefaultDial(DialTimeout),
		Heartbeat:       Heartbeat,
		Properties:      props,
		TLSClientConfig: tlsConfig,
	}
}

// First connects to the first reachable of urls (the nodes of one RabbitMQ
// cluster), trying them in turn from index from, and returns the
// connection and the index of the node it reached. With one URL its error
// is the dial's own; with several, every node's error, each named by its
// redacted URL.
func First(ctx context.Context, urls []string, from int, cfg amqp.Config) (*amqp.Connection, int, error) {
	var errs []error
	for i := range urls {
		used := (from + i) % len(urls)
		conn, err := amqp.DialConfig(urls[used], cfg)
		if err == nil {
			return conn, used, nil
		}
		if len(urls) == 1 {
			return nil, 0, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", Redact(urls[used]), err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, errors.Join(errs...)
}

// Redact hides the password of an AMQP (or any) URL for logs and errors.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
