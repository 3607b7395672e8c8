package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

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
}

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
	propAll = 1<<iota - 1
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
// mode as one byte, the timestamp as varint unix seconds. A table is as
// appendValue says. A set property is never its zero value, keys are in
// increasing order, and AppendEnvelope writes v1 whenever v1 can hold the
// envelope (no property, only string headers), so each envelope still has
// one encoding, and scanners of the previous release read every envelope
// that needs nothing new (a fleet can be upgraded scanners first).
const envelopeV2 = 0x02

// AppendEnvelope appends the encoding of e to dst and returns the extended
// slice. It allocates only when dst lacks capacity. Header values must be
// normalized (Message and Delivery do it; see normalizeValue).
func AppendEnvelope(dst []byte, e *Envelope) []byte {
	if e.needsV2() {
		return appendEnvelopeV2(dst, e)
	}
	dst = e.appendHead(dst, envelopeV1)
	dst = binary.AppendUvarint(dst, uint64(len(e.Headers)))
	for _, h := range e.Headers {
		dst = appendStr(dst, h.Key)
		dst = appendStr(dst, h.Value.(string))
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Body)))
	return append(dst, e.Body...)
}

// appendHead appends the fields both versions start with.
func (e *Envelope) appendHead(dst []byte, version byte) []byte {
	dst = append(dst, version)
	dst = binary.AppendVarint(dst, e.EnqueuedMs)
	dst = appendStr(dst, e.Topic)
	dst = appendStr(dst, e.Exchange)
	dst = appendStr(dst, e.RoutingKey)
	return appendStr(dst, e.ContentType)
}

// needsV2 reports whether e has something format v1 cannot hold.
func (e *Envelope) needsV2() bool {
	if !e.Properties.IsZero() {
		return true
	}
	for _, h := range e.Headers {
		if _, ok := h.Value.(string); !ok {
			return true
		}
	}
	return false
}

func appendEnvelopeV2(dst []byte, e *Envelope) []byte {
	dst = e.appendHead(dst, envelopeV2)
	p := e.Properties
	mask := p.mask()
	dst = binary.AppendUvarint(dst, mask)
	for i, s := range p.strings() {
		if mask&(1<<i) != 0 {
			dst = appendStr(dst, *s)
		}
	}
	if mask&propPriority != 0 {
		dst = append(dst, p.Priority)
	}
	if mask&propDeliveryMode != 0 {
		dst = append(dst, p.DeliveryMode)
	}
	if mask&propTimestamp != 0 {
		dst = binary.AppendVarint(dst, p.Timestamp.Unix())
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Headers)))
	for _, h := range e.Headers {
		dst = appendStr(dst, h.Key)
		dst = appendValue(dst, h.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Body)))
	return append(dst, e.Body...)
}

// EncodedSize is an upper bound of len(AppendEnvelope(nil, e)) when every
// header is a string, and a good first guess otherwise.
func (e *Envelope) EncodedSize() int {
	n := 3 + binary.MaxVarintLen64*(8+2*len(e.Headers)) + len(e.Topic) + len(e.Exchange) +
		len(e.RoutingKey) + len(e.ContentType) + len(e.Body)
	for _, s := range e.Properties.strings() {
		n += binary.MaxVarintLen64 + len(*s)
	}
	for _, h := range e.Headers {
		n += len(h.Key)
		if s, ok := h.Value.(string); ok {
			n += len(s)
		} else {
			n += 16
		}
	}
	return n
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeEnvelope parses an envelope written by AppendEnvelope. Errors wrap
// ErrCorrupt and say which field is wrong. The returned Body does not alias b.
func DecodeEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	if len(b) == 0 {
		return e, fmt.Errorf("%w: empty", ErrCorrupt)
	}
	if b[0] != envelopeV1 && b[0] != envelopeV2 {
		return e, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, b[0])
	}
	v2 := b[0] == envelopeV2
	d := decoder{b: b[1:]}
	e.EnqueuedMs = d.varint("enqueued time")
	e.Topic = d.str("topic")
	e.Exchange = d.str("exchange")
	e.RoutingKey = d.str("routing key")
	e.ContentType = d.str("content type")
	if v2 {
		e.Properties = d.properties()
	}
	n := d.count("headers", 2)
	if d.err == nil && n > 0 {
		e.Headers = make([]Header, n)
		for i := range e.Headers {
			k := d.str("header key")
			if d.err == nil && i > 0 && k <= e.Headers[i-1].Key {
				d.fail("headers", "keys out of order (%q after %q)", k, e.Headers[i-1].Key)
			}
			if v2 {
				e.Headers[i] = Header{Key: k, Value: d.value("headers."+k, 0)}
			} else {
				e.Headers[i] = Header{Key: k, Value: d.str("header value")}
			}
		}
	}
	if d.err == nil && v2 && !e.needsV2() {
		d.fail("format", "a v2 envelope that v1 holds (no property, only string headers)")
	}
	body := d.bytes("body")
	if d.err != nil {
		return Envelope{}, d.err
	}
	if len(d.b) != 0 {
		return Envelope{}, fmt.Errorf("%w: %d trailing bytes after body", ErrCorrupt, len(d.b))
	}
	if len(body) > 0 {
		e.Body = append([]byte(nil), body...)
	}
	return e, nil
}

// properties reads a v2 property mask and the properties it lists.
func (d *decoder) properties() Properties {
	var p Properties
	mask := d.uvarint("property mask")
	if d.err != nil {
		return p
	}
	if mask&^propAll != 0 {
		d.fail("property mask", "unknown properties 0x%x", mask&^propAll)
		return p
	}
	for i, s := range p.strings() {
		if mask&(1<<i) != 0 {
			*s = d.str("property")
			if d.err == nil && *s == "" {
				d.fail("property", "property %d is set but empty", i)
			}
		}
	}
	if mask&propPriority != 0 {
		p.Priority = d.byte("priority")
	}
	if mask&propDeliveryMode != 0 {
		p.DeliveryMode = d.byte("delivery mode")
	}
	if mask&propTimestamp != 0 {
		p.Timestamp = d.timestamp("timestamp")
	}
	if d.err == nil && p.mask() != mask {
		d.fail("property mask", "a property is set to its zero value")
	}
	return p
}

// decoder reads fields in order and remembers the first error, so that the
// field sequence in DecodeEnvelope reads like the format.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(field, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrCorrupt, field, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail(field, "bad or non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail(field, "bad or non-minimal length")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(field string) []byte {
	n := d.uvarint(field)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(field, "length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(field string) string { return string(d.bytes(field)) }
