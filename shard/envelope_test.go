package shard_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/delayq/delayq/shard"
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
