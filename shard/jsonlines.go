package shard

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// LineError is a JSON Lines input line that was rejected. Reading goes on
// with the next line.
type LineError struct {
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// jsonLine is one input line. Unknown fields are rejected.
type jsonLine struct {
	ID          string                     `json:"id"`
	Topic       string                     `json:"topic"`
	Exchange    string                     `json:"exchange"`
	RoutingKey  string                     `json:"routing_key"`
	DelayMs     *int64                     `json:"delay_ms"`
	AtMs        *int64                     `json:"at_ms"`
	ExpiresAtMs *int64                     `json:"expires_at_ms"`
	MaxLateMs   *int64                     `json:"max_lateness_ms"`
	Headers     map[string]json.RawMessage `json:"headers"`
	Body        *string                    `json:"body"`
	BodyBase64  *string                    `json:"body_base64"`
	ContentType string                     `json:"content_type"`
	Retry       []string                   `json:"retry"`
	RetryStep   int                        `json:"retry_step"`
	Attempts    int                        `json:"attempts"`
	Dead        *deadJSON                  `json:"dead"`

	ContentEncoding string `json:"content_encoding"`
	CorrelationID   string `json:"correlation_id"`
	ReplyTo         string `json:"reply_to"`
	Expiration      string `json:"expiration"`
	Type            string `json:"type"`
	AppID           string `json:"app_id"`
	Priority        uint8  `json:"priority"`
	DeliveryMode    uint8  `json:"delivery_mode"`
	Timestamp       int64  `json:"timestamp"`
}

// LineReader reads messages in JSON Lines form, one object a line:
//
//	{"id":"order-42","topic":"order.cancel","delay_ms":1800000,"body":"..."}
//
// Fields: id; topic, or exchange and routing_key; delay_ms or at_ms (unix
// ms); the deadline, expires_at_ms (unix ms) and/or max_lateness_ms
// (Message.ExpiresAt, MaxLateness); headers (an object of typed values:
// see ParseJSONValue); body
// (text) or body_base64; content_type; retry (a schedule: ["15s","3m"]);
// the AMQP properties content_encoding, correlation_id, reply_to,
// expiration, type, app_id, priority, delivery_mode and timestamp (unix
// seconds); and, as an export writes them (AppendLine), retry_step and
// attempts (Message.RetryStep, Attempts), and for a dead message dead,
// {"since_ms": N, "reason": "..."}, without a due time (Message.Dead).
// Blank lines are skipped.
type LineReader struct {
	r       *bufio.Reader
	line    int
	maxLine int
}

// NewLineReader reads from r. Lines longer than what a body of maxBody bytes
// needs (base64 plus room for the other fields) are rejected.
func NewLineReader(r io.Reader, maxBody int) *LineReader {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), maxLine: maxBody*4/3 + 8 + 64<<10}
}

// Next returns the next message and its line number. At the end it returns
// io.EOF. A bad line gives a *LineError, after which Next may be called
// again; any other error is final.
func (lr *LineReader) Next() (Message, int, error) {
	for {
		raw, err := lr.readLine()
		if err != nil {
			return Message{}, lr.line, err
		}
		if raw == nil {
			return Message{}, lr.line, &LineError{Line: lr.line, Err: fmt.Errorf("longer than %d bytes", lr.maxLine)}
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		m, err := ParseLine(raw)
		if err != nil {
			return Message{}, lr.line, &LineError{Line: lr.line, Err: err}
		}
		return m, lr.line, nil
	}
}

// readLine returns the next line without its newline, or nil (and no error)
// for a line over the limit, which it skips.
func (lr *LineReader) readLine() ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > lr.maxLine {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil:
			lr.line++
			if tooLong {
				return nil, nil
			}
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && (len(buf) > 0 || tooLong):
			lr.line++ // last line without a newline
			if tooLong {
				return nil, nil
			}
			return buf, nil
		default:
			return nil, err
		}
	}
}

// ParseLine parses one JSON Lines object into a Message. It checks the
// line's own rules (known fields, one of delay_ms/at_ms, one of
// body/body_base64); the message rules are checked by Enqueue.
func ParseLine(raw []byte) (Message, error) { return parseLine(raw, false) }

// ParseTemplate parses a message in the JSON Lines form without its time
// (delay_ms and at_ms may be absent): the message of a recurring schedule.
func ParseTemplate(raw []byte) (Message, error) { return parseLine(raw, true) }

func parseLine(raw []byte, template bool) (Message, error) {
	// encoding/json would turn invalid UTF-8, and \u escapes of lone
	// surrogates, into U+FFFD without a word: an id or body rewritten so
	// is not the one the producer meant (a later cancel by the original
	// id would miss it). Refuse them instead.
	if !utf8.Valid(raw) {
		at := 0
		for at < len(raw) {
			r, n := utf8.DecodeRune(raw[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return Message{}, fmt.Errorf("not valid UTF-8 at byte %d (JSON text is UTF-8; give a binary body as body_base64)", at+1)
	}
	var l jsonLine
	if err := decodeOne(raw, &l); err != nil {
		return Message{}, err
	}
	m := Message{ID: l.ID, Topic: l.Topic, Exchange: l.Exchange, RoutingKey: l.RoutingKey,
		ContentType: l.ContentType, Properties: Properties{ContentEncoding: l.ContentEncoding,
			CorrelationID: l.CorrelationID, ReplyTo: l.ReplyTo, Expiration: l.Expiration, Type: l.Type,
			AppID: l.AppID, Priority: l.Priority, DeliveryMode: l.DeliveryMode}}
	if l.Timestamp != 0 {
		if l.Timestamp < 0 || l.Timestamp > maxTimestamp {
			return Message{}, invalid("timestamp", "%d is not unix seconds in 1970..9999", l.Timestamp)
		}
		m.Properties.Timestamp = time.Unix(l.Timestamp, 0).UTC()
	}
	if l.Headers != nil {
		m.Headers = make(amqp.Table, len(l.Headers))
		for k, raw := range l.Headers {
			v, err := ParseJSONValue("headers["+k+"]", raw)
			if err != nil {
				return Message{}, err
			}
			m.Headers[k] = v
		}
	}
	for i, f := range l.Retry {
		d, err := time.ParseDuration(f)
		if err != nil {
			return Message{}, invalid(fmt.Sprintf("retry[%d]", i), "%q is not a duration such as \"15s\" or \"3m\"", f)
		}
		m.Retry = append(m.Retry, d)
	}
	m.RetryStep, m.Attempts = l.RetryStep, l.Attempts
	switch {
	case l.DelayMs != nil && l.AtMs != nil:
		return Message{}, invalid("delay_ms", "give delay_ms or at_ms, not both")
	case l.DelayMs != nil:
		if *l.DelayMs < 0 || *l.DelayMs > MaxDelay.Milliseconds() {
			return Message{}, invalid("delay_ms", "%d is outside [0, %d]", *l.DelayMs, MaxDelay.Milliseconds())
		}
		m.Delay = time.Duration(*l.DelayMs) * time.Millisecond
	case l.AtMs != nil:
		if *l.AtMs < minAt.UnixMilli() || *l.AtMs >= maxAt.UnixMilli() {
			return Message{}, invalid("at_ms", "%d is outside [%d, %d)", *l.AtMs, minAt.UnixMilli(), maxAt.UnixMilli())
		}
		m.At = time.UnixMilli(*l.AtMs)
	case !template && l.Dead == nil:
		return Message{}, invalid("delay_ms", "missing: give delay_ms or at_ms")
	}
	if l.Dead != nil {
		d, err := l.Dead.stateOf(template, l.DelayMs != nil || l.AtMs != nil)
		if err != nil {
			return Message{}, err
		}
		m.Dead = d
	}
	if l.ExpiresAtMs != nil {
		if *l.ExpiresAtMs < minAt.UnixMilli() || *l.ExpiresAtMs >= maxAt.UnixMilli() {
			return Message{}, invalid("expires_at_ms", "%d is outside [%d, %d)", *l.ExpiresAtMs, minAt.UnixMilli(), maxAt.UnixMilli())
		}
		m.ExpiresAt = time.UnixMilli(*l.ExpiresAtMs)
	}
	if l.MaxLateMs != nil {
		if *l.MaxLateMs <= 0 || *l.MaxLateMs > MaxDelay.Milliseconds() {
			return Message{}, invalid("max_lateness_ms", "%d is outside [1, %d]", *l.MaxLateMs, MaxDelay.Milliseconds())
		}
		m.MaxLateness = time.Duration(*l.MaxLateMs) * time.Millisecond
	}
	switch {
	case l.Body != nil && l.BodyBase64 != nil:
		return Message{}, invalid("body", "give body or body_base64, not both")
	case l.Body != nil:
		m.Body = []byte(*l.Body)
	case l.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*l.BodyBase64)
		if err != nil {
			return Message{}, invalid("body_base64", "%v", err)
		}
		m.Body = b
	}
	if strings.ContainsRune(m.ID, utf8.RuneError) && !mentionsReplacement(raw) {
		return Message{}, invalid("id", "has a \\u escape of a lone surrogate, which is not a character")
	}
	if template && m.ID == "" {
		return m, nil // the schedule gives each occurrence its id
	}
	if err := validateID(m.ID); err != nil {
		return Message{}, err
	}
	return m, nil
}

// decodeOne decodes the one JSON object raw holds into v, refusing
// unknown fields and anything after it; the error says what is wrong
// (JSONError).
func decodeOne(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return JSONError(err)
	}
	if dec.More() {
		return errors.New("invalid JSON: more than one value")
	}
	return nil
}

// mentionsReplacement reports whether a valid UTF-8 line holds U+FFFD
// itself, literally or as \ufffd: then a U+FFFD in a decoded string may be
// the producer's own.
func mentionsReplacement(raw []byte) bool {
	return bytes.ContainsRune(raw, utf8.RuneError) || bytes.Contains(bytes.ToLower(raw), []byte(`\ufffd`))
}

// JSONError says what an encoding/json decoding error means in JSON's terms
// (member names and JSON kinds), not Go's type names: an *InvalidError
// naming the member when the error is about one (of the wrong type, or
// unknown), else an error about the JSON text. The JSON Lines form and
// the HTTP API's bodies share it.
func JSONError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := "another kind of value"
		switch te.Type.Kind() {
		case reflect.Map, reflect.Struct:
			want = "an object"
		case reflect.Bool:
			want = "true or false"
		case reflect.String:
			want = "a string"
		case reflect.Int64, reflect.Int:
			want = "a whole number"
		case reflect.Uint8:
			want = "a whole number in [0, 255]"
		case reflect.Slice:
			want = "an array of strings"
		}
		field := te.Field
		if field == "" {
			return fmt.Errorf("invalid JSON: want an object, got %s", article(te.Value))
		}
		return invalid(field, "want %s, got %s", want, article(te.Value))
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errors.New("invalid JSON: the object is not closed")
	}
	// encoding/json says so only in words: json: unknown field "colour".
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		name = strings.TrimSuffix(name, `"`)
		return invalid(name, "unknown field %q: not part of a message (see the JSON lines form in the README)", name)
	}
	return fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// article turns encoding/json's value kinds ("string", "number", ...)
// into words.
func article(kind string) string {
	switch kind {
	case "array", "object":
		return "an " + kind
	case "number", "string", "bool":
		return "a " + kind
	}
	if n, ok := strings.CutPrefix(kind, "number "); ok {
		return "the number " + n
	}
	return kind
}
