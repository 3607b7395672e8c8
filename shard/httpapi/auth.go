package httpapi

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
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
	name  string // who holds it, for the audit log: the line's third field, or "tokens line N"
}

// MinTokenLen is the shortest token accepted: 16 bytes.
const MinTokenLen = 16

// ParseTokens reads a tokens file: one "ROLE TOKEN [NAME]" a line, ROLE
// read or admin, NAME who holds the token (the audit log names it; default
// "tokens line N"); blank lines and lines starting with # are skipped.
// Errors name the line, never the token.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 && len(f) != 3 {
			return nil, fmt.Errorf("tokens line %d: want ROLE TOKEN [NAME] (read or admin, the token, who holds it)", n)
		}
		name := fmt.Sprintf("tokens line %d", n)
		if len(f) == 3 {
			name = f[2]
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
		t.entries = append(t.entries, tokenEntry{token: []byte(f[1]), role: role, name: name})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("tokens: no token in the file")
	}
	return t, nil
}

// Role returns the role of token (Lookup without the name).
func (t *Tokens) Role(token string) Role {
	role, _ := t.Lookup(token)
	return role
}

// Lookup returns the role of token and the name of its holder. It
// compares token with every entry in constant time, so the time taken
// says nothing about the tokens. A nil Tokens (none configured) makes
// everyone an admin named "local".
func (t *Tokens) Lookup(token string) (Role, string) {
	if t == nil {
		return RoleAdmin, "local"
	}
	role, name := RoleNone, ""
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(e.token, []byte(token)) == 1 && e.role > role {
			role, name = e.role, e.name
		}
	}
	return role, name
}

// Key derives a secret for purpose from every configured token (nil for
// nil Tokens): every server given the same tokens file derives the same
// key, so what one signs another accepts, and changing the tokens
// changes it. Knowing some tokens does not give it: it takes all of them.
func (t *Tokens) Key(purpose string) []byte {
	if t == nil {
		return nil
	}
	h := sha256.New()
	for _, e := range t.entries {
		fmt.Fprintf(h, "%d:%s:%d:", e.role, e.token, len(e.token))
	}
	m := hmac.New(sha256.New, h.Sum(nil))
	m.Write([]byte("delayq " + purpose))
	return m.Sum(nil)
}

// Each calls f with every token's role and name and a fingerprint of the
// token under key (HMAC-SHA256), which a signed session can carry
// instead of the token.
func (t *Tokens) Each(key []byte, f func(fingerprint string, role Role, name string)) {
	if t == nil {
		return
	}
	for _, e := range t.entries {
		f(Fingerprint(key, string(e.token)), e.role, e.name)
	}
}

// Fingerprint is the fingerprint of token under key that Each reports.
func Fingerprint(key []byte, token string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("token:"))
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil))
}
