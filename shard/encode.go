package shard

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
	if e.mask() != 0 {
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
	mask := e.mask()
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
	if mask&propExpires != 0 {
		dst = binary.AppendVarint(dst, e.ExpiresMs)
	}
	if mask&propMaxLateness != 0 {
		dst = binary.AppendUvarint(dst, uint64(e.MaxLatenessMs))
	}
	if mask&propOccurrence != 0 {
		o := &e.Occurrence
		dst = appendStr(dst, o.Schedule)
		dst = binary.AppendUvarint(dst, uint64(o.Version))
		dst = binary.AppendVarint(dst, o.NominalMs)
		dst = appendStr(dst, o.Rule)
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
	n := 3 + binary.MaxVarintLen64*(14+2*len(e.Headers)) + len(e.Topic) + len(e.Exchange) +
		len(e.RoutingKey) + len(e.ContentType) + len(e.Body) + len(e.Occurrence.Schedule) + len(e.Occurrence.Rule)
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

// appendValue appends the encoding of a normalized value: its tag, then
//
//	V: nothing          t: one byte 0 or 1     b, B: one byte
//	s, I, l: varint     u, i: uvarint          f, d: IEEE 754 bits, big endian
//	D: scale byte, varint value                S, x: str
//	T: varint unix seconds                     F: table   A: uvarint n, n values
//
// where a table is uvarint n followed by n (str key, value) pairs in
// increasing key order.
func appendValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, tagVoid)
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		return append(dst, tagBool, b)
	case int8:
		return append(dst, tagInt8, byte(x))
	case uint8:
		return append(dst, tagUint8, x)
	case int16:
		return binary.AppendVarint(append(dst, tagInt16), int64(x))
	case uint16:
		return binary.AppendUvarint(append(dst, tagUint16), uint64(x))
	case int32:
		return binary.AppendVarint(append(dst, tagInt32), int64(x))
	case uint32:
		return binary.AppendUvarint(append(dst, tagUint32), uint64(x))
	case int64:
		return binary.AppendVarint(append(dst, tagInt64), x)
	case int:
		return binary.AppendVarint(append(dst, tagInt64), int64(x))
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, tagFloat32), math.Float32bits(x))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, tagFloat64), math.Float64bits(x))
	case amqp.Decimal:
		return binary.AppendVarint(append(dst, tagDecimal, x.Scale), int64(x.Value))
	case string:
		return appendStr(append(dst, tagString), x)
	case []byte:
		return appendStr(append(dst, tagBytes), string(x))
	case time.Time:
		return binary.AppendVarint(append(dst, tagTimestamp), x.Unix())
	case amqp.Table:
		return appendTable(append(dst, tagTable), x)
	case map[string]any:
		return appendTable(append(dst, tagTable), amqp.Table(x))
	case []any:
		dst = binary.AppendUvarint(append(dst, tagArray), uint64(len(x)))
		for _, e := range x {
			dst = appendValue(dst, e)
		}
		return dst
	}
	panic(fmt.Sprintf("shard: %T is not a normalized header value", v))
}

func appendTable(dst []byte, t amqp.Table) []byte {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = appendStr(dst, k)
		dst = appendValue(dst, t[k])
	}
	return dst
}
