// Command delayq-bench measures delayq against the physical limits of the
// machine it runs on, in the same run: it starts its own Redis and
// RabbitMQ on loopback, measures the ceilings (the claim script alone, a
// bare amqp091-go publisher with confirms), then runs delayq's scanners
// (the real binary) through the scenarios of scripts/bench.sh and prints
// every machine-dependent figure as a ratio to a ceiling, with PASS/FAIL
// against the targets, plus a JSON file.
//
// Run it through scripts/bench.sh; -quick shrinks every scenario for a
// smoke run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

type config struct {
	delayq      string
	out         string
	quick       bool
	steadyFor   time.Duration
	idleFor     time.Duration
	burst       int
	memory      int
	far         int
	backlog     int
	ceilingMsgs int
	batches     []int
	scanners    []int
	loads       []float64
	fixedLimit  float64 // when > 0, the steady runs' limit instead of (c)
	goroutines  int
	rounds      int             // saturated drains per claim batch, each between two ceiling measurements
	only        map[string]bool // scenarios to run; empty: all

	consolePending int
	schedules      int      // recurring schedules of the schedules scenario
	profileDir     string   // when set, the steady and saturated runs save the scanners' profiles and Redis's stats there
	scannerEnv     []string // extra environment of every scanner process (NAME=value)
	before         string   // the flow scenario's A/B: the delayq binary built before flow control
}

func main() {
	var c config
	var batches, scanners, loads, only string
	flag.StringVar(&c.delayq, "delayq", "bin/delayq", "path of the delayq binary")
	flag.StringVar(&c.out, "out", "bench.json", "JSON results file")
	flag.BoolVar(&c.quick, "quick", false, "small sizes: a smoke run of every scenario")
	flag.DurationVar(&c.steadyFor, "steady", 10*time.Second, "length of each steady-load run")
	flag.DurationVar(&c.idleFor, "idle", 60*time.Second, "length of the idle measurement")
	flag.IntVar(&c.burst, "burst", 1_000_000, "messages due at the same millisecond in the burst")
	flag.IntVar(&c.memory, "memory", 1_000_000, "pending messages for the memory measurement")
	flag.IntVar(&c.far, "far", 300_000, "far messages promoted during the far scenario's steady run")
	flag.StringVar(&c.profileDir, "profile", "", "steady and saturated runs: save each scanner's CPU and block profiles over the stationary window "+
		"(the first 2 s of a drain), and Redis's commandstats and latency events, in this directory")
	flag.IntVar(&c.consolePending, "console-pending", 10_000_000, "pending messages (over 256 shards) behind the console and API timings")
	flag.IntVar(&c.schedules, "schedules", 100_000, "recurring schedules firing every minute in the schedules scenario")
	flag.IntVar(&c.backlog, "backlog", 60_000, "messages of the saturated-dispatch runs")
	flag.IntVar(&c.rounds, "rounds", 3, "saturated drains per claim batch, each compared with the ceilings measured right before and right after it; the median decides")
	flag.IntVar(&c.ceilingMsgs, "ceiling", 100_000, "messages per ceiling measurement")
	flag.StringVar(&batches, "batches", "1,8,32", "claim batch sizes to compare (the first must be 1)")
	flag.StringVar(&scanners, "scanners", "1,2,3", "scanner process counts for the steady runs")
	flag.StringVar(&loads, "loads", "0.3,0.5", "steady loads, as fractions of the shared-core limit (d)")
	flag.Float64Var(&c.fixedLimit, "limit", 0, "steady runs: use this many msg/s as the limit instead of (d) measured "+
		"next to them, to compare two builds at the same rates (the host's speed drifts)")
	flag.IntVar(&c.goroutines, "goroutines", 128, "goroutines per scanner process (the idle scenario always uses 32)")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run (saturated,steady,burst,idle,memory,far,bulk,ingress,console,flow,schedules,tracing,quota,fair,export,move; ab, with -before, only when named); "+
		"the ceilings always run; burst takes its k from saturated (1 and the best), or all of -batches without it; steady runs every k of -batches")
	var scannerEnv string
	flag.StringVar(&c.before, "before", "", "flow, tracing and ab scenarios: a delayq binary of another build (the one before a change or feature), for the A/B "+
		"(scripts/bench.sh builds it from BEFORE=<git revision>)")
	flag.StringVar(&scannerEnv, "scanner-env", "", "comma-separated NAME=value pairs added to every scanner's environment "+
		"(to compare settings: -scanner-env GOMAXPROCS=1,DELAYQ_GOROUTINES=64)")
	flag.Parse()
	for _, kv := range strings.Split(scannerEnv, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			if !strings.Contains(kv, "=") {
				fmt.Fprintf(os.Stderr, "-scanner-env: %q is not NAME=value\n", kv)
				os.Exit(2)
			}
			c.scannerEnv = append(c.scannerEnv, kv)
		}
	}
	c.batches, c.scanners = ints(batches), ints(scanners)
	for _, f := range strings.Split(loads, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "-loads: %q is not a positive fraction\n", f)
			os.Exit(2)
		}
		c.loads = append(c.loads, v)
	}
	if only != "" {
		c.only = map[string]bool{}
		for _, name := range strings.Split(only, ",") {
			c.only[strings.TrimSpace(name)] = true
		}
	}
	if c.quick {
		c.steadyFor, c.idleFor = 6*time.Second, 10*time.Second
		c.burst, c.memory, c.backlog, c.ceilingMsgs = 30_000, 50_000, 10_000, 20_000
		c.far = 50_000
		c.consolePending = 200_000
		c.schedules = 10_000
		c.scanners = []int{1, 2}
		explicit := false // an explicit -rounds still counts
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rounds" })
		if !explicit {
			c.rounds = 1
		}
	}
	c.rounds = max(c.rounds, 1)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "delayq-bench: -profile:", err)
			os.Exit(2)
		}
	}
	r, err := run(ctx, c)
	if r != nil {
		r.print(os.Stdout)
		if b, jerr := json.MarshalIndent(r, "", "  "); jerr == nil {
			_ = os.WriteFile(c.out, append(b, '\n'), 0o644)
			fmt.Printf("\nresults written to %s\n", c.out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayq-bench:", err)
		os.Exit(1)
	}
}

// percents prints fractions as whole percents: "87% 92% 90%".
func percents(xs []float64) string {
	each := make([]string, len(xs))
	for i, x := range xs {
		each[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return strings.Join(each, " ")
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// results is everything the benchmark measured.
type results struct {
	Machine   string            `json:"machine"`
	Started   time.Time         `json:"started"`
	Ceilings  ceilings          `json:"ceilings"`
	Saturated []saturatedResult `json:"saturated"`
	Steady    []steadyResult    `json:"steady"`
	Burst     []burstResult     `json:"burst"`
	Idle      *idleResult       `json:"idle,omitempty"`
	Memory    *memoryResult     `json:"memory,omitempty"`
	// FarLateness: a steady load with and without far buckets promoted.
	FarLateness *farLatenessResult `json:"far_lateness,omitempty"`
	Bulk        *bulkResult        `json:"bulk,omitempty"`
	Ingress     *ingressResult     `json:"ingress,omitempty"`
	Console     *consoleResult     `json:"console,omitempty"`
	Flow        *flowResult        `json:"flow,omitempty"`
	Schedules   *schedulesResult   `json:"schedules,omitempty"`
	Tracing     *tracingResult     `json:"tracing,omitempty"`
	Quota       *quotaResult       `json:"quota,omitempty"`
	Fair        *fairResult        `json:"fair,omitempty"`
	Export      *exportResult      `json:"export,omitempty"`
	Move        *moveResult        `json:"move,omitempty"`
	AB          *abResult          `json:"ab,omitempty"`
	Targets     []target           `json:"targets"`
	Notes       []string           `json:"notes,omitempty"`
}

type target struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Target string `json:"target"`
	Pass   bool   `json:"pass"`
}

func (r *results) check(name string, pass bool, value, want string) {
	r.Targets = append(r.Targets, target{Name: name, Value: value, Target: want, Pass: pass})
}

func (r *results) print(w *os.File) {
	fmt.Fprintf(w, "\ndelayq-bench on %s, %s\n", r.Machine, r.Started.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	c := r.Ceilings
	fmt.Fprintln(tw, "\nCEILINGS (same run)\tmsg/s\t")
	for _, k := range c.ClaimBatches {
		fmt.Fprintf(tw, "(a) claim script alone, k=%d, %d clients\t%.0f\t\n", k.Batch, c.Clients, k.Rate)
	}
	for _, p := range c.AMQPWindows {
		fmt.Fprintf(tw, "(b) bare amqp091-go, %d channels, confirm window %d\t%.0f\t\n", c.Channels, p.Window, p.Rate)
	}
	for _, k := range c.ClaimBatches {
		fmt.Fprintf(tw, "(c) pipeline limit, k=%d\t%.0f\t\n", k.Batch, c.limit(k.Batch))
	}
	for _, k := range c.ClaimBatches {
		fmt.Fprintf(tw, "(d) shared-core limit, k=%d: %d cores / CPU per message of (a)+(b)\t%.0f\t\n", k.Batch, runtime.NumCPU(), c.sharedLimit(k.Batch))
	}
	fmt.Fprintln(tw, "\nCPU PER MESSAGE\t\t")
	for _, k := range c.ClaimBatches {
		fmt.Fprintf(tw, "(a) k=%d\t%s\t\n", k.Batch, k.CPU)
	}
	for _, p := range c.AMQPWindows {
		fmt.Fprintf(tw, "(b) window %d\t%s\t\n", p.Window, p.CPU)
	}
	for _, s := range r.Saturated {
		fmt.Fprintf(tw, "saturated k=%d\t%s\t\n", s.Batch, s.CPU)
	}
	for _, b := range r.Burst {
		fmt.Fprintf(tw, "burst k=%d\t%s\t\n", b.Batch, b.CPU)
	}
	fmt.Fprintln(tw, "\nSATURATED DISPATCH (backlog all due; limits measured right before and after; the median round)\tmsg/s\tlimit (c)\tof (c)\tlimit (d)\tof (d)\tevery round, of (d)\t")
	for _, s := range r.Saturated {
		var each []float64
		for _, r := range s.Rounds {
			each = append(each, r.OfShared)
		}
		fmt.Fprintf(tw, "k=%d, %d scanner(s), %d msgs\t%.0f\t%.0f\t%.0f%%\t%.0f\t%.0f%%\t%s\t\n", s.Batch, s.Scanners, s.Messages, s.Rate,
			s.Limit, 100*s.OfLimit, s.Shared, 100*s.OfShared, percents(each))
	}
	fmt.Fprintln(tw, "\nSTEADY LOAD (open loop, due 1-5 s later; load as a fraction of (d), or of -limit)\tof (d) after\tdispatch msg/s\tp50\tp99\tp99.9\tmax\tearly\tbacklog\tclaim p50\tclaim p99\tcores busy\tthreads waiting for a CPU\t")
	for _, s := range r.Steady {
		busy, waiting := "-", "-"
		if s.CPU != nil {
			busy = fmt.Sprintf("%.2f of %d", s.CPU.TotalBusy, runtime.NumCPU())
			waiting = fmt.Sprintf("%.2f", s.CPU.Waiting)
		}
		fmt.Fprintf(tw, "k=%d, %d scanner(s), %.0f%% of limit (%.0f/s)\t%.0f%%\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t<=%s\t<=%s\t%s\t%s\t\n", s.Batch, s.Scanners,
			100*s.Load, s.Rate, 100*s.OfSharedAfter, s.Dispatch, ms(s.P50), ms(s.P99), ms(s.P999), ms(s.Max), s.Early, s.Missing, ms(s.ClaimP50), ms(s.ClaimP99), busy, waiting)
	}
	if len(r.Burst) > 0 {
		fmt.Fprintln(tw, "\nBURST (all due at one millisecond)\tdrain msg/s\tsaturated just before\tof saturated\tdrain time\tslowest cmd\tcmds > 5 ms\tof all cmds\t")
		for _, b := range r.Burst {
			fmt.Fprintf(tw, "k=%d, %d msgs, %d scanner(s)\t%.0f\t%.0f\t%.0f%%\t%s\t%s\t%d\t%d\t\n", b.Batch, b.Messages, b.Scanners, b.Rate,
				b.Saturated, 100*b.OfSaturated, b.Drain.Round(100*time.Millisecond), time.Duration(b.SlowestMicros)*time.Microsecond, b.SlowOver5ms, b.Commands)
		}
	}
	for _, b := range r.Burst {
		for _, c := range b.SlowCommands {
			fmt.Fprintf(tw, "  slow, k=%d: %s\t\t\n", b.Batch, c)
		}
		if b.Descheduled > 0 {
			fmt.Fprintf(tw, "  k=%d: %d of the slow entries are O(1) commands (e.g. HGET): the Redis thread waited for a CPU\t\t\n", b.Batch, b.Descheduled)
		}
	}
	if i := r.Idle; i != nil {
		fmt.Fprintln(tw, "\nIDLE\t\t")
		fmt.Fprintf(tw, "M=%d, %d scanners x %d goroutines, %s\t%.1f Redis cmd/s (%.2f per shard)\tscanner CPU %.2f%% of a core (max)\t\n",
			i.Shards, i.Scanners, i.Goroutines, i.Duration, i.CommandsPerSec, i.CommandsPerSec/float64(i.Shards), i.MaxCPUPercent)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintln(tw, "\nMEMORY\t\t")
		fmt.Fprintf(tw, "%d pending, %d-byte bodies, ids up to %d bytes\t%.0f bytes each (body + id + %.0f)\t\n", m.Messages, m.BodyBytes, m.IDBytes,
			m.BytesPerMessage, m.BytesPerMessage-float64(m.BodyBytes+m.IDBytes))
		fmt.Fprintf(tw, "MEMORY USAGE per message: due ZSET, msg hash (envelope)\t%.0f, %.0f (%.0f)\t\n", m.DueBytes, m.MsgBytes, m.EnvelopeBytes)
	}
	if f := r.FarLateness; f != nil {
		fmt.Fprintf(tw, "\nFAR TIER (the same steady near load twice, k=%d, 2 scanners; %d far messages promoted during the second)\tnear msg/s\tp50 / p99 / max lateness\tCPU a message\t\n",
			f.With.Batch, f.Promoted)
		for _, row := range []struct {
			name string
			s    steadyResult
		}{{"without promotion", f.Without}, {"while far buckets are promoted", f.With}} {
			cpu := "-"
			if row.s.CPU != nil {
				cpu = fmt.Sprintf("%.1f µs", row.s.CPU.TotalBusy*1e6/row.s.Dispatch)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s / %s / %s\t%s\t\n", row.name, row.s.Dispatch, ms(row.s.P50), ms(row.s.P99), ms(row.s.Max), cpu)
		}
		fmt.Fprintf(tw, "far placement before the run\t%.0f/s\t\t\t\n", f.FillRate)
	}
	if m := r.Move; m != nil && len(m.Without) > 0 {
		fmt.Fprintf(tw, "\nLIVE MOVE (a steady load, k=%d, 2 scanners, with %d messages due in an hour waiting; in turn %d times: alone, while delayq move takes them to another namespace of the same Redis (median %s), and while it does so at --rate %.0f; medians)\tmsg/s\tp50 / p99 / max lateness\tCPU a message\t\n",
			m.Without[0].Batch, m.Backlog, len(m.Without), median(m.MovedIn).Round(time.Millisecond), m.Rate)
		for _, row := range []struct {
			name string
			s    []steadyResult
		}{{"alone", m.Without}, {"while delayq move runs", m.With}, {fmt.Sprintf("while delayq move --rate %.0f runs", m.Rate), m.WithPaced}} {
			var rate, cpu []float64
			var p50, p99, mx []time.Duration
			for _, s := range row.s {
				rate, p50, p99, mx = append(rate, s.Dispatch), append(p50, s.P50), append(p99, s.P99), append(mx, s.Max)
				if s.CPU != nil {
					cpu = append(cpu, s.CPU.TotalBusy*1e6/s.Dispatch)
				}
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s / %s / %s\t%.1f µs\t\n", row.name, median(rate), ms(median(p50)), ms(median(p99)), ms(median(mx)), median(cpu))
		}
	}
	if f := r.Flow; f != nil && len(f.Stages) > 0 {
		fmt.Fprintf(tw, "\nFLOW CONTROL (an unlimited topic at %.0f/s, 2 scanners, k=1; beside it a topic with %.0f/s of work)\tp99 at the consumer, each round\tclaims' p99 (<= bucket)\tconfirm p99 (<= bucket)\t\n",
			f.UnlimitedRate, f.Limit)
		for _, name := range []string{"alone", "beside the same load unlimited", "beside a limited backlog due at one instant", "beside the limited drain"} {
			var p99, claim, confirm []string
			for _, st := range f.Stages[name] {
				p99, claim, confirm = append(p99, ms(st.Consumer)), append(claim, ms(st.Claim)), append(confirm, ms(st.Confirm))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, strings.Join(p99, " "), strings.Join(claim, " "), strings.Join(confirm, " "))
		}
	}
	if sc := r.Schedules; sc != nil && sc.CPU != nil && sc.CPUOneOff != nil {
		fmt.Fprintf(tw, "\nRECURRING SCHEDULES (%d firing every %s, %.0f/s, 2 scanners, k=1; one-offs at the same rate)\tper occurrence\tper one-off\tratio\t\n",
			sc.Schedules, sc.Every, sc.Rate)
		fmt.Fprintf(tw, "CPU of the whole machine (µs)\t%.1f\t%.1f\t%.2f\t\n", sc.CPU.TotalBusy*sc.Window.Seconds()*1e6/float64(sc.Occurrences),
			sc.CPUOneOff.TotalBusy*sc.Window.Seconds()*1e6/float64(sc.OneOffs), sc.CPURatio)
		fmt.Fprintf(tw, "Redis commands (scripts' calls included)\t%.1f\t%.1f\t%.2f\t\n", sc.Cmds, sc.CmdsOneOff, sc.CmdsRatio)
		fmt.Fprintf(tw, "lateness p50 / p99 / max\t%s / %s / %s\tp99 %s\t\t\n", ms(sc.P50), ms(sc.P99), ms(sc.Max), ms(sc.OneOffP99))
		fmt.Fprintf(tw, "created in\t%s\t\t\t\n", sc.Created.Round(time.Millisecond))
	}
	if tr := r.Tracing; tr != nil && len(tr.On) > 0 {
		fmt.Fprintln(tw, "\nTRACING (saturated dispatch, k=1, one scanner; each round in turn)\tmsg/s, each round\tCPU a message (machine, median)\t")
		fmt.Fprintf(tw, "off\t%s\t%.1f µs\t\n", rates(tr.OffA), tr.UsOff)
		if len(tr.OffB) > 0 {
			fmt.Fprintf(tw, "off, the build before\t%s\t\t\n", rates(tr.OffB))
		}
		fmt.Fprintf(tw, "on, every message sampled and exported (OTLP/HTTP)\t%s\t%.1f µs (+%.1f)\t\n", rates(tr.On), tr.UsOn, tr.UsOn-tr.UsOff)
	}
	if bk := r.Bulk; bk != nil {
		fmt.Fprintln(tw, "\nBULK CANCEL (by id prefix)\t\t")
		fmt.Fprintf(tw, "%d of %d pending: dry run, cancel\t%.2f s, %.2f s (%.0f cancelled/s, %.0f entries read/s)\t\n",
			bk.Matched, bk.Messages, bk.DryRun, bk.Cancel, bk.PerSec, bk.ScanPerS)
		fmt.Fprintf(tw, "Redis commands over 5 ms meanwhile\t%d\t\n", bk.SlowOver5)
	}
	if in := r.Ingress; in != nil {
		fmt.Fprintln(tw, "\nAMQP INGRESS (queue → Redis, one scanner)\tmsg/s\tof the lower ceiling\t")
		fmt.Fprintf(tw, "(i) bare amqp091-go consume + multiple ack, prefetch %d\t%.0f\t\t\n", in.Prefetch, in.ConsumeAck)
		fmt.Fprintf(tw, "(ii) bare EnqueueBatch, one goroutine, batches of %d\t%.0f\t\t\n", max(1, in.Prefetch/2), in.EnqueueBatch)
		fmt.Fprintf(tw, "(iii) shared-core limit: %d cores / CPU per message of (i)+(ii)\t%.0f\t\t\n", runtime.NumCPU(), in.Shared)
		fmt.Fprintf(tw, "ingress, %d messages (the median of %d runs)\t%.0f\t%.0f%% of (i, ii); %.0f%% of (iii)\t\n", in.Messages, max(len(in.Runs), 1), in.Rate, 100*in.OfLower, 100*in.OfShared)
		fmt.Fprintf(tw, "every run, of the lower ceiling\t%s\t\t\n", percents(in.Runs))
		fmt.Fprintf(tw, "CPU per message: (i)\t%s\t\t\n", in.ConsumeAckCPU)
		fmt.Fprintf(tw, "CPU per message: (ii)\t%s\t\t\n", in.EnqueueBatchCPU)
		fmt.Fprintf(tw, "CPU per message: ingress\t%s\t\t\n", in.CPU)
	}
	if c := r.Console; c != nil {
		fmt.Fprintf(tw, "\nCONSOLE AND API (M=%d, %d pending, %d requests each)\tp50\tp99\tmax\t\n", c.Shards, c.Pending, c.Requests)
		for _, e := range c.Endpoints {
			fmt.Fprintf(tw, "GET %s\t%s\t%s\t%s\t\n", e.Path, ms(e.P50), ms(e.P99), ms(e.Max))
		}
	}
	fmt.Fprintln(tw, "\nTARGETS\tvalue\ttarget\t")
	for _, t := range r.Targets {
		res := "PASS"
		if !t.Pass {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t\n", res, t.Name, t.Value, t.Target)
	}
	_ = tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func ms(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
	return d.Round(10 * time.Millisecond).String()
}

// rates prints msg/s figures.
func rates(xs []float64) string {
	out := make([]string, len(xs))
	for j, x := range xs {
		out[j] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(out, " ")
}
