// Package console is delayq's web console: an overview (shards, the fleet's
// counts, oldest overdue and rates, refreshed live; the due-time profile of
// the namespace or one topic as an SVG bar chart), the scheduled messages (browsed
// by shard, topic, id prefix and due window, a bounded page at a time), a
// message page (find by id; headers with their AMQP types; cancel or
// reschedule it), the dead messages (with their reasons; redrive or
// purge one, a selection or all) and flow control (each limited or paused
// topic with the backlog it holds back; limit, pause and resume one), the
// recurring schedules, the far tier, release classes, quotas, and the
// export (the scheduled messages, schedules or dead messages as a JSON
// Lines download, the lines delayq export writes, streamed through
// httpapi.API.Export a page at a time). Every cancel, redrive, purge and
// pause asks for a confirmation first.
//
// Pages are rendered on the server (html/template, files embedded in the
// binary): no CDN, no build step, a few lines of JavaScript only to
// refresh the overview. Every read and write goes through httpapi.API's
// exported readers and shard.Producer, so the console does the same
// bounded Redis work as the API.
//
// The guide to the console and the API is shard/httpapi/README.md.
//
// # Access
//
// Signing in takes a bearer token (httpapi.Tokens) and sets an HttpOnly,
// SameSite=Strict cookie holding a signed, expiring session: an id, its
// end and the token's fingerprint, never the token, so a session dies
// with its token and at its end. Signing out records the end of the
// session in Redis (Options.Sessions), so a copied cookie is refused by
// every instance. Every form carries a CSRF token, the sign-in form
// included (bound to a nonce cookie of its own), which the server checks
// in constant time. Sessions and form tokens are signed with
// Options.Key: instances given the same key accept each other's (serve
// behind a balancer). A session holds its token's grants (package scope):
// read sees and changes nothing; produce also cancels and reschedules a
// message; operate also redrives and purges, bulk-cancels and
// reschedules, limits flows and changes schedules; admin also turns the
// far tier on and off. A session of a token limited to scopes sees only
// its scopes' messages, dead messages, flows, schedules, topics and bulk
// jobs, and acts only on them, through the same checks as the API
// (httpapi's readers ending in For, MayAddress, MaySchedule); the
// namespace's counts stay visible, and the far tier's switch and the
// export need a grant without a scope (an export is every message's
// body). TestConsoleScopes sends every page and action
// (Routes) with another team's session.
// With no tokens configured, nobody signs in and every visitor is an
// admin (the server then listens on loopback only; httpapi.Guard keeps
// other sites' pages out). Every change is logged as one "audit" line
// naming the token's holder.
package console
