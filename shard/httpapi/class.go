package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
)

// Release classes (shard/fair.go): GET /v1/classes lists them with what
// waits in their backlogs and their release rates; PUT and DELETE
// /v1/classes/{name} set and delete one, with a token of the whole
// namespace's admin role (a class decides what goes first for every
// team). A scoped token sees the default class and the classes that name
// a topic of its scopes.

// Class is a release class and its backlog, as GET /v1/classes and the
// stats show it.
type Class struct {
	Name   string   `json:"name"`
	Topics []string `json:"topics"`
	Weight int      `json:"weight"`
	Strict bool     `json:"strict"`
	// Deleted: it names no topic any more; its backlog still drains.
	Deleted bool `json:"deleted,omitempty"`
	// Backlog is what waits, due, in its backlogs (set apart while the
	// fleet is behind); OldestSec how long the earliest has waited.
	Backlog   int64   `json:"backlog"`
	OldestSec float64 `json:"oldest_sec"`
	// ReleasedPerSec is what the fleet released from its backlog a second
	// over the last DefaultRatesWindow.
	ReleasedPerSec float64 `json:"released_per_sec"`
	Summary        string  `json:"summary"` // "weight 3, topics auth.*"
	Changed        string  `json:"changed,omitempty"`
	ChangedBy      string  `json:"changed_by,omitempty"`
}

// ClassRequest is the body of PUT /v1/classes/{name}.
type ClassRequest struct {
	Topics []string `json:"topics"`
	Weight *int     `json:"weight"` // left out: 1
	Strict bool     `json:"strict"`
}

// ClassOf renders a class's status with its release rate.
func ClassOf(s shard.ClassStatus, releasedPerSec float64) Class {
	c := Class{Name: s.Name, Topics: s.Topics, Weight: s.Weight, Strict: s.Strict, Deleted: s.DeletedMs > 0,
		Backlog: s.Backlog, OldestSec: s.WaitedFor().Seconds(), ReleasedPerSec: releasedPerSec,
		Summary: s.Class.String(), ChangedBy: s.Source}
	if c.Topics == nil {
		c.Topics = []string{}
	}
	if s.ChangedMs > 0 {
		c.Changed = time.UnixMilli(s.ChangedMs).UTC().Format(time.RFC3339Nano)
	}
	return c
}

// ReadClasses reads every class (the default one always) with its backlog
// and release rate. A stored value that cannot be read is logged and left
// out. Without classes besides the default it returns nil.
func (a *API) ReadClasses(ctx context.Context) ([]Class, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return nil, err
	}
	sts, err := a.o.Store.ClassStatuses(ctx, n)
	if sts == nil && err != nil {
		return nil, err
	}
	if err != nil {
		a.o.Log.Warn("classes left out", zap.Error(err))
	}
	if shard.NoClasses(sts) {
		return nil, nil // no rates to read
	}
	rates, err := a.o.Store.Rates(ctx, DefaultRatesWindow)
	if err != nil {
		return nil, err
	}
	return ClassesOf(sts, rates), nil
}

// ClassesOf renders classes' statuses with their release rates; nil for
// the default class alone, never set and with nothing waiting (a
// namespace without classes).
func ClassesOf(sts []shard.ClassStatus, rates shard.Rates) []Class {
	if shard.NoClasses(sts) {
		return nil
	}
	out := make([]Class, len(sts))
	for j, s := range sts {
		out[j] = ClassOf(s, rates.Released[s.Name])
	}
	return out
}

// ReadClassesFor is ReadClasses as c sees it.
func (a *API) ReadClassesFor(ctx context.Context, c scope.Caller) ([]Class, error) {
	cs, err := a.ReadClasses(ctx)
	return classesOf(c, cs), err
}

// classesOf keeps the classes c may see: all for a token of the whole
// namespace; else the default class and those naming a topic of c's
// scopes.
func classesOf(c scope.Caller, cs []Class) []Class {
	if c.Global(RoleRead) || cs == nil {
		return cs
	}
	kept := cs[:0:0]
	for _, k := range cs {
		mine := k.Name == shard.DefaultClass
		for _, p := range k.Topics {
			mine = mine || c.CanTopic(RoleRead, strings.TrimSuffix(p, "*"))
		}
		if mine {
			kept = append(kept, k)
		}
	}
	return kept
}

// ChangeClass sets class name from req, writes the audit line (via, who)
// and returns the class after. Bad input is a *shard.InvalidError naming
// the field.
func (a *API) ChangeClass(ctx context.Context, via, who, name string, req ClassRequest) (shard.Class, error) {
	c := shard.Class{Name: name, Topics: req.Topics, Weight: 1, Strict: req.Strict}
	if req.Weight != nil {
		c.Weight = *req.Weight
	}
	out, err := a.o.Store.SetClass(ctx, c, via+" "+who)
	target := "class " + name
	if err == nil {
		target += ": " + out.String()
	}
	Audit(a.o.Log, via, who, "class set", target, err)
	return out, err
}

// DeleteClass deletes class name and writes the audit line.
func (a *API) DeleteClass(ctx context.Context, via, who, name string) error {
	err := a.o.Store.DeleteClass(ctx, name, via+" "+who)
	Audit(a.o.Log, via, who, "class delete", "class "+name, err)
	return err
}

func (a *API) classes(w http.ResponseWriter, r *http.Request) {
	cs, err := a.ReadClassesFor(r.Context(), callerOf(r))
	if err != nil {
		a.fail(w, err)
		return
	}
	if cs == nil {
		cs = []Class{}
	}
	writeJSON(w, http.StatusOK, cs)
}

func (a *API) putClass(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, 16<<10)
	if b == nil {
		return
	}
	var req ClassRequest
	if !decodeStrict(w, b, &req) {
		return
	}
	c, err := a.ChangeClass(r.Context(), "api", holderOf(r), r.PathValue("name"), req)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ClassOf(shard.ClassStatus{Class: c, OldestMs: -1}, 0))
}

func (a *API) deleteClass(w http.ResponseWriter, r *http.Request) {
	err := a.DeleteClass(r.Context(), "api", holderOf(r), r.PathValue("name"))
	if errors.Is(err, shard.ErrNotFound) {
		problem(w, http.StatusNotFound, "not found", err.Error(), "name")
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
