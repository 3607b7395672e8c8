package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

// schedules lists the recurring schedules, with each one's next
// occurrence in UTC and in its zone, and (for an admin) pause, resume and
// delete. ?name= shows one with its next 10 occurrences.
func (c *Console) schedules(w http.ResponseWriter, r *http.Request, s session) {
	data := map[string]any{"S": s, "Title": "Schedules", "Nav": "schedules", "Done": r.URL.Query().Get("done"),
		"Operate": s.Role >= httpapi.RoleOperate}
	if name := r.URL.Query().Get("name"); name != "" {
		one, err := c.o.API.ReadSchedule(r.Context(), name)
		if may, merr := c.o.API.MaySchedule(r.Context(), s.Caller, httpapi.RoleRead, name); err == nil && (merr != nil || !may) {
			err = cmp.Or(merr, fmt.Errorf("schedule %q: %w", name, shard.ErrScheduleNotFound))
		}
		if err == nil {
			data["One"] = one
			data["Preview"], err = c.o.API.PreviewSchedule(r.Context(), name, time.Time{}, 10)
		}
		if err != nil {
			data["Error"] = err.Error()
		}
		data["Title"] = "Schedule " + name
		c.render(w, statusOfSchedule(err), "schedules.html", data)
		return
	}
	list, err := c.o.API.ReadSchedulesFor(r.Context(), s.Caller)
	data["Schedules"] = list
	if err != nil {
		data["Error"] = "Redis: " + err.Error()
	}
	c.render(w, http.StatusOK, "schedules.html", data)
}

func statusOfSchedule(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, shard.ErrScheduleNotFound):
		return http.StatusNotFound
	}
	return statusOf(err)
}

// scheduleAction pauses, resumes or deletes a schedule from the page. A
// delete asks for a confirmation first.
func (c *Console) scheduleAction(w http.ResponseWriter, r *http.Request, s session) {
	action, name := r.PostFormValue("action"), r.PostFormValue("name")
	if action != "pause" && action != "resume" && action != "delete" {
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	if action == "delete" && r.PostFormValue("confirm") != "yes" {
		c.render(w, http.StatusOK, "confirm.html", map[string]any{"S": s, "Title": "Confirm", "Nav": "schedules",
			"Question": "Delete schedule " + name + "?",
			"Explain":  "Its next occurrence is removed and no other follows; an occurrence being published now still is. This cannot be undone: setting it again starts it afresh.",
			"Post":     "/schedules", "Back": "/schedules", "Verb": "delete", "Danger": true,
			"Fields": map[string][]string{"action": {"delete"}, "name": {name}}})
		return
	}
	may, err := c.o.API.MaySchedule(r.Context(), s.Caller, httpapi.RoleOperate, name)
	var info shard.ScheduleInfo
	switch {
	case err != nil:
	case !may:
		err = fmt.Errorf("schedule %q: %w", name, shard.ErrScheduleNotFound)
	default:
		info, err = c.o.API.ChangeSchedule(r.Context(), "console", s.Name, action, name)
	}
	if err != nil {
		c.render(w, statusOfSchedule(err), "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "schedules", "Error": err.Error()})
		return
	}
	done := name + ": deleted"
	if action != "delete" {
		done = name + ": " + map[bool]string{true: "paused", false: "running, next " + httpapi.ScheduleOf(info).Next}[info.Paused]
	}
	http.Redirect(w, r, "/schedules?done="+url.QueryEscape(done), http.StatusSeeOther)
}
