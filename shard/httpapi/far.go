package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/delayq/delayq/shard"
)

// Far is the far-future tier as GET /v1/far and delayq far --json show it.
type Far struct {
	// State is "off" (never turned on), "on", or "turned-off" (nothing
	// more goes far; what is far is being promoted).
	State       string   `json:"state"`
	Horizon     string   `json:"horizon,omitempty"`
	BucketWidth string   `json:"bucket_width,omitempty"`
	IndexSlots  int      `json:"index_slots,omitempty"`
	Far         int64    `json:"far"`
	Buckets     int64    `json:"buckets"`
	NextBucket  string   `json:"next_bucket,omitempty"` // the earliest bucket's start
	Scanners    int      `json:"scanners"`              // live scanner processes
	Older       []string `json:"older_scanners,omitempty"`
}

// FarOf renders a far-tier status.
func FarOf(st shard.FarStatus) Far {
	v := Far{State: "off", Far: st.Far, Buckets: st.Buckets, Scanners: len(st.Scanners), Older: st.Older}
	if st.On {
		v.State = "on"
		if !st.Placing {
			v.State = "turned-off"
		} else {
			v.Horizon = st.Settings.Horizon.String()
		}
		v.BucketWidth, v.IndexSlots = st.Settings.BucketWidth.String(), st.Settings.IndexSlots
	}
	if !st.NextBucket.IsZero() {
		v.NextBucket = st.NextBucket.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// ReadFar reads the far tier's status over every shard that may hold
// messages.
func (a *API) ReadFar(ctx context.Context) (Far, error) {
	n, err := a.o.Shards(ctx)
	if err != nil {
		return Far{}, err
	}
	st, err := a.o.Store.FarStatus(ctx, n)
	if err != nil {
		return Far{}, err
	}
	return FarOf(st), nil
}

// FarRequest turns the far tier on (with its settings, Go durations; ""
// and 0 keep or default them) or off, as PUT /v1/far and the console
// send it.
type FarRequest struct {
	On          *bool  `json:"on"`
	Horizon     string `json:"horizon"`
	BucketWidth string `json:"bucket_width"`
	IndexSlots  int    `json:"index_slots"`
}

// ChangeFar applies req, writes the audit line (via, who) and returns the
// tier's status after it. Bad input is a *shard.InvalidError naming the
// field; a live scanner of an older release, shard.ErrFarNotSupported.
func (a *API) ChangeFar(ctx context.Context, via, who string, req FarRequest) (Far, error) {
	err := a.changeFar(ctx, req)
	action := "far off"
	if req.On != nil && *req.On {
		action = "far on"
	}
	Audit(a.o.Log, via, who, action, "far tier", err)
	if err != nil {
		return Far{}, err
	}
	return a.ReadFar(ctx)
}

func (a *API) changeFar(ctx context.Context, req FarRequest) error {
	if req.On == nil {
		return &shard.InvalidError{Field: "on", Reason: "say on: true or on: false"}
	}
	var fs shard.FarSettings
	for _, d := range []struct {
		field, v string
		to       *time.Duration
	}{{"horizon", req.Horizon, &fs.Horizon}, {"bucket_width", req.BucketWidth, &fs.BucketWidth}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v <= 0 || !*req.On {
			return &shard.InvalidError{Field: d.field, Reason: fmt.Sprintf("%q: a positive duration such as 1h, with on: true", d.v)}
		}
		*d.to = v
	}
	if req.IndexSlots < 0 || req.IndexSlots > 0 && !*req.On {
		return &shard.InvalidError{Field: "index_slots", Reason: fmt.Sprintf("%d: a positive count, with on: true", req.IndexSlots)}
	}
	fs.IndexSlots = req.IndexSlots
	if *req.On {
		return a.o.Store.TurnFarOn(ctx, fs)
	}
	return a.o.Store.TurnFarOff(ctx)
}

func (a *API) far(w http.ResponseWriter, r *http.Request) {
	v, err := a.ReadFar(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// setFar turns the tier on (or changes its horizon) or off:
// {"on": true, "horizon": "1h", "bucket_width": "10m", "index_slots": 4096}
// or {"on": false}. 409 while a live scanner cannot promote far messages.
func (a *API) setFar(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, 4<<10)
	if b == nil {
		return
	}
	var req FarRequest
	if !decodeStrict(w, b, &req) {
		return
	}
	who := holderOf(r)
	v, err := a.ChangeFar(r.Context(), "api", who, req)
	if errors.Is(err, shard.ErrFarNotSupported) {
		problem(w, http.StatusConflict, "a scanner cannot promote far messages", err.Error(), "on")
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
