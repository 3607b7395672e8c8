// Package scope says which messages a caller may see and change: the teams
// sharing one delayq (scopes), what each token may do within one (roles),
// and to which scope a message belongs. It is pure code: the scopes file
// is read at start (ParseSet), and nothing here talks to a server.
//
// # Scopes
//
// A scope is a team's share of a namespace, named, and defined by rules
// on what its messages are addressed to and how their ids start:
//
//   - topic=PATTERN: messages addressed to a topic the pattern matches.
//   - exchange=EXCHANGE[/KEY-PATTERN]: messages addressed to an exchange
//     and routing key (no /: any key; EXCHANGE empty is AMQP's default
//     exchange, "exchange=/jobs-*").
//   - ids=PREFIX: and whose id starts so (several: any of them).
//
// A line may also give the scope's quota (package shard, quota.go):
// pending=N, the most messages it may hold, and rate=N, the most it may
// enqueue a second (a whole number, 0 or more; 0: no limit). serve and
// scan write it to Redis at start, unless the quota was changed at
// runtime since (delayq quota, the API, the console): that change stays.
//
// The scopes file (DELAYQ_SCOPES_FILE; not secret) holds one a line:
//
//	# NAME   RULES                                        QUOTA
//	billing  topic=billing.*  topic=invoice.*  ids=billing-  pending=1000000 rate=5000
//	search   exchange=search/*  ids=search-
//
// A PATTERN is a name, or a prefix followed by one * ("billing.*",
// "billing*", "*"): no other wildcards, so a pattern reads at a glance and
// two patterns overlap exactly when one's prefix begins the other's. A
// message is in a scope when its destination matches one of the scope's
// topic or exchange rules (any destination, when it has none) and, when
// the scope has ids rules, its id starts with one of the prefixes.
//
// Scopes may not overlap: no message may be in two (Set.Of gives a
// message's scope, or none). That is what lets the quotas, and the release
// shares that come after them, be kept per scope without asking which
// team a message counts against. Two scopes overlap when a destination
// rule of one overlaps one of the other's (or either has none) and their
// ids do too (either has none, or a prefix of one begins a prefix of the
// other). The file is refused at start, naming the line, for an unknown
// rule, an empty pattern, a * anywhere but last, a name given twice, a
// scope without rules, a quota that is not a whole number of 0 or more,
// or two scopes that overlap (both lines named).
//
// # Roles
//
// A grant is a role within a scope, or within the whole namespace (no
// scope). The roles, each including those before it:
//
//   - read: see the scope's messages, dead messages, flows, schedules and
//     counts.
//   - produce: also enqueue, upsert, cancel and reschedule its messages.
//   - operate: also flow limits and pauses, recurring schedules, bulk
//     cancel and reschedule, redrive and purge of dead messages.
//   - admin: also the scope's quotas; with no scope, everything: the
//     shard count M, the far tier, every scope's quotas.
//
// What is not a message's (M, the far tier, the fleet) needs a grant
// without a scope: Caller.Global.
//
// # What a scoped caller sees
//
// Message-addressed checks (Caller.Can) take the message's id and
// destination. A message outside every scope the caller holds is, to it,
// not there (a 404, never a 403 that would tell it exists); a request to
// write one it may not (an enqueue addressed elsewhere) is refused naming
// the field. Lists and counts of messages are filtered to the caller's
// scopes (Caller.Can with RoleRead), and bulk filters intersected with
// them. The
// figures that stay visible to every read grant, whatever its scope, are
// the namespace's totals by shard (stats), the due-time profile of the
// namespace and the fleet's rates: they count messages without naming
// one (the flows listed in stats are filtered).
//
// Id-addressed requests (get, cancel, reschedule) are refused with no
// read when every scope the caller holds has id prefixes and none begins
// the id, and allowed with no read when one whose only rules are id
// prefixes begins it: the prefix makes the id the team's, whoever holds
// it. Otherwise the stored message's destination is read first and the
// change made after, two steps: a message another team creates under
// that very id in between (after the first was cancelled) could be
// touched. Give every producing scope an id prefix; a scope without one
// is also told, by a duplicate, that an id another team holds exists.
//
// # Non-guarantees
//
//   - The CLI talks to Redis itself: it is an operator's tool, outside
//     every scope. Never hand a team the Redis credentials instead of a
//     token.
//   - A scope names what a token may address, not what the broker does
//     with it: a topic's route (the routes file) decides its exchange.
package scope
