package shard

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// This file is the export of scheduled messages in the JSON Lines form
// enqueue -f reads, and the restore of what an export says that the
// enqueue scripts do not write (see "Moving to another Redis" in the
// package doc).

// exportLine is one exported message: the JSON Lines form (jsonLine),
// every field written only when set, in a fixed order.
type exportLine struct {
	ID              string         `json:"id,omitempty"`
	Topic           string         `json:"topic,omitempty"`
	Exchange        *string        `json:"exchange,omitempty"`
	RoutingKey      *string        `json:"routing_key,omitempty"`
	AtMs            int64          `json:"at_ms,omitempty"`
	ExpiresAtMs     int64          `json:"expires_at_ms,omitempty"`
	MaxLateMs       int64          `json:"max_lateness_ms,omitempty"`
	Retry           []string       `json:"retry,omitempty"`
	RetryStep       int            `json:"retry_step,omitempty"`
	Attempts        int            `json:"attempts,omitempty"`
	ContentType     string         `json:"content_type,omitempty"`
	ContentEncoding string         `json:"content_encoding,omitempty"`
	CorrelationID   string         `json:"correlation_id,omitempty"`
	ReplyTo         string         `json:"reply_to,omitempty"`
	Expiration      string         `json:"expiration,omitempty"`
	Type            string         `json:"type,omitempty"`
	AppID           string         `json:"app_id,omitempty"`
	Priority        uint8          `json:"priority,omitempty"`
	DeliveryMode    uint8          `json:"delivery_mode,omitempty"`
	Timestamp       int64          `json:"timestamp,omitempty"`
	Headers         map[string]any `json:"headers,omitempty"`
	Body            *string        `json:"body,omitempty"`
	BodyBase64      *string        `json:"body_base64,omitempty"`
	Dead            *deadJSON      `json:"dead,omitempty"`
}

// ErrOccurrence is returned by AppendLine for an occurrence of a recurring
// schedule: it is not exported as a message (its schedule is, and makes
// it again).
var ErrOccurrence = errors.New("an occurrence of a recurring schedule")

// AppendLine appends to dst the JSON Lines object (and a newline) that
// enqueue -f reads back into the message env holds, due at dueMs after
// attempts deliveries: its destination, every property, its typed headers
// (JSONValue), its retry schedule and step, its deadline, its body (text
// when it is UTF-8, else body_base64). The same message gives the same
// bytes.
func AppendLine(dst []byte, id string, dueMs int64, attempts int, env *Envelope) ([]byte, error) {
	if env.Occurrence.Schedule != "" {
		return dst, fmt.Errorf("export %q: %w (schedule %q)", id, ErrOccurrence, env.Occurrence.Schedule)
	}
	l, err := exportLineOf(id, dueMs, attempts, env)
	if err != nil {
		return dst, err
	}
	return encodeLine(dst, id, &l)
}

// encodeLine appends l as one JSON line, HTML characters as they are.
func encodeLine(dst []byte, id string, l *exportLine) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil { // Encode ends the line
		return dst, fmt.Errorf("export %q: %w", id, err)
	}
	return append(dst, b.Bytes()...), nil
}

// exportLineOf is the line of AppendLine; with no id and a due time of 0,
// the message of a schedule (AppendScheduleLine).
func exportLineOf(id string, dueMs int64, attempts int, env *Envelope) (exportLine, error) {
	l := exportLine{ID: id, Topic: env.Topic, AtMs: dueMs, ExpiresAtMs: env.ExpiresMs, MaxLateMs: env.MaxLatenessMs,
		Attempts: attempts, ContentType: env.ContentType}
	if env.Topic == "" {
		l.Exchange, l.RoutingKey = &env.Exchange, &env.RoutingKey
	}
	p := env.Properties
	l.ContentEncoding, l.CorrelationID, l.ReplyTo, l.Expiration = p.ContentEncoding, p.CorrelationID, p.ReplyTo, p.Expiration
	l.Type, l.AppID, l.Priority, l.DeliveryMode = p.Type, p.AppID, p.Priority, p.DeliveryMode
	if !p.Timestamp.IsZero() {
		l.Timestamp = p.Timestamp.Unix()
	}
	for _, h := range env.Headers {
		switch h.Key {
		case HeaderRetry:
			s, _ := h.Value.(string)
			l.Retry = strings.Split(s, ",")
		case HeaderRetryStep:
			n, err := strconv.Atoi(fmt.Sprint(h.Value))
			if err != nil {
				return l, fmt.Errorf("export %q: header %s is %v, not a step", id, HeaderRetryStep, h.Value)
			}
			l.RetryStep = n
		default:
			if l.Headers == nil {
				l.Headers = make(map[string]any, len(env.Headers))
			}
			l.Headers[h.Key] = JSONValue(h.Value)
		}
	}
	if utf8.Valid(env.Body) {
		s := string(env.Body)
		l.Body = &s
	} else {
		s := base64.StdEncoding.EncodeToString(env.Body)
		l.BodyBase64 = &s
	}
	return l, nil
}

// ExportCursor is where an export goes on: in shard Shard, in Part (""
// the due set and the far tier merged; else a set apart, "held:<topic>"
// or "class:<name>"), after entry After.
type ExportCursor struct {
	Shard int
	Part  string
	After ListCursor
}

// String is the cursor as people pass it back: "<shard>:<due ms>:<id>" in
// the due set (delayq list's form), "<shard>@<n>:<part>:<due ms>:<id>" in
// a set apart whose name is n bytes long.
func (c ExportCursor) String() string {
	if c.Part == "" {
		return BrowseCursor{Shard: c.Shard, After: c.After}.String()
	}
	return fmt.Sprintf("%d@%d:%s:%d:%s", c.Shard, len(c.Part), c.Part, c.After.DueMs, c.After.ID)
}

// ParseExportCursor reads ExportCursor.String ("" is the start).
func ParseExportCursor(s string) (ExportCursor, error) {
	sh, rest, ok := strings.Cut(s, "@")
	if !ok {
		b, err := ParseBrowseCursor(s)
		return ExportCursor{Shard: b.Shard, After: b.After}, err
	}
	bad := fmt.Errorf("%q: want a cursor as a stopped export printed it", s)
	i, err := strconv.Atoi(sh)
	ln, tail, ok2 := strings.Cut(rest, ":")
	n, err2 := strconv.Atoi(ln)
	if err != nil || err2 != nil || !ok2 || i < 0 || n <= 0 || n >= len(tail) || tail[n] != ':' {
		return ExportCursor{}, bad
	}
	part := tail[:n]
	b, err := ParseBrowseCursor("0:" + tail[n+1:])
	if err != nil || !strings.HasPrefix(part, "held:") && !strings.HasPrefix(part, "class:") {
		return ExportCursor{}, bad
	}
	return ExportCursor{Shard: i, Part: part, After: b.After}, nil
}

// Exported is one message of an export: its line, or why it has none
// (Err: a corrupt envelope, an occurrence of a schedule), and where the
// export goes on after it.
type Exported struct {
	ID   string
	Line []byte // nil with Err
	Err  error
	Next ExportCursor
}

// Export calls fn with every scheduled message of shards [0, shards)
// after cursor, shard by shard: first its due set and far tier merged, in
// (due, id) order (delayq list's order), then what its sets apart hold
// (due messages a limited topic or a class's turn holds back: the held
// sets of the topics with a flow, then every class's backlog), each in
// (due, id) order; a page of n at a time, so memory stays bounded
// whatever the backlog. fn's error stops it and is returned. Messages in
// flight are being published and are not exported. A walk is not a
// snapshot: a message enqueued, cancelled or released meanwhile may or
// may not be in it.
func (s *Store) Export(ctx context.Context, shards int, after ExportCursor, n int, fn func(Exported) error) error {
	apart, err := s.apartSets(ctx, BulkFilter{All: true})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	parts := make([]string, len(apart))
	for j, a := range apart {
		parts[j] = "held:" + a.topic
		if a.class != "" {
			parts[j] = "class:" + a.class
		}
	}
	// By name, so that a cursor's part says which come before it.
	order := make([]int, len(parts))
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(parts[a], parts[b]) })
	emit := func(i int, part string, l Listed) error {
		e := Exported{ID: l.ID, Next: ExportCursor{Shard: i, Part: part, After: ListCursor{ID: l.ID, DueMs: l.Due.UnixMilli()}}}
		if l.Envelope == nil {
			e.Err = fmt.Errorf("export %q in shard %d: %w", l.ID, i, l.Corrupt)
		} else {
			e.Line, e.Err = AppendLine(nil, l.ID, l.Due.UnixMilli(), l.Attempts, l.Envelope)
		}
		return fn(e)
	}
	for i := after.Shard; i < shards; i++ {
		from := ExportCursor{Shard: i}
		if i == after.Shard {
			from = after
		}
		if from.Part == "" {
			w, err := s.walkShard(ctx, i, from.After, 0)
			if err != nil {
				return fmt.Errorf("export shard %d: %w", i, err)
			}
			for {
				l, ok, err := w.next(ctx, n)
				if err != nil {
					return fmt.Errorf("export shard %d: %w", i, err)
				}
				if !ok {
					break
				}
				if err := emit(i, "", l); err != nil {
					return err
				}
			}
		}
		for _, j := range order {
			part := parts[j]
			cur := ListCursor{}
			switch {
			case from.Part == part:
				cur = from.After
			case from.Part != "" && part < from.Part:
				continue // done before the stop
			}
			for {
				page, next, more, err := s.listSet(ctx, i, apart[j].key(s.ns, i), cur, min(max(n, 1), maxListPage))
				if err != nil {
					return fmt.Errorf("export shard %d, %s: %w", i, part, err)
				}
				for _, l := range page {
					if err := emit(i, part, l); err != nil {
						return err
					}
				}
				if !more {
					break
				}
				cur = next
			}
		}
	}
	return nil
}

// restoreAttempts writes, for each message enqueued as res says with
// Attempts > 0 (an exported message read back), its count of deliveries
// into its shard's attempts HASH, where the claim reads it: one pipelined
// round trip, only when there is any. Not atomic with the enqueue: a
// producer that dies between the two leaves the message with none (its
// next delivery says attempt 1).
func (p *Producer) restoreAttempts(ctx context.Context, msgs []Message, res []BatchResult) error {
	var pipe redis.Pipeliner
	for i := range msgs {
		if msgs[i].Attempts <= 0 || res[i].Err != nil {
			continue
		}
		if pipe == nil {
			pipe = p.store.rdb.Pipeline()
		}
		pipe.HSet(ctx, ShardKeys(p.store.ns, res[i].Shard).Attempts, msgs[i].ID, strconv.Itoa(msgs[i].Attempts))
	}
	if pipe == nil {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("restore the attempts of exported messages: %w", err)
	}
	return nil
}
