package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
)

// Quotas per scope (shard/quota.go): GET /v1/quotas lists them, each a
// shard.QuotaUsage; PUT and DELETE /v1/quotas/{scope} set and remove one,
// with a token of the whole namespace's admin role (a team may not raise
// its own quota). An enqueue over a quota is a 429 with Retry-After, and
// status "over_quota" in a batch.

// QuotaRequest is the body of PUT /v1/quotas/{scope}: the limits (a
// field left out keeps the quota's, or is 0 for a new one) and, for a
// scope that DELAYQ_SCOPES_FILE does not define, its rules.
type QuotaRequest struct {
	MaxPending *int64 `json:"max_pending"`
	MaxRate    *int64 `json:"max_rate"`
	Rules      string `json:"rules,omitempty"`
}

// ReadQuotasFor returns the quotas c may see: every one for a token of
// the whole namespace, the quotas of its scopes otherwise.
func (a *API) ReadQuotasFor(ctx context.Context, c scope.Caller) ([]shard.QuotaUsage, error) {
	qs, err := a.o.Store.Quotas(ctx)
	if err != nil || c.Global(RoleRead) {
		return qs, err
	}
	mine := map[string]bool{}
	for _, sc := range c.Scopes(RoleRead) {
		mine[sc.Name] = true
	}
	out := qs[:0]
	for _, q := range qs {
		if mine[q.Scope] {
			out = append(out, q)
		}
	}
	return out, nil
}

// ChangeQuota sets scope name's quota from req, writes the audit line
// (via, who) and returns the quota after. Bad input is a
// *shard.InvalidError naming the field.
func (a *API) ChangeQuota(ctx context.Context, via, who, name string, req QuotaRequest) (shard.QuotaUsage, error) {
	q, err := a.changeQuota(ctx, name, req, via+" "+who)
	Audit(a.o.Log, via, who, "quota set", "scope "+name, err)
	return q, err
}

func (a *API) changeQuota(ctx context.Context, name string, req QuotaRequest, source string) (shard.QuotaUsage, error) {
	have, err := a.o.Store.Quotas(ctx)
	if err != nil && !errors.Is(err, shard.ErrCorruptQuota) { // setting it again mends a corrupt one
		return shard.QuotaUsage{}, err
	}
	q := shard.Quota{Scope: name, Rules: req.Rules, Source: source}
	for _, h := range have {
		if h.Scope == name {
			q.MaxPending, q.MaxRate = h.MaxPending, h.MaxRate
			if q.Rules == "" {
				q.Rules = h.Rules
			}
		}
	}
	if sc, ok := a.o.Scopes.Get(name); ok && req.Rules == "" {
		q.Rules = rulesOf(sc)
	}
	if q.Rules == "" {
		return shard.QuotaUsage{}, &shard.InvalidError{Field: "scope",
			Reason: fmt.Sprintf("no scope %q in DELAYQ_SCOPES_FILE, and no rules given", name)}
	}
	if req.MaxPending != nil {
		q.MaxPending = *req.MaxPending
	}
	if req.MaxRate != nil {
		q.MaxRate = *req.MaxRate
	}
	if err := a.o.Store.SetQuota(ctx, q); err != nil {
		return shard.QuotaUsage{}, err
	}
	qs, err := a.o.Store.Quotas(ctx)
	if errors.Is(err, shard.ErrCorruptQuota) { // another's: this one is set
		err = nil
	}
	for _, h := range qs {
		if h.Scope == name {
			return h, err
		}
	}
	return shard.QuotaUsage{}, errors.Join(err, fmt.Errorf("quota %q: gone after it was set (deleted meanwhile)", name))
}

// rulesOf is a scope's rules as the scopes file writes them, without its
// name.
func rulesOf(sc *scope.Scope) string {
	s := sc.String()
	if len(s) > len(sc.Name) {
		return s[len(sc.Name)+1:]
	}
	return ""
}

// DeleteQuota removes scope name's quota and writes the audit line.
func (a *API) DeleteQuota(ctx context.Context, via, who, name string) error {
	err := a.o.Store.DeleteQuota(ctx, name)
	Audit(a.o.Log, via, who, "quota delete", "scope "+name, err)
	return err
}

func (a *API) quotas(w http.ResponseWriter, r *http.Request) {
	qs, err := a.ReadQuotasFor(r.Context(), callerOf(r))
	if err != nil {
		a.fail(w, err)
		return
	}
	if qs == nil {
		qs = []shard.QuotaUsage{}
	}
	writeJSON(w, http.StatusOK, qs)
}

func (a *API) putQuota(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, 4<<10)
	if b == nil {
		return
	}
	var req QuotaRequest
	if !decodeStrict(w, b, &req) {
		return
	}
	q, err := a.ChangeQuota(r.Context(), "api", holderOf(r), r.PathValue("scope"), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, q)
}

func (a *API) deleteQuota(w http.ResponseWriter, r *http.Request) {
	if err := a.DeleteQuota(r.Context(), "api", holderOf(r), r.PathValue("scope")); err != nil {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// overQuota answers a message a quota refused: 429, with Retry-After in
// whole seconds (at least 1).
func overQuota(w http.ResponseWriter, qe *shard.QuotaError) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Max(1, math.Ceil(qe.RetryAfter.Seconds())))))
	problem(w, http.StatusTooManyRequests, "over quota", qe.Error(), "quota")
}
