// Package ingress makes every AMQP client a delayq producer: it consumes
// ingress queues and schedules what they hold, so that moving off
// RabbitMQ's delayed-message plugin is a change of exchange name in the
// producers.
//
// A producer publishes to an exchange bound to an ingress queue, as it
// would to an x-delayed-message exchange: the x-delay header (ms, any
// integer width or a numeric string, as the plugin reads it) or
// x-delayq-at (unix ms) says when; message_id is the delayq id (duplicates
// are refused; cancel, inspect and reschedule work by it). When the
// message is due, a scanner publishes it to the route's exchange
// (x-delayq-exchange overrides it per message) with the routing key,
// body, every AMQP property but user_id, and every header with its AMQP
// type, minus x-delay, the control headers and those RabbitMQ set on the
// way (BrokerHeader: x-delivery-count, x-death, ...), plus the x-delayq-*
// delivery headers. Header names are case-sensitive: X-Delay is an
// ordinary header. Parse lists the control headers: cancel by id
// (x-delayq-cancel), a retry schedule (x-delayq-retry) and a consumer's
// request for the next retry step (x-delayq-retry-cause).
//
// README.md beside this file is the guide for users moving from the
// plugin: setting it up, every header, the differences, and examples in
// Python, Node and Java.
//
// # Guarantees
//
//   - Nothing is lost between the broker and Redis: a delivery is acked
//     only after Redis stored it (EnqueueBatch), with one multiple ack per
//     batch. If the process dies anywhere before that ack, the broker
//     redelivers; the id is then already stored, so the copy is acked and
//     counted as a duplicate.
//   - Redis down: the ingress retries the batch with backoff and acks
//     nothing, so the broker sends nothing more (prefetch) and keeps the
//     messages. It resumes by itself.
//   - Bad input never blocks a queue: a message that can never be
//     scheduled (Reason constants) is rejected without requeue, so the
//     queue's dead-letter exchange keeps it, logged with its id and reason
//     and counted by reason.
//   - A queue mapped to a scope (Route.Scope) schedules, retries and
//     cancels only within it (scope.go); the rest is rejected as bad input
//     is, reason outside_scope.
//
// # Non-guarantees
//
//   - Without a message_id delayq makes an id, so a redelivery (after a
//     crash before the ack) schedules a second copy.
//   - Order: messages are scheduled by due time, not by arrival.
//   - A cancel that finds nothing scheduled leaves a tombstone for
//     Options.CancelWindow (default 1 min): a message with that id stored
//     within the window is acked as cancelled_ahead, never scheduled. So
//     a cancel published right behind its message wins even when another
//     consumer (another scanner) settles it first. The flip side: a new
//     message that reuses the id of a cancelled, delivered or unknown one
//     within the window is taken as cancelled too (logged and counted).
//
// # Lifecycle
//
// Ingress has the Start/Stop of every long-lived part. Start returns at
// once; one goroutine owns the connection and reconnects with backoff;
// each queue has a channel and a goroutine of its own. Stop ends them,
// lets a Redis write under way finish and ack, and closes the connection,
// which returns every unacked delivery to its queue.
package ingress
