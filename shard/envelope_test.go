package shard_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	amqp "github.com/rabbitmq/amqp091-go"
)

func sampleEnvelope() shard.Envelope {
	return shard.Envelope{
		Topic: "order.cancel", ContentType: "application/json",
		Headers:    []shard.Header{{Key: "tenant", Value: "acme"}, {Key: "trace", Value: "abc"}},
		Body:       []byte(`{"order":42}`),
		EnqueuedMs: 1700000000123,
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, e := range []shard.Envelope{
		sampleEnvelope(),
		{Exchange: "orders", RoutingKey: "cancel"},
		{RoutingKey: "queue-name", EnqueuedMs: -1},
	} {
		b := shard.AppendEnvelope(nil, &e)
		if len(b) > e.EncodedSize() {
			t.Errorf("encoded %d bytes, EncodedSize said at most %d", len(b), e.EncodedSize())
		}
		got, err := shard.DecodeEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

// everyType is a header table with one value of every AMQP field type,
// nested tables and arrays included, normalized as Message does it.
func everyType() []shard.Header {
	return []shard.Header{
		{Key: "array", Value: []any{"a", int32(1), []any{true}, amqp.Table{"in": int8(-1)}}},
		{Key: "bool", Value: true},
		{Key: "bytes", Value: []byte{0, 1, 0xff}},
		{Key: "decimal", Value: amqp.Decimal{Scale: 2, Value: -1234}},
		{Key: "float32", Value: float32(1.5)},
		{Key: "float64", Value: math.Inf(-1)},
		{Key: "int16", Value: int16(math.MinInt16)},
		{Key: "int32", Value: int32(math.MaxInt32)},
		{Key: "int64", Value: int64(math.MinInt64)},
		{Key: "int8", Value: int8(-128)},
		{Key: "string", Value: "caf\u00e9"},
		{Key: "table", Value: amqp.Table{"deep": amqp.Table{"deeper": "x"}, "n": uint16(7)}},
		{Key: "timestamp", Value: time.Unix(1700000000, 0).UTC()},
		{Key: "uint16", Value: uint16(math.MaxUint16)},
		{Key: "uint32", Value: uint32(math.MaxUint32)},
		{Key: "uint8", Value: uint8(255)},
		{Key: "void", Value: nil},
	}
}

func v2Envelope() shard.Envelope {
	e := sampleEnvelope()
	e.Headers = everyType()
	e.Properties = shard.Properties{ContentEncoding: "gzip", CorrelationID: "c-1", ReplyTo: "replies",
		Expiration: "60000", Type: "order.cancelled", AppID: "shop", Priority: 9, DeliveryMode: 1,
		Timestamp: time.Unix(1600000000, 0).UTC()}
	return e
}

func TestEnvelopeV2RoundTrip(t *testing.T) {
	onlyProps := sampleEnvelope()
	onlyProps.Properties.CorrelationID = "c"
	onlyTyped := sampleEnvelope()
	onlyTyped.Headers = []shard.Header{{Key: "n", Value: int64(1)}}
	onlyDeadline := sampleEnvelope()
	onlyDeadline.ExpiresMs, onlyDeadline.MaxLatenessMs = 1700000060000, 2000
	everything := v2Envelope()
	everything.MaxLatenessMs = 1
	for _, e := range []shard.Envelope{v2Envelope(), onlyProps, onlyTyped, onlyDeadline, everything} {
		b := shard.AppendEnvelope(nil, &e)
		if b[0] != 2 {
			t.Fatalf("format version %d, want 2", b[0])
		}
		got, err := shard.DecodeEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

// A v1 envelope, as the previous release wrote it, still decodes; and
// AppendEnvelope still writes v1 when v1 holds everything, so scanners of
// the previous release read it.
func TestEnvelopeV1StillReadAndWritten(t *testing.T) {
	old, _ := hex.DecodeString("01f6a1abfef9620c6f726465722e63616e63656c0000106170706c69636174696f6e2f6a736f6e" +
		"020674656e616e740461636d65057472616365036162630c7b226f72646572223a34327d")
	got, err := shard.DecodeEnvelope(old)
	if err != nil {
		t.Fatal(err)
	}
	if want := sampleEnvelope(); !reflect.DeepEqual(got, want) {
		t.Errorf("v1 decoded as %+v, want %+v", got, want)
	}
	if again := shard.AppendEnvelope(nil, &got); !bytes.Equal(again, old) {
		t.Errorf("re-encoded as %x, want the v1 bytes %x", again, old)
	}
}

func TestDecodeEnvelopeV2Rejects(t *testing.T) {
	e := v2Envelope()
	good := shard.AppendEnvelope(nil, &e)
	v1 := sampleEnvelope()
	v1b := shard.AppendEnvelope(nil, &v1)
	asV2 := append([]byte{2}, v1b[1:]...) // v1 content under the v2 byte: no mask
	for name, b := range map[string][]byte{
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte{}, good...), 0),
		"v1 content":     asV2,
		"unknown tag":    bytes.Replace(good, []byte("\x04voidV"), []byte("\x04voidZ"), 1),
		"bool byte 2":    bytes.Replace(good, []byte("\x04boolt\x01"), []byte("\x04boolt\x02"), 1),
		"unsorted table": bytes.Replace(good, []byte("\x04deep"), []byte("\x04zeep"), 1),
	} {
		if bytes.Equal(b, good) {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		if _, err := shard.DecodeEnvelope(b); !errors.Is(err, shard.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// TestEnvelopeExpired: the expiry time and the maximum lateness, each
// alone and together (the earlier applies).
func TestEnvelopeExpired(t *testing.T) {
	const due, expires = 1_000_000, 1_005_000
	for _, c := range []struct {
		expiresMs, maxLate, now int64
		want                    bool
	}{
		{0, 0, due + 1e9, false},
		{expires, 0, expires, false},
		{expires, 0, expires + 1, true},
		{0, 2000, due + 2000, false},
		{0, 2000, due + 2001, true},
		{expires, 2000, due + 2001, true},
		{expires, 9000, expires + 1, true},
	} {
		e := shard.Envelope{ExpiresMs: c.expiresMs, MaxLatenessMs: c.maxLate}
		why, got := e.Expired(due, c.now)
		if got != c.want || got != (why != "") {
			t.Errorf("expires %d, max lateness %d, claimed at %d: %v %q, want %v", c.expiresMs, c.maxLate, c.now, got, why, c.want)
		}
	}
}

func TestDecodeEnvelopeRejects(t *testing.T) {
	e := sampleEnvelope()
	good := shard.AppendEnvelope(nil, &e)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"json":      []byte(`{"id":"x"}`),
	} {
		if _, err := shard.DecodeEnvelope(b); !errors.Is(err, shard.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestAppendEnvelopeAllocatesNothingWithCapacity(t *testing.T) {
	e := sampleEnvelope()
	buf := make([]byte, 0, e.EncodedSize())
	if n := testing.AllocsPerRun(100, func() { buf = shard.AppendEnvelope(buf[:0], &e) }); n != 0 {
		t.Errorf("AppendEnvelope allocated %.0f times", n)
	}
}

func FuzzEnvelope(f *testing.F) {
	e := sampleEnvelope()
	f.Add(shard.AppendEnvelope(nil, &e))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0x0f})
	v2 := v2Envelope()
	f.Add(shard.AppendEnvelope(nil, &v2))
	v2.ExpiresMs, v2.MaxLatenessMs = 1700000060000, 2000
	f.Add(shard.AppendEnvelope(nil, &v2))
	v2.Occurrence = shard.OccurrenceRef{Schedule: "daily", Version: 3, NominalMs: 1700000000000, Rule: `{"spec":"@daily"}`}
	f.Add(shard.AppendEnvelope(nil, &v2))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := shard.DecodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, shard.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := shard.AppendEnvelope(nil, &e); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
	})
}

func BenchmarkAppendEnvelope(b *testing.B) {
	e := sampleEnvelope()
	e.Body = make([]byte, 100)
	buf := make([]byte, 0, e.EncodedSize())
	b.ReportAllocs()
	for b.Loop() {
		buf = shard.AppendEnvelope(buf[:0], &e)
	}
}

func BenchmarkDecodeEnvelope(b *testing.B) {
	e := sampleEnvelope()
	e.Body = make([]byte, 100)
	enc := shard.AppendEnvelope(nil, &e)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := shard.DecodeEnvelope(enc); err != nil {
			b.Fatal(err)
		}
	}
}
