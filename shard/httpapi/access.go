package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
)

// Access: a scope check no route can forget.
//
// Every route is registered with an access rule (handle takes one; only
// the constructors below make one), which names the role the route needs
// and what it is needed on. The rule is checked before the handler runs,
// for everything a request names in its path or query:
//
//   - inNamespace(role): what is the namespace's (M, the far tier): a
//     grant without a scope (scope.Caller.Global).
//   - anywhere(role): figures that name no message (stats, rates, the
//     namespace's due profile): a grant of role in any scope. A topic
//     query parameter (?topic=) must be one of the caller's topics.
//   - onMessage(role): the message {id} names (scheduled, in flight or
//     dead): read first, and unless the caller may act on it with role,
//     answered exactly as an unknown id is (404), so a scope learns
//     nothing of another's ids.
//   - onTopic(role): the topic {topic} names (its flow).
//   - onSchedule(role): the schedule {name} names, if it exists (its
//     message's destination, its name as the id): as onMessage.
//   - inBody(role): messages in the request body (or a bulk filter, which
//     the handler limits to the caller's scopes: BulkFilter.Within); and
//     listed(role): a list. These the handler checks per item, with the
//     helpers below (mayWrite, and the readers ending in For, which the
//     console uses too); the role matrix test (access_test.go) sends
//     every route of the OpenAPI document, with a token of another
//     scope, and fails on any change or any of the other scope's ids,
//     topics or names in an answer, so a route whose handler forgets is
//     caught.
//
// A caller with a grant of role for the whole namespace passes every
// check without a read.
type access struct {
	role Role
	on   accessOn
}

type accessOn int

const (
	onNamespace accessOn = iota
	onAnywhere
	onMessageID
	onTopicPath
	onSchedulePath
	onBodyItems
	onListItems
	onNobody // openapi.json: no token
)

// String is the rule as the OpenAPI document states it for its route
// (x-delayq-role and x-delayq-scope): "role/where".
func (r access) String() string {
	return r.role.String() + "/" + [...]string{onNamespace: "namespace", onAnywhere: "anywhere", onMessageID: "message",
		onTopicPath: "topic", onSchedulePath: "schedule", onBodyItems: "body", onListItems: "list", onNobody: "public"}[r.on]
}

func inNamespace(role Role) access { return access{role, onNamespace} }
func anywhere(role Role) access    { return access{role, onAnywhere} }
func onMessage(role Role) access   { return access{role, onMessageID} }
func onTopic(role Role) access     { return access{role, onTopicPath} }
func onSchedule(role Role) access  { return access{role, onSchedulePath} }
func inBody(role Role) access      { return access{role, onBodyItems} }
func listed(role Role) access      { return access{role, onListItems} }
func public() access               { return access{RoleNone, onNobody} }

// callerKey is the request context's key of its scope.Caller.
type callerKey struct{}

// callerOf is the caller of r (the zero Caller outside a route).
func callerOf(r *http.Request) scope.Caller {
	c, _ := r.Context().Value(callerKey{}).(scope.Caller)
	return c
}

// check applies rule to r for caller c before the handler runs: it
// writes the refusal and returns false, or returns true.
func (a *API) check(w http.ResponseWriter, r *http.Request, rule access, c scope.Caller) bool {
	if c.Max() < rule.role {
		if c.Max() == RoleNone {
			w.Header().Set("WWW-Authenticate", `Bearer realm="delayq"`)
			problem(w, http.StatusUnauthorized, "missing or unknown token", "send Authorization: Bearer <token>", "")
			return false
		}
		problem(w, http.StatusForbidden, "not allowed", fmt.Sprintf("this needs the %s role; the token holds %s at most", rule.role, c.Max()), "")
		return false
	}
	if c.Global(rule.role) {
		return true
	}
	switch rule.on {
	case onNamespace:
		problem(w, http.StatusForbidden, "not allowed", fmt.Sprintf("this needs the %s role for the whole namespace; the token is limited to scopes", rule.role), "")
		return false
	case onAnywhere:
		if t := r.URL.Query().Get("topic"); t != "" && !c.CanTopic(rule.role, t) {
			problem(w, http.StatusForbidden, "outside the token's scopes", fmt.Sprintf("topic %q is not in a scope the token holds %s in", t, rule.role), "topic")
			return false
		}
	case onMessageID:
		id := r.PathValue("id")
		if shard.ValidateID(id) != nil {
			return true // the handler says what is wrong with it
		}
		may, err := a.mayAddress(r.Context(), c, rule.role, id)
		if err != nil {
			a.fail(w, err)
			return false
		}
		if !may {
			problem(w, http.StatusNotFound, "unknown id", fmt.Sprintf("%q is not scheduled, in flight or dead", id), "id")
			return false
		}
	case onTopicPath:
		if t := r.PathValue("topic"); !c.CanTopic(rule.role, t) {
			problem(w, http.StatusForbidden, "outside the token's scopes", fmt.Sprintf("topic %q is not in a scope the token holds %s in", t, rule.role), "topic")
			return false
		}
	case onSchedulePath:
		name := r.PathValue("name")
		may, err := a.MaySchedule(r.Context(), c, rule.role, name)
		switch {
		case err != nil:
			a.fail(w, err)
			return false
		case !may:
			a.failSchedule(w, fmt.Errorf("schedule %q: %w", name, shard.ErrScheduleNotFound))
			return false
		}
	}
	return true
}

// holderOf is who made r, for the audit log (AuditName).
func holderOf(r *http.Request) string { return AuditName(callerOf(r)) }

// AuditName is who the audit log names for c: the token's holder, and its
// grants when it is limited to scopes.
func AuditName(c scope.Caller) string {
	if !c.Scoped() {
		return c.Holder
	}
	return c.Holder + " (" + c.String() + ")"
}

// mayAddress reports whether c may act with role on the message id: on
// the id alone when every scope it holds role in has id prefixes (none of
// them matching: no), else by the stored message's destination, read. A
// failed read is an error, never a yes.
func (a *API) mayAddress(ctx context.Context, c scope.Caller, role Role, id string) (bool, error) {
	prefixed, matched := true, false
	for _, s := range c.Scopes(role) {
		switch {
		case !s.HasIDRules():
			prefixed = false
		case s.HasID(id) && !s.HasDestinationRules():
			return true, nil // the id makes it the scope's
		case s.HasID(id):
			matched = true
		}
	}
	if prefixed && !matched {
		return false, nil
	}
	info, err := a.o.Producer.Inspect(ctx, id)
	if err != nil {
		return false, err
	}
	if info.State == shard.StateUnknown {
		return true, nil // the handler answers that it is unknown
	}
	return c.Can(role, targetOf(id, info.Envelope)), nil
}

// mayWrite reports whether the caller of r may write m (enqueue it, or
// make a schedule of it) with role; when not, it writes the 403 naming
// the field.
func mayWrite(w http.ResponseWriter, r *http.Request, role Role, m shard.Message) bool {
	c := callerOf(r)
	if c.Can(role, targetOfMessage(m)) {
		return true
	}
	problem(w, http.StatusForbidden, "outside the token's scopes", outsideWhy(c, role, m), fieldOutside(c, role, m))
	return false
}

// outsideWhy says why message m is outside c's scopes.
func outsideWhy(c scope.Caller, role Role, m shard.Message) string {
	var names []string
	for _, s := range c.Scopes(role) {
		names = append(names, s.String())
	}
	dest := "topic " + m.Topic
	if m.Topic == "" {
		dest = fmt.Sprintf("exchange %q routing key %q", m.Exchange, m.RoutingKey)
	}
	return fmt.Sprintf("id %q to %s is in no scope the token holds %s in (%s)", m.ID, dest, role, strings.Join(names, "; "))
}

// fieldOutside names the field that puts m outside: the id when its
// destination is in a scope of c's, else the destination's.
func fieldOutside(c scope.Caller, role Role, m shard.Message) string {
	t := targetOfMessage(m)
	for _, s := range c.Scopes(role) {
		if s.HasDestination(t) {
			return "id"
		}
	}
	if m.Topic != "" {
		return "topic"
	}
	return "exchange"
}

func targetOf(id string, env *shard.Envelope) scope.Target {
	t := scope.Target{ID: id}
	if env != nil {
		t.Topic, t.Exchange, t.RoutingKey = env.Topic, env.Exchange, env.RoutingKey
	}
	return t
}

func targetOfMessage(m shard.Message) scope.Target {
	return scope.Target{ID: m.ID, Topic: m.Topic, Exchange: m.Exchange, RoutingKey: m.RoutingKey}
}

// scheduleTarget is a schedule as a scope sees it: its name as the id
// (its occurrences' ids begin with it) and its message's destination.
func scheduleTarget(info shard.ScheduleInfo) scope.Target { return targetOf(info.Name, info.Envelope) }

// The checks and readers for a caller, which the API's handlers and the
// console (for the caller its session holds) share.

// MayAddress reports whether c may act with role on message id (the
// onMessage rule); an error when the message could not be read.
func (a *API) MayAddress(ctx context.Context, c scope.Caller, role Role, id string) (bool, error) {
	if c.Global(role) {
		return true, nil
	}
	if c.Max() < role {
		return false, nil
	}
	return a.mayAddress(ctx, c, role, id)
}

// MaySchedule reports whether c may act with role on schedule name (the
// onSchedule rule): yes when there is no such schedule (what follows says
// so, or creates it from a message c may write).
func (a *API) MaySchedule(ctx context.Context, c scope.Caller, role Role, name string) (bool, error) {
	if c.Global(role) {
		return true, nil
	}
	info, err := a.o.Store.ScheduleInfo(ctx, name)
	switch {
	case errors.Is(err, shard.ErrScheduleNotFound):
		return c.Max() >= role, nil
	case err != nil:
		return false, err
	}
	return c.Can(role, scheduleTarget(info)), nil
}

// ReadStatsFor is ReadStats as c sees it: the flows of its topics.
func (a *API) ReadStatsFor(ctx context.Context, c scope.Caller) (Stats, error) {
	st, err := a.ReadStats(ctx)
	st.Flows = flowsOf(c, st.Flows)
	st.Classes = classesOf(c, st.Classes)
	return st, err
}

// ReadFlowsFor is ReadFlows as c sees it: the flows of its topics.
func (a *API) ReadFlowsFor(ctx context.Context, c scope.Caller) ([]Flow, error) {
	fs, err := a.ReadFlows(ctx)
	return flowsOf(c, fs), err
}

func flowsOf(c scope.Caller, fs []Flow) []Flow {
	kept := fs[:0:0]
	for _, f := range fs {
		if c.CanTopic(RoleRead, f.Topic) {
			kept = append(kept, f)
		}
	}
	return kept
}

// ReadSchedulesFor is ReadSchedules as c sees it: the schedules whose
// message it may read.
func (a *API) ReadSchedulesFor(ctx context.Context, c scope.Caller) ([]Schedule, error) {
	return a.readSchedules(ctx, func(info shard.ScheduleInfo) bool { return c.Can(RoleRead, scheduleTarget(info)) })
}

// ReadDeadFor is ReadDead as c sees it. A scoped caller's page holds its
// own dead messages, each one's destination read: it may hold fewer than
// limit, and Next still says where to go on.
func (a *API) ReadDeadFor(ctx context.Context, c scope.Caller, after string, limit int) (DeadPage, error) {
	page, err := a.ReadDead(ctx, after, limit)
	if err != nil || c.Global(RoleRead) {
		return page, err
	}
	kept := page.Dead[:0]
	for _, d := range page.Dead {
		may, err := a.mayAddress(ctx, c, RoleRead, d.ID)
		if err != nil {
			return DeadPage{}, err
		}
		if may {
			kept = append(kept, d)
		}
	}
	page.Dead = kept
	return page, nil
}
