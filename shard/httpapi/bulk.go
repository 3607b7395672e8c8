package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
)

// BulkJob is a bulk cancel or reschedule as POST /v1/bulk/… and GET
// /v1/bulk/{job} show it.
type BulkJob struct {
	Job    string `json:"job"`
	Action string `json:"action"` // cancel, reschedule
	Filter string `json:"filter"`
	// State: running (under way, or its server stopped: POST the same
	// request again to go on), done, or dry_run (nothing changed).
	State   string `json:"state"`
	Matched int    `json:"matched"` // what the filter selected when the job started
	Done    int    `json:"done"`    // cancelled or rescheduled so far, by every run of the job
	// Due is where a reschedule moves the messages (once it started).
	Due string `json:"due,omitempty"`
}

// bulkRequest is the body of POST /v1/bulk/cancel and /v1/bulk/reschedule.
type bulkRequest struct {
	Topic   string `json:"topic"`
	Prefix  string `json:"prefix"`
	From    string `json:"from"`
	To      string `json:"to"`
	All     bool   `json:"all"`
	DryRun  bool   `json:"dry_run"`
	DelayMs *int64 `json:"delay_ms"` // reschedule: after this delay from the job's start
	AtMs    *int64 `json:"at_ms"`    // reschedule: at this unix ms
}

// filter reads the request's filter; the error names the field.
func (req *bulkRequest) filter() (shard.BulkFilter, error) {
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
			return f, err
		}
		*e.to = t
	}
	return f, f.Validate()
}

// bulk answers a POST of a bulk job: the count with dry_run, else 202
// with the job to poll (Location). The job runs on in this process (Close
// stops it); its progress is in Redis, so any instance answers GET
// /v1/bulk/{job}, and a POST of the same request goes on with a job whose
// server stopped.
func (a *API) bulk(w http.ResponseWriter, r *http.Request, action string) {
	b := readBody(w, r, 64<<10)
	if b == nil {
		return
	}
	var req bulkRequest
	if !decodeStrict(w, b, &req) {
		return
	}
	f, err := req.filter()
	if err != nil {
		a.fail(w, err)
		return
	}
	if c := callerOf(r); !c.Global(RoleOperate) {
		f.Within = c.Scopes(RoleOperate) // a scoped {"all": true} is all of its own
	}
	var to BulkTarget
	switch {
	case action == "cancel" && (req.DelayMs != nil || req.AtMs != nil):
		problem(w, http.StatusBadRequest, "invalid delay_ms", "a cancel takes no delay_ms or at_ms", "delay_ms")
		return
	case action == "reschedule" && (req.DelayMs == nil) == (req.AtMs == nil):
		problem(w, http.StatusBadRequest, "invalid delay_ms", "give delay_ms or at_ms", "delay_ms")
		return
	case req.DelayMs != nil:
		to.Delay = time.Duration(*req.DelayMs) * time.Millisecond
	case req.AtMs != nil:
		to.At = time.UnixMilli(*req.AtMs)
	}
	who := holderOf(r)
	job, err := a.StartBulk(r.Context(), action, f, to, req.DryRun, "api", who)
	if err != nil {
		a.fail(w, err)
		return
	}
	if req.DryRun {
		writeJSON(w, http.StatusOK, job)
		return
	}
	w.Header().Set("Location", "/v1/bulk/"+job.Job)
	writeJSON(w, http.StatusAccepted, job)
}

// BulkTarget is where a bulk reschedule moves messages: At, or Delay
// after the job's start.
type BulkTarget struct {
	Delay time.Duration
	At    time.Time
}

// StartBulk counts what f selects and, unless dryRun, starts the job
// (action cancel, or reschedule to to) in a goroutine of the API (Close
// stops it), which writes an audit line (via, who) when it ends. It
// returns the job as it starts.
func (a *API) StartBulk(ctx context.Context, action string, f shard.BulkFilter, to BulkTarget, dryRun bool, via, who string) (BulkJob, error) {
	if err := f.Validate(); err != nil {
		return BulkJob{}, err
	}
	id := f.Job()
	if action == "reschedule" {
		var err error
		if id, err = f.RescheduleJob(to.Delay, to.At); err != nil {
			return BulkJob{}, err
		}
	}
	n, err := a.o.Shards(ctx)
	if err != nil {
		return BulkJob{}, err
	}
	matched, err := a.o.Store.CountMatching(ctx, n, f)
	if err != nil {
		return BulkJob{}, err
	}
	job := BulkJob{Job: id, Action: action, Filter: f.String(), State: "dry_run", Matched: matched}
	if dryRun {
		return job, nil
	}
	job.State = "running"
	a.jobs.Go(func() {
		var res shard.BulkProgress
		var err error
		if action == "reschedule" {
			res, err = a.o.Store.BulkReschedule(a.jobsCtx, n, f, to.Delay, to.At, matched, nil)
		} else {
			res, err = a.o.Store.BulkCancel(a.jobsCtx, n, f, matched, nil)
		}
		Audit(a.o.Log, via, who, "bulk "+action, fmt.Sprintf("%s (%d done)", f, res.Done), err)
	})
	return job, nil
}

// ReadBulkJob reads where bulk job stands; its State is "" when there is
// no such job.
func (a *API) ReadBulkJob(ctx context.Context, job string) (BulkJob, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return BulkJob{}, err
	}
	j, err := a.o.Store.BulkStatus(ctx, n, job)
	if err != nil {
		return BulkJob{}, err
	}
	v := BulkJob{Job: j.ID, Action: j.Action, Filter: j.Filter, State: j.State, Matched: j.Matched, Done: j.Done}
	if j.DueMs > 0 {
		v.Due = time.UnixMilli(j.DueMs).UTC().Format(time.RFC3339Nano)
	}
	return v, nil
}

var jobID = regexp.MustCompile(`^[0-9a-f]{16}$`)

// ValidJobID reports whether id has the form of a bulk job's id.
func ValidJobID(id string) bool { return jobID.MatchString(id) }

// bulkStatus answers where a bulk job stands, from Redis.
func (a *API) bulkStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("job")
	if !ValidJobID(id) {
		problem(w, http.StatusBadRequest, "invalid job", fmt.Sprintf("%q is not a job id (16 hex digits, as the POST answered)", id), "job")
		return
	}
	j, err := a.ReadBulkJob(r.Context(), id)
	if err != nil {
		a.fail(w, err)
		return
	}
	if j.State == "" || !SeesJob(callerOf(r), j) {
		problem(w, http.StatusNotFound, "not found", fmt.Sprintf("no bulk job %s (or it ended more than a day ago)", id), "job")
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// SeesJob reports whether c may see bulk job j: a caller of the whole
// namespace sees every job; a scoped one, the jobs limited to scopes it
// reads (a scoped caller's jobs are: BulkFilter.Within, named last in the
// filter, after whatever a prefix or topic holds).
func SeesJob(c scope.Caller, j BulkJob) bool {
	if c.Global(RoleRead) {
		return true
	}
	at := strings.LastIndex(j.Filter, " within=")
	if at < 0 {
		return false
	}
	for _, name := range strings.Split(j.Filter[at+len(" within="):], ",") {
		if !slices.ContainsFunc(c.Scopes(RoleRead), func(s *scope.Scope) bool { return s.Name == name }) {
			return false
		}
	}
	return true
}

// Close stops the bulk jobs this API runs and waits for them: each stops
// between two script calls, and a POST of its request goes on later.
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
