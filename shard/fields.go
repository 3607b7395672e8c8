package shard

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

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

// maxTimestamp is 9999-12-31T23:59:59Z in unix seconds: timestamps are
// kept in [0, maxTimestamp] (AMQP's are unsigned).
const maxTimestamp = 253402300799

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
