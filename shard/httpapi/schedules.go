package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/schedule"
)

// Schedule is a recurring schedule as GET /v1/schedules… shows it. Times
// are RFC 3339 in UTC; NextLocal is the next occurrence in the schedule's
// zone.
type Schedule struct {
	Name      string          `json:"name"`
	Spec      string          `json:"spec"`
	Zone      string          `json:"zone"`
	Start     string          `json:"start,omitempty"`
	End       string          `json:"end,omitempty"`
	Count     int             `json:"count,omitempty"`
	Missed    string          `json:"missed"`
	GraceMs   int64           `json:"grace_ms"`
	CatchUp   int             `json:"catch_up,omitempty"`
	Message   ScheduleMessage `json:"message"`
	Shard     int             `json:"shard"`
	Version   int64           `json:"version"`
	Paused    bool            `json:"paused"`
	Next      string          `json:"next,omitempty"`
	NextLocal string          `json:"next_local,omitempty"`
	Pending   string          `json:"pending,omitempty"` // the next occurrence's message id
	Last      string          `json:"last,omitempty"`
	Fired     int64           `json:"fired"`
	Skipped   int64           `json:"skipped"`
	Created   string          `json:"created"`
	Changed   string          `json:"changed"`
}

// ScheduleOf renders a stored schedule.
func ScheduleOf(info shard.ScheduleInfo) Schedule {
	utc := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	zone := info.Zone
	if zone == "" {
		zone = "UTC"
	}
	v := Schedule{Name: info.Name, Spec: info.Spec, Zone: zone, Start: utc(info.Start), End: utc(info.End), Count: info.Count,
		Missed: info.Missed, GraceMs: info.Grace.Milliseconds(), CatchUp: info.CatchUp, Shard: info.Shard,
		Version: info.Version, Paused: info.Paused, Next: utc(info.Next), Pending: info.Pending, Last: utc(info.Last),
		Fired: info.Fired, Skipped: info.Skipped, Created: utc(info.Created), Changed: utc(info.Changed)}
	if v.Missed == "" {
		v.Missed = schedule.MissedSkip
	}
	if v.GraceMs == 0 {
		v.GraceMs = schedule.DefaultGrace.Milliseconds()
	}
	if loc, err := schedule.LoadZone(info.Zone); err == nil && !info.Next.IsZero() {
		v.NextLocal = info.Next.In(loc).Format(time.RFC3339)
	}
	m := MessageOf(shard.Info{Envelope: info.Envelope})
	v.Message = ScheduleMessage{Topic: m.Topic, Exchange: m.Exchange, RoutingKey: m.RoutingKey, ContentType: m.ContentType,
		MaxLatenessMs: m.MaxLatenessMs, Properties: m.Properties, Headers: m.Headers, Body: m.Body, BodyBase64: m.BodyBase64}
	return v
}

// ScheduleMessage is what each occurrence of a schedule publishes.
type ScheduleMessage struct {
	Topic         string         `json:"topic,omitempty"`
	Exchange      string         `json:"exchange,omitempty"`
	RoutingKey    string         `json:"routing_key,omitempty"`
	ContentType   string         `json:"content_type,omitempty"`
	MaxLatenessMs int64          `json:"max_lateness_ms,omitempty"`
	Properties    map[string]any `json:"properties,omitempty"`
	Headers       map[string]any `json:"headers,omitempty"` // typed: see shard.ParseJSONValue
	Body          *string        `json:"body,omitempty"`    // when it is UTF-8 text
	BodyBase64    *string        `json:"body_base64,omitempty"`
}

// Occurrence is one occurrence of a preview.
type Occurrence struct {
	At    string `json:"at"`    // UTC
	Local string `json:"local"` // in the schedule's zone
	ID    string `json:"id"`    // its message id
}

// ReadSchedule returns schedule name.
func (a *API) ReadSchedule(ctx context.Context, name string) (Schedule, error) {
	info, err := a.o.Store.ScheduleInfo(ctx, name)
	if err != nil {
		return Schedule{}, err
	}
	return ScheduleOf(info), nil
}

// ReadSchedules lists the schedules.
func (a *API) ReadSchedules(ctx context.Context) ([]Schedule, error) {
	return a.readSchedules(ctx, func(shard.ScheduleInfo) bool { return true })
}

// readSchedules is ReadSchedules of those keep keeps.
func (a *API) readSchedules(ctx context.Context, keep func(shard.ScheduleInfo) bool) ([]Schedule, error) {
	infos, err := a.o.Store.Schedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(infos))
	for _, info := range infos {
		if keep(info) {
			out = append(out, ScheduleOf(info))
		}
	}
	return out, nil
}

// PreviewSchedule returns the next n occurrences of schedule name from
// start on (zero: from its next occurrence, or now).
func (a *API) PreviewSchedule(ctx context.Context, name string, start time.Time, n int) ([]Occurrence, error) {
	info, err := a.o.Store.ScheduleInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	from := time.Now()
	switch {
	case !start.IsZero():
		from = start.Add(-time.Millisecond) // an occurrence at start is one
	case !info.Next.IsZero():
		from = info.Next.Add(-time.Millisecond)
	}
	ts, err := info.Preview(from, n)
	if err != nil {
		return nil, err
	}
	loc, _ := schedule.LoadZone(info.Zone)
	out := make([]Occurrence, len(ts))
	for j, t := range ts {
		out[j] = Occurrence{At: t.UTC().Format(time.RFC3339Nano), Local: t.In(loc).Format(time.RFC3339), ID: shard.OccurrenceID(name, t)}
	}
	return out, nil
}

// ChangeSchedule pauses, resumes or deletes schedule name (op "pause",
// "resume", "delete"). The console and the API both come here; via and
// who go to the audit line.
func (a *API) ChangeSchedule(ctx context.Context, via, who, op, name string) (shard.ScheduleInfo, error) {
	var info shard.ScheduleInfo
	var err error
	switch op {
	case "pause":
		info, err = a.o.Store.PauseSchedule(ctx, name)
	case "resume":
		info, err = a.o.Store.ResumeSchedule(ctx, name)
	case "delete":
		err = a.o.Store.DeleteSchedule(ctx, name)
	default:
		err = fmt.Errorf("schedule: unknown change %q", op)
	}
	Audit(a.o.Log, via, who, "schedule "+op, name, err)
	return info, err
}

// UpsertSchedule creates or changes a schedule from its JSON form (the
// name in the path wins; one in the body must match it).
func (a *API) UpsertSchedule(ctx context.Context, via, who, name string, body []byte) (shard.ScheduleInfo, error) {
	sc, err := shard.ParseScheduleJSON(body)
	switch {
	case err == nil && sc.Name != "" && sc.Name != name:
		err = &shard.InvalidError{Field: "name", Reason: fmt.Sprintf("%q in the body, %q in the path", sc.Name, name)}
	case err == nil && sc.Restore != nil:
		err = &shard.InvalidError{Field: "state", Reason: "an exported schedule's state is restored by an operator's delayq schedule set --file, not over HTTP"}
	}
	var info shard.ScheduleInfo
	if err == nil {
		sc.Name = name
		info, err = a.o.Producer.UpsertSchedule(ctx, sc)
	}
	target := name
	if err == nil {
		target += ": " + sc.Spec
		if sc.Zone != "" {
			target += " " + sc.Zone
		}
	}
	Audit(a.o.Log, via, who, "schedule set", target, err)
	return info, err
}

func (a *API) schedules(w http.ResponseWriter, r *http.Request) {
	out, err := a.ReadSchedulesFor(r.Context(), callerOf(r))
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getSchedule(w http.ResponseWriter, r *http.Request) {
	info, err := a.o.Store.ScheduleInfo(r.Context(), r.PathValue("name"))
	if err != nil {
		a.failSchedule(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ScheduleOf(info))
}

func (a *API) putSchedule(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, a.messageLimit())
	if b == nil {
		return
	}
	if sc, err := shard.ParseScheduleJSON(b); err == nil {
		m := sc.Message
		m.ID = r.PathValue("name") // its occurrences' ids begin with it
		if !mayWrite(w, r, RoleOperate, m) {
			return
		}
	} // else UpsertSchedule reports what is wrong with it
	info, err := a.UpsertSchedule(r.Context(), "api", holderOf(r), r.PathValue("name"), b)
	if err != nil {
		a.failSchedule(w, err)
		return
	}
	status := http.StatusOK
	if info.Version == 1 {
		status = http.StatusCreated
	}
	writeJSON(w, status, ScheduleOf(info))
}

func (a *API) changeScheduleHandler(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		info, err := a.ChangeSchedule(r.Context(), "api", holderOf(r), op, r.PathValue("name"))
		switch {
		case err != nil:
			a.failSchedule(w, err)
		case op == "delete":
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, http.StatusOK, ScheduleOf(info))
		}
	}
}

func (a *API) previewSchedule(w http.ResponseWriter, r *http.Request) {
	n := 10
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			problem(w, http.StatusBadRequest, "invalid n", fmt.Sprintf("%q is not a count in 1..1000", v), "n")
			return
		}
	}
	var start time.Time
	if v := r.URL.Query().Get("start"); v != "" {
		var err error
		if start, err = shard.ParseWindowEnd("start", v, time.Now()); err != nil {
			problem(w, http.StatusBadRequest, "invalid start", err.Error(), "start")
			return
		}
	}
	out, err := a.PreviewSchedule(r.Context(), r.PathValue("name"), start, n)
	if err != nil {
		a.failSchedule(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// failSchedule is fail, with a missing schedule as 404.
func (a *API) failSchedule(w http.ResponseWriter, err error) {
	if errors.Is(err, shard.ErrScheduleNotFound) {
		problem(w, http.StatusNotFound, "no such schedule", err.Error(), "name")
		return
	}
	a.fail(w, err)
}
