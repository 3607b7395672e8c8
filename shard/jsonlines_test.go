package shard_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/shard"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestLineReader(t *testing.T) {
	in := strings.Join([]string{
		`{"id":"a","topic":"t","delay_ms":1000,"body":"hi","headers":{"k":"v"},"content_type":"text/plain"}`,
		``,
		`{"id":"b","exchange":"x","routing_key":"rk","at_ms":1800000000000,"body_base64":"aGk="}`,
		`not json`,
		`{"id":"c","topic":"t"}`,
		`{"id":"d","topic":"t","delay_ms":1,"at_ms":1800000000000}`,
		`{"id":"e","topic":"t","delay_ms":-5}`,
		`{"id":"f","topic":"t","delay_ms":5,"colour":"red"}`,
		`{"id":"g","topic":"t","delay_ms":5,"body":"x","body_base64":"eA=="}`,
		`{"id":"h","topic":"t","delay_ms":5,"body_base64":"!!"}`,
		`{"id":"","topic":"t","delay_ms":5}`,
		`{"id":"i","topic":"t","at_ms":5}`,
		`{"id":"j","topic":"t","delay_ms":5} {"id":"k"}`,
		"{\"id\":\"bad\xffid\",\"topic\":\"t\",\"delay_ms\":5}",
		`{"id":"lone\ud800","topic":"t","delay_ms":5}`,
		"{\"id\":\"u\",\"topic\":\"t\",\"delay_ms\":5,\"body\":\"\xc3\"}",
		`{"id":"ok\ufffd","topic":"t","delay_ms":5}`,
		`{"id":"last","topic":"t","delay_ms":0}`, // no trailing newline
	}, "\n")
	lr := shard.NewLineReader(strings.NewReader(in), 1024)
	var ok []string
	bad := map[int]string{}
	for {
		m, line, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var le *shard.LineError
		if errors.As(err, &le) {
			if le.Line != line {
				t.Errorf("LineError.Line %d != line %d", le.Line, line)
			}
			bad[line] = err.Error()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ok = append(ok, m.ID)
		if m.ID == "a" && (m.Delay != time.Second || string(m.Body) != "hi" || m.Headers["k"] != "v") {
			t.Errorf("line 1 parsed as %+v", m)
		}
		if m.ID == "b" && (m.At.UnixMilli() != 1800000000000 || string(m.Body) != "hi") {
			t.Errorf("line 3 parsed as %+v", m)
		}
	}
	if strings.Join(ok, ",") != "a,b,ok\ufffd,last" {
		t.Errorf("accepted %q, want a,b,ok\ufffd,last", ok)
	}
	for line, want := range map[int]string{
		4: "invalid JSON", 5: "delay_ms or at_ms", 6: "not both", 7: "delay_ms", 8: "unknown field",
		9: "body or body_base64", 10: "body_base64", 11: "invalid id: empty", 12: "at_ms", 13: "more than one value",
		14: "not valid UTF-8 at byte 11", 15: "lone surrogate", 16: "not valid UTF-8 at byte 44",
	} {
		if !strings.Contains(bad[line], want) {
			t.Errorf("line %d: error %q, want it to mention %q", line, bad[line], want)
		}
	}
	if len(bad) != 13 {
		t.Errorf("rejected lines %v", bad)
	}
}

func TestLineReaderTooLong(t *testing.T) {
	long := `{"id":"big","topic":"t","delay_ms":1,"body":"` + strings.Repeat("x", 200<<10) + `"}`
	in := long + "\n" + `{"id":"small","topic":"t","delay_ms":1}` + "\n"
	lr := shard.NewLineReader(strings.NewReader(in), 1024)
	_, line, err := lr.Next()
	if err == nil || line != 1 || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("line %d: err %v, want too long", line, err)
	}
	m, line, err := lr.Next()
	if err != nil || line != 2 || m.ID != "small" {
		t.Fatalf("after a long line: %q line %d err %v", m.ID, line, err)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"id":"a","topic":"t","delay_ms":1000,"body":"hi","headers":{"k":"v"}}`))
	f.Add([]byte(`{"id":"b","exchange":"x","routing_key":"rk","at_ms":1800000000000,"body_base64":"aGk="}`))
	f.Add([]byte(`{"id":"c","delay_ms":1e30}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := shard.ParseLine(raw)
		if err != nil {
			return
		}
		if m.ID == "" || m.Delay < 0 || m.Delay > shard.MaxDelay {
			t.Fatalf("accepted bad line %q as %+v", raw, m)
		}
		if (m.Delay != 0) && !m.At.IsZero() {
			t.Fatalf("both delay and at set from %q", raw)
		}
		if !utf8.ValidString(m.ID) || !utf8.Valid(raw) {
			t.Fatalf("accepted a line that is not UTF-8: %q", raw)
		}
	})
}

// TestLineErrorsSpeakJSON: a line's error names the field and the JSON
// kinds, never a Go type or struct name.
func TestLineErrorsSpeakJSON(t *testing.T) {
	for line, want := range map[string]string{
		`{"id":"a","topic":"t","delay_ms":1,"headers":"x"}`:                 "headers: want an object, got a string",
		`{"id":"a","topic":"t","delay_ms":1,"headers":{"k":{"$int9":1}}}`:   `headers[k]: unknown type "$int9"`,
		`{"id":"a","topic":"t","delay_ms":1,"headers":{"k":{"$int8":300}}}`: `headers[k]: $int8: "300" is not a whole number in [-128, 127]`,
		`{"id":"a","topic":"t","delay_ms":1,"headers":{"k":[{"":1}]}}`:      `headers[k][0].: empty name`,
		`{"id":"a","topic":"t","delay_ms":1,"priority":300}`:                "priority: want a whole number in [0, 255], got the number 300",
		`{"id":"a","topic":"t","delay_ms":1,"retry":["soon"]}`:              `retry[0]: "soon" is not a duration`,
		`{"id":"a","topic":"t","delay_ms":"soon"}`:                          "delay_ms: want a whole number, got a string",
		`{"id":7,"topic":"t","delay_ms":1}`:                                 "id: want a string, got a number",
		`{"id":"a","topic":"t","delay_ms":1.5}`:                             "delay_ms: want a whole number, got the number 1.5",
		`["a"]`:                                                             "want an object, got an array",
		`{"id":"a",`:                                                        "invalid JSON",
		`{"id":"a","colour":"red"}`:                                         `unknown field "colour"`,
		`{"id" "a"}`:                                                        "invalid JSON at byte",
		`{"id":"a","topic":"t","delay_ms":1,"max_lateness_ms":0}`:           "max_lateness_ms: 0 is outside [1, ",
		`{"id":"a","topic":"t","delay_ms":1,"expires_at_ms":5}`:             "expires_at_ms: 5 is outside [",
		`{"id":"a","topic":"t","delay_ms":1,"expires_at_ms":"soon"}`:        "expires_at_ms: want a whole number, got a string",
	} {
		_, err := shard.ParseLine([]byte(line))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "jsonLine") {
			t.Errorf("%s: error %v, want it to say %q and no Go names", line, err, want)
		}
	}
}

func TestDeadlineInJSONLines(t *testing.T) {
	m, err := shard.ParseLine([]byte(`{"id":"a","topic":"t","at_ms":1800000000000,"expires_at_ms":1800000060000,"max_lateness_ms":2000}`))
	if err != nil {
		t.Fatal(err)
	}
	if !m.ExpiresAt.Equal(time.UnixMilli(1800000060000)) || m.MaxLateness != 2*time.Second {
		t.Errorf("expires %v, max lateness %v", m.ExpiresAt, m.MaxLateness)
	}
}

// TestTypedHeadersInJSONLines: every AMQP type can be written in a line
// and comes out as the Go type the publisher sends with that AMQP type.
func TestTypedHeadersInJSONLines(t *testing.T) {
	line := `{"id":"a","topic":"t","delay_ms":1,"correlation_id":"c-1","priority":5,"delivery_mode":1,"timestamp":1700000000,` +
		`"expiration":"60000","retry":["15s","3m"],"headers":{` +
		`"s":"text","b":true,"i":12,"big":12345678901,"f":1.5,"v":null,"arr":[1,"x"],"tab":{"n":{"$int16":-5}},` +
		`"i8":{"$int8":-1},"u8":{"$uint8":200},"u16":{"$uint16":65535},"u32":{"$uint32":4294967295},` +
		`"i64":{"$int64":"9007199254740993"},"f32":{"$float32":0.25},"f64":{"$float64":2},` +
		`"dec":{"$decimal":"-12.34"},"ts":{"$timestamp":"2023-11-14T22:13:20Z"},"raw":{"$bytes":"AAH/"},` +
		`"dollar":{"$table":{"$x":1}}}}`
	m, err := shard.ParseLine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Table{
		"s": "text", "b": true, "i": int32(12), "big": int64(12345678901), "f": 1.5, "v": nil,
		"arr": []any{int32(1), "x"}, "tab": amqp.Table{"n": int16(-5)},
		"i8": int8(-1), "u8": uint8(200), "u16": uint16(65535), "u32": uint32(4294967295),
		"i64": int64(9007199254740993), "f32": float32(0.25), "f64": float64(2),
		"dec": amqp.Decimal{Scale: 2, Value: -1234}, "ts": time.Unix(1700000000, 0).UTC(), "raw": []byte{0, 1, 0xff},
		"dollar": amqp.Table{"$x": int32(1)},
	}
	if !reflect.DeepEqual(m.Headers, want) {
		t.Errorf("headers\n got %#v\nwant %#v", m.Headers, want)
	}
	p := m.Properties
	if p.CorrelationID != "c-1" || p.Priority != 5 || p.DeliveryMode != 1 || p.Expiration != "60000" ||
		p.Timestamp.Unix() != 1700000000 || len(m.Retry) != 2 || m.Retry[1] != 3*time.Minute {
		t.Errorf("properties or retry parsed as %+v, %v", p, m.Retry)
	}
	// And back: JSONValue writes each value so that it parses to itself.
	for k, v := range want {
		raw, err := json.Marshal(shard.JSONValue(v))
		if err != nil {
			t.Fatal(err)
		}
		back, err := shard.ParseJSONValue(k, raw)
		if err != nil || !reflect.DeepEqual(back, v) {
			t.Errorf("%s: %s parsed back as %#v (%v), want %#v", k, raw, back, err, v)
		}
	}
}

// FuzzJSONValue: whatever parses is written back by JSONValue in a form
// that parses to the same value.
func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`"x"`, `1`, `12345678901`, `1.5`, `null`, `[true,{"a":1}]`, `{"$int8":-1}`,
		`{"$decimal":"-0.05"}`, `{"$bytes":"AAH/"}`, `{"$table":{"$x":{"$float32":"NaN"}}}`, `{"$timestamp":5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := shard.ParseJSONValue("h", raw)
		if err != nil {
			if !errors.Is(err, shard.ErrInvalid) {
				t.Fatalf("error is not ErrInvalid: %v", err)
			}
			return
		}
		again, err := json.Marshal(shard.JSONValue(v))
		if err != nil {
			t.Fatalf("JSONValue(%#v) does not marshal: %v", v, err)
		}
		back, err := shard.ParseJSONValue("h", again)
		if err != nil {
			t.Fatalf("%s (from %s) does not parse: %v", again, raw, err)
		}
		if !equalValues(back, v) {
			t.Fatalf("%s → %#v → %s → %#v", raw, v, again, back)
		}
	})
}

// equalValues is reflect.DeepEqual with NaN equal to NaN.
func equalValues(a, b any) bool {
	return reflect.DeepEqual(fmt.Sprintf("%#v", a), fmt.Sprintf("%#v", b))
}
