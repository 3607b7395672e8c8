// Package publisher publishes messages to RabbitMQ and reports, for each
// one, whether the broker took responsibility for it.
//
// # What it does
//
// One AMQP connection with a pool of channels in confirm mode. Every
// message is mandatory, and persistent unless its producer asked for a
// transient one (Message.DeliveryMode). Publish returns a Confirm at once;
// Confirm.Wait returns nil only after the broker's ack, and ErrReturned (a
// *ReturnedError) when the broker returned the message as unroutable, so a
// returned message is never taken for delivered. One goroutine per channel
// reads both the (unbuffered) return notifications and the confirms; the
// client library hands over a return before it processes the ack of the
// same publish, so that goroutine always knows a publish was returned before
// it sees its ack.
//
// The client library writes each publish to the socket on its own; the
// connection is wrapped so that publishes made while a write is under way
// go out together in the next one (flushConn). That does not delay any
// publish, and it cuts the write syscalls of the publisher and the reads of
// the broker when many goroutines publish at once.
//
// # Failures
//
// When the connection closes, every outstanding Confirm fails with
// ErrConnectionLost and the publisher redials with exponential backoff
// (Options.MinBackoff to MaxBackoff). A channel-level error (for example a
// publish to a missing exchange) closes only that channel; it is reopened in
// place. Ready is false while disconnected or while RabbitMQ blocks the
// connection (a memory or disk alarm); callers should not take work they
// cannot publish (the scanner waits on WaitReady before claiming).
// ExchangeExists lets callers detect a missing exchange without losing a
// channel.
//
// # Lifecycle
//
// New, then Start(ctx) launches the goroutine that owns the connection;
// Close stops it, closes the connection and waits for every goroutine the
// publisher started. Passwords never appear in logs (Redact).
//
// # Non-guarantees
//
// ErrConnectionLost and a Wait cut short by its context leave the outcome
// unknown: the message may have been delivered. Callers that retry get
// at-least-once delivery; consumers dedupe on message_id.
package publisher
