package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

// bulkFilter reads a bulk cancel's filter from the scheduled page's
// fields (topic, prefix, from, to; the shard filter does not apply).
func bulkFilter(form url.Values) (shard.BulkFilter, error) {
	f := shard.BulkFilter{Topic: strings.TrimSpace(form.Get("topic")), Prefix: strings.TrimSpace(form.Get("prefix"))}
	now := time.Now()
	for _, e := range []struct {
		field string
		to    *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := strings.TrimSpace(form.Get(e.field)); v != "" {
			t, err := shard.ParseWindowEnd(e.field, v, now)
			if err != nil {
				return f, err
			}
			*e.to = t
		}
	}
	return f, f.Validate()
}

// bulkCancel cancels every scheduled message the scheduled page's filter
// selects: a confirmation with the count first, then the job, then its
// progress page.
func (c *Console) bulkCancel(w http.ResponseWriter, r *http.Request, s session) {
	c.bulkAction(w, r, s, "cancel")
}

// bulkReschedule moves every scheduled message the filter selects to the
// form's delay from now, as bulkCancel does.
func (c *Console) bulkReschedule(w http.ResponseWriter, r *http.Request, s session) {
	c.bulkAction(w, r, s, "reschedule")
}

func (c *Console) bulkAction(w http.ResponseWriter, r *http.Request, s session, action string) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f, err := bulkFilter(r.PostForm)
	if !s.Caller.Global(httpapi.RoleOperate) {
		f.Within = s.Caller.Scopes(httpapi.RoleOperate) // its own, whatever the filter
	}
	if err != nil {
		c.render(w, http.StatusBadRequest, "error.html", map[string]any{"S": s, "Title": "Not cancelled", "Error": err.Error()})
		return
	}
	back := "/scheduled?" + url.Values{"topic": {r.PostFormValue("topic")}, "prefix": {r.PostFormValue("prefix")},
		"from": {r.PostFormValue("from")}, "to": {r.PostFormValue("to")}}.Encode()
	var to httpapi.BulkTarget
	if action == "reschedule" {
		d, err := time.ParseDuration(strings.TrimSpace(r.PostFormValue("delay")))
		if err != nil || d < 0 {
			c.render(w, http.StatusBadRequest, "error.html", map[string]any{"S": s, "Title": "Not rescheduled",
				"Error": fmt.Sprintf("delay %q: give a duration from now, such as 30m or 2h", r.PostFormValue("delay"))})
			return
		}
		to.Delay = d
	}
	confirmed := r.PostFormValue("confirm") == "yes"
	job, err := c.o.API.StartBulk(r.Context(), action, f, to, !confirmed, "console", s.Name)
	if err != nil {
		c.render(w, statusOf(err), "error.html", map[string]any{"S": s, "Title": "Not cancelled", "Error": err.Error()})
		return
	}
	if !confirmed {
		fields := map[string][]string{}
		for _, k := range []string{"topic", "prefix", "from", "to", "delay"} {
			fields[k] = []string{r.PostFormValue(k)}
		}
		q := map[string]any{"S": s, "Title": "Confirm", "Nav": "scheduled",
			"Question": "Cancel " + plural(job.Matched, "scheduled message") + "?",
			"Explain":  "Every scheduled message with " + f.String() + " is deleted and never delivered.",
			"Post":     "/scheduled/cancel", "Back": back, "Verb": "cancel them", "Danger": true, "Fields": fields}
		if action == "reschedule" {
			q["Question"] = "Reschedule " + plural(job.Matched, "scheduled message") + " to " + to.Delay.String() + " from now?"
			q["Explain"] = "Every scheduled message with " + f.String() + " becomes due then, all at once."
			q["Post"], q["Verb"], q["Danger"] = "/scheduled/reschedule", "reschedule them", false
		}
		c.render(w, http.StatusOK, "confirm.html", q)
		return
	}
	http.Redirect(w, r, "/bulk?job="+url.QueryEscape(job.Job), http.StatusSeeOther)
}

// bulk shows where a bulk cancel stands, refreshed every second while it
// runs.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, s session) {
	id := r.URL.Query().Get("job")
	data := map[string]any{"S": s, "Title": "Bulk cancel", "Nav": "scheduled"}
	if !httpapi.ValidJobID(id) {
		data["Error"] = "no such bulk cancel"
		c.render(w, http.StatusNotFound, "bulk.html", data)
		return
	}
	job, err := c.o.API.ReadBulkJob(r.Context(), id)
	switch {
	case err != nil:
		data["Error"] = err.Error()
	case job.State == "" || !httpapi.SeesJob(s.Caller, job):
		data["Error"] = "no such bulk cancel (or it ended more than a day ago)"
	default:
		data["Job"] = job
	}
	c.render(w, http.StatusOK, "bulk.html", data)
}
