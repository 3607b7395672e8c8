package httpapi

import (
	"bufio"
	"crypto/subtle"
	"fmt"
	"io"
	"strings"
)

// Role is what a token may do.
type Role int

const (
	// RoleNone: no valid token.
	RoleNone Role = iota
	// RoleRead may read: messages, stats, shards, dead lists.
	RoleRead
	// RoleAdmin may also write: enqueue, cancel, reschedule, redrive, purge.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// Tokens are the bearer tokens the server accepts. The zero value accepts
// none; Open (nil Tokens) means no token is configured and every request
// is an admin's (the server then listens on loopback only).
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	token []byte
	role  Role
}

// MinTokenLen is the shortest token accepted: 16 bytes.
const MinTokenLen = 16

// ParseTokens reads a tokens file: one "ROLE TOKEN" a line, ROLE read or
// admin; blank lines and lines starting with # are skipped. Errors name
// the line, never the token.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("tokens line %d: want ROLE TOKEN (read or admin, then the token)", n)
		}
		var role Role
		switch f[0] {
		case "read":
			role = RoleRead
		case "admin":
			role = RoleAdmin
		default:
			return nil, fmt.Errorf("tokens line %d: role %q, want read or admin", n, f[0])
		}
		if len(f[1]) < MinTokenLen {
			return nil, fmt.Errorf("tokens line %d: token shorter than %d characters", n, MinTokenLen)
		}
		t.entries = append(t.entries, tokenEntry{token: []byte(f[1]), role: role})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("tokens: no token in the file")
	}
	return t, nil
}

// Role returns the role of token. It compares token with every entry in
// constant time, so the time taken says nothing about the tokens. A nil
// Tokens (none configured) makes everyone an admin.
func (t *Tokens) Role(token string) Role {
	if t == nil {
		return RoleAdmin
	}
	role := RoleNone
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(e.token, []byte(token)) == 1 {
			role = max(role, e.role)
		}
	}
	return role
}
