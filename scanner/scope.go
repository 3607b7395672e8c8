package scanner

import (
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
)

// scopeOf names the scope of message id, addressed as env says (Deps.Scopes):
// "" for none, or without scopes.
func (s *Scanner) scopeOf(id string, env *shard.Envelope) string {
	if s.d.Scopes == nil {
		return ""
	}
	if sc := s.d.Scopes.Of(scope.Target{ID: id, Topic: env.Topic, Exchange: env.Exchange, RoutingKey: env.RoutingKey}); sc != nil {
		return sc.Name
	}
	return ""
}
