package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/delayq/delayq/shard"
)

// BulkJob is a bulk cancel as POST and GET /v1/bulk/cancel show it.
type BulkJob struct {
	Job    string `json:"job"`
	Filter string `json:"filter"`
	// State: running (under way, or its server stopped: POST the same
	// filter again to go on), done, or dry_run (nothing changed).
	State     string `json:"state"`
	Matched   int    `json:"matched"`   // what the filter selected when the job started
	Cancelled int    `json:"cancelled"` // so far, by every run of the job
}

// bulkCancel starts a bulk cancel of what the filter selects, and answers
// 202 with the job to poll (Location), or with dry_run only the count.
// The job runs on in this process (Close stops it); its progress is in
// Redis, so any instance answers GET /v1/bulk/cancel/{job}, and a POST of
// the same filter goes on with a job whose server stopped.
func (a *API) bulkCancel(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, 64<<10)
	if b == nil {
		return
	}
	var req struct {
		Topic  string `json:"topic"`
		Prefix string `json:"prefix"`
		From   string `json:"from"`
		To     string `json:"to"`
		All    bool   `json:"all"`
		DryRun bool   `json:"dry_run"`
	}
	if !decodeStrict(w, b, &req) {
		return
	}
	f := shard.BulkFilter{Topic: req.Topic, Prefix: req.Prefix, All: req.All}
	now := time.Now()
	for _, e := range []struct {
		field, v string
		to       *time.Time
	}{{"from", req.From, &f.From}, {"to", req.To, &f.To}} {
		if e.v == "" {
			continue
		}
		t, err := shard.ParseWindowEnd(e.field, e.v, now)
		if err != nil {
			a.fail(w, err)
			return
		}
		*e.to = t
	}
	who, _ := r.Context().Value(holderKey{}).(string)
	job, err := a.StartBulkCancel(r.Context(), f, req.DryRun, "api", who)
	if err != nil {
		a.fail(w, err)
		return
	}
	if req.DryRun {
		writeJSON(w, http.StatusOK, job)
		return
	}
	w.Header().Set("Location", "/v1/bulk/cancel/"+job.Job)
	writeJSON(w, http.StatusAccepted, job)
}

// StartBulkCancel counts what f selects and, unless dryRun, starts
// cancelling it in a goroutine of the API (Close stops it), which writes
// an audit line (via, who) when it ends. It returns the job as it starts.
func (a *API) StartBulkCancel(ctx context.Context, f shard.BulkFilter, dryRun bool, via, who string) (BulkJob, error) {
	if err := f.Validate(); err != nil {
		return BulkJob{}, err
	}
	n, err := a.o.Shards(ctx)
	if err != nil {
		return BulkJob{}, err
	}
	matched, err := a.o.Store.CountMatching(ctx, n, f)
	if err != nil {
		return BulkJob{}, err
	}
	job := BulkJob{Job: f.Job(), Filter: f.String(), State: "dry_run", Matched: matched}
	if dryRun {
		return job, nil
	}
	job.State = "running"
	a.jobs.Go(func() {
		res, err := a.o.Store.BulkCancel(a.jobsCtx, n, f, matched, nil)
		Audit(a.o.Log, via, who, "bulk cancel", fmt.Sprintf("%s (%d cancelled)", f, res.Done), err)
	})
	return job, nil
}

// ReadBulkJob reads where bulk cancel job stands; its State is "" when
// there is no such job.
func (a *API) ReadBulkJob(ctx context.Context, job string) (BulkJob, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return BulkJob{}, err
	}
	j, err := a.o.Store.BulkStatus(ctx, n, job)
	if err != nil {
		return BulkJob{}, err
	}
	return BulkJob{Job: j.ID, Filter: j.Filter, State: j.State, Matched: j.Matched, Cancelled: j.Done}, nil
}

// ValidJobID reports whether id has the form of a bulk job's id.
func ValidJobID(id string) bool { return jobID.MatchString(id) }

var jobID = regexp.MustCompile(`^[0-9a-f]{16}$`)

// bulkStatus answers where a bulk cancel stands, from Redis.
func (a *API) bulkStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("job")
	if !jobID.MatchString(id) {
		problem(w, http.StatusBadRequest, "invalid job", fmt.Sprintf("%q is not a job id (16 hex digits, as the POST answered)", id), "job")
		return
	}
	j, err := a.ReadBulkJob(r.Context(), id)
	if err != nil {
		a.fail(w, err)
		return
	}
	if j.State == "" {
		problem(w, http.StatusNotFound, "not found", fmt.Sprintf("no bulk cancel %s (or it ended more than a day ago)", id), "job")
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// Close stops the bulk jobs this API runs and waits for them: each stops
// between two script calls, and a POST of its filter goes on later.
func (a *API) Close(ctx context.Context) error {
	a.stopJobs()
	done := make(chan struct{})
	go func() { a.jobs.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bulk jobs still stopping: %w", ctx.Err())
	}
}
