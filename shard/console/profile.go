package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/shard/httpapi"
)

// dueChart is the overview's due-time profile as an SVG bar chart,
// computed here so the template only places it: one bar a bucket, each a
// link to the Scheduled page filtered to its window, with its exact count
// and window in a tooltip (and data-* attributes, which the browser test
// reads).
type dueChart struct {
	Resolution, Other   string // this chart's resolution, and the other one
	Topic               string // one topic's chart; empty: the namespace's
	Topics              []string
	Estimated           bool // some bars are estimates (a topic's busy buckets)
	Width, Height, Plot int  // the SVG's size; Plot: the axis, where the bars stand
	Left                int  // the bars start here, right of the scale
	Bars                []dueBar
	Ticks               []dueTick
	Scale               []dueTick // the count scale: Label at height X from the top
	Max, Total, Overdue int64
	InFlight            int64
	Span                string // "the next hour", "the next 7 days"
	AsOf                string // when the profile was computed (Redis clock, UTC), and how long before the page
}

type dueBar struct {
	X, Y, W, H int
	Count      int64
	Sampled    int64  // entries an estimated count rests on; 0: exact
	From, To   string // RFC 3339, UTC
	Href       string
	Title      string
}

type dueTick struct {
	X     int
	Label string
}

// newDueChart lays out profile p for a page rendered at now. A bar's
// height is its count against the largest, on a linear scale whose marks
// (the largest count, half of it, 0) sit left of the bars; a bar with a
// count is at least 4 px high, so a quiet minute beside a spike still
// shows. The SVG shrinks to the screen's width (CSS), so the whole span,
// spike and scale included, is visible on a phone.
func newDueChart(p httpapi.DueProfile, now time.Time) dueChart {
	const top, plot, left, barW, gap = 8, 120, 52, 10, 2 // top: room for the scale's highest mark
	base := top + plot                                   // the axis
	c := dueChart{Resolution: p.Resolution, Topic: p.Topic, Plot: base, Height: base + 22, Left: left, Max: p.Max, Total: p.Total,
		Overdue: p.Overdue, InFlight: p.InFlight, Other: "hour", Span: "the next hour"}
	step, every := time.Minute, 15
	if p.Resolution == "hour" {
		c.Other, c.Span, step, every = "minute", "the next 7 days", time.Hour, 24
	}
	if at, err := time.Parse(time.RFC3339Nano, p.Now); err == nil {
		c.AsOf = "as of " + at.UTC().Format("15:04:05") + " UTC"
		if age := now.Sub(at).Round(time.Second); age >= time.Second {
			c.AsOf += fmt.Sprintf(", %s before this page", age)
		}
	}
	if p.Max > 0 { // marks at the largest count, at half of it (a whole count, at its own height), and at 0
		c.Scale = []dueTick{{X: top, Label: shortCount(p.Max)}}
		if half := p.Max / 2; half >= 1 {
			c.Scale = append(c.Scale, dueTick{X: base - int(plot*half/p.Max), Label: shortCount(half)})
		}
		c.Scale = append(c.Scale, dueTick{X: base, Label: "0"})
	}
	w := barW
	if len(p.Buckets) > 100 {
		w = 4
	}
	c.Width = left + len(p.Buckets)*(w+gap) + 8
	for j, b := range p.Buckets {
		h := 0
		if p.Max > 0 {
			h = int(float64(plot) * float64(b.Count) / float64(p.Max))
			if b.Count > 0 && h < 4 {
				h = 4 // a bar of one message still shows, also shrunk to a phone's width (a third)
			}
		}
		x := left + j*(w+gap)
		from, _ := time.Parse(time.RFC3339, b.From)
		to, _ := time.Parse(time.RFC3339, b.To)
		q := url.Values{"from": {b.From}, "to": {b.To}}
		if p.Topic != "" {
			q.Set("topic", p.Topic)
		}
		title := fmt.Sprintf("%d due %s - %s UTC", b.Count, from.UTC().Format("Jan 2 15:04"), to.UTC().Format("15:04"))
		if b.Sampled > 0 {
			title = fmt.Sprintf("about %d due %s - %s UTC (estimated from %d messages read)", b.Count, from.UTC().Format("Jan 2 15:04"),
				to.UTC().Format("15:04"), b.Sampled)
			c.Estimated = true
		}
		c.Bars = append(c.Bars, dueBar{X: x, Y: base - h, W: w, H: h, Count: b.Count, Sampled: b.Sampled, From: b.From, To: b.To,
			Href: "/scheduled?" + q.Encode(), Title: title})
		if j%every == 0 {
			label := "now"
			if j > 0 {
				label = "+" + shortDur(time.Duration(j)*step)
			}
			c.Ticks = append(c.Ticks, dueTick{X: x, Label: label})
		}
	}
	return c
}

func shortDur(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}

// dueChartFor reads the profile r asks for (?due=hour, else minute; ?topic=
// one topic's) and up to 200 known topics, for the chart's topic field.
func (c *Console) dueChartFor(r *http.Request, s session) (dueChart, error) {
	res := r.URL.Query().Get("due")
	if res != "hour" {
		res = "minute"
	}
	topic := strings.TrimSpace(r.URL.Query().Get("topic"))
	if topic != "" && !s.Caller.CanTopic(httpapi.RoleRead, topic) {
		return dueChart{}, fmt.Errorf("topic %q is not in your scopes", topic)
	}
	p, err := c.o.API.ReadDueProfile(r.Context(), res, topic)
	if err != nil {
		return dueChart{}, err
	}
	chart := newDueChart(p, time.Now())
	topics, err := c.o.Producer.Store().Topics(r.Context(), 200)
	if err != nil {
		return dueChart{}, err
	}
	for _, t := range topics {
		if s.Caller.CanTopic(httpapi.RoleRead, t) {
			chart.Topics = append(chart.Topics, t)
		}
	}
	return chart, nil
}

// shortCount writes a count for the chart's scale: 950, 8.2k, 1.5M.
func shortCount(n int64) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 10_000:
		return strconv.FormatInt(n/1000, 10) + "k"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}
