package shard

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
		d.properties(&e)
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

// properties reads a v2 property mask and what it lists: the properties
// and the deadline.
func (d *decoder) properties(e *Envelope) {
	p := &e.Properties
	mask := d.uvarint("property mask")
	if d.err != nil {
		return
	}
	if mask&^propAll != 0 {
		d.fail("property mask", "unknown properties 0x%x", mask&^propAll)
		return
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
	if mask&propExpires != 0 {
		e.ExpiresMs = d.signed("expiry time", 1, math.MaxInt64)
	}
	if mask&propMaxLateness != 0 {
		e.MaxLatenessMs = int64(d.unsigned("maximum lateness", math.MaxInt64))
	}
	if mask&propOccurrence != 0 {
		o := &e.Occurrence
		o.Schedule = d.str("schedule")
		o.Version = int64(d.unsigned("schedule version", math.MaxInt64))
		o.NominalMs = d.signed("occurrence time", 1, math.MaxInt64)
		o.Rule = d.str("schedule rule")
		if d.err == nil && o.Schedule == "" {
			d.fail("schedule", "an occurrence without its schedule's name")
		}
	}
	if d.err == nil && e.mask() != mask {
		d.fail("property mask", "a property is set to its zero value")
	}
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
	if !d.skipMinimal(field, n, "varint") {
		return 0
	}
	return v
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if !d.skipMinimal(field, n, "length") {
		return 0
	}
	return v
}

// skipMinimal moves past a varint of n bytes (n as encoding/binary
// reports it: <= 0 for a bad one), after checking that it is in its
// shortest form (no high zero byte), so that each value has one encoding.
func (d *decoder) skipMinimal(field string, n int, what string) bool {
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail(field, "bad or non-minimal %s", what)
		return false
	}
	d.b = d.b[n:]
	return true
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

// value reads one value written by appendValue. depth counts the tables
// and arrays around it.
func (d *decoder) value(field string, depth int) any {
	if d.err != nil {
		return nil
	}
	if len(d.b) == 0 {
		d.fail(field, "missing value")
		return nil
	}
	tag := d.b[0]
	d.b = d.b[1:]
	switch tag {
	case tagVoid:
		return nil
	case tagBool:
		b := d.byte(field)
		if b > 1 {
			d.fail(field, "boolean byte %d", b)
		}
		return b == 1
	case tagInt8:
		return int8(d.byte(field))
	case tagUint8:
		return d.byte(field)
	case tagInt16:
		return int16(d.signed(field, math.MinInt16, math.MaxInt16))
	case tagUint16:
		return uint16(d.unsigned(field, math.MaxUint16))
	case tagInt32:
		return int32(d.signed(field, math.MinInt32, math.MaxInt32))
	case tagUint32:
		return uint32(d.unsigned(field, math.MaxUint32))
	case tagInt64:
		return d.varint(field)
	case tagFloat32:
		b := d.fixed(field, 4)
		if b == nil {
			return nil
		}
		return math.Float32frombits(binary.BigEndian.Uint32(b))
	case tagFloat64:
		b := d.fixed(field, 8)
		if b == nil {
			return nil
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b))
	case tagDecimal:
		scale := d.byte(field)
		return amqp.Decimal{Scale: scale, Value: int32(d.signed(field, math.MinInt32, math.MaxInt32))}
	case tagString:
		return d.str(field)
	case tagBytes:
		b := d.bytes(field)
		return append([]byte{}, b...)
	case tagTimestamp:
		return d.timestamp(field)
	case tagTable:
		if depth+1 > MaxHeaderDepth {
			d.fail(field, "nested more than %d deep", MaxHeaderDepth)
			return nil
		}
		return d.table(field, depth+1)
	case tagArray:
		if depth+1 > MaxHeaderDepth {
			d.fail(field, "nested more than %d deep", MaxHeaderDepth)
			return nil
		}
		n := d.count(field, 1)
		out := make([]any, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			out = append(out, d.value(fmt.Sprintf("%s[%d]", field, i), depth+1))
		}
		return out
	}
	d.fail(field, "unknown type tag %q", tag)
	return nil
}

// table reads a table written by appendTable.
func (d *decoder) table(field string, depth int) amqp.Table {
	n := d.count(field, 2) // a key and a value need >= 2 bytes
	t := make(amqp.Table, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str(field + " key")
		if d.err == nil && i > 0 && k <= prev {
			d.fail(field, "keys out of order (%q after %q)", k, prev)
		}
		prev = k
		t[k] = d.value(field+"."+k, depth)
	}
	return t
}

// count reads an element count and checks that the bytes left can hold it
// at min bytes an element (so a corrupt count cannot make a huge slice).
func (d *decoder) count(field string, min int) int {
	n := d.uvarint(field + " count")
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.fail(field, "%d elements in %d bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) byte(field string) byte {
	b := d.fixed(field, 1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (d *decoder) fixed(field string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail(field, "%d bytes left, want %d", len(d.b), n)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) timestamp(field string) time.Time {
	return time.Unix(d.signed(field, 0, maxTimestamp), 0).UTC()
}

func (d *decoder) signed(field string, lo, hi int64) int64 {
	v := d.varint(field)
	if d.err == nil && (v < lo || v > hi) {
		d.fail(field, "%d is out of range", v)
	}
	return v
}

func (d *decoder) unsigned(field string, hi uint64) uint64 {
	v := d.uvarint(field)
	if d.err == nil && v > hi {
		d.fail(field, "%d is out of range", v)
	}
	return v
}
