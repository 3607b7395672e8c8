package httpapi

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/delayq/delayq/shard"
)

// Rates are the fleet's rates (shard.Store.Rates) as GET /v1/stats/rates
// and the stats show them.
type Rates struct {
	Now            string  `json:"now"` // the Redis clock, UTC
	WindowSeconds  float64 `json:"window_seconds"`
	SampledSeconds float64 `json:"sampled_seconds"` // what the samples span: less than the window after a start
	// Messages a second over the window, for the whole fleet.
	EnqueuedPerSecond  float64 `json:"enqueued_per_second"`
	PublishedPerSecond float64 `json:"published_per_second"`
	DeadPerSecond      float64 `json:"dead_per_second"`
	// LatenessP99Ms is the upper bound of the lateness bucket holding the
	// 99th percentile of the window's publishes (null: none counted);
	// LatenessP99Over: beyond the largest bucket.
	LatenessP99Ms   *int64      `json:"lateness_p99_ms"`
	LatenessP99Over bool        `json:"lateness_p99_over,omitempty"`
	Points          []RatePoint `json:"points"`
}

// RatePoint is the rates between two samples, ending At.
type RatePoint struct {
	At                 string  `json:"at"`
	Seconds            float64 `json:"seconds"`
	EnqueuedPerSecond  float64 `json:"enqueued_per_second"`
	PublishedPerSecond float64 `json:"published_per_second"`
	DeadPerSecond      float64 `json:"dead_per_second"`
	LatenessP99Ms      *int64  `json:"lateness_p99_ms"`
	LatenessP99Over    bool    `json:"lateness_p99_over,omitempty"`
}

// DefaultRatesWindow is the window of the rates in the stats and the
// console.
const DefaultRatesWindow = 15 * time.Minute

// ReadRates reads the fleet's rates over window.
func (a *API) ReadRates(ctx context.Context, window time.Duration) (Rates, error) {
	r, err := a.o.Store.Rates(ctx, window)
	if err != nil {
		return Rates{}, err
	}
	return RatesOf(r), nil
}

func (a *API) rates(w http.ResponseWriter, r *http.Request) {
	window := DefaultRatesWindow
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > shard.RatesKeep {
			a.fail(w, &shard.InvalidError{Field: "window", Reason: "\"" + v + "\": want a duration from 1s to " + shard.RatesKeep.String() + " (e.g. 15m)"})
			return
		}
		window = d
	}
	v, err := a.ReadRates(r.Context(), window)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// RatesOf renders rates: a second to the millisecond (samples are at
// whole ms, so seconds times a rate gives the count back), rates to 0.01.
func RatesOf(r shard.Rates) Rates {
	out := Rates{Now: r.Now.UTC().Format(time.RFC3339Nano), WindowSeconds: r.Window.Seconds(), SampledSeconds: r.Sampled.Seconds(),
		EnqueuedPerSecond: round2(r.Enqueued), PublishedPerSecond: round2(r.Published), DeadPerSecond: round2(r.Dead),
		Points: make([]RatePoint, 0, len(r.Points))}
	out.LatenessP99Ms, out.LatenessP99Over = p99Ms(r.Lateness)
	for _, p := range r.Points {
		rp := RatePoint{At: p.At.UTC().Format(time.RFC3339Nano), Seconds: math.Round(p.Seconds*1000) / 1000, EnqueuedPerSecond: round2(p.Enqueued),
			PublishedPerSecond: round2(p.Published), DeadPerSecond: round2(p.Dead)}
		rp.LatenessP99Ms, rp.LatenessP99Over = p99Ms(p.Lateness)
		out.Points = append(out.Points, rp)
	}
	return out
}

func p99Ms(l shard.LatenessP99) (*int64, bool) {
	if l.Count == 0 {
		return nil, false
	}
	ms := l.UpTo.Milliseconds()
	return &ms, l.Over
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }
