package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

// farPage shows the far-future tier (its state, settings, what waits far,
// the scanners that cannot promote) and, for an admin, the forms that
// turn it on or off.
func (c *Console) farPage(w http.ResponseWriter, r *http.Request, s session) {
	f, err := c.o.API.ReadFar(r.Context())
	data := map[string]any{"S": s, "Title": "Far tier", "Nav": "far", "Far": f,
		"Done": r.URL.Query().Get("done"), "Admin": s.Caller.Global(httpapi.RoleAdmin)}
	if err != nil {
		data["Error"] = "Redis: " + err.Error()
	}
	c.render(w, http.StatusOK, "far.html", data)
}

// farAction turns the tier on (with the horizon given, if any) or off.
// Off asks for a confirmation first: every far message is promoted at
// once, which costs Redis the memory the tier saved.
func (c *Console) farAction(w http.ResponseWriter, r *http.Request, s session) {
	on := r.PostFormValue("action") == "on"
	if !on && r.PostFormValue("action") != "off" {
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	if !on && r.PostFormValue("confirm") != "yes" {
		c.render(w, http.StatusOK, "confirm.html", map[string]any{"S": s, "Title": "Confirm", "Nav": "far",
			"Question": "Turn the far tier off?",
			"Explain": "Nothing more is placed far, and the scanners promote every far message into the due sets now: " +
				"Redis needs the memory the tier saved (about 4 times as much for those messages).",
			"Post": "/far", "Back": "/far", "Verb": "turn off", "Danger": true,
			"Fields": map[string][]string{"action": {"off"}}})
		return
	}
	if !s.Caller.Global(httpapi.RoleAdmin) {
		c.render(w, http.StatusForbidden, "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "far",
			"Error": "The far tier is the namespace's: this needs an admin token without a scope."})
		return
	}
	req := httpapi.FarRequest{On: &on, Horizon: strings.TrimSpace(r.PostFormValue("horizon"))}
	f, err := c.o.API.ChangeFar(r.Context(), "console", s.Name, req)
	if err != nil {
		status := statusOf(err)
		if errors.Is(err, shard.ErrFarNotSupported) {
			status = http.StatusConflict
		}
		c.render(w, status, "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "far", "Error": err.Error()})
		return
	}
	http.Redirect(w, r, "/far?done="+f.State, http.StatusSeeOther)
}
