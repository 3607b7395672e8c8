package shard

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Typed header values in JSON (JSON lines, inspect --json, the HTTP API).
// Plain JSON means what it looks like:
//
//	"text"            string          true, false   bool
//	12 (fits 32 bits) int32           12345678901   int64 (outside 32 bits)
//	1.5, 1e3          float64         null          void
//	[…]               array           {…}           nested table
//
// as most AMQP clients send them (pika, amqplib). Every other type is an
// object whose only key starts with "$":
//
//	{"$int8": -1}  {"$uint8": 1}  {"$int16": 5}  {"$uint16": 5}  {"$int32": 5}
//	{"$uint32": 5}  {"$int64": 5}  {"$float32": 1.5}  {"$float64": 2}
//	{"$decimal": "12.34"}  {"$timestamp": 1700000000} or {"$timestamp": "2023-11-14T22:13:20Z"}
//	{"$bytes": "<base64>"}  {"$table": {…}} (a table whose keys start with "$")
//
// Integers may also be given as strings ({"$int64": "9007199254740993"}),
// which JavaScript producers need above 2^53; floats as "NaN", "+Inf" and
// "-Inf". JSONValue writes each value back in this form, so a value read
// and written again is unchanged.

// ParseJSONValue reads a typed header value written in the form above.
// path names the value in errors.
func ParseJSONValue(path string, raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid(path, "%v", JSONError(err))
	}
	return fromJSON(path, v, 0)
}

func fromJSON(path string, v any, depth int) (any, error) {
	if depth > MaxHeaderDepth {
		return nil, invalid(path, "nested more than %d deep", MaxHeaderDepth)
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, invalid(path, "%s does not fit in 64 bits", s)
			}
			if n >= math.MinInt32 && n <= math.MaxInt32 {
				return int32(n), nil
			}
			return n, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, invalid(path, "%s is not a 64-bit float", s)
		}
		return f, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := fromJSON(fmt.Sprintf("%s[%d]", path, i), e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, e := range x {
				if strings.HasPrefix(k, "$") {
					return typedFromJSON(path, k, e, depth)
				}
			}
		}
		return tableFromJSON(path, x, depth)
	}
	return nil, invalid(path, "unexpected JSON value %T", v)
}

func tableFromJSON(path string, x map[string]any, depth int) (amqp.Table, error) {
	t := make(amqp.Table, len(x))
	for k, e := range x {
		p := path + "." + k
		if err := validateFieldName(p, k); err != nil {
			return nil, err
		}
		n, err := fromJSON(p, e, depth+1)
		if err != nil {
			return nil, err
		}
		t[k] = n
	}
	return t, nil
}

func typedFromJSON(path, typ string, v any, depth int) (any, error) {
	intOf := func(lo, hi int64) (int64, error) {
		var s string
		switch x := v.(type) {
		case json.Number:
			s = string(x)
		case string:
			s = x
		default:
			return 0, invalid(path, "%s wants a whole number", typ)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < lo || n > hi {
			return 0, invalid(path, "%s: %q is not a whole number in [%d, %d]", typ, s, lo, hi)
		}
		return n, nil
	}
	floatOf := func(bits int) (float64, error) {
		var s string
		switch x := v.(type) {
		case json.Number:
			s = string(x)
		case string:
			s = x
		default:
			return 0, invalid(path, "%s wants a number", typ)
		}
		f, err := strconv.ParseFloat(s, bits)
		if err != nil {
			return 0, invalid(path, "%s: %q is not a number", typ, s)
		}
		return f, nil
	}
	switch typ {
	case "$int8":
		n, err := intOf(math.MinInt8, math.MaxInt8)
		return int8(n), err
	case "$uint8":
		n, err := intOf(0, math.MaxUint8)
		return uint8(n), err
	case "$int16":
		n, err := intOf(math.MinInt16, math.MaxInt16)
		return int16(n), err
	case "$uint16":
		n, err := intOf(0, math.MaxUint16)
		return uint16(n), err
	case "$int32":
		n, err := intOf(math.MinInt32, math.MaxInt32)
		return int32(n), err
	case "$uint32":
		n, err := intOf(0, math.MaxUint32)
		return uint32(n), err
	case "$int64":
		return intOf(math.MinInt64, math.MaxInt64)
	case "$float32":
		f, err := floatOf(32)
		return float32(f), err
	case "$float64":
		return floatOf(64)
	case "$decimal":
		s, ok := v.(string)
		if !ok {
			if n, isNum := v.(json.Number); isNum {
				s, ok = string(n), true
			}
		}
		if !ok {
			return nil, invalid(path, "$decimal wants a string such as \"12.34\"")
		}
		d, err := parseDecimal(s)
		if err != nil {
			return nil, invalid(path, "$decimal: %v", err)
		}
		return d, nil
	case "$timestamp":
		if s, ok := v.(string); ok {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return time.Unix(t.Unix(), 0).UTC(), nil
			}
		}
		n, err := intOf(0, maxTimestamp)
		if err != nil {
			return nil, invalid(path, "$timestamp wants unix seconds or an RFC 3339 time")
		}
		return time.Unix(n, 0).UTC(), nil
	case "$bytes":
		s, ok := v.(string)
		if !ok {
			return nil, invalid(path, "$bytes wants a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, invalid(path, "$bytes: %v", err)
		}
		return b, nil
	case "$table":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, invalid(path, "$table wants an object")
		}
		return tableFromJSON(path, m, depth)
	}
	return nil, invalid(path, "unknown type %q (want $int8, $uint8, $int16, $uint16, $int32, $uint32, $int64, "+
		"$float32, $float64, $decimal, $timestamp, $bytes or $table)", typ)
}

// parseDecimal reads "-12.34" into an AMQP decimal (value -1234, scale 2).
func parseDecimal(s string) (amqp.Decimal, error) {
	intPart, frac, _ := strings.Cut(s, ".")
	digits := strings.TrimPrefix(intPart, "-") + frac
	if digits == "" || strings.Trim(digits, "0123456789") != "" || strings.HasPrefix(intPart, "+") {
		return amqp.Decimal{}, fmt.Errorf("%q is not a decimal number", s)
	}
	if len(frac) > 255 {
		return amqp.Decimal{}, fmt.Errorf("%q has more than 255 decimal places", s)
	}
	n, ok := new(big.Int).SetString(strings.TrimPrefix(intPart, "-")+frac, 10)
	if !ok || !n.IsInt64() || n.Int64() > math.MaxInt32 {
		return amqp.Decimal{}, fmt.Errorf("%q does not fit AMQP's 32-bit decimal", s)
	}
	v := int32(n.Int64())
	if strings.HasPrefix(intPart, "-") {
		v = -v
	}
	return amqp.Decimal{Scale: uint8(len(frac)), Value: v}, nil
}

// JSONValue returns v (a normalized header value) in the JSON form above,
// ready for encoding/json.
func JSONValue(v any) any {
	typed := func(k string, x any) map[string]any { return map[string]any{k: x} }
	switch x := v.(type) {
	case nil, bool, string:
		return x
	case int8:
		return typed("$int8", x)
	case uint8:
		return typed("$uint8", x)
	case int16:
		return typed("$int16", x)
	case uint16:
		return typed("$uint16", x)
	case int32:
		return x
	case uint32:
		return typed("$uint32", x)
	case int64:
		if x >= math.MinInt32 && x <= math.MaxInt32 {
			return typed("$int64", x)
		}
		return x
	case int:
		return JSONValue(int64(x))
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return typed("$float32", fmt.Sprint(x))
		}
		return typed("$float32", x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return typed("$float64", fmt.Sprint(x))
		}
		if b, _ := json.Marshal(x); bytes.ContainsAny(b, ".eE") {
			return x
		}
		return typed("$float64", x)
	case amqp.Decimal:
		return typed("$decimal", decimalString(x))
	case []byte:
		return typed("$bytes", base64.StdEncoding.EncodeToString(x))
	case time.Time:
		return typed("$timestamp", x.UTC().Format(time.RFC3339))
	case amqp.Table:
		out := make(map[string]any, len(x))
		dollar := false
		for k, e := range x {
			out[k] = JSONValue(e)
			dollar = dollar || strings.HasPrefix(k, "$")
		}
		if dollar && len(out) == 1 {
			return typed("$table", out)
		}
		return out
	case map[string]any:
		return JSONValue(amqp.Table(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = JSONValue(e)
		}
		return out
	}
	return fmt.Sprint(v)
}
