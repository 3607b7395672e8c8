package scanner_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRetrySchedule walks a message through a 3-step retry schedule: a
// consumer that always fails calls Producer.Retry on each delivery; the
// message comes back after each step's delay with x-delayq-retry-step
// raised, and lands in the dead set when the schedule is exhausted.
func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 4}, rabbit.URL)
	schedule := []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
	const id = "notify-upstream-7"
	if _, err := f.prod.Enqueue(t.Context(), shard.Message{ID: id, Topic: "t", Body: []byte("payload"),
		Headers: amqp.Table{"tenant": "acme"}, ContentType: "text/plain", Retry: schedule}); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for step := 0; step <= len(schedule); step++ {
		shardtest.WaitFor(t, 10*time.Second, func() bool { return len(f.delivered(id)) > step },
			func() string { return "no delivery for step " + strconv.Itoa(step) })
		got := f.delivered(id)
		d := got[step]
		h := d.raw.Headers
		if h[shard.HeaderRetryStep] != strconv.Itoa(step) || h[shard.HeaderRetry] != "200ms,300ms,400ms" ||
			h["tenant"] != "acme" || d.body != "payload" || d.raw.ContentType != "text/plain" {
			t.Fatalf("step %d delivered with headers %v body %q", step, h, d.body)
		}
		if step > 0 {
			if gap := d.at.Sub(last); gap < schedule[step-1] {
				t.Errorf("step %d came %s after the failure, before its delay %s", step, gap, schedule[step-1])
			}
		}
		last = time.Now()
		out, err := f.prod.Retry(t.Context(), shard.Delivery{MessageID: d.raw.MessageId, Exchange: d.raw.Exchange,
			RoutingKey: d.raw.RoutingKey, Headers: d.raw.Headers, ContentType: d.raw.ContentType, Body: d.raw.Body},
			"upstream answered 503")
		if err != nil {
			t.Fatalf("retry at step %d: %v", step, err)
		}
		if step < len(schedule) && (out.Step != step+1 || out.Dead || out.Due.IsZero()) {
			t.Fatalf("retry at step %d: %+v", step, out)
		}
		if step == len(schedule) && !out.Dead {
			t.Fatalf("schedule exhausted but not dead: %+v", out)
		}
		// A redelivered copy of the same step retried again changes nothing.
		again, err := f.prod.Retry(t.Context(), shard.Delivery{MessageID: id, Exchange: d.raw.Exchange,
			RoutingKey: d.raw.RoutingKey, Headers: d.raw.Headers, Body: d.raw.Body}, "again")
		if err != nil || !again.Duplicate {
			t.Fatalf("second retry of step %d: %+v %v", step, again, err)
		}
	}
	info, err := f.prod.Inspect(t.Context(), id)
	if err != nil || info.State != shard.StateDead || !strings.Contains(info.Reason, "exhausted after 3 retries: upstream answered 503") {
		t.Fatalf("after the schedule: %+v %v", info, err)
	}
	if n := len(f.delivered(id)); n != 4 {
		t.Errorf("%d deliveries, want 4 (original + 3 retries)", n)
	}
}

// TestRetryKeepsTheDeadline: a message with a maximum lateness and an
// expiry time carries them as headers, and each retry step keeps them.
func TestRetryKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, scanner.Config{Goroutines: 2}, rabbit.URL)
	expires := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	const id = "remind-with-deadline"
	if _, err := f.prod.Enqueue(t.Context(), shard.Message{ID: id, Topic: "t", Retry: []time.Duration{100 * time.Millisecond},
		ExpiresAt: expires, MaxLateness: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for step := range 2 {
		shardtest.WaitFor(t, 10*time.Second, func() bool { return len(f.delivered(id)) > step },
			func() string { return "no delivery for step " + strconv.Itoa(step) })
		d := f.delivered(id)[step].raw
		if d.Headers[shard.HeaderExpiresAt] != expires.UnixMilli() || d.Headers[shard.HeaderMaxLateness] != int64(30000) {
			t.Fatalf("step %d carries %v", step, d.Headers)
		}
		if step == 0 {
			if _, err := f.prod.Retry(t.Context(), shard.Delivery{MessageID: d.MessageId, Exchange: d.Exchange,
				RoutingKey: d.RoutingKey, Headers: d.Headers, Body: d.Body}, "try later"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestRetryScheduleValidation(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, scanner.Config{Goroutines: 1}, rabbit.URL)
	for _, bad := range [][]time.Duration{{0}, {-time.Second}, make([]time.Duration, shard.MaxRetrySteps+1)} {
		if _, err := f.prod.Enqueue(t.Context(), shard.Message{ID: "x", Topic: "t", Retry: bad}); err == nil ||
			!strings.Contains(err.Error(), "retry") {
			t.Errorf("schedule %v accepted: %v", bad, err)
		}
	}
	if _, err := f.prod.Retry(t.Context(), shard.Delivery{MessageID: "y", RoutingKey: "q"}, "x"); err == nil {
		t.Error("retry without a schedule accepted")
	}
}
