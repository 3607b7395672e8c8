package scope

import (
	"fmt"
	"strings"
)

// Role is what a grant allows (doc.go, "Roles"); each includes those
// before it.
type Role int

const (
	// RoleNone: no valid token.
	RoleNone Role = iota
	// RoleRead may see.
	RoleRead
	// RoleProduce may also enqueue, upsert, cancel and reschedule.
	RoleProduce
	// RoleOperate may also change flows, schedules, bulk jobs and the
	// dead set.
	RoleOperate
	// RoleAdmin may do everything within its scope; without one,
	// everything.
	RoleAdmin
)

var roleNames = [...]string{"none", "read", "produce", "operate", "admin"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("Role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole returns the role named s (read, produce, operate or admin).
func ParseRole(s string) (Role, error) {
	for r := RoleRead; r <= RoleAdmin; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return RoleNone, fmt.Errorf("role %q, want read, produce, operate or admin", s)
}

// Grant is a role within a scope, or within the whole namespace when
// Scope is nil.
type Grant struct {
	Role  Role
	Scope *Scope
}

func (g Grant) String() string {
	if g.Scope == nil {
		return g.Role.String()
	}
	return g.Role.String() + "@" + g.Scope.Name
}

// Caller is who makes a request: the holder of a token (for the audit
// log) and its grants. The zero Caller may do nothing.
type Caller struct {
	Holder string
	Grants []Grant
}

// Everyone is the caller of a server without tokens: an admin of the
// whole namespace.
func Everyone(holder string) Caller {
	return Caller{Holder: holder, Grants: []Grant{{Role: RoleAdmin}}}
}

// Can reports whether the caller may act on message t with role: a grant
// of that role or more, of the whole namespace or of a scope t is in.
func (c Caller) Can(role Role, t Target) bool {
	for _, g := range c.Grants {
		if g.Role >= role && (g.Scope == nil || g.Scope.Contains(t)) {
			return true
		}
	}
	return false
}

// CanTopic reports whether the caller may act with role on what belongs
// to a topic as a whole (its flow limit): a grant of a scope whose
// destinations include topic, whatever the ids.
func (c Caller) CanTopic(role Role, topic string) bool {
	for _, g := range c.Grants {
		if g.Role >= role && (g.Scope == nil || g.Scope.HasTopic(topic)) {
			return true
		}
	}
	return false
}

// Global reports whether the caller may act with role on what is the
// namespace's (M, the far tier): a grant without a scope.
func (c Caller) Global(role Role) bool {
	for _, g := range c.Grants {
		if g.Scope == nil && g.Role >= role {
			return true
		}
	}
	return false
}

// Max is the highest role of any grant: what the caller may do somewhere
// (a console shows the buttons of that role; each action is checked on
// its own).
func (c Caller) Max() Role {
	m := RoleNone
	for _, g := range c.Grants {
		m = max(m, g.Role)
	}
	return m
}

// Scoped reports whether every grant is limited to a scope: what the
// caller sees of lists and counts is filtered.
func (c Caller) Scoped() bool { return len(c.Grants) > 0 && !c.Global(RoleRead) }

// Scopes returns the scopes in which the caller holds role or more (nil
// when it holds it for the whole namespace: Global).
func (c Caller) Scopes(role Role) []*Scope {
	var out []*Scope
	for _, g := range c.Grants {
		if g.Role >= role && g.Scope != nil {
			out = append(out, g.Scope)
		}
	}
	return out
}

// String lists the grants, e.g. "produce@billing, read@ops" ("admin" for
// a grant of the whole namespace).
func (c Caller) String() string {
	g := make([]string, len(c.Grants))
	for j, x := range c.Grants {
		g[j] = x.String()
	}
	return strings.Join(g, ", ")
}
