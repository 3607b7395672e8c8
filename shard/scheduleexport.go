package shard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// This file is the export of recurring schedules in the JSON form that
// schedule set --file reads back (ParseScheduleJSON), with what each has
// done so far (see "Moving to another Redis" in the package doc).

// scheduleLine is one exported schedule: the fields of scheduleJSON in
// its order, each written only when set, and its state.
type scheduleLine struct {
	Name    string            `json:"name"`
	Spec    string            `json:"spec"`
	Zone    string            `json:"zone,omitempty"`
	StartMs int64             `json:"start_ms,omitempty"`
	EndMs   int64             `json:"end_ms,omitempty"`
	Count   int               `json:"count,omitempty"`
	Missed  string            `json:"missed,omitempty"`
	GraceMs int64             `json:"grace_ms,omitempty"`
	CatchUp int               `json:"catch_up,omitempty"`
	Message exportLine        `json:"message"`
	State   scheduleStateJSON `json:"state"`
}

// scheduleStateJSON is a ScheduleState's JSON form, the "state" of a
// schedule's line.
type scheduleStateJSON struct {
	Paused    bool  `json:"paused,omitempty"`
	Fired     int64 `json:"fired"`
	Skipped   int64 `json:"skipped,omitempty"`
	LastMs    int64 `json:"last_ms,omitempty"`
	CreatedMs int64 `json:"created_ms"`
}

// AppendScheduleLine appends to dst the JSON line (and a newline) that
// schedule set --file reads back into the schedule info holds: its
// definition, its message (the JSON Lines form without id and time), and
// its state (paused, occurrences fired and skipped, the last one, when it
// was created), which the set restores when it creates the schedule. The
// same schedule gives the same bytes.
func AppendScheduleLine(dst []byte, info *ScheduleInfo) ([]byte, error) {
	if info.Envelope == nil {
		return dst, fmt.Errorf("export schedule %q: %w: it has no message", info.Name, ErrCorrupt)
	}
	msg, err := exportLineOf("", 0, 0, info.Envelope)
	if err != nil {
		return dst, fmt.Errorf("export schedule %q: %w", info.Name, err)
	}
	l := scheduleLine{Name: info.Name, Spec: info.Spec, Zone: info.Zone, Count: info.Count, Missed: info.Missed,
		GraceMs: info.Grace.Milliseconds(), CatchUp: info.CatchUp, Message: msg,
		State: scheduleStateJSON{Paused: info.Paused, Fired: info.Fired, Skipped: info.Skipped, CreatedMs: info.Created.UnixMilli()}}
	if info.Start.IsZero() { // where @every counts from, to the millisecond
		l.State.CreatedMs = info.anchor().UnixMilli()
	}
	if !info.Start.IsZero() {
		l.StartMs = info.Start.UnixMilli()
	}
	if !info.End.IsZero() {
		l.EndMs = info.End.UnixMilli()
	}
	if !info.Last.IsZero() {
		l.State.LastMs = info.Last.UnixMilli()
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&l); err != nil { // Encode ends the line
		return dst, fmt.Errorf("export schedule %q: %w", info.Name, err)
	}
	return append(dst, b.Bytes()...), nil
}

// restoreOf checks a line's state and returns it as a ScheduleState.
func (j *scheduleStateJSON) restoreOf() (*ScheduleState, error) {
	switch {
	case j.Fired < 0:
		return nil, invalid("state.fired", "%d is negative", j.Fired)
	case j.Skipped < 0:
		return nil, invalid("state.skipped", "%d is negative", j.Skipped)
	case j.CreatedMs < minAt.UnixMilli() || j.CreatedMs >= maxAt.UnixMilli():
		return nil, invalid("state.created_ms", "%d is outside [%d, %d)", j.CreatedMs, minAt.UnixMilli(), maxAt.UnixMilli())
	case j.LastMs != 0 && (j.LastMs < minAt.UnixMilli() || j.LastMs >= maxAt.UnixMilli()):
		return nil, invalid("state.last_ms", "%d is outside [%d, %d)", j.LastMs, minAt.UnixMilli(), maxAt.UnixMilli())
	}
	r := &ScheduleState{Paused: j.Paused, Fired: j.Fired, Skipped: j.Skipped, Created: time.UnixMilli(j.CreatedMs)}
	if j.LastMs != 0 {
		r.Last = time.UnixMilli(j.LastMs)
	}
	return r, nil
}
