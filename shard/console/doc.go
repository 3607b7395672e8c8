// Package console is delayq's web console: an overview (shards, the fleet's
// counts, oldest overdue, refreshed live), a message page (find by id;
// cancel or reschedule it) and the dead messages (with their reasons;
// redrive or purge one, a selection or all, after a confirmation).
//
// Pages are rendered on the server (html/template, files embedded in the
// binary): no CDN, no build step, a few lines of JavaScript only to
// refresh the overview. Every read and write goes through httpapi.API's
// exported readers and shard.Producer, so the console does the same
// bounded Redis work as the API.
//
// # Access
//
// Signing in takes a bearer token (httpapi.Tokens); the console keeps it
// in an HttpOnly, SameSite=Strict cookie, and every state-changing form
// carries a CSRF token derived from it (HMAC with a per-process key), which
// the server checks in constant time. A read token sees everything and
// changes nothing. With no tokens configured, nobody signs in and every
// visitor is an admin (the server then listens on loopback only).
package console
