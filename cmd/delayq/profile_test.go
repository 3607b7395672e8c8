package main_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestConsoleDueProfile: 10,000 messages due over the next hour, 5,000 of
// them in one minute 30 minutes out: the overview's chart (read from its
// SVG) has each minute's exact count, the spike's bar opens the Scheduled
// page filtered to its minute, and the page fits a 390 px screen. One
// topic's chart has its quiet minutes exact and the spike estimated, marked
// so; the CLI says the same.
func TestConsoleDueProfile(t *testing.T) {
	w := newWorld(t, 4)
	ctx := browser(t)
	st, err := shard.NewStore(redisSrv.Client(t), w.ns)
	must(t, err)
	prod := shard.NewProducer(st, balance.Static(4), shard.ProducerOptions{})
	now := time.Now()
	spike := now.Truncate(time.Minute).Add(30*time.Minute + 30*time.Second)
	var due []int64
	var topics []string
	var msgs []shard.Message
	for j := range 10_000 {
		at := spike
		if j%2 == 1 {
			at = now.Add(time.Duration(j) * 360 * time.Millisecond) // spread over the hour
		}
		topic := "t"
		if j%4 == 3 {
			topic = "u" // half the spread ones
		}
		due = append(due, at.UnixMilli())
		topics = append(topics, topic)
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("m%05d", j), Topic: topic, At: at})
	}
	for c := range 20 {
		_, err := prod.EnqueueBatch(t.Context(), msgs[c*500:(c+1)*500])
		must(t, err)
	}
	// The CLI: a sparkline and the busy minutes; the same as JSON.
	out, e, code := w.delayq("", "stats", "--due")
	if code != 0 || !strings.Contains(out, "falling due in the next hour: ") || !strings.Contains(out, spike.UTC().Format("2006-01-02T15:04")) ||
		!strings.Contains(out, "now |") {
		t.Errorf("stats --due: exit %d %q %q", code, out, e)
	}
	if out, _, code = w.delayq("", "stats", "--due", "--json"); code != 0 || !strings.Contains(out, `"resolution": "minute"`) {
		t.Errorf("stats --due --json: exit %d %q", code, out)
	}
	if _, e, code = w.delayq("", "stats", "--due", "--watch"); code != 2 {
		t.Errorf("stats --due --watch: exit %d %q", code, e)
	}
	// One topic: the spread minutes exact, the spike's estimated and said so.
	if out, e, code = w.delayq("", "stats", "--due", "--topic", "t"); code != 0 || !strings.Contains(out, "of topic t") ||
		!strings.Contains(out, "estimated from") {
		t.Errorf("stats --due --topic t: exit %d %q %q", code, out, e)
	}
	if _, e, code = w.delayq("", "stats", "--due", "--topic", "nope"); code != 2 || !strings.Contains(e, "topic") {
		t.Errorf("stats --due --topic nope: exit %d %q", code, e)
	}
	base := w.serve(t)
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		must(t, chromedp.Do(ctx, steps...))
	}
	do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleAdmin), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("due-chart")))
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[[]map[string]string](`[...document.querySelectorAll("#due-chart rect.bar")].map(r =>
		({count: r.dataset.count, from: r.dataset.from, to: r.dataset.to, href: r.parentElement.getAttribute("href")}))`))
	must(t, err)
	if len(bars) != 60 {
		t.Fatalf("%d bars, want 60", len(bars))
	}
	spikeHref := ""
	for j, b := range bars {
		from, err1 := time.Parse(time.RFC3339Nano, b["from"])
		to, err2 := time.Parse(time.RFC3339Nano, b["to"])
		if err1 != nil || err2 != nil {
			t.Fatalf("bar %d: from %q to %q", j, b["from"], b["to"])
		}
		var want int64
		for _, ms := range due {
			if (j == 0 && ms > from.UnixMilli() || j > 0 && ms >= from.UnixMilli()) && ms < to.UnixMilli() {
				want++
			}
		}
		if got := b["count"]; got != fmt.Sprint(want) {
			t.Errorf("bar %d (%s - %s): %s, want %d", j, b["from"], b["to"], got, want)
		}
		if !spike.Before(from) && spike.Before(to) {
			spikeHref = b["href"]
		}
	}
	title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#due-chart rect.bar title").textContent`))
	must(t, err)
	if !strings.Contains(title, " UTC (") || !strings.Contains(title, " local)") {
		t.Errorf("a bar's tooltip: %q, want its window in UTC and local time", title)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, err)
	artifact(t, "console-due-profile.png", shot)
	if spikeHref == "" {
		t.Fatal("no bar holds the spike")
	}
	do(chromedp.Click(chromedp.CSS(`#due-chart a[href="`+spikeHref+`"] rect`)), chromedp.WaitVisible(chromedp.CSS("main")))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	must(t, err)
	u, err := url.Parse(loc)
	must(t, err)
	from, _ := time.Parse(time.RFC3339, u.Query().Get("from"))
	to, _ := time.Parse(time.RFC3339, u.Query().Get("to"))
	if u.Path != "/scheduled" || spike.Before(from) || !spike.Before(to) || to.Sub(from) != time.Minute {
		t.Errorf("the spike's bar opened %s", loc)
	}
	// The same chart for topic t, chosen in the chart's topic field.
	do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("due-topic")), chromedp.SendKeys(chromedp.ID("due-topic"), "t"),
		chromedp.Submit(chromedp.ID("due-topic")), chromedp.WaitVisible(chromedp.CSS(`#due-chart a[href*="topic=t"]`)))
	bars, err = chromedp.Run(ctx, chromedp.Evaluate[[]map[string]string](`[...document.querySelectorAll("#due-chart rect.bar")].map(r =>
		({count: r.dataset.count, sampled: r.dataset.sampled, est: String(r.classList.contains("est")), from: r.dataset.from, to: r.dataset.to,
		  href: r.parentElement.getAttribute("href")}))`))
	must(t, err)
	for j, b := range bars {
		from, _ := time.Parse(time.RFC3339Nano, b["from"])
		to, _ := time.Parse(time.RFC3339Nano, b["to"])
		var want int64
		for k, ms := range due {
			if topics[k] == "t" && (j == 0 && ms > from.UnixMilli() || j > 0 && ms >= from.UnixMilli()) && ms < to.UnixMilli() {
				want++
			}
		}
		var got int64
		fmt.Sscan(b["count"], &got)
		if !spike.Before(from) && spike.Before(to) { // 5,000 and more in 4 shards: sampled
			if b["est"] != "true" || b["sampled"] == "0" || got < want*9/10 || got > want*11/10 || !strings.Contains(b["href"], "topic=t") {
				t.Errorf("topic t's spike bar: %v, want about %d, estimated", b, want)
			}
			continue
		}
		if got != want || b["est"] != "false" {
			t.Errorf("topic t's bar %d (%s - %s): %v, want exactly %d", j, b["from"], b["to"], b, want)
		}
	}
	shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, err)
	artifact(t, "console-due-profile-topic.png", shot)
	do(chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("due-chart")))
	width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	must(t, err)
	if width > 390 {
		t.Errorf("the overview is %d px wide on a 390 px screen", width)
	}
	if summary, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("due-summary"))); err != nil || !strings.Contains(summary, "at most") ||
		!strings.Contains(summary, "as of ") {
		t.Errorf("the chart's summary: %q %v", summary, err)
	}
	// On the phone the whole chart shows: the scale, the spike, and every
	// bar with a count at least a pixel high.
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
		const chart = document.getElementById("due-chart").getBoundingClientRect();
		const max = document.getElementById("due-max").getBoundingClientRect();
		let right = 0, lowest = 1e9, spike = 0;
		for (const r of document.querySelectorAll("#due-chart rect.bar")) {
			const b = r.getBoundingClientRect();
			right = Math.max(right, b.right);
			if (+r.dataset.count > 0) { lowest = Math.min(lowest, b.height); }
			if (+r.dataset.count > spike) { spike = +r.dataset.count; }
		}
		return {chartRight: chart.right, maxLeft: max.left, maxRight: max.right, barsRight: right, lowest: lowest, spike: spike};
	})()`))
	must(t, err)
	if seen["chartRight"] > 390 || seen["barsRight"] > 390 || seen["maxLeft"] < 0 || seen["maxRight"] > 390 || seen["lowest"] < 1 {
		t.Errorf("the chart at 390 px: %v; want it, its bars and its scale on screen, every bar with a count at least 1 px high", seen)
	}
	shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, err)
	artifact(t, "console-due-profile-390.png", shot)
}

// TestConsoleRates: two scanners publish 600 messages while they and
// serve sample the fleet's counters; delayq stats, the API and the
// overview (in Chromium, live from /ui/stats) show the published rate and
// the lateness p99, and the rates add up to what was published.
func TestConsoleRates(t *testing.T) {
	w := newWorld(t, 4, "DELAYQ_RATES_EVERY=500ms")
	ctx := browser(t)
	w.consume()
	w.scan()
	w.scan()
	base := w.serve(t)
	var v struct {
		Rates struct {
			Published float64 `json:"published_per_second"`
			Sampled   float64 `json:"sampled_seconds"`
			Late      *int64  `json:"lateness_p99_ms"`
			Points    []struct {
				Seconds   float64 `json:"seconds"`
				Published float64 `json:"published_per_second"`
				Enqueued  float64 `json:"enqueued_per_second"`
			} `json:"points"`
		} `json:"rates"`
	}
	stats := func() bool {
		out, _, code := w.delayq("", "stats", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &v) == nil
	}
	// Sampled from the start: the samples before the load are zeros.
	shardtest.WaitFor(t, 10*time.Second, func() bool { return stats() && len(v.Rates.Points) > 0 },
		func() string { return "no two samples" })
	in, ids := w.jsonl(600, 3*time.Second, "rate")
	if out, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, e)
	}
	w.waitDelivered(ids, 60*time.Second)
	sum := func() (enq, pub float64) {
		for _, p := range v.Rates.Points {
			enq, pub = enq+p.Enqueued*p.Seconds, pub+p.Published*p.Seconds
		}
		return enq, pub
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		if !stats() {
			return false
		}
		enq, pub := sum()
		return enq > 599 && pub > 599 && v.Rates.Late != nil // the rounding of each point's rate: within a message or so
	}, func() string {
		enq, pub := sum()
		return fmt.Sprintf("rates add up to %.1f enqueued, %.1f published: %+v", enq, pub, v.Rates)
	})
	if enq, pub := sum(); enq > 601 || pub > 601 {
		t.Errorf("rates add up to %.1f enqueued, %.1f published; want 600 each", enq, pub)
	}
	if out, _, _ := w.delayq("", "stats"); !strings.Contains(out, "published/s, ") || !strings.Contains(out, "lateness p99 <= ") {
		t.Errorf("delayq stats has no rates line:\n%s", out)
	}
	// Messages due over the next hour, for the chart (the screenshot is
	// the README's picture of the console).
	var later strings.Builder
	for j := range 400 {
		delay := time.Duration(j%60)*time.Minute + time.Duration(j)*time.Second
		if j%5 == 0 {
			delay = 20*time.Minute + time.Duration(j)*time.Millisecond // a busy minute
		}
		fmt.Fprintf(&later, `{"id":"later-%d","topic":"order.cancel","delay_ms":%d,"body":"x"}`+"\n", j, delay.Milliseconds())
	}
	if out, e, code := w.delayq(later.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, e)
	}
	// The overview, refreshed live while more is published.
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		must(t, chromedp.Do(ctx, steps...))
	}
	do(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleAdmin), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("rates")))
	in, more := w.jsonl(300, 2*time.Second, "rate2")
	if out, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: %s %s", out, e)
	}
	w.waitDelivered(more, 60*time.Second)
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`({pub: document.getElementById("r-published").textContent,
			late: document.getElementById("r-lateness").textContent,
			points: String(document.getElementById("s-published").getAttribute("points").split(" ").length)})`))
		return err == nil && strings.HasSuffix(got["pub"], "/s") && strings.HasPrefix(got["late"], "≤ ") && got["points"] != "1"
	}, func() string {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("rates").innerText`))
		return fmt.Sprintf("the overview's rates: %q %v", got, err)
	})
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, err)
	artifact(t, "console-rates.png", shot)
}

// TestConsoleManyShards: with 32 shards the overview shows the 8 busiest
// (a hot shard first) and how uneven the shards are, and keeps the full
// table a click away; the live refresh redraws both the same way.
func TestConsoleManyShards(t *testing.T) {
	const m = 32
	w := newWorld(t, m)
	ctx := browser(t)
	st, err := shard.NewStore(redisSrv.Client(t), w.ns)
	must(t, err)
	prod := shard.NewProducer(st, balance.Static(m), shard.ProducerOptions{})
	var msgs []shard.Message
	hot := 0
	for j := range 400 {
		id := fmt.Sprintf("s%04d", j)
		if j == 0 {
			hot = shard.Of(id, m)
		}
		msgs = append(msgs, shard.Message{ID: id, Topic: "t", Delay: time.Hour})
	}
	for j := 0; len(msgs) < 700; j++ { // 300 more in the hot shard
		if id := fmt.Sprintf("h%05d", j); shard.Of(id, m) == hot {
			msgs = append(msgs, shard.Message{ID: id, Topic: "t", Delay: time.Hour})
		}
	}
	_, err = prod.EnqueueBatch(t.Context(), msgs)
	must(t, err)
	base := w.serve(t)
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleAdmin), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("busiest"))))
	check := func(when string) {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`({
			busiest: [...document.querySelectorAll("#busiest tbody tr")].map(tr => tr.cells[0].textContent),
			all: document.querySelectorAll("#shards tbody tr").length,
			open: document.getElementById("all-shards").open,
			skew: document.getElementById("shard-skew").textContent})`))
		must(t, err)
		busiest, _ := v["busiest"].([]any)
		if len(busiest) != 8 || fmt.Sprint(busiest[0]) != fmt.Sprint(hot) || v["all"] != float64(m) || v["open"] != false ||
			!strings.Contains(fmt.Sprint(v["skew"]), fmt.Sprintf("32 shards, 22 scheduled each on average; the fullest, shard %d", hot)) {
			t.Errorf("%s: %v; want the 8 busiest, shard %d first, all %d a click away, and the spread", when, v, hot, m)
		}
	}
	check("as served")
	must(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#updated:not(:empty)"))))
	check("after the live refresh")
}
