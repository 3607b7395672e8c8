package ingress

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard"
)

// The headers a producer sets on an ingress message. Apart from x-delay
// (the delayed-message plugin's own), they start with x-delayq-.
const (
	// HeaderDelay: delay in ms, as the rabbitmq_delayed_message_exchange
	// plugin reads it: an integer of any width or a numeric string; a
	// float is taken to the millisecond. Zero or less: due now.
	HeaderDelay = "x-delay"
	// HeaderAt: the due time in unix ms (integer or numeric string).
	HeaderAt = "x-delayq-at"
	// HeaderExpiresAt: the latest useful time in unix ms; claimed after
	// it, the message is dead-lettered as expired, never published
	// (shard.Message.ExpiresAt).
	HeaderExpiresAt = shard.HeaderExpiresAt
	// HeaderMaxLateness: in ms, how late the message may still be
	// published (shard.Message.MaxLateness).
	HeaderMaxLateness = shard.HeaderMaxLateness
	// HeaderExchange: deliver to this exchange instead of the ingress's
	// target (the routing key is still the one published with).
	HeaderExchange = "x-delayq-exchange"
	// HeaderCancel: cancel the scheduled message with this message_id
	// instead of scheduling one. Any value but false.
	HeaderCancel = "x-delayq-cancel"
	// HeaderRetryCause: this is a delivery a consumer failed to process,
	// published back as it was received (headers included): schedule the
	// next step of its x-delayq-retry schedule, or dead-letter it when the
	// schedule is exhausted, with the header's value as the reason.
	HeaderRetryCause = "x-delayq-retry-cause"
)

// Rejection reasons: the reason label of delayq_ingress_rejected_total
// and the first word of a rejection's log line.
const (
	ReasonDelay    = "bad_delay"      // x-delay, x-delayq-at or a deadline header is not a usable time
	ReasonID       = "bad_id"         // message_id is not a valid delayq id
	ReasonBody     = "body_too_large" // over the body limit
	ReasonHeader   = "bad_header"     // a header value or name delayq cannot keep
	ReasonControl  = "bad_control"    // a x-delayq-* header that is unknown or malformed
	ReasonProperty = "bad_property"   // an AMQP property delayq cannot publish
	ReasonTarget   = "bad_target"     // no exchange and no routing key, or a bad x-delayq-exchange
	ReasonRetry    = "bad_retry"      // a retry request without a usable schedule
	ReasonInvalid  = "invalid"        // any other rule of shard.Message
	ReasonScope    = "outside_scope"  // addressed outside the queue's scope (Route.Scope)
)

// RejectError is why an ingress message is rejected (to the queue's
// dead-letter exchange, never requeued).
type RejectError struct {
	Reason string // one of the Reason constants
	Detail string
}

func (e *RejectError) Error() string { return e.Reason + ": " + e.Detail }

func reject(reason, format string, args ...any) error {
	return &RejectError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Kind is what an ingress message asks for.
type Kind int

const (
	Schedule Kind = iota // schedule Message
	Cancel               // cancel the message ID
	Retry                // schedule the next retry step of Delivery
)

// Request is one parsed ingress message.
type Request struct {
	Kind     Kind
	Message  shard.Message  // Schedule
	ID       string         // Cancel
	Delivery shard.Delivery // Retry
	Cause    string         // Retry
	// GeneratedID is true when the producer gave no message_id and delayq
	// made one (a redelivery then schedules a second copy).
	GeneratedID bool
}

// Parse turns a delivery from an ingress queue into a Request. target is
// the ingress's exchange, maxBody the body limit. A *RejectError says why
// the delivery can never be scheduled.
func Parse(d *amqp.Delivery, target string, maxBody int) (Request, error) {
	var r Request
	id := d.MessageId
	if id == "" {
		id, r.GeneratedID = newID(), true
	}
	if err := shard.ValidateID(id); err != nil {
		return r, reject(ReasonID, "message_id %q: %v", id, err)
	}
	var ctl control
	headers, err := ctl.take(d.Headers)
	if err != nil {
		return r, err
	}
	if ctl.cancel {
		if r.GeneratedID {
			return r, reject(ReasonID, "%s without a message_id: nothing to cancel", HeaderCancel)
		}
		return Request{Kind: Cancel, ID: id}, nil
	}
	if len(d.Body) > maxBody {
		return r, reject(ReasonBody, "%d bytes, more than the limit of %d", len(d.Body), maxBody)
	}
	exchange := target
	if ctl.exchange != nil {
		exchange = *ctl.exchange
	}
	if exchange == "" && d.RoutingKey == "" {
		return r, reject(ReasonTarget, "no exchange and no routing key to deliver to")
	}
	props := shard.PropertiesOf(d.ContentEncoding, d.CorrelationId, d.ReplyTo, d.Expiration, d.Type, d.AppId,
		d.Priority, d.DeliveryMode, d.Timestamp)
	if ctl.retryCause != nil {
		if r.GeneratedID {
			return r, reject(ReasonRetry, "%s without a message_id", HeaderRetryCause)
		}
		if ctl.retry == "" {
			return r, reject(ReasonRetry, "%s without an %s schedule", HeaderRetryCause, shard.HeaderRetry)
		}
		// The delivery as the consumer received it: its retry headers
		// are what Producer.Retry reads.
		h := make(amqp.Table, len(headers)+4)
		for k, v := range headers {
			h[k] = v
		}
		h[shard.HeaderRetry] = ctl.retry
		h[shard.HeaderRetryStep] = ctl.retryStep
		if ctl.expiresAt != nil { // the deadline goes on with the retries
			h[shard.HeaderExpiresAt] = *ctl.expiresAt
		}
		if ctl.maxLate != nil {
			h[shard.HeaderMaxLateness] = *ctl.maxLate
		}
		return Request{Kind: Retry, Cause: *ctl.retryCause, Delivery: shard.Delivery{
			MessageID: id, Exchange: exchange, RoutingKey: d.RoutingKey, Headers: h,
			ContentType: d.ContentType, Properties: props, Body: d.Body,
		}}, nil
	}
	m := shard.Message{ID: id, Exchange: exchange, RoutingKey: d.RoutingKey, Headers: headers,
		ContentType: d.ContentType, Properties: props, Body: d.Body}
	if ctl.retry != "" {
		for i, f := range strings.Split(ctl.retry, ",") {
			step, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || step <= 0 || step > shard.MaxDelay {
				return r, reject(ReasonRetry, "%s step %d: %q is not a duration in (0, %s]", shard.HeaderRetry, i+1, f, shard.MaxDelay)
			}
			m.Retry = append(m.Retry, step)
		}
	}
	switch {
	case ctl.at != nil:
		m.At = time.UnixMilli(*ctl.at)
	case ctl.delay != nil:
		if *ctl.delay > shard.MaxDelay.Milliseconds() {
			return r, reject(ReasonDelay, "%s = %d ms is more than %s", HeaderDelay, *ctl.delay, shard.MaxDelay)
		}
		m.Delay = time.Duration(max(*ctl.delay, 0)) * time.Millisecond
	}
	if ctl.expiresAt != nil {
		m.ExpiresAt = time.UnixMilli(*ctl.expiresAt)
	}
	if ctl.maxLate != nil {
		if *ctl.maxLate > shard.MaxDelay.Milliseconds() {
			return r, reject(ReasonDelay, "%s = %d ms is more than %s", HeaderMaxLateness, *ctl.maxLate, shard.MaxDelay)
		}
		m.MaxLateness = time.Duration(*ctl.maxLate) * time.Millisecond
	}
	r.Kind, r.Message = Schedule, m
	return r, nil
}

// ReasonOf maps an error of shard.Producer for a single message to a
// rejection reason, or "" if the error is not the message's fault.
func ReasonOf(err error) string {
	var ie *shard.InvalidError
	if !errors.As(err, &ie) {
		return ""
	}
	switch f := ie.Field; {
	case f == "id":
		return ReasonID
	case f == "body":
		return ReasonBody
	case f == "at" || f == "delay" || f == "expires_at" || f == "max_lateness":
		return ReasonDelay
	case f == "destination" || f == "exchange" || f == "routing_key":
		return ReasonTarget
	case strings.HasPrefix(f, "headers"):
		return ReasonHeader
	case strings.HasPrefix(f, "retry"):
		return ReasonRetry
	case f == "content_type" || f == "content_encoding" || f == "correlation_id" || f == "reply_to" ||
		f == "expiration" || f == "type" || f == "app_id" || f == "delivery_mode" || f == "timestamp":
		return ReasonProperty
	}
	return ReasonInvalid
}

// BrokerHeader reports whether name is a header RabbitMQ sets on a message
// it delivers or dead-letters: x-delivery-count (a quorum queue's count
// of deliveries), x-death with x-first-death-* and x-last-death-*
// (dead-lettering), x-received-from (federation). The ingress drops them:
// they describe the message's trip to the ingress queue, and published
// on they would tell the target's consumers of deliveries and deaths that
// were not theirs (a first delivery taken for a retry). RabbitMQ 3.13 and
// later treat x- headers as the broker's own, too.
func BrokerHeader(name string) bool {
	switch name {
	case "x-delivery-count", "x-death", "x-received-from":
		return true
	}
	return strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
}

// control is what the control headers say.
type control struct {
	delay, at  *int64
	expiresAt  *int64
	maxLate    *int64
	exchange   *string
	cancel     bool
	retry      string
	retryStep  any
	retryCause *string
}

// take reads the control headers of h and returns the others, which are
// the message's own, minus the broker's (BrokerHeader). The headers of a
// past delivery (due time, attempt, retry step) are dropped from a new
// schedule. Header names are case-sensitive, as in AMQP and in the
// delayed-message plugin: X-Delay is an ordinary header, kept as sent.
func (c *control) take(h amqp.Table) (amqp.Table, error) {
	out := make(amqp.Table, len(h))
	for k, v := range h {
		if k != HeaderDelay && !strings.HasPrefix(k, shard.ReservedHeaderPrefix) {
			if !BrokerHeader(k) {
				out[k] = v
			}
			continue
		}
		switch k {
		case HeaderDelay:
			ms, err := shard.HeaderMillis(v)
			if err != nil {
				return nil, reject(ReasonDelay, "%s = %s: %v", k, shard.FormatValue(v), err)
			}
			c.delay = &ms
		case HeaderAt:
			ms, err := shard.HeaderMillis(v)
			if err != nil {
				return nil, reject(ReasonDelay, "%s = %s: %v", k, shard.FormatValue(v), err)
			}
			c.at = &ms
		case HeaderExpiresAt, HeaderMaxLateness:
			ms, err := shard.HeaderMillis(v)
			if err == nil && ms <= 0 {
				err = fmt.Errorf("%d is not a positive number of milliseconds", ms)
			}
			if err != nil {
				return nil, reject(ReasonDelay, "%s = %s: %v", k, shard.FormatValue(v), err)
			}
			if k == HeaderExpiresAt {
				c.expiresAt = &ms
			} else {
				c.maxLate = &ms
			}
		case HeaderExchange:
			s, ok := v.(string)
			if !ok || len(s) > shard.MaxNameLen {
				return nil, reject(ReasonTarget, "%s = %s: want an exchange name", k, shard.FormatValue(v))
			}
			c.exchange = &s
		case HeaderCancel:
			c.cancel = v != false
		case shard.HeaderRetry:
			s, ok := v.(string)
			if !ok || s == "" {
				return nil, reject(ReasonRetry, "%s = %s: want a schedule such as \"15s,3m,10m\"", k, shard.FormatValue(v))
			}
			c.retry = s
		case HeaderRetryCause:
			s := shard.FormatValue(v)
			c.retryCause = &s
		case shard.HeaderRetryStep:
			c.retryStep = v
		case shard.HeaderDueMs, shard.HeaderAttempt, shard.HeaderLateMs, shard.HeaderReleasedMs:
			// from a past delivery: not the new message's
		default:
			return nil, reject(ReasonControl, "unknown header %s (names starting with %s are delayq's: %s, %s, %s, %s, %s, %s, %s)",
				k, shard.ReservedHeaderPrefix, HeaderAt, HeaderExpiresAt, HeaderMaxLateness, HeaderExchange, HeaderCancel,
				shard.HeaderRetry, HeaderRetryCause)
		}
	}
	if c.delay != nil && c.at != nil {
		return nil, reject(ReasonDelay, "give %s or %s, not both", HeaderDelay, HeaderAt)
	}
	if c.retryStep == nil {
		c.retryStep = "0"
	}
	return out, nil
}

// newID makes an id for a message published without a message_id.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "ingress-" + hex.EncodeToString(b[:])
}
