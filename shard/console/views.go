package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
)

// timeView is a time as the pages show it: UTC, how long ago or from now,
// and (times.js, in the browser's zone) local.
type timeView struct {
	ISO, UTC, Rel string
}

// timeOf renders t (a time.Time or an RFC 3339 string; anything else is
// empty); a past time is "... ago" or "... overdue" (past).
func timeOf(t any, past string) timeView {
	var tm time.Time
	switch x := t.(type) {
	case time.Time:
		tm = x
	case string:
		tm, _ = time.Parse(time.RFC3339Nano, x)
	}
	if tm.IsZero() {
		return timeView{}
	}
	v := timeView{ISO: tm.UTC().Format(time.RFC3339Nano), UTC: tm.UTC().Format("2006-01-02 15:04:05.000 UTC")}
	switch d := time.Until(tm); {
	case d >= time.Second:
		v.Rel = "in " + human(d)
	case d > -time.Second:
		v.Rel = "now"
	default:
		v.Rel = human(-d) + " " + past
	}
	return v
}

// human is a duration to the unit people read it in: 12 s, 3 m 20 s,
// 2 h 5 m, 3 d 4 h.
func human(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		return pair(s/60, "m", s%60, "s")
	case s < 86400:
		return pair(s/3600, "h", s%3600/60, "m")
	}
	return pair(s/86400, "d", s%86400/3600, "h")
}

func pair(a int64, ua string, b int64, ub string) string {
	if b == 0 {
		return fmt.Sprintf("%d %s", a, ua)
	}
	return fmt.Sprintf("%d %s %d %s", a, ua, b, ub)
}

// plural is "1 message", "3 messages".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// headerRow is one header of a message with its AMQP type, as people read
// it: the string "12" and the integer 12 look different.
type headerRow struct {
	Name, Type, Value string
}

func headerRows(env *shard.Envelope) []headerRow {
	if env == nil {
		return nil
	}
	rows := make([]headerRow, 0, len(env.Headers))
	for _, kv := range env.Headers {
		t, v := describe(kv.Value)
		rows = append(rows, headerRow{Name: kv.Key, Type: t, Value: v})
	}
	return rows
}

// describe names the AMQP type of a header value and writes the value.
func describe(v any) (typ, text string) {
	switch x := v.(type) {
	case nil:
		return "void (null)", ""
	case string:
		return "string", strconv.Quote(x)
	case bool:
		return "boolean", strconv.FormatBool(x)
	case int8, uint8, int16, uint16, int32, uint32, int64, float32, float64:
		return fmt.Sprintf("%T", x), fmt.Sprint(x)
	case amqp.Decimal:
		return "decimal", strings.TrimPrefix(shard.FormatValue(x), "decimal ")
	case []byte:
		return fmt.Sprintf("bytes (%d)", len(x)), fmt.Sprintf("0x%x", x)
	case time.Time:
		return "timestamp", x.UTC().Format(time.RFC3339)
	case amqp.Table:
		return fmt.Sprintf("table (%d)", len(x)), shard.FormatValue(x)
	case []any:
		return fmt.Sprintf("array (%d)", len(x)), shard.FormatValue(x)
	}
	return fmt.Sprintf("%T", v), fmt.Sprint(v)
}

// scheduledPage is how many messages the scheduled page shows, and
// scheduledScan how many entries it reads at most to find them (filters
// may match few): the page's Redis work is bounded either way.
const (
	scheduledPage = 50
	scheduledScan = 5000
)

// scheduled browses the scheduled messages: every shard or one, by topic,
// id prefix and due window, in due order per shard, a page at a time.
func (c *Console) scheduled(w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	data := map[string]any{"S": s, "Title": "Scheduled", "Nav": "scheduled", "Q": map[string]string{
		"shard": q.Get("shard"), "topic": q.Get("topic"), "prefix": q.Get("prefix"), "from": q.Get("from"), "to": q.Get("to")}}
	bq, err := browseQuery(q)
	if !s.Caller.Global(httpapi.RoleRead) {
		bq.Within = s.Caller.Scopes(httpapi.RoleRead)
	}
	if err == nil {
		var page []shard.Listed
		var next *shard.BrowseCursor
		if page, next, err = c.o.API.Browse(r.Context(), bq); err == nil {
			data["Rows"] = page
			if next != nil {
				nq := url.Values{}
				for k, v := range q {
					nq[k] = v
				}
				nq.Set("after", next.String())
				data["Next"] = "/scheduled?" + nq.Encode()
			}
			data["Paged"] = q.Get("after") != ""
		}
	}
	if err != nil {
		data["Error"] = err.Error()
	}
	c.render(w, http.StatusOK, "scheduled.html", data)
}

// browseQuery reads the scheduled page's filters: shard, topic, prefix,
// from and to (a duration from now such as 30m, or an RFC 3339 time), after.
func browseQuery(q url.Values) (shard.BrowseQuery, error) {
	bq := shard.BrowseQuery{Shard: -1, Topic: strings.TrimSpace(q.Get("topic")), Prefix: strings.TrimSpace(q.Get("prefix")),
		Limit: scheduledPage, MaxScan: scheduledScan}
	if v := strings.TrimSpace(q.Get("shard")); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return bq, &shard.InvalidError{Field: "shard", Reason: fmt.Sprintf("%q is not a shard number", v)}
		}
		bq.Shard = i
	}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"from", &bq.From}, {"to", &bq.To}} {
		v := strings.TrimSpace(q.Get(f.name))
		if v == "" {
			continue
		}
		t, err := shard.ParseWindowEnd(f.name, v, time.Now())
		if err != nil {
			return bq, err
		}
		*f.to = t
	}
	after, err := shard.ParseBrowseCursor(q.Get("after"))
	if err != nil {
		return bq, &shard.InvalidError{Field: "after", Reason: err.Error()}
	}
	bq.After = after
	return bq, nil
}
