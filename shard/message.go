package shard

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Sentinel errors returned (wrapped) by Producer and Store. Test with errors.Is.
var (
	// ErrDuplicate: a message with this id already exists (scheduled, in
	// flight or dead). Enqueue with Upsert replaces a scheduled one.
	ErrDuplicate = errors.New("duplicate message id")
	// ErrNotFound: no scheduled message has this id.
	ErrNotFound = errors.New("message not found")
	// ErrInFlight: the message is being published right now; it can no
	// longer be cancelled, rescheduled or replaced.
	ErrInFlight = errors.New("message is in flight")
	// ErrInvalid: the input breaks a rule; the error is an *InvalidError that
	// names the field.
	ErrInvalid = errors.New("invalid message")
	// ErrCapacity: the namespace holds its limit of pending messages
	// (ProducerOptions.MaxPending); nothing was written. Retry later.
	ErrCapacity = errors.New("namespace at capacity")
	// ErrNotReplicated: the write was done on the master (or found done
	// already), but fewer replicas than Store.WithReplicas asks for
	// confirmed it in time, so a failover may lose it. Retrying is safe: a
	// retried enqueue of a stored message reports ErrDuplicate once the
	// replicas confirm.
	ErrNotReplicated = errors.New("not confirmed by enough replicas")
	// ErrCancelled: a cancel for this id came before the message
	// (Producer.CancelAhead left a tombstone that has not expired), so the
	// message is taken as cancelled; nothing was written.
	ErrCancelled = errors.New("cancelled before it was stored")
)

// InvalidError says which field of a message is wrong and why. It matches
// ErrInvalid under errors.Is.
type InvalidError struct {
	Field  string // e.g. "id", "delay", "headers[x-delayq-due-ms]"
	Reason string
}

func (e *InvalidError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// Is reports target == ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Limits of a message. Exceeding one is an ErrInvalid.
const (
	MaxIDLen   = 256 // bytes
	MaxNameLen = 255 // topic, exchange, routing key, content type, header key (AMQP short string)
	MaxHeaders = 64  // producer headers per message (top level; see MaxHeaderBytes)
	MaxDelay   = 100 * 365 * 24 * time.Hour
	// DefaultMaxBody is the default body limit (ProducerOptions.MaxBody).
	DefaultMaxBody = 1 << 20
	// ReservedHeaderPrefix starts the headers delayq sets itself; producers
	// may not set them.
	ReservedHeaderPrefix = "x-delayq-"
)

var (
	minAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxAt = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Message is what a producer schedules.
type Message struct {
	// ID identifies the message for cancel, reschedule, inspect and
	// consumer-side deduplication (it becomes the AMQP message_id). Usually a
	// business key such as "order-42-cancel". 1..256 bytes of UTF-8 without
	// control characters.
	ID string

	// Destination: either Topic (resolved by the scanners' route table), or
	// Exchange and RoutingKey. Exchange "" is AMQP's default exchange, which
	// routes by queue name, so it needs a RoutingKey.
	Topic      string
	Exchange   string
	RoutingKey string

	// Headers are AMQP headers with typed values (strings, the integer
	// widths, floats, booleans, amqp.Decimal, time.Time, []byte, nested
	// amqp.Table and []any: see FormatValue's table); each keeps its AMQP
	// type to the consumer. Keys may not start with "x-delayq-".
	Headers     amqp.Table
	ContentType string
	// Properties are the other AMQP basic properties to publish with
	// (correlation_id, reply_to, priority, …).
	Properties Properties
	Body       []byte

	// When: At if it is non-zero (a time in the past means "now"), else
	// Delay after the Redis server's clock reads the enqueue (so producer
	// clock skew does not matter).
	Delay time.Duration
	At    time.Time

	// The deadline: a message claimed after it is never published but
	// goes to the dead set with reason "expired" (a meeting reminder that
	// is worthless once the meeting started). ExpiresAt is its latest
	// useful time, by the Redis clock; MaxLateness how long after the time
	// it was scheduled for it may still be published (a redelivery keeps
	// that time). Either, both (the earlier applies) or neither (published
	// however late). A deadline before the due time is an ErrInvalid.
	ExpiresAt   time.Time
	MaxLateness time.Duration

	// Retry is a retry schedule for the consumer: when processing fails,
	// Producer.Retry schedules the same id again after the next delay, and
	// dead-letters it when the schedule is exhausted. For example
	// []time.Duration{15*time.Second, 3*time.Minute, 10*time.Minute}.
	// At most MaxRetrySteps steps, each in (0, MaxDelay].
	Retry []time.Duration

	// RetryStep and Attempts restore a message as an export wrote it
	// (delayq export, then enqueue -f; export.go): the step of its retry
	// schedule it is at (0, the original delivery, to len(Retry)), and
	// the deliveries it had that were not acked (its next is published
	// with x-delayq-attempt Attempts + 1). A new message leaves both 0.
	RetryStep int
	Attempts  int
	// Dead, when set, is a dead message restored as an export wrote it
	// (delayq export --dead, then enqueue -f; deadrestore.go): EnqueueBatch
	// puts it in its shard's dead set, with its reason and time of death,
	// where redrive and purge find it, instead of scheduling it. Only
	// EnqueueBatch and UpsertBatch take it.
	Dead *DeadState
}

// MaxAttempts is the most deliveries a restored message may say it had.
const MaxAttempts = 1_000_000

// MaxRetrySteps is the longest retry schedule accepted.
const MaxRetrySteps = 32

// The headers delayq sets on the messages it publishes, for consumers:
// every x-delayq-* name is here (ReservedHeaderPrefix), importable without
// the scanner or any AMQP code.
const (
	// HeaderDueMs (int64): unix ms, by the Redis clock, the message was
	// scheduled (or last rescheduled) for; a redelivery says the same time.
	HeaderDueMs = "x-delayq-due-ms"
	// HeaderAttempt (int32): 1 on the first delivery, more on a redelivery.
	HeaderAttempt = "x-delayq-attempt"
	// HeaderRetry: a retry schedule, e.g. "15s,3m0s,10m0s" (Message.Retry).
	HeaderRetry = "x-delayq-retry"
	// HeaderRetryStep: 0 for the original delivery, n for the n-th retry.
	HeaderRetryStep = "x-delayq-retry-step"
	// HeaderExpiresAt (int64) and HeaderMaxLateness (int64): a message's
	// deadline (Message.ExpiresAt as unix ms, MaxLateness in ms), on the
	// messages that have one, so that a stepped retry (Producer.Retry)
	// keeps it; a producer sets them on the AMQP ingress.
	HeaderExpiresAt   = "x-delayq-expires-at"
	HeaderMaxLateness = "x-delayq-max-lateness"
	// HeaderLateMs (int64): on a message claimed past its deadline whose
	// route publishes it all the same (router.ExpiredPublish), how many ms
	// after the time it was scheduled for it was claimed.
	HeaderLateMs = "x-delayq-late-ms"
	// HeaderReleasedMs (int64): on a message its topic's flow control
	// (a rate limit or a pause) held back, unix ms by the Redis clock when
	// the limit released it (its grant), never before its due time (a
	// grant taken just before the message fell due stamps the due time):
	// released - due is how long the limit held it, at least 0. Under a
	// backlog, in any second of these times a topic has at most its rate +
	// burst.
	HeaderReleasedMs = "x-delayq-released-ms"
	// HeaderSchedule (string) is set on an occurrence of a recurring
	// schedule: the schedule's name.
	HeaderSchedule = "x-delayq-schedule"
	// HeaderNominalMs (int64): the occurrence's time by its schedule, unix
	// ms (UTC); equal to HeaderDueMs except for a message rescheduled by
	// hand.
	HeaderNominalMs = "x-delayq-nominal-ms"
)

// ValidateID checks a message id: 1..MaxIDLen bytes of UTF-8 without
// control characters. The error is an *InvalidError for the field "id".
func ValidateID(id string) error { return validateID(id) }

// validateID checks a message id.
func validateID(id string) error {
	switch {
	case id == "":
		return invalid("id", "empty")
	case len(id) > MaxIDLen:
		return invalid("id", "%d bytes, more than %d", len(id), MaxIDLen)
	case !utf8.ValidString(id):
		return invalid("id", "not valid UTF-8")
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return invalid("id", "contains control character %U", r)
		}
	}
	return nil
}

func validateName(field, v string) error {
	if len(v) > MaxNameLen {
		return invalid(field, "%d bytes, more than %d", len(v), MaxNameLen)
	}
	if !utf8.ValidString(v) {
		return invalid(field, "not valid UTF-8")
	}
	return nil
}

// validateWhen checks Delay and At and returns the enqueue script's mode
// and time argument.
func validateWhen(delay time.Duration, at time.Time) (mode string, ms int64, err error) {
	if !at.IsZero() {
		if at.Before(minAt) || !at.Before(maxAt) {
			return "", 0, invalid("at", "%s is outside [%s, %s)", at.UTC().Format(time.RFC3339),
				minAt.Format("2006-01-02"), maxAt.Format("2006-01-02"))
		}
		return "at", at.UnixMilli(), nil
	}
	if delay < 0 {
		return "", 0, invalid("delay", "negative (%s)", delay)
	}
	if delay > MaxDelay {
		return "", 0, invalid("delay", "%s is more than %s", delay, MaxDelay)
	}
	return "delay", delay.Milliseconds(), nil
}

// envelope validates m's content and builds its envelope.
func (m *Message) envelope(maxBody int, now time.Time) (Envelope, error) {
	if err := validateID(m.ID); err != nil {
		return Envelope{}, err
	}
	for _, f := range [...]struct{ name, v string }{
		{"topic", m.Topic}, {"exchange", m.Exchange}, {"routing_key", m.RoutingKey}, {"content_type", m.ContentType},
	} {
		if err := validateName(f.name, f.v); err != nil {
			return Envelope{}, err
		}
	}
	switch {
	case m.Topic != "" && (m.Exchange != "" || m.RoutingKey != ""):
		return Envelope{}, invalid("destination", "give a topic or an exchange and routing key, not both")
	case m.Topic == "" && m.Exchange == "" && m.RoutingKey == "":
		return Envelope{}, invalid("destination", "missing: give a topic, or an exchange and/or routing key")
	}
	if len(m.Body) > maxBody {
		return Envelope{}, invalid("body", "%d bytes, more than the limit of %d", len(m.Body), maxBody)
	}
	if err := m.Properties.validate(); err != nil {
		return Envelope{}, err
	}
	hs, err := headerList(m.Headers, false)
	if err != nil {
		return Envelope{}, err
	}
	if len(m.Retry) > 0 {
		if len(m.Retry) > MaxRetrySteps {
			return Envelope{}, invalid("retry", "%d steps, more than %d", len(m.Retry), MaxRetrySteps)
		}
		parts := make([]string, len(m.Retry))
		for i, d := range m.Retry {
			if d <= 0 || d > MaxDelay {
				return Envelope{}, invalid(fmt.Sprintf("retry[%d]", i), "%s is outside (0, %s]", d, MaxDelay)
			}
			parts[i] = d.String()
		}
		if m.RetryStep < 0 || m.RetryStep > len(m.Retry) {
			return Envelope{}, invalid("retry_step", "%d is outside [0, %d], the steps of its retry schedule", m.RetryStep, len(m.Retry))
		}
		hs = withRetryHeaders(hs, strings.Join(parts, ","), m.RetryStep)
	} else if m.RetryStep != 0 {
		return Envelope{}, invalid("retry_step", "%d without a retry schedule", m.RetryStep)
	}
	if m.Attempts < 0 || m.Attempts > MaxAttempts {
		return Envelope{}, invalid("attempts", "%d is outside [0, %d]", m.Attempts, MaxAttempts)
	}
	p := m.Properties
	if !p.Timestamp.IsZero() {
		p.Timestamp = time.Unix(p.Timestamp.Unix(), 0).UTC()
	}
	expires, maxLate, err := m.deadline(now)
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{
		Topic: m.Topic, Exchange: m.Exchange, RoutingKey: m.RoutingKey, ContentType: m.ContentType,
		Properties: p, Headers: hs, Body: m.Body, EnqueuedMs: now.UnixMilli(),
		ExpiresMs: expires, MaxLatenessMs: maxLate,
	}, nil
}

// deadline checks ExpiresAt and MaxLateness and returns them in ms (0:
// none). An expiry before the due time (At, or now plus Delay by the
// producer's clock) is refused: the message could never be published.
func (m *Message) deadline(now time.Time) (expires, maxLate int64, err error) {
	if m.MaxLateness < 0 || m.MaxLateness > MaxDelay {
		return 0, 0, invalid("max_lateness", "%s is outside [0, %s]", m.MaxLateness, MaxDelay)
	}
	if m.MaxLateness > 0 && m.MaxLateness < time.Millisecond {
		return 0, 0, invalid("max_lateness", "%s is less than a millisecond", m.MaxLateness)
	}
	if m.ExpiresAt.IsZero() {
		return 0, m.MaxLateness.Milliseconds(), nil
	}
	if m.ExpiresAt.Before(minAt) || !m.ExpiresAt.Before(maxAt) {
		return 0, 0, invalid("expires_at", "%s is outside [%s, %s)", m.ExpiresAt.UTC().Format(time.RFC3339),
			minAt.Format("2006-01-02"), maxAt.Format("2006-01-02"))
	}
	due := m.At
	if due.IsZero() {
		due = now.Add(m.Delay)
	}
	if m.ExpiresAt.Before(due) {
		return 0, 0, invalid("expires_at", "%s is before the message is due (%s)", m.ExpiresAt.UTC().Format(time.RFC3339Nano),
			due.UTC().Format(time.RFC3339Nano))
	}
	return m.ExpiresAt.UnixMilli(), m.MaxLateness.Milliseconds(), nil
}

// headerList checks a message's headers and returns them sorted, with
// normalized values. reservedOK lets x-delayq-* names through (Retry
// carries a delivery's own).
func headerList(t amqp.Table, reservedOK bool) ([]Header, error) {
	if len(t) > MaxHeaders {
		return nil, invalid("headers", "%d headers, more than %d", len(t), MaxHeaders)
	}
	hs := make([]Header, 0, len(t))
	size := 0
	for _, k := range slices.Sorted(maps.Keys(t)) {
		field := "headers[" + k + "]"
		if k == "" {
			return nil, invalid("headers", "empty header name")
		}
		if err := validateFieldName(field, k); err != nil {
			return nil, err
		}
		if !reservedOK && strings.HasPrefix(strings.ToLower(k), ReservedHeaderPrefix) {
			return nil, invalid(field, "names starting with %q are reserved for delayq", ReservedHeaderPrefix)
		}
		v, err := normalizeValue(field, t[k], 0)
		if err != nil {
			return nil, err
		}
		size += len(k) + len(appendValue(nil, v))
		if size > MaxHeaderBytes {
			return nil, invalid("headers", "more than %d bytes encoded (at %s)", MaxHeaderBytes, field)
		}
		hs = append(hs, Header{Key: k, Value: v})
	}
	return hs, nil
}

// validate checks the properties AMQP or RabbitMQ constrain.
func (p Properties) validate() error {
	for i, s := range p.strings() {
		name := [...]string{"content_encoding", "correlation_id", "reply_to", "expiration", "type", "app_id"}[i]
		if err := validateName(name, *s); err != nil {
			return err
		}
	}
	if e := p.Expiration; e != "" {
		// RabbitMQ closes the channel on any other expiration.
		if len(e) > 10 || strings.Trim(e, "0123456789") != "" {
			return invalid("expiration", "%q is not a whole number of milliseconds", e)
		}
	}
	if p.DeliveryMode > 2 {
		return invalid("delivery_mode", "%d, want 1 (transient) or 2 (persistent)", p.DeliveryMode)
	}
	if t := p.Timestamp; !t.IsZero() && (t.Unix() < 0 || t.Unix() > maxTimestamp) {
		return invalid("timestamp", "%s is outside 1970..9999", t.UTC().Format(time.RFC3339))
	}
	return nil
}
