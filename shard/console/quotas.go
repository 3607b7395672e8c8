package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/delayq/delayq/shard/httpapi"
)

// quotasPage shows the teams' quotas the session may see (its own
// scopes', or every one for a token of the whole namespace), each with
// what it counts, and for an admin of the namespace the forms that set
// and delete them.
func (c *Console) quotasPage(w http.ResponseWriter, r *http.Request, s session) {
	qs, err := c.o.API.ReadQuotasFor(r.Context(), s.Caller)
	data := map[string]any{"S": s, "Title": "Quotas", "Nav": "quotas", "Quotas": qs,
		"Done": r.URL.Query().Get("done"), "Admin": s.Caller.Global(httpapi.RoleAdmin)}
	if err != nil {
		data["Error"] = "Redis: " + err.Error()
	}
	c.render(w, http.StatusOK, "quotas.html", data)
}

// quotaAction sets a scope's quota (an empty limit keeps the quota's) or
// deletes it, for an admin of the whole namespace: a team may not raise
// its own.
func (c *Console) quotaAction(w http.ResponseWriter, r *http.Request, s session) {
	name := strings.TrimSpace(r.PostFormValue("scope"))
	action := r.PostFormValue("action")
	if !s.Caller.Global(httpapi.RoleAdmin) {
		c.render(w, http.StatusForbidden, "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "quotas",
			"Error": "Quotas are the namespace's: this needs an admin token without a scope."})
		return
	}
	fail := func(status int, msg string) {
		c.render(w, status, "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "quotas", "Error": msg})
	}
	switch action {
	case "delete":
		if err := c.o.API.DeleteQuota(r.Context(), "console", s.Name, name); err != nil {
			fail(statusOf(err), err.Error())
			return
		}
	case "set":
		var req httpapi.QuotaRequest
		for field, dst := range map[string]**int64{"max_pending": &req.MaxPending, "max_rate": &req.MaxRate} {
			v := strings.TrimSpace(r.PostFormValue(field))
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				fail(http.StatusBadRequest, field+": "+strconv.Quote(v)+" is not a whole number")
				return
			}
			*dst = &n
		}
		req.Rules = strings.TrimSpace(r.PostFormValue("rules"))
		if _, err := c.o.API.ChangeQuota(r.Context(), "console", s.Name, name, req); err != nil {
			fail(statusOf(err), err.Error())
			return
		}
	default:
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, "/quotas?done="+action, http.StatusSeeOther)
}
