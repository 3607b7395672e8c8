package console

import (
	"fmt"
	"net/http"
	"net/url"
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
	Width, Height, Plot int  // the SVG's size; Plot: the bars' height
	Bars                []dueBar
	Ticks               []dueTick
	Max, Total, Overdue int64
	InFlight            int64
	Span                string // "the next hour", "the next 7 days"
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

// newDueChart lays out profile p.
func newDueChart(p httpapi.DueProfile) dueChart {
	const plot, left, barW, gap = 120, 8, 10, 2
	c := dueChart{Resolution: p.Resolution, Topic: p.Topic, Plot: plot, Height: plot + 22, Max: p.Max, Total: p.Total, Overdue: p.Overdue,
		InFlight: p.InFlight, Other: "hour", Span: "the next hour"}
	step, every := time.Minute, 15
	if p.Resolution == "hour" {
		c.Other, c.Span, step, every = "minute", "the next 7 days", time.Hour, 24
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
			if b.Count > 0 && h < 2 {
				h = 2 // a bar of one message still shows
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
		c.Bars = append(c.Bars, dueBar{X: x, Y: plot - h, W: w, H: h, Count: b.Count, Sampled: b.Sampled, From: b.From, To: b.To,
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
func (c *Console) dueChartFor(r *http.Request) (dueChart, error) {
	res := r.URL.Query().Get("due")
	if res != "hour" {
		res = "minute"
	}
	p, err := c.o.API.ReadDueProfile(r.Context(), res, strings.TrimSpace(r.URL.Query().Get("topic")))
	if err != nil {
		return dueChart{}, err
	}
	chart := newDueChart(p)
	if chart.Topics, err = c.o.Producer.Store().Topics(r.Context(), 200); err != nil {
		return dueChart{}, err
	}
	return chart, nil
}
