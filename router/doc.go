// Package router decides where a message is published: message → AMQP
// exchange and routing key.
//
// # Rules, in order
//
//  1. A message with an explicit destination (no topic) goes to its own
//     exchange and routing key. Exchange "" is AMQP's default exchange.
//  2. A message with a topic goes to that topic's route in the table.
//  3. Otherwise, if the table has a default exchange, the message goes there
//     with the topic as routing key.
//  4. Otherwise there is no route: Resolve returns ErrNoRoute and the
//     scanner dead-letters the message with that reason.
//
// # Guarantees
//
// A Table is immutable after Load/New and safe for concurrent use. Load
// rejects a bad table as a whole, naming the file, line and field; it never
// half-applies one. Router knows nothing of Redis or AMQP connections.
package router
