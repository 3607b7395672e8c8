package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// This file holds the envelope: what Redis stores for a message, its
// format versions and the header values it carries. encode.go writes it,
// decode.go reads it.

// Envelope is what Redis stores for a message (in the shard's msg hash):
// everything needed to publish it, but not its due time (the due ZSET score)
// nor its attempt count (the attempts hash), which scripts change without
// rewriting the envelope.
type Envelope struct {
	// Topic, when set, names a route that the scanner's router resolves.
	// When empty, Exchange and RoutingKey are the explicit destination.
	Topic       string
	Exchange    string
	RoutingKey  string
	ContentType string
	Properties  Properties
	Headers     []Header // sorted by Key, keys unique
	Body        []byte
	EnqueuedMs  int64 // producer's wall clock, unix ms; informational
	// ExpiresMs and MaxLatenessMs are the message's deadline
	// (Message.ExpiresAt, Message.MaxLateness); 0 is none.
	ExpiresMs, MaxLatenessMs int64
	// Occurrence is set on an occurrence of a recurring schedule: which
	// one, and the rule the scanner computes the next one with.
	Occurrence OccurrenceRef
}

// OccurrenceRef names the occurrence of a recurring schedule that an
// envelope is (the zero value: a one-off message).
type OccurrenceRef struct {
	Schedule  string // the schedule's name
	Version   int64  // the schedule's version when the occurrence was made
	NominalMs int64  // the occurrence's time by the schedule, unix ms
	// Rule is the schedule's rule (schedule.Rule as JSON): spec, zone,
	// anchor, end, grace and missed-run policy.
	Rule string
}

// Expired reports whether a message of this envelope, scheduled for
// dueMs and claimed at nowMs (both by the Redis clock), is past its
// deadline, and says by how much.
func (e *Envelope) Expired(dueMs, nowMs int64) (string, bool) {
	switch {
	case e.ExpiresMs > 0 && nowMs > e.ExpiresMs:
		return fmt.Sprintf("expired: claimed %s after its expiry time %s", msText(nowMs-e.ExpiresMs),
			time.UnixMilli(e.ExpiresMs).UTC().Format(time.RFC3339Nano)), true
	case e.MaxLatenessMs > 0 && nowMs-dueMs > e.MaxLatenessMs:
		return fmt.Sprintf("expired: claimed %s after it was due, more than its maximum lateness of %s",
			msText(nowMs-dueMs), msText(e.MaxLatenessMs)), true
	}
	return "", false
}

func msText(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// Header is one producer-supplied AMQP header. Value is an AMQP field value
// (see the table above normalizeValue: string, the integer widths, bool,
// floats, amqp.Decimal, []byte, time.Time, amqp.Table, []any or nil).
type Header struct {
	Key   string
	Value any
}

// Properties are the AMQP basic properties a producer may set besides
// content_type (Message.ContentType), message_id (the delayq id) and
// headers. A zero field is an absent property, as in amqp091-go. user_id
// is not kept: RabbitMQ refuses a publish whose user_id is not the
// publishing connection's user, which would make every such message
// undeliverable.
type Properties struct {
	ContentEncoding string
	CorrelationID   string
	ReplyTo         string
	// Expiration is the per-message TTL the consumer's queue applies, in
	// ms as decimal digits (AMQP's form); it starts when delayq publishes.
	Expiration string
	Type       string
	AppID      string
	Priority   uint8
	// DeliveryMode 1 publishes transient; 0 (absent) and 2 persistent.
	DeliveryMode uint8
	// Timestamp, when set, is published as it is (whole seconds); when
	// zero, delayq sets the publish time.
	Timestamp time.Time
}

// IsZero reports whether no property is set.
func (p Properties) IsZero() bool { return p.mask() == 0 }

// mask is the v2 mask of the envelope: its properties and its deadline.
func (e *Envelope) mask() uint64 {
	m := e.Properties.mask()
	if e.ExpiresMs != 0 {
		m |= propExpires
	}
	if e.MaxLatenessMs != 0 {
		m |= propMaxLateness
	}
	if e.Occurrence.Schedule != "" {
		m |= propOccurrence
	}
	return m
}

// The bits of the v2 property mask, in the order the properties follow it.
const (
	propContentEncoding = 1 << iota
	propCorrelationID
	propReplyTo
	propExpiration
	propType
	propAppID
	propPriority
	propDeliveryMode
	propTimestamp
	// Not AMQP properties: the deadline, after the properties.
	propExpires
	propMaxLateness
	propOccurrence // Envelope.Occurrence
	propAll        = 1<<iota - 1
)

// strings returns the string properties in mask-bit order.
func (p *Properties) strings() [6]*string {
	return [6]*string{&p.ContentEncoding, &p.CorrelationID, &p.ReplyTo, &p.Expiration, &p.Type, &p.AppID}
}

func (p Properties) mask() uint64 {
	var m uint64
	for i, s := range p.strings() {
		if *s != "" {
			m |= 1 << i
		}
	}
	if p.Priority != 0 {
		m |= propPriority
	}
	if p.DeliveryMode != 0 {
		m |= propDeliveryMode
	}
	if !p.Timestamp.IsZero() {
		m |= propTimestamp
	}
	return m
}

// ErrCorrupt is wrapped by DecodeEnvelope's errors: the bytes are not an
// envelope this version can read.
var ErrCorrupt = errors.New("corrupt envelope")

// envelopeV1 is the first byte of every envelope of format version 1.
//
// Layout (all integers are Go's varint / uvarint encodings):
//
//	0x01 | varint enqueuedMs | str topic | str exchange | str routingKey |
//	str contentType | uvarint nHeaders | (str key | str value)* | str body
//
// where str is uvarint length followed by that many bytes. Nothing may
// follow the body, and integers must use their shortest encoding, so every
// envelope has exactly one encoding.
const envelopeV1 = 0x01

// envelopeV2 is the first byte of every envelope of format version 2, which
// adds the AMQP properties and typed headers:
//
//	0x02 | varint enqueuedMs | str topic | str exchange | str routingKey |
//	str contentType | uvarint propertyMask | property* | table headers | str body
//
// The mask has a bit for each property that is set (propContentEncoding
// …); they follow in bit order: the strings as str, priority and delivery
// mode as one byte, the timestamp as varint unix seconds, then the
// deadline, which is no AMQP property: the expiry time as varint unix ms,
// the maximum lateness as uvarint ms. A table is as
// appendValue says. A set property is never its zero value, keys are in
// increasing order, and AppendEnvelope writes v1 whenever v1 can hold the
// envelope (no property, only string headers), so each envelope still has
// one encoding, and scanners of the previous release read every envelope
// that needs nothing new (a fleet can be upgraded scanners first).
const envelopeV2 = 0x02

// Header values are AMQP 0-9-1 field values, as github.com/rabbitmq/amqp091-go
// reads them from a delivery and writes them to a publish. Each Go type is
// one AMQP type, so a value keeps its type from producer to consumer:
//
//	Go type        AMQP type (RabbitMQ's tag)
//	nil            void (V)
//	bool           boolean (t)
//	int8, uint8    short-short int, signed (b) and unsigned (B)
//	int16, uint16  short int (s, u)
//	int32, uint32  long int (I, i)
//	int64          long-long int (l)
//	float32        float (f)
//	float64        double (d)
//	amqp.Decimal   decimal (D)
//	string         long string (S)
//	[]byte         byte array (x)
//	time.Time      timestamp, whole seconds (T)
//	amqp.Table     nested table (F); a map[string]any is taken as one
//	[]any          array (A)
//
// A Go int is accepted too and kept as an int64 (amqp091-go would cut it to
// 32 bits). Nothing else is a header value.

// Limits of the typed headers of a message. Exceeding one is an ErrInvalid.
const (
	MaxHeaderDepth = 8        // nested tables and arrays inside a header value
	MaxHeaderBytes = 64 << 10 // all headers of a message, encoded
)

// field tags: RabbitMQ's, so that an envelope's bytes read like AMQP's.
const (
	tagVoid      = 'V'
	tagBool      = 't'
	tagInt8      = 'b'
	tagUint8     = 'B'
	tagInt16     = 's'
	tagUint16    = 'u'
	tagInt32     = 'I'
	tagUint32    = 'i'
	tagInt64     = 'l'
	tagFloat32   = 'f'
	tagFloat64   = 'd'
	tagDecimal   = 'D'
	tagString    = 'S'
	tagBytes     = 'x'
	tagTimestamp = 'T'
	tagTable     = 'F'
	tagArray     = 'A'
)

// normalizeValue checks that v is a header value and returns it in the one
// Go type the decoder gives back (int → int64, map[string]any →
// amqp.Table, a timestamp truncated to the second in UTC). path names the
// value in errors, e.g. "headers[trace].spans[2]".
func normalizeValue(path string, v any, depth int) (any, error) {
	switch x := v.(type) {
	case nil, bool, int8, uint8, int16, uint16, int32, uint32, int64, float32, float64, amqp.Decimal, []byte:
		return v, nil
	case string:
		return v, nil
	case int:
		return int64(x), nil
	case time.Time:
		if x.Unix() < 0 || x.Unix() > maxTimestamp {
			return nil, invalid(path, "timestamp %s is outside 1970..9999", x.UTC().Format(time.RFC3339))
		}
		return time.Unix(x.Unix(), 0).UTC(), nil
	case map[string]any:
		return normalizeTable(path, amqp.Table(x), depth+1)
	case amqp.Table:
		return normalizeTable(path, x, depth+1)
	case []any:
		if depth+1 > MaxHeaderDepth {
			return nil, invalid(path, "nested more than %d deep", MaxHeaderDepth)
		}
		out := make([]any, len(x))
		for i, e := range x {
			n, err := normalizeValue(fmt.Sprintf("%s[%d]", path, i), e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, invalid(path, "a %T is not an AMQP field value", v)
}

func normalizeTable(path string, t amqp.Table, depth int) (amqp.Table, error) {
	if depth > MaxHeaderDepth {
		return nil, invalid(path, "nested more than %d deep", MaxHeaderDepth)
	}
	out := make(amqp.Table, len(t))
	for k, v := range t {
		p := path + "." + k
		if err := validateFieldName(p, k); err != nil {
			return nil, err
		}
		n, err := normalizeValue(p, v, depth)
		if err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, nil
}

// validateFieldName checks a header or nested-table key: an AMQP short
// string, which delayq also requires to be UTF-8.
func validateFieldName(path, k string) error {
	switch {
	case k == "":
		return invalid(path, "empty name")
	case len(k) > MaxNameLen:
		return invalid(path, "name of %d bytes, more than %d", len(k), MaxNameLen)
	case !utf8.ValidString(k):
		return invalid(path, "name is not valid UTF-8")
	}
	return nil
}

// maxTimestamp is 9999-12-31T23:59:59Z in unix seconds: timestamps are
// kept in [0, maxTimestamp] (AMQP's are unsigned).
const maxTimestamp = 253402300799

// FormatValue renders a header value for people: strings as they are,
// other types in Go syntax with their AMQP type where it is not obvious
// (int16(5), 2024-01-02T03:04:05Z, decimal 12.34, bytes 0x0102).
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "void"
	case string:
		return x
	case bool, int64, float64:
		return fmt.Sprint(x)
	case int8, uint8, int16, uint16, int32, uint32, float32:
		return fmt.Sprintf("%T(%v)", x, x)
	case amqp.Decimal:
		return "decimal " + decimalString(x)
	case []byte:
		return fmt.Sprintf("bytes 0x%x", x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Table:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + FormatValue(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = FormatValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// decimalString writes an AMQP decimal in base 10: value / 10^scale.
func decimalString(d amqp.Decimal) string {
	neg := d.Value < 0
	digits := fmt.Sprint(int64(d.Value))
	if neg {
		digits = digits[1:]
	}
	s := int(d.Scale)
	if s > 0 {
		if len(digits) <= s {
			digits = strings.Repeat("0", s-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-s] + "." + digits[len(digits)-s:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}
