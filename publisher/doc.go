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
// returned message is never taken for delivered. PublishNotify reports the
// same outcome to a function instead, called on the goroutine that reads
// the confirms (no goroutine waits per message). One goroutine per channel
// reads both the (unbuffered) return notifications and the confirms; the
// client library hands over a return before it processes the ack of the
// same publish, so that goroutine always knows a publish was returned before
// it sees its ack.
//
// The client library writes each publish to the socket on its own; the
// connection is wrapped so that publishes made while a write is under way
// go out together in the next one (flushConn), and a publish that follows
// a pause first lets the goroutines that are ready to publish go ahead
// (or waits Options.Gather, when set) so that they share its write. That
// cuts the write syscalls of the publisher and, more, the reads and
// confirms of the broker: at a steady load the publishes come a few at a
// time, and the broker spends much less per message when it reads and
// confirms them together. While publishes keep coming nothing waits.
//
// A publish goes to the first channel with fewer than 32 publishes
// awaiting a confirm, and only while every channel holds that many to the
// least loaded one. At a steady load the publishes of a moment so share
// one channel, which the broker serves with one process and confirms with
// one multiple ack, instead of a process and a confirm for each of a few
// channels in turn; a saturated publisher still fills them all (a
// scanner's window holds 256). Against round robin, A/B at a steady 6,000
// msg/s with claim batch 8 on the 2-core benchmark VM (`delayq-bench -only
// ab -batches 8 -rounds 5 -scanners 2,3 -limit 12000`): RabbitMQ 9-11 %
// less CPU a message, lateness p99 (the median of five runs) 12.7 against
// 15.7 ms with two scanners and 11.9 against 19.3 ms with three; with one
// scanner and in saturated drains, within the noise
// (cmd/delayq-bench/README.md).
//
// # Failures
//
// When the connection closes, every outstanding Confirm fails with
// ErrConnectionLost and the publisher redials with exponential backoff
// (Options.MinBackoff to MaxBackoff), starting with the next node of the
// cluster. A channel-level error (for example a publish to a missing
// exchange) closes only that channel; it is reopened in place.
//
// A channel that nacks a publish is retired at once (no more publishes),
// and closed and reopened once its outstanding confirms are in. RabbitMQ
// 3.10 nacks every publish, for good, on a channel opened while a quorum
// queue elects its leader, and an election can take seconds (it waits for
// a majority, which a paused node holds up), so no pause before
// reconnecting can rule that out; a fresh channel opened after the
// election is the cure. Only the first nack of a channel is reported as
// ErrNacked (a refusal, which callers count), and not even that one on a
// channel opened within Options.Probation of a connect: the others are
// ErrNackedSuspect, which callers take for an outage. Channels that nack
// in a row without acking anything are reopened after a growing pause
// (100 ms doubling to 1 s), and only the first of such a streak is logged
// as a warning. Ready is false while disconnected or while RabbitMQ blocks the
// connection (a memory or disk alarm); callers should not take work they
// cannot publish (the scanner waits on WaitReady before claiming).
// ExchangeExists lets callers detect a missing exchange without losing a
// channel.
//
// # Lifecycle
//
// New, then Start(ctx) launches the goroutine that owns the connection;
// Close stops it, closes the connection and waits for every goroutine the
// publisher started. It reaches the nodes of a cluster, and waits between
// reconnects, as the AMQP ingress does, through package amqpdial; a node is
// named in logs by its URL without the password (amqpdial.Redact).
//
// # Non-guarantees
//
// ErrConnectionLost and a Wait cut short by its context leave the outcome
// unknown: the message may have been delivered. Callers that retry get
// at-least-once delivery; consumers dedupe on message_id.
package publisher
