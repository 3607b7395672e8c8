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

	"github.com/delayq/delayq/shard/scope"
)

// Role is what a token may do (scope.Role: read, produce, operate, admin).
type Role = scope.Role

// The roles, as scope defines them.
const (
	RoleNone    = scope.RoleNone
	RoleRead    = scope.RoleRead
	RoleProduce = scope.RoleProduce
	RoleOperate = scope.RoleOperate
	RoleAdmin   = scope.RoleAdmin
)

// Tokens are the bearer tokens the server accepts. The zero value accepts
// none; Open (nil Tokens) means no token is configured and every request
// is an admin's (the server then listens on loopback only).
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	token []byte
	grant scope.Grant
	name  string // who holds it, for the audit log: the line's third field, or "tokens line N"
}

// MinTokenLen is the shortest token accepted: 16 bytes.
const MinTokenLen = 16

// ParseTokens reads a tokens file: one "ROLE TOKEN [NAME [SCOPE]]" a
// line. ROLE is read, produce, operate or admin (scope.Role); NAME is who
// holds the token (the audit log names it; default "tokens line N");
// SCOPE, one of scopes by name, limits the grant to that scope's messages
// (none: the whole namespace). A token on several lines holds each line's
// grant, under one NAME. Blank lines and lines starting with # are
// skipped. Errors name the line, never the token.
func ParseTokens(r io.Reader, scopes *scope.Set) (*Tokens, error) {
	t := &Tokens{}
	names := map[string]string{} // token -> its NAME
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 4 {
			return nil, fmt.Errorf("tokens line %d: want ROLE TOKEN [NAME [SCOPE]] (read, produce, operate or admin; the token; who holds it; the scope it is limited to)", n)
		}
		name := fmt.Sprintf("tokens line %d", n)
		if len(f) >= 3 {
			name = f[2]
		}
		role, err := scope.ParseRole(f[0])
		if err != nil {
			return nil, fmt.Errorf("tokens line %d: %w", n, err)
		}
		if len(f[1]) < MinTokenLen {
			return nil, fmt.Errorf("tokens line %d: token shorter than %d characters", n, MinTokenLen)
		}
		g := scope.Grant{Role: role}
		if len(f) == 4 {
			s, ok := scopes.Get(f[3])
			if !ok {
				return nil, fmt.Errorf("tokens line %d: scope %q is not in the scopes file (DELAYQ_SCOPES_FILE)", n, f[3])
			}
			g.Scope = s
		}
		if had, ok := names[f[1]]; ok && had != name {
			return nil, fmt.Errorf("tokens line %d: this token is held by %q on an earlier line: one token, one holder", n, had)
		}
		names[f[1]] = name
		t.entries = append(t.entries, tokenEntry{token: []byte(f[1]), grant: g, name: name})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("tokens: no token in the file")
	}
	return t, nil
}

// Caller returns the grants of token and its holder: the zero Caller for
// an unknown token. It compares token with every entry in constant time,
// so the time taken says nothing about the tokens. A nil Tokens (none
// configured) makes everyone an admin of everything named "local".
func (t *Tokens) Caller(token string) scope.Caller {
	if t == nil {
		return scope.Everyone("local")
	}
	var c scope.Caller
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(e.token, []byte(token)) == 1 {
			c.Holder = e.name
			c.Grants = append(c.Grants, e.grant)
		}
	}
	return c
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
		fmt.Fprintf(h, "%d:%s:%d:", e.grant.Role, e.token, len(e.token))
		if e.grant.Scope != nil {
			fmt.Fprintf(h, "%s:", e.grant.Scope.Name)
		}
	}
	m := hmac.New(sha256.New, h.Sum(nil))
	m.Write([]byte("delayq " + purpose))
	return m.Sum(nil)
}

// Each calls f with every token's grants and a fingerprint of the token
// under key (HMAC-SHA256), which a signed session can carry instead of
// the token.
func (t *Tokens) Each(key []byte, f func(fingerprint string, c scope.Caller)) {
	if t == nil {
		return
	}
	seen := map[string]bool{}
	for _, e := range t.entries {
		if !seen[string(e.token)] {
			seen[string(e.token)] = true
			f(Fingerprint(key, string(e.token)), t.Caller(string(e.token)))
		}
	}
}

// Fingerprint is the fingerprint of token under key that Each reports.
func Fingerprint(key []byte, token string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("token:"))
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil))
}
