// Package backoff is how delayq waits before it tries again: a doubling
// wait between a floor and a ceiling, spread by jitter, and a sleep that a
// context cuts short. The publisher and the ingress wait this way between
// reconnects to RabbitMQ, the ingress between Redis writes, the scanner
// while Redis fails its claims, and the Consul watch between failed
// queries.
//
// Guarantees: a wait is never longer than the ceiling and never shorter
// than half the floor; Sleep returns as soon as its context ends.
//
// Non-guarantees: a Backoff is not safe for concurrent use (each retry
// loop owns one); the jitter comes from math/rand/v2 and is not meant to
// be unpredictable, only to keep a fleet that lost a server from coming
// back to it in lockstep.
package backoff
