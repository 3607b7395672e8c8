package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoffDoublesWithinItsBounds(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		if d := b.Next(); d < w/2 || d > w {
			t.Fatalf("wait %d: %v, want in [%v, %v]", i, d, w/2, w)
		}
	}
	b.Reset()
	if d := b.Next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("after Reset: %v, want in [50ms, 100ms]", d)
	}
}

func TestNewRaisesMaxToMin(t *testing.T) {
	b := New(time.Second, time.Millisecond)
	for range 3 {
		if d := b.Next(); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("wait %v, want in [500ms, 1s]", d)
		}
	}
}

func TestJitterOfNothingIsNothing(t *testing.T) {
	if d := Jitter(0); d != 0 {
		t.Fatalf("Jitter(0) = %v", d)
	}
	if d := Jitter(-time.Second); d != 0 {
		t.Fatalf("Jitter(-1s) = %v", d)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context: %v, want context.Canceled", err)
	}
	if err := New(time.Hour, time.Hour).Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an ended context: %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
}
