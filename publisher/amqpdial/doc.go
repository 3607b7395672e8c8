// Package amqpdial connects delayq's two AMQP sides to RabbitMQ: the
// publisher (package publisher), which publishes due messages, and the
// ingress (package shard/ingress), which consumes the queues that
// plugin-style producers publish to. Both take the nodes of one cluster as
// a list of URLs and reach the first that answers (First), name a node in
// logs and errors without its password (Redact), and share one connection
// configuration (Config) and one set of reconnect waits (Backoff).
//
// It imports nothing of delayq, so that both sides can import it without
// one of them importing the other.
//
// Guarantees: First tries every node once, starting with the one given,
// and stops early only when its context ends; its error names every node
// that failed, by its redacted URL. Redact never returns a password.
//
// Non-guarantees: First does not wait between nodes nor retry a list
// that failed: the caller's loop does that, with Backoff's waits.
package amqpdial
