package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/delayq/delayq/shard/httpapi"
)

// classesPage shows the release classes the session may see, each with
// what waits in its backlog and its release rate, and for an admin of the
// namespace the forms that set and delete them.
func (c *Console) classesPage(w http.ResponseWriter, r *http.Request, s session) {
	cs, err := c.o.API.ReadClassesFor(r.Context(), s.Caller)
	data := map[string]any{"S": s, "Title": "Classes", "Nav": "classes", "Classes": cs,
		"Done": r.URL.Query().Get("done"), "Admin": s.Caller.Global(httpapi.RoleAdmin)}
	if err != nil {
		data["Error"] = "Redis: " + err.Error()
	}
	c.render(w, http.StatusOK, "classes.html", data)
}

// classAction sets a class (topics, comma- or space-separated; a weight,
// or strict) or deletes it, for an admin of the whole namespace: a class
// decides what goes first for every team.
func (c *Console) classAction(w http.ResponseWriter, r *http.Request, s session) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	action := r.PostFormValue("action")
	fail := func(status int, msg string) {
		c.render(w, status, "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "classes", "Error": msg})
	}
	if !s.Caller.Global(httpapi.RoleAdmin) {
		fail(http.StatusForbidden, "Classes are the namespace's: this needs an admin token without a scope.")
		return
	}
	switch action {
	case "delete":
		if err := c.o.API.DeleteClass(r.Context(), "console", s.Name, name); err != nil {
			fail(statusOf(err), err.Error())
			return
		}
	case "set":
		req := httpapi.ClassRequest{Topics: strings.FieldsFunc(r.PostFormValue("topics"), func(r rune) bool { return r == ',' || r == ' ' }),
			Strict: r.PostFormValue("share") == "strict"}
		if !req.Strict {
			v := strings.TrimSpace(r.PostFormValue("weight"))
			n, err := strconv.Atoi(v)
			if err != nil {
				fail(http.StatusBadRequest, "weight: "+strconv.Quote(v)+" is not a whole number")
				return
			}
			req.Weight = &n
		}
		if _, err := c.o.API.ChangeClass(r.Context(), "console", s.Name, name, req); err != nil {
			fail(statusOf(err), err.Error())
			return
		}
	default:
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, "/classes?done="+action, http.StatusSeeOther)
}
