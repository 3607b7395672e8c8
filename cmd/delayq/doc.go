// Command delayq is the one delayq binary.
//
//	delayq scan                      run a scanner worker until SIGINT/SIGTERM
//	delayq enqueue ... | -f FILE     schedule messages (flags, or JSON Lines)
//	delayq cancel ID...              cancel scheduled messages
//	delayq reschedule ID --delay D   move a scheduled message (or --at T)
//	delayq inspect ID                where a message is: scheduled, in flight, dead, unknown
//	delayq stats [--json]            per-shard counts
//	delayq serve                     the HTTP API (/v1) and the web console (/)
//
// and list, clear, shards, dead, help, version (`delayq help`).
//
// Configuration comes only from DELAYQ_* environment variables (envconfig);
// `delayq <command> -h` lists them with their defaults. Logs are zap, JSON
// or console, on stderr; passwords never appear in them.
//
// This is the only package that knows about signals and the environment:
// main turns SIGINT/SIGTERM into context cancellation, and everything below
// takes a context.
//
// Shutdown order of `delayq scan`: readiness off, out of the Consul
// catalog, the AMQP ingress (a Redis write under way finishes and is
// acked; the broker keeps the rest), the scanner stops claiming and settles
// what it has in flight (up to DELAYQ_SHUTDOWN_TIMEOUT), the metrics
// listener, the layout and the Consul watch, the publisher closes the AMQP
// connection, the rates sampler and the Redis settings watch, then the
// Redis client closes. `delayq serve`: the listener finishes the requests
// under way, then the rates sampler, the layout and the Consul watch, then
// Redis.
//
// Exit codes: 0 success, 1 the command failed (or a JSON Lines file had
// rejected lines), 2 bad usage or configuration.
package main
