package shard_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/shard"
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
		`{"id":"a","topic":"t","delay_ms":1,"headers":"x"}`:     "headers: want an object of strings, got a string",
		`{"id":"a","topic":"t","delay_ms":1,"headers":{"k":1}}`: "headers: want an object of strings, got a number",
		`{"id":"a","topic":"t","delay_ms":"soon"}`:              "delay_ms: want a whole number, got a string",
		`{"id":7,"topic":"t","delay_ms":1}`:                     "id: want a string, got a number",
		`{"id":"a","topic":"t","delay_ms":1.5}`:                 "delay_ms: want a whole number, got the number 1.5",
		`["a"]`:                                                 "want an object, got an array",
		`{"id":"a",`:                                            "invalid JSON",
		`{"id":"a","colour":"red"}`:                             `unknown field "colour"`,
		`{"id" "a"}`:                                            "invalid JSON at byte",
	} {
		_, err := shard.ParseLine([]byte(line))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "jsonLine") {
			t.Errorf("%s: error %v, want it to say %q and no Go names", line, err, want)
		}
	}
}
