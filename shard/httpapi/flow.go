package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

// Flow is a topic's release limit and pause, and what it holds back
// (shard.FlowStatus), as GET /v1/flows and the stats show it.
type Flow struct {
	Topic string  `json:"topic"`
	Rate  float64 `json:"rate"` // messages a second for the whole fleet; 0: no limit
	Burst int     `json:"burst"`
	// Paused: nothing of the topic is released; PausedUntil says until
	// when (RFC 3339), empty for a pause until resumed.
	Paused      bool    `json:"paused"`
	PausedUntil string  `json:"paused_until,omitempty"`
	Held        int64   `json:"held"`            // due messages held back
	OldestSec   float64 `json:"oldest_held_sec"` // how long the earliest of them has waited
	Summary     string  `json:"summary"`         // "limit 200/s burst 20, paused until ..."
	Changed     string  `json:"changed,omitempty"`
	ChangedBy   string  `json:"changed_by,omitempty"`
}

// FlowOf renders a flow's status.
func FlowOf(s shard.FlowStatus) Flow {
	f := Flow{Topic: s.Topic, Rate: s.Rate, Burst: s.Burst, Paused: s.Paused(s.NowMs), Held: s.Held,
		OldestSec: s.HeldFor().Seconds(), Summary: s.Flow.String(), ChangedBy: s.Source}
	if s.PausedUntilMs > 0 && f.Paused {
		f.PausedUntil = time.UnixMilli(s.PausedUntilMs).UTC().Format(time.RFC3339Nano)
	}
	if s.ChangedMs > 0 {
		f.Changed = time.UnixMilli(s.ChangedMs).UTC().Format(time.RFC3339Nano)
	}
	return f
}

// ReadFlows reads every flow with what it holds back. A stored value that
// cannot be read is logged and left out.
func (a *API) ReadFlows(ctx context.Context) ([]Flow, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return nil, err
	}
	sts, err := a.o.Store.FlowStatuses(ctx, n)
	if sts == nil && err != nil {
		return nil, err
	}
	if err != nil {
		a.o.Log.Warn("flows left out", zap.Error(err))
	}
	out := make([]Flow, len(sts))
	for j, s := range sts {
		out[j] = FlowOf(s)
	}
	return out, nil
}

func (a *API) flows(w http.ResponseWriter, r *http.Request) {
	fs, err := a.ReadFlowsFor(r.Context(), callerOf(r))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, fs)
}

// FlowRequest is the body of PUT /v1/flows/{topic} (a limit) and of
// POST /v1/flows/{topic}/pause.
type FlowRequest struct {
	// Rate: a number of messages a second, or a string as the CLI takes it
	// ("200/s", "30/m", "none"); 0 or "none" removes the limit.
	Rate  json.RawMessage `json:"rate,omitempty"`
	Burst int             `json:"burst,omitempty"`
	// Until: when a pause ends by itself, a duration from now ("10m") or
	// an RFC 3339 time; empty: until resumed.
	Until string `json:"until,omitempty"`
}

// ChangeFlow applies one change to a topic's flow: op is "limit",
// "pause" or "resume". The console and the API both come here; via and
// who go to the audit line.
func (a *API) ChangeFlow(ctx context.Context, via, who, op, topic string, req FlowRequest) (shard.Flow, error) {
	f, err := a.changeFlow(ctx, via, op, topic, req)
	target := topic
	if err == nil {
		target += ": " + f.String()
	}
	Audit(a.o.Log, via, who, "flow "+op, target, err)
	return f, err
}

func (a *API) changeFlow(ctx context.Context, via, op, topic string, req FlowRequest) (shard.Flow, error) {
	if err := shard.ValidateFlowTopic(topic); err != nil {
		return shard.Flow{}, err
	}
	switch op {
	case "limit":
		rate, err := parseRateJSON(req.Rate)
		if err != nil {
			return shard.Flow{}, err
		}
		return a.o.Store.SetLimit(ctx, topic, rate, req.Burst, via)
	case "pause":
		var until time.Time
		if req.Until != "" {
			var err error
			if until, err = shard.ParseWindowEnd("until", req.Until, time.Now()); err != nil {
				return shard.Flow{}, err
			}
		}
		return a.o.Store.Pause(ctx, topic, until, via)
	default:
		return a.o.Store.Resume(ctx, topic, via)
	}
}

// parseRateJSON reads FlowRequest.Rate: a JSON number or string.
func parseRateJSON(raw json.RawMessage) (float64, error) {
	if len(raw) == 0 {
		return 0, &shard.InvalidError{Field: "rate", Reason: "missing: give messages a second (200, \"30/m\") or \"none\""}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return shard.ParseRate(s)
}

func (a *API) changeFlowHandler(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req FlowRequest
		if op != "resume" || r.ContentLength > 0 {
			b := readBody(w, r, 4<<10)
			if b == nil {
				return
			}
			if !decodeStrict(w, b, &req) {
				return
			}
		}
		who := holderOf(r)
		f, err := a.ChangeFlow(r.Context(), "api", who, op, r.PathValue("topic"), req)
		if err != nil {
			a.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, FlowOf(shard.FlowStatus{Flow: f, OldestMs: -1, NowMs: nowMs()}))
	}
}

func nowMs() int64 { return time.Now().UnixMilli() }
