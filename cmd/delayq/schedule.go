package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/schedule"
)

func scheduleCommand() command {
	return command{name: "schedule",
		args:    "[--json] | show NAME | set NAME SPEC [flags] | set --file F | delete NAME | pause NAME | resume NAME | preview SPEC [--zone Z] [--start T] [--end T] [--count N] [-n N]",
		summary: "recurring schedules: cron or @every, in any time zone", run: runSchedule,
		flags: func() *flag.FlagSet { return newScheduleFlags().fs }}
}

type scheduleFlags struct {
	fs                             *flag.FlagSet
	asJSON                         *bool
	zone, start, end, missed, file *string
	topic, exchange, routingKey    *string
	body, contentType              *string
	grace, maxLateness             *time.Duration
	count, catchUp, n              *int
}

func newScheduleFlags() scheduleFlags {
	fs := flag.NewFlagSet("schedule", flag.ContinueOnError)
	return scheduleFlags{fs: fs,
		asJSON:      fs.Bool("json", false, "print JSON"),
		zone:        fs.String("zone", "", "IANA time zone the spec is read in (Europe/Berlin); default UTC"),
		start:       fs.String("start", "", "no occurrence before it: a duration from now (1h) or an RFC 3339 time; @every counts from it"),
		end:         fs.String("end", "", "no occurrence after it: a duration from now or an RFC 3339 time"),
		count:       fs.Int("count", 0, "publish at most this many occurrences (0: no limit)"),
		missed:      fs.String("missed", "", "missed runs (fleet down, paused): skip (default), latest or all"),
		grace:       fs.Duration("grace", 0, "how late an occurrence may fire before it is missed (default 1m)"),
		catchUp:     fs.Int("catch-up", 0, "--missed all: the most missed occurrences published (default 100)"),
		topic:       fs.String("topic", "", "each occurrence's topic (a route)"),
		exchange:    fs.String("exchange", "", "or its exchange"),
		routingKey:  fs.String("routing-key", "", "and routing key"),
		body:        fs.String("body", "", "each occurrence's body"),
		contentType: fs.String("content-type", "", "its content type"),
		maxLateness: fs.Duration("max-lateness", 0, "an occurrence later than this is dead as expired, not published"),
		file:        fs.String("file", "", "set: schedules in their JSON form, one a line (- for standard input); a bad line is named and the others are set"),
		n:           fs.Int("n", 5, "show, preview: how many next occurrences"),
	}
}

// runSchedule lists, shows, sets, deletes, pauses or resumes schedules,
// or previews a spec (no Redis). A change writes an audit line.
func runSchedule(ctx context.Context, e *env, args []string) int {
	f := newScheduleFlags()
	pos, err := parse(f.fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq schedule: %s\nusage: delayq schedule %s\n", msg, scheduleCommand().args)
		return exitUsage
	}
	op := "list"
	if len(pos) > 0 {
		op = pos[0]
	}
	want := map[string]int{"list": 1, "show": 2, "set": 3, "delete": 2, "pause": 2, "resume": 2, "preview": 2}
	n, ok := want[op]
	switch {
	case !ok:
		return usage(fmt.Sprintf("unknown subcommand %q", op))
	case op == "set" && *f.file != "":
		if len(pos) != 1 {
			return usage("set --file takes no NAME or SPEC")
		}
	case op == "list" && len(pos) > 0 || op != "list" && len(pos) != n:
		return usage(fmt.Sprintf("%s takes %d argument(s)", op, n-1))
	case *f.n < 1 || *f.n > 1000:
		return usage(fmt.Sprintf("-n %d: give 1..1000", *f.n))
	}
	if op == "preview" {
		var other []string
		f.fs.Visit(func(fl *flag.Flag) {
			if !previewFlags[fl.Name] {
				other = append(other, "--"+fl.Name)
			}
		})
		if len(other) > 0 {
			return usage(fmt.Sprintf("preview takes --zone, --start, --end, --count and -n; not %s", strings.Join(other, ", ")))
		}
		return e.previewSpec(pos[1], f)
	}
	var sc shard.Schedule
	if op == "set" && *f.file == "" {
		if sc, err = f.schedule(pos[1], pos[2]); err != nil {
			return e.fail("schedule", err)
		}
	}
	p, done, err := e.producer(ctx, readOnce)
	if err != nil {
		return e.fail("schedule", err)
	}
	defer done()
	st := p.Store()
	switch op {
	case "list":
		return e.listSchedules(ctx, st, *f.asJSON)
	case "show":
		info, err := st.ScheduleInfo(ctx, pos[1])
		if err != nil {
			return e.fail("schedule", err)
		}
		return e.showSchedule(info, *f.n, *f.asJSON)
	case "set":
		if *f.file != "" {
			return e.setSchedulesFromFile(ctx, p, *f.file)
		}
		info, err := p.UpsertSchedule(ctx, sc)
		e.auditSchedule("set", sc.Name+": "+sc.Spec+" "+sc.Zone, err)
		if err != nil {
			return e.fail("schedule", err)
		}
		return e.showSchedule(info, *f.n, *f.asJSON)
	}
	var info shard.ScheduleInfo
	switch op {
	case "pause":
		info, err = st.PauseSchedule(ctx, pos[1])
	case "resume":
		info, err = st.ResumeSchedule(ctx, pos[1])
	case "delete":
		err = st.DeleteSchedule(ctx, pos[1])
	}
	e.auditSchedule(op, pos[1], err)
	if err != nil {
		return e.fail("schedule", err)
	}
	if op == "delete" {
		fmt.Fprintf(e.stdout, "%s: deleted\n", pos[1])
		return exitOK
	}
	return e.showSchedule(info, *f.n, *f.asJSON)
}

func (e *env) auditSchedule(op, target string, err error) {
	e.log.Info("audit", zap.String("via", "cli"), zap.String("action", "schedule "+op), zap.String("target", target),
		zap.String("result", resultOf(err)))
}

// schedule builds the schedule the flags describe.
func (f scheduleFlags) schedule(name, spec string) (shard.Schedule, error) {
	sc := shard.Schedule{Name: name, Spec: spec, Zone: *f.zone, Count: *f.count, Missed: *f.missed, Grace: *f.grace,
		CatchUp: *f.catchUp, Message: shard.Message{Topic: *f.topic, Exchange: *f.exchange, RoutingKey: *f.routingKey,
			Body: []byte(*f.body), ContentType: *f.contentType, MaxLateness: *f.maxLateness}}
	now := time.Now()
	var err error
	if *f.start != "" {
		if sc.Start, err = shard.ParseWindowEnd("start", *f.start, now); err != nil {
			return sc, err
		}
	}
	if *f.end != "" {
		if sc.End, err = shard.ParseWindowEnd("end", *f.end, now); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// setSchedulesFromFile sets each schedule of a JSON Lines file; a bad
// line is reported with its number and the others are set.
func (e *env) setSchedulesFromFile(ctx context.Context, p *shard.Producer, path string) int {
	var r io.Reader = e.stdin
	if path != "-" {
		fh, err := os.Open(path)
		if err != nil {
			return e.fail("schedule", err)
		}
		defer fh.Close()
		r = fh
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	line, set, bad := 0, 0, 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		if len(raw) == 0 {
			continue
		}
		s, err := shard.ParseScheduleJSON(raw)
		if err != nil {
			bad++
			fmt.Fprintf(e.stderr, "delayq schedule: %s line %d: %v\n", path, line, err)
			continue
		}
		_, err = p.UpsertSchedule(ctx, s)
		e.auditSchedule("set", s.Name+": "+s.Spec+" "+s.Zone, err)
		if err != nil {
			bad++
			fmt.Fprintf(e.stderr, "delayq schedule: %s line %d: %v\n", path, line, err)
			if !errors.Is(err, shard.ErrInvalid) {
				return exitFail // Redis failed: stop; run it again to finish
			}
			continue
		}
		set++
	}
	if err := sc.Err(); err != nil {
		return e.fail("schedule", fmt.Errorf("%s line %d: %w", path, line+1, err))
	}
	fmt.Fprintf(e.stdout, "%d schedule(s) set, %d line(s) refused\n", set, bad)
	if bad > 0 {
		return exitFail
	}
	return exitOK
}

func (e *env) listSchedules(ctx context.Context, st *shard.Store, asJSON bool) int {
	infos, err := st.Schedules(ctx)
	if err != nil {
		return e.fail("schedule", err)
	}
	if asJSON {
		out := make([]httpapi.Schedule, len(infos))
		for j, info := range infos {
			out[j] = httpapi.ScheduleOf(info)
		}
		return writeJSON(e, out)
	}
	if len(infos) == 0 {
		fmt.Fprintln(e.stdout, "no schedules")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tspec\tzone\tnext (UTC)\tnext (zone)\tlast (UTC)\tfired\tskipped\t")
	for _, info := range infos {
		v := httpapi.ScheduleOf(info)
		next, local := v.Next, v.NextLocal
		if info.Paused {
			next, local = "paused", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", v.Name, v.Spec, v.Zone, orDash(next), orDash(local), orDash(v.Last), v.Fired, v.Skipped)
	}
	_ = tw.Flush()
	return exitOK
}

// showSchedule prints one schedule and its next n occurrences.
func (e *env) showSchedule(info shard.ScheduleInfo, n int, asJSON bool) int {
	v := httpapi.ScheduleOf(info)
	if asJSON {
		return writeJSON(e, v)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	dest := v.Message.Topic
	if dest == "" {
		dest = v.Message.Exchange + " / " + v.Message.RoutingKey
	}
	state := "running"
	if info.Paused {
		state = "paused"
	}
	for _, kv := range [][2]string{{"name", v.Name}, {"spec", v.Spec}, {"zone", v.Zone}, {"state", state},
		{"publishes to", dest}, {"missed runs", fmt.Sprintf("%s (grace %s)", v.Missed, time.Duration(v.GraceMs)*time.Millisecond)},
		{"last (UTC)", orDash(v.Last)}, {"fired, skipped", fmt.Sprintf("%d, %d", v.Fired, v.Skipped)}, {"version", fmt.Sprint(v.Version)}} {
		fmt.Fprintf(tw, "%s:\t%s\t\n", kv[0], kv[1])
	}
	_ = tw.Flush()
	if info.Paused || info.Next.IsZero() {
		return exitOK
	}
	ts, err := info.Preview(info.Next.Add(-time.Millisecond), n)
	if err != nil {
		return e.fail("schedule", err)
	}
	e.printOccurrences(info.Name, info.Zone, ts)
	return exitOK
}

// previewFlags are the flags preview honours.
var previewFlags = map[string]bool{"zone": true, "start": true, "end": true, "count": true, "n": true}

// previewSpec prints the next occurrences of a spec as a schedule with
// f's zone, start, end and count would have them (-n of them at most),
// without Redis: from --start on when it is given (@every counts from
// it), else from now.
func (e *env) previewSpec(spec string, f scheduleFlags) int {
	now := time.Now()
	anchor, end := now, time.Time{}
	from := now
	var err error
	if *f.start != "" {
		if anchor, err = shard.ParseWindowEnd("start", *f.start, now); err != nil {
			return e.fail("schedule", err)
		}
		from = anchor.Add(-time.Millisecond) // an occurrence at the start is one
	}
	if *f.end != "" {
		if end, err = shard.ParseWindowEnd("end", *f.end, now); err != nil {
			return e.fail("schedule", err)
		}
	}
	n := *f.n
	if *f.count > 0 {
		n = min(n, *f.count)
	}
	ts, err := shard.PreviewSpec(spec, *f.zone, anchor, end, from, n)
	if err != nil {
		return e.fail("schedule", err)
	}
	e.printOccurrences("", *f.zone, ts)
	return exitOK
}

func (e *env) printOccurrences(name, zone string, ts []time.Time) {
	loc, _ := schedule.LoadZone(zone)
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	head := "next\tUTC\tin " + loc.String() + "\t"
	if name != "" {
		head += "message id\t"
	}
	fmt.Fprintln(tw, head)
	for j, t := range ts {
		row := fmt.Sprintf("%d\t%s\t%s\t", j+1, t.UTC().Format(time.RFC3339), t.In(loc).Format("2006-01-02 15:04:05 MST (-07:00)"))
		if name != "" {
			row += shard.OccurrenceID(name, t) + "\t"
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
}
