package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is what Retry needs of a message a consumer received: an AMQP
// delivery's fields. Its Headers take an amqp091 Table as it is.
type Delivery struct {
	MessageID   string
	Exchange    string // where the message was published
	RoutingKey  string
	Headers     map[string]any
	ContentType string
	Properties  Properties
	Body        []byte
}

// DeliveryOf takes what Retry needs from an amqp091-go delivery: its
// exchange, routing key, headers, body and every property Properties has.
func DeliveryOf(d amqp.Delivery) Delivery {
	return Delivery{
		MessageID: d.MessageId, Exchange: d.Exchange, RoutingKey: d.RoutingKey, Headers: d.Headers,
		ContentType: d.ContentType, Body: d.Body, Properties: PropertiesOf(d.ContentEncoding, d.CorrelationId,
			d.ReplyTo, d.Expiration, d.Type, d.AppId, d.Priority, d.DeliveryMode, d.Timestamp),
	}
}

// PropertiesOf gathers AMQP basic properties, as amqp091-go names them.
func PropertiesOf(contentEncoding, correlationID, replyTo, expiration, typ, appID string,
	priority, deliveryMode uint8, timestamp time.Time) Properties {
	return Properties{ContentEncoding: contentEncoding, CorrelationID: correlationID, ReplyTo: replyTo,
		Expiration: expiration, Type: typ, AppID: appID, Priority: priority, DeliveryMode: deliveryMode,
		Timestamp: timestamp}
}

// RetryOutcome says what Retry did.
type RetryOutcome struct {
	Step      int       // the retry step scheduled (1 = first retry); 0 when dead
	Due       time.Time // when the retry is due; zero when dead
	Dead      bool      // the schedule is exhausted: the message is in the dead set
	Duplicate bool      // this step was already scheduled (a redelivered message retried twice)
}

// ErrNoRetrySchedule: the delivery carries no x-delayq-retry header.
var ErrNoRetrySchedule = errors.New("message has no retry schedule")

// Retry is the consumer's helper for stepped retries: call it when
// processing a delivery failed. If the message's retry schedule has a next
// step, the same id is scheduled again after that step's delay, to the
// exchange and routing key it was delivered from, with its headers, body
// and x-delayq-retry-step raised by one; the consumer then acks the
// delivery. When the schedule is exhausted, the message goes to the dead
// set with cause as its reason (see delayq dead list / redrive).
//
// Retry is idempotent per step: retrying a redelivered copy of the same
// step reports Duplicate and changes nothing. It may run before the
// scanner has acked the delivery (consumers can be that fast): the retry
// then takes the message over, and the scanner's ack changes nothing.
func (p *Producer) Retry(ctx context.Context, d Delivery, cause string) (RetryOutcome, error) {
	sched, _ := d.Headers[HeaderRetry].(string)
	if sched == "" {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, ErrNoRetrySchedule)
	}
	var delays []time.Duration
	for _, f := range strings.Split(sched, ",") {
		dl, err := time.ParseDuration(f)
		if err != nil || dl <= 0 {
			return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, invalid("headers["+HeaderRetry+"]", "%q: bad step %q", sched, f))
		}
		delays = append(delays, dl)
	}
	step, err := strconv.Atoi(fmt.Sprint(d.Headers[HeaderRetryStep]))
	if err != nil || step < 0 {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, invalid("headers["+HeaderRetryStep+"]", "%v is not a step number", d.Headers[HeaderRetryStep]))
	}
	m := Message{ID: d.MessageID, Exchange: d.Exchange, RoutingKey: d.RoutingKey, ContentType: d.ContentType,
		Properties: d.Properties, Body: d.Body, Headers: amqp.Table{}}
	for k, v := range d.Headers {
		if !strings.HasPrefix(strings.ToLower(k), ReservedHeaderPrefix) {
			m.Headers[k] = v
		}
	}
	if m.Exchange == "" && m.RoutingKey == "" {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, invalid("destination", "the delivery says neither exchange nor routing key"))
	}
	env, err := m.envelope(p.maxBody, p.now())
	if err != nil {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, err)
	}
	// The deadline goes on with the retries: an expiry time stays (a step
	// due after it will be dead-lettered as expired when claimed), a
	// maximum lateness applies to each step.
	if ms, err := HeaderMillis(d.Headers[HeaderExpiresAt]); err == nil && ms > 0 {
		env.ExpiresMs = ms
	}
	if ms, err := HeaderMillis(d.Headers[HeaderMaxLateness]); err == nil && ms > 0 {
		env.MaxLatenessMs = ms
	}
	i, _, err := p.shardOf(ctx, d.MessageID)
	if err != nil {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, err)
	}
	var mode string
	var arg any
	if step >= len(delays) { // exhausted: to the dead set, as delivered last
		env.Headers = withRetryHeaders(env.Headers, sched, step)
		mode, arg = "dead", fmt.Sprintf("retry schedule exhausted after %d retries: %s", len(delays), cause)
	} else {
		env.Headers = withRetryHeaders(env.Headers, sched, step+1)
		mode, arg = "delay", delays[step].Milliseconds()
	}
	v, err := p.store.retry(ctx, i, d.MessageID, AppendEnvelope(nil, &env), mode, arg)
	if err != nil {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, err)
	}
	r := reply{v: v, what: "retry reply"}
	if len(v) != 2 {
		return RetryOutcome{}, fmt.Errorf("retry %q: unexpected reply of %d fields", d.MessageID, len(v))
	}
	status, due := r.int(0), r.int(1)
	if r.err != nil {
		return RetryOutcome{}, fmt.Errorf("retry %q: %w", d.MessageID, r.err)
	}
	switch status {
	case 0:
		if step >= len(delays) {
			return RetryOutcome{Dead: true, Duplicate: true}, nil
		}
		return RetryOutcome{Step: step + 1, Duplicate: true}, nil
	case 2:
		return RetryOutcome{Dead: true}, nil
	}
	return RetryOutcome{Step: step + 1, Due: time.UnixMilli(due)}, nil
}

// withRetryHeaders adds the retry schedule and step to hs, keeping the
// headers sorted by key (one encoding per envelope).
func withRetryHeaders(hs []Header, sched string, step int) []Header {
	hs = append(hs, Header{Key: HeaderRetry, Value: sched}, Header{Key: HeaderRetryStep, Value: strconv.Itoa(step)})
	slices.SortFunc(hs, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
	return hs
}

// HeaderMillis reads a number of ms (a delay, a unix time) from a header
// value as AMQP clients send it: an integer of any width, a numeric string
// (as the delayed-message plugin accepts), or a finite float, taken to the
// millisecond.
func HeaderMillis(v any) (int64, error) {
	switch x := v.(type) {
	case int8:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case float32:
		return floatMillis(float64(x))
	case float64:
		return floatMillis(x)
	case string:
		s := strings.TrimSpace(x)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return floatMillis(f)
		}
		return 0, fmt.Errorf("%q is not a number of milliseconds", x)
	}
	return 0, errors.New("not a number of milliseconds")
}

func floatMillis(f float64) (int64, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64/2) {
		return 0, fmt.Errorf("%v is not a number of milliseconds", f)
	}
	return int64(math.Floor(f)), nil
}
