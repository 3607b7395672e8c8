package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

// flows lists every limited or paused topic with what it holds back, and
// (for an admin) forms to limit, pause and resume one.
func (c *Console) flows(w http.ResponseWriter, r *http.Request, s session) {
	fs, err := c.o.API.ReadFlowsFor(r.Context(), s.Caller)
	data := map[string]any{"S": s, "Title": "Flow control", "Nav": "flows", "Flows": fs,
		"Done": r.URL.Query().Get("done"), "Operate": s.Role >= httpapi.RoleOperate}
	if err != nil {
		data["Error"] = "Redis: " + err.Error()
	}
	c.render(w, http.StatusOK, "flows.html", data)
}

// flowAction applies one change from the flows page: action limit (rate,
// burst), pause (until, empty for until resumed) or resume, of topic. A
// pause asks for a confirmation first: it stops a topic's deliveries.
func (c *Console) flowAction(w http.ResponseWriter, r *http.Request, s session) {
	action, topic := r.PostFormValue("action"), r.PostFormValue("topic")
	if action != "limit" && action != "pause" && action != "resume" {
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	req := httpapi.FlowRequest{Until: strings.TrimSpace(r.PostFormValue("until"))}
	if !s.Caller.CanTopic(httpapi.RoleOperate, topic) {
		c.render(w, http.StatusForbidden, "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "flows",
			"Error": fmt.Sprintf("topic %q is not in a scope your token may operate in", topic)})
		return
	}
	var err error
	if action == "limit" {
		rate := strings.TrimSpace(r.PostFormValue("rate"))
		req.Rate, _ = json.Marshal(rate)
		if b := strings.TrimSpace(r.PostFormValue("burst")); b != "" {
			if req.Burst, err = strconv.Atoi(b); err != nil {
				err = &shard.InvalidError{Field: "burst", Reason: strconv.Quote(b) + ": want a whole number of messages"}
			}
		}
	}
	if err == nil && action == "pause" && r.PostFormValue("confirm") != "yes" {
		if err = shard.ValidateFlowTopic(topic); err == nil && req.Until != "" {
			_, err = shard.ParseWindowEnd("until", req.Until, time.Now())
		}
		if err == nil {
			until := "until resumed"
			if d, derr := time.ParseDuration(req.Until); derr == nil {
				until = "for " + d.String()
			} else if req.Until != "" {
				until = "until " + req.Until
			}
			c.render(w, http.StatusOK, "confirm.html", map[string]any{"S": s, "Title": "Confirm", "Nav": "flows",
				"Question": "Pause " + topic + " " + until + "?",
				"Explain":  "While paused, nothing of the topic is published; its messages wait, and other topics flow as before.",
				"Post":     "/flows", "Back": "/flows", "Verb": "pause", "Danger": true,
				"Fields": map[string][]string{"action": {"pause"}, "topic": {topic}, "until": {req.Until}}})
			return
		}
	}
	var f shard.Flow
	if err == nil {
		f, err = c.o.API.ChangeFlow(r.Context(), "console", s.Name, action, topic, req)
	} else {
		c.audit(s, "flow "+action, topic, err)
	}
	if err != nil {
		c.render(w, statusOf(err), "error.html", map[string]any{"S": s, "Title": "Not changed", "Nav": "flows", "Error": err.Error()})
		return
	}
	http.Redirect(w, r, "/flows?done="+url.QueryEscape(topic+": "+f.String()), http.StatusSeeOther)
}
