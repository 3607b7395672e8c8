package shard

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/delayq/delayq/shard/schedule"
)

// scheduleJSON is a schedule's JSON form (the CLI's --file lines and the
// HTTP API's PUT /v1/schedules/{name}). Unknown fields are refused.
type scheduleJSON struct {
	Name    string          `json:"name"`
	Spec    string          `json:"spec"`
	Zone    string          `json:"zone"`
	StartMs *int64          `json:"start_ms"`
	EndMs   *int64          `json:"end_ms"`
	Count   int             `json:"count"`
	Missed  string          `json:"missed"`
	GraceMs *int64          `json:"grace_ms"`
	CatchUp int             `json:"catch_up"`
	Message json.RawMessage `json:"message"`
	// State is what an export adds (AppendScheduleLine): restored when
	// the schedule is created, ignored when it exists.
	State *scheduleStateJSON `json:"state"`
}

// ParseScheduleJSON reads a schedule in its JSON form:
//
//	{"name":"daily-report","spec":"0 9 * * 1-5","zone":"Europe/Berlin",
//	 "missed":"latest","message":{"topic":"reports","body":"..."}}
//
// Fields: name, spec, zone, start_ms and end_ms (unix ms), count, missed
// (skip, latest, all), grace_ms, catch_up, and message: the JSON Lines
// form of a message (ParseLine) without id, delay_ms, at_ms, expires_at_ms
// and retry; and state, what delayq export --schedules writes of what a
// schedule has done (paused, fired, skipped, last_ms, created_ms),
// restored when the schedule is created and ignored when it exists. The
// schedule's own rules are checked by UpsertSchedule.
func ParseScheduleJSON(raw []byte) (Schedule, error) {
	var j scheduleJSON
	if err := decodeOne(raw, &j); err != nil {
		return Schedule{}, err
	}
	sc := Schedule{Name: j.Name, Spec: j.Spec, Zone: j.Zone, Count: j.Count, Missed: j.Missed, CatchUp: j.CatchUp}
	for _, t := range []struct {
		field string
		ms    *int64
		to    *time.Time
	}{{"start_ms", j.StartMs, &sc.Start}, {"end_ms", j.EndMs, &sc.End}} {
		if t.ms == nil {
			continue
		}
		if *t.ms < minAt.UnixMilli() || *t.ms >= maxAt.UnixMilli() {
			return Schedule{}, invalid(t.field, "%d is outside [%d, %d)", *t.ms, minAt.UnixMilli(), maxAt.UnixMilli())
		}
		*t.to = time.UnixMilli(*t.ms)
	}
	if j.GraceMs != nil {
		if *j.GraceMs <= 0 {
			return Schedule{}, invalid("grace_ms", "%d is not positive", *j.GraceMs)
		}
		sc.Grace = time.Duration(*j.GraceMs) * time.Millisecond
	}
	if len(j.Message) == 0 || string(j.Message) == "null" {
		return Schedule{}, invalid("message", "missing: what each occurrence publishes")
	}
	m, err := ParseTemplate(j.Message)
	if err != nil {
		return Schedule{}, prefixField("message.", err)
	}
	sc.Message = m
	if j.State != nil {
		if sc.Restore, err = j.State.restoreOf(); err != nil {
			return Schedule{}, err
		}
	}
	return sc, nil
}

// Preview returns the next n occurrences of a stored schedule after from,
// in UTC; each may be shown in Zone as well (schedule.LoadZone).
func (info *ScheduleInfo) Preview(from time.Time, n int) ([]time.Time, error) {
	anchor := info.Created
	if !info.Start.IsZero() {
		anchor = info.Start
	}
	return PreviewSpec(info.Spec, info.Zone, anchor, info.End, from, n)
}

// PreviewSpec returns the next n occurrences after from of spec in zone
// (anchor: where @every counts from; end: none after it, zero for none).
// The error is an *InvalidError naming spec or zone.
func PreviewSpec(spec, zone string, anchor, end, from time.Time, n int) ([]time.Time, error) {
	if _, err := schedule.LoadZone(zone); err != nil {
		return nil, invalid("zone", "%v", err)
	}
	sp, err := schedule.Parse(spec, zone)
	if err != nil {
		return nil, invalid("spec", "%v", err)
	}
	r := schedule.Rule{Spec: spec, Zone: zone, AnchorMs: anchor.UnixMilli()}
	if !end.IsZero() {
		r.EndMs = end.UnixMilli()
	}
	var out []time.Time
	t := from
	for len(out) < n {
		next, err := r.First(sp, t.Add(time.Millisecond))
		if errors.Is(err, schedule.ErrNoOccurrence) {
			break
		}
		if err != nil {
			return out, err
		}
		out = append(out, next.UTC())
		t = next
	}
	if len(out) == 0 && n > 0 {
		return nil, invalid("spec", "%q in %s has no occurrence after %s", spec, sp.Zone(), from.UTC().Format(time.RFC3339))
	}
	return out, nil
}
