package ingress

import "github.com/delayq/delayq/shard/scope"

// A queue mapped to a scope (Route.Scope; DELAYQ_INGRESS=queue=exchange@scope)
// is a team's way in: what it asks for is checked as the HTTP API checks
// a token limited to that scope, and rejected (ReasonScope, to the queue's
// dead-letter exchange) when it reaches outside.
//
//   - Schedule: the message's id and destination must be in the scope.
//   - Retry: the delivery's id, exchange and routing key (where the next
//     attempt goes) must be: give the scope an exchange rule for them.
//   - Cancel: the id must start with one of the scope's id prefixes. A
//     queue of a scope without id prefixes takes no cancels: nothing makes
//     an id its own, and the ingress does not read the stored message.

// allows returns nil when r's scope (if any) allows req, or the
// rejection.
func (r Route) allows(req Request) error {
	s := r.Scope
	if s == nil {
		return nil
	}
	switch req.Kind {
	case Schedule:
		m := req.Message
		if !s.Contains(scope.Target{ID: m.ID, Topic: m.Topic, Exchange: m.Exchange, RoutingKey: m.RoutingKey}) {
			if m.Topic == "" {
				return reject(ReasonScope, "id %q to exchange %q routing key %q is outside scope %s", m.ID, m.Exchange, m.RoutingKey, s)
			}
			return reject(ReasonScope, "id %q to topic %q is outside scope %s", m.ID, m.Topic, s)
		}
	case Retry:
		d := req.Delivery
		if !s.Contains(scope.Target{ID: d.MessageID, Exchange: d.Exchange, RoutingKey: d.RoutingKey}) {
			return reject(ReasonScope, "a retry of %q to exchange %q routing key %q is outside scope %s", d.MessageID, d.Exchange, d.RoutingKey, s)
		}
	case Cancel:
		if !s.HasIDRules() {
			return reject(ReasonScope, "a cancel of %q on a queue of scope %s, which has no id prefixes to make an id its own", req.ID, s)
		}
		if !s.HasID(req.ID) {
			return reject(ReasonScope, "a cancel of %q is outside scope %s", req.ID, s)
		}
	}
	return nil
}
