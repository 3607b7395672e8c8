package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	Headers     []Header // sorted by Key, keys unique
	Body        []byte
	EnqueuedMs  int64 // producer's wall clock, unix ms; informational
}

// Header is one producer-supplied AMQP header (string valued).
type Header struct{ Key, Value string }

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

// AppendEnvelope appends the encoding of e to dst and returns the extended
// slice. It allocates only when dst lacks capacity.
func AppendEnvelope(dst []byte, e *Envelope) []byte {
	dst = append(dst, envelopeV1)
	dst = binary.AppendVarint(dst, e.EnqueuedMs)
	dst = appendStr(dst, e.Topic)
	dst = appendStr(dst, e.Exchange)
	dst = appendStr(dst, e.RoutingKey)
	dst = appendStr(dst, e.ContentType)
	dst = binary.AppendUvarint(dst, uint64(len(e.Headers)))
	for _, h := range e.Headers {
		dst = appendStr(dst, h.Key)
		dst = appendStr(dst, h.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Body)))
	return append(dst, e.Body...)
}

// EncodedSize is an upper bound of len(AppendEnvelope(nil, e)).
func (e *Envelope) EncodedSize() int {
	n := 1 + binary.MaxVarintLen64*(6+2*len(e.Headers)) + len(e.Topic) + len(e.Exchange) +
		len(e.RoutingKey) + len(e.ContentType) + len(e.Body)
	for _, h := range e.Headers {
		n += len(h.Key) + len(h.Value)
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
	if b[0] != envelopeV1 {
		return e, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, b[0])
	}
	d := decoder{b: b[1:]}
	e.EnqueuedMs = d.varint("enqueued time")
	e.Topic = d.str("topic")
	e.Exchange = d.str("exchange")
	e.RoutingKey = d.str("routing key")
	e.ContentType = d.str("content type")
	n := d.uvarint("header count")
	if d.err == nil && n > uint64(len(d.b))/2 { // each header needs >= 2 bytes
		d.fail("header count", "%d headers in %d bytes", n, len(d.b))
	}
	if d.err == nil && n > 0 {
		e.Headers = make([]Header, n)
		for i := range e.Headers {
			e.Headers[i] = Header{Key: d.str("header key"), Value: d.str("header value")}
		}
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
