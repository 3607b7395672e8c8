package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/delayq/delayq/shard/httpapi"
)

// rateTile is one of the overview's live rates: the latest interval's
// value, large, over a sparkline of the window (live.js redraws both from
// /ui/stats with the same scaling).
type rateTile struct {
	ID, Label, Value string
	Points           string // the sparkline's polyline points
}

// The sparkline's size.
const sparkW, sparkH = 120, 28

// rateTilesOf lays out the rates, and sums up their window.
func rateTilesOf(r *httpapi.Rates) (tiles []rateTile, note string) {
	if r == nil {
		return nil, ""
	}
	series := func(f func(p httpapi.RatePoint) float64) []float64 {
		out := make([]float64, len(r.Points))
		for j, p := range r.Points {
			out[j] = f(p)
		}
		return out
	}
	perSec := func(v []float64) string {
		if len(v) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f/s", v[len(v)-1])
	}
	enq := series(func(p httpapi.RatePoint) float64 { return p.EnqueuedPerSecond })
	pub := series(func(p httpapi.RatePoint) float64 { return p.PublishedPerSecond })
	dead := series(func(p httpapi.RatePoint) float64 { return p.DeadPerSecond })
	late := series(func(p httpapi.RatePoint) float64 {
		if p.LatenessP99Ms == nil {
			return 0
		}
		return float64(*p.LatenessP99Ms)
	})
	lateValue := "-"
	if n := len(r.Points); n > 0 {
		lateValue = latenessText(r.Points[n-1].LatenessP99Ms, r.Points[n-1].LatenessP99Over)
	}
	tiles = []rateTile{
		{"enqueued", "enqueued", perSec(enq), sparkline(enq)},
		{"published", "published", perSec(pub), sparkline(pub)},
		{"dead", "dead-lettered", perSec(dead), sparkline(dead)},
		{"lateness", "lateness p99", lateValue, sparkline(late)},
	}
	return tiles, rateWindowText(r)
}

// rateWindowText sums up the window (live.js writes the same).
func rateWindowText(r *httpapi.Rates) string {
	if len(r.Points) == 0 {
		return "no samples yet (delayq scan and serve take one every DELAYQ_RATES_EVERY, 10 s)"
	}
	span := time.Duration(r.SampledSeconds * float64(time.Second)).Round(time.Second)
	return fmt.Sprintf("the last %s: %.1f/s published, lateness p99 %s", span, r.PublishedPerSecond, latenessText(r.LatenessP99Ms, r.LatenessP99Over))
}

// latenessText says a p99 bucket's bound for people.
func latenessText(ms *int64, over bool) string {
	if ms == nil {
		return "-"
	}
	t := fmt.Sprintf("%dms", *ms)
	if *ms >= 1000 {
		t = fmt.Sprintf("%gs", float64(*ms)/1000)
	}
	if over {
		return "> " + t
	}
	return "≤ " + t
}

// sparkline draws v scaled to its largest value, oldest at the left.
func sparkline(v []float64) string {
	top := 0.0
	for _, x := range v {
		top = max(top, x)
	}
	var b strings.Builder
	for j, x := range v {
		px := 0.0
		if len(v) > 1 {
			px = float64(j) * sparkW / float64(len(v)-1)
		}
		py := float64(sparkH - 1)
		if top > 0 {
			py = (sparkH - 1) - x/top*(sparkH-2)
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", px, py)
	}
	return strings.TrimSpace(b.String())
}
