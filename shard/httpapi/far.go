package httpapi

import (
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

func (a *API) far(w http.ResponseWriter, r *http.Request) {
	n, err := a.o.Shards(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	st, err := a.o.Store.FarStatus(r.Context(), n)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FarOf(st))
}

// setFar turns the tier on (or changes its horizon) or off:
// {"on": true, "horizon": "1h", "bucket_width": "10m", "index_slots": 4096}
// or {"on": false}. 409 while a live scanner cannot promote far messages.
func (a *API) setFar(w http.ResponseWriter, r *http.Request) {
	b := readBody(w, r, 4<<10)
	if b == nil {
		return
	}
	var req struct {
		On          *bool  `json:"on"`
		Horizon     string `json:"horizon"`
		BucketWidth string `json:"bucket_width"`
		IndexSlots  int    `json:"index_slots"`
	}
	if !decodeStrict(w, b, &req) {
		return
	}
	if req.On == nil {
		problem(w, http.StatusBadRequest, "invalid on", "say on: true or on: false", "on")
		return
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
			problem(w, http.StatusBadRequest, "invalid "+d.field, fmt.Sprintf("%q: a positive duration such as 1h, with on: true", d.v), d.field)
			return
		}
		*d.to = v
	}
	if req.IndexSlots < 0 || req.IndexSlots > 0 && !*req.On {
		problem(w, http.StatusBadRequest, "invalid index_slots", fmt.Sprintf("%d: a positive count, with on: true", req.IndexSlots), "index_slots")
		return
	}
	fs.IndexSlots = req.IndexSlots
	var err error
	action := "far off"
	if *req.On {
		action = "far on"
		err = a.o.Store.TurnFarOn(r.Context(), fs)
	} else {
		err = a.o.Store.TurnFarOff(r.Context())
	}
	a.audit(r, action, "far tier", err)
	if errors.Is(err, shard.ErrFarNotSupported) {
		problem(w, http.StatusConflict, "a scanner cannot promote far messages", err.Error(), "on")
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.far(w, r)
}
