// Package httpapi is delayq's JSON API under /v1, for services that do not
// speak AMQP or Go: enqueue (one or a batch), get, cancel and reschedule a
// message; stats and shards; list, redrive and purge dead messages. The
// OpenAPI 3 document is served at /v1/openapi.json: every response with its
// schema, every error as application/problem+json. Tests check it against
// the routes and validate every response they get against it.
//
// It is stateless: every read and write goes through shard.Producer and
// shard.Store, the same bounded scripts as the CLI; nothing here builds a
// key or runs a script. A message in a request is in the JSON lines form
// (shard.ParseLine), with typed headers, so one codec serves the SDK, the
// CLI, the AMQP ingress and HTTP.
//
// README.md beside this file is the guide to the API and the console:
// access, sessions, every endpoint, errors and what each costs Redis.
//
// # Guarantees
//
//   - Access: a bearer token (Tokens: its roles, for the whole namespace
//     or limited to scopes: package scope), compared in constant time,
//     never logged. Without tokens every request is an admin's; the
//     caller must then listen on loopback only (delayq serve does).
//   - Scopes: every route is registered with an access rule (access.go)
//     checked before its handler; what a scoped token may not reach is
//     answered as missing (404) or refused (403), and lists hold only
//     what it may see. TestScopeMatrix sends every route of the OpenAPI
//     document with tokens of another scope, so a route without its
//     check fails it.
//   - Guard, which serve puts in front of the API and the console, refuses
//     what a web page could make a browser send: a Host that is a name the
//     server does not answer to (DNS rebinding), a state-changing request
//     from another site (Origin, Sec-Fetch-Site).
//   - Every change (cancel, reschedule, redrive, purge, M) is logged as one
//     "audit" line naming the token's holder (Tokens), never the token.
//     Answers are sent with Cache-Control: no-store.
//   - Bad input is a 4xx application/problem+json naming the field, and
//     nothing is written: malformed JSON, unknown fields, a wrong content
//     type (415), an oversized body (413), invalid ids.
//   - Bounded: each request does bounded Redis work: at most MaxBatch
//     messages, MaxDeadPage dead messages listed, MaxSelection redriven or
//     purged; stats is one pipelined round trip over the shards.
//
// # Non-guarantees
//
//   - A batch is not atomic: each message succeeds or fails on its own.
//   - The dead list is paged by a cursor (the time and id of a page's last
//     message): a walk, not a snapshot. A message redriven meanwhile may
//     come back on a later page when it dies again.
package httpapi
