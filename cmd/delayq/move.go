package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/ingress"
)

func moveCommand() command {
	return command{name: "move", args: "--to-redis ADDRS [--to-namespace NS] [--to-shards M] [--keep 30s] [--rate N] [--passes N]",
		summary: "move the scheduled messages, schedules, dead and settings to another Redis or namespace while both fleets run", run: runMove,
		flags: func() *flag.FlagSet { fs, _ := moveFlags(); return fs }}
}

type moveOpts struct {
	toRedis, toNamespace string
	toShards, passes     int
	keep                 time.Duration
	rate                 float64
}

func moveFlags() (*flag.FlagSet, *moveOpts) {
	o := &moveOpts{}
	fs := flag.NewFlagSet("move", flag.ContinueOnError)
	fs.StringVar(&o.toRedis, "to-redis", "", "the target Redis: host:port, or several (comma-separated) for a cluster")
	fs.StringVar(&o.toNamespace, "to-namespace", "", "the target namespace (default: the same)")
	fs.IntVar(&o.toShards, "to-shards", 0, "M of the target (default: the source's); the target's fleet and producers must use it")
	fs.DurationVar(&o.keep, "keep", 30*time.Second, "leave what falls due within this to the source's fleet (at least 5s)")
	fs.IntVar(&o.passes, "passes", 0, "stop after this many passes over the shards (default: once a pass moves nothing)")
	fs.Float64Var(&o.rate, "rate", 0, "copy at most this many messages a second, to spare the source's fleet (default: as fast as it goes)")
	return fs, o
}

// movePage is how many messages one batch of the move copies (at most).
const movePage = 500

// pacedPage is the batch of a move paced at rate messages a second:
// twenty batches a second, from 50 to movePage. A batch's removal is one
// script call on the source, which holds its Redis for a moment: smaller
// batches spread that over the second.
func pacedPage(rate float64) int {
	return min(max(int(rate/20), 50), movePage)
}

// runMove moves every scheduled message of the source (DELAYQ_*) due
// later than --keep to the target, a batch at a time (shard.MovePage, then
// shard.MoveFar for the far tier), pass after pass over the shards until a
// pass moves nothing: copied, then removed from the source only if
// unchanged meanwhile, so each message is live on one side. Then it hands
// the recurring schedules over (shard.MoveSchedules) and moves the dead
// messages (shard.MoveDeadPage). The namespace's settings go around them:
// flows, classes and the far tier's before (shard.MoveSettings), quotas
// after (shard.MoveQuotas). The target's fleet must be running: what
// moves is published there. It refuses, before anything is copied, a
// target whose policy can evict or which is full, and one whose namespace
// records another M.
func runMove(ctx context.Context, e *env, args []string) int {
	fs, o := moveFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil {
		return exitUsage
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "delayq move: %s\nusage: delayq move %s\n", msg, moveCommand().args)
		return exitUsage
	}
	switch {
	case len(pos) > 0:
		return usage(fmt.Sprintf("unexpected argument %q", pos[0]))
	case o.toRedis == "":
		return usage("--to-redis is required")
	case o.keep < 5*time.Second:
		return usage(fmt.Sprintf("--keep %s: want at least 5s (a batch must end well before anything it copies falls due)", o.keep))
	case o.toShards < 0 || o.passes < 0 || o.rate < 0:
		return usage("--to-shards, --passes and --rate are 0 or more")
	}
	rdb, src, err := e.connect(ctx)
	if err != nil {
		return e.fail("move", err)
	}
	defer rdb.Close()
	n, err := e.allShards(ctx, src)
	if err != nil {
		return e.fail("move", err)
	}
	tcfg := e.cfg
	tcfg.RedisAddrs = strings.Split(o.toRedis, ",")
	tcfg.RedisSentinel, tcfg.RedisWait = "", 0
	if o.toNamespace != "" {
		tcfg.Namespace = o.toNamespace
	}
	if tcfg.Namespace == e.cfg.Namespace && o.toRedis == strings.Join(e.cfg.RedisAddrs, ",") {
		return usage("the target is the source: give another --to-redis or --to-namespace")
	}
	trdb, err := newRedis(tcfg)
	if err != nil {
		return e.fail("move", err)
	}
	defer trdb.Close()
	if err := pingRedis(ctx, trdb, tcfg); err != nil {
		return e.fail("move", fmt.Errorf("the target: %w", err))
	}
	dst, err := shard.NewStore(trdb, tcfg.Namespace)
	if err != nil {
		return e.fail("move", err)
	}
	servers, err := dst.RedisServers(ctx)
	if err == nil {
		_, err = shard.CheckRedis(servers, false)
	}
	for _, r := range servers {
		if u := r.MemoryUsed(); err == nil && u > shard.MemoryHeadroom {
			err = fmt.Errorf("redis %s is full: used_memory is %.0f %% of maxmemory (over %.0f %%); give it more memory before moving messages there",
				r.Addr, 100*u, 100*shard.MemoryHeadroom)
		}
	}
	if err != nil {
		return e.fail("move", fmt.Errorf("the target refuses: %w", err))
	}
	m := o.toShards
	if m == 0 {
		consul, err := newConsul(e.cfg)
		if err == nil {
			m, _, _, err = e.currentM(ctx, consul)
		}
		if err == nil && m <= 0 {
			err = fmt.Errorf("the source's M is unknown: give --to-shards")
		}
		if err != nil {
			return e.fail("move", err)
		}
	}
	lay, err := dst.ReadLayout(ctx)
	if err != nil {
		return e.fail("move", err)
	}
	// The target's M: the one from its Consul, else the one its producers
	// and fleet pinned (a namespace settled after a resize records one).
	theirs := lay.M
	if theirs == 0 && len(lay.Used) > 0 && !slices.Contains(lay.Used, m) {
		theirs = lay.Used[len(lay.Used)-1]
	}
	if theirs > 0 && theirs != m {
		return e.fail("move", fmt.Errorf("the target namespace %s uses M = %d, not %d: give --to-shards %d, or the target's fleet this M",
			tcfg.Namespace, theirs, m, theirs))
	}
	to := shard.NewProducer(dst, balance.Static(m), shard.ProducerOptions{MaxBody: e.cfg.MaxBody})
	mo := shard.MoveOptions{Keep: o.keep}
	crash, err := crashPoint()
	if err != nil {
		return e.fail("move", err)
	}
	if crash != nil {
		mo.AtStep = func(step string) { crash(ingress.Step(step)) }
	}
	page := movePage
	if o.rate > 0 {
		mo.Pace, page = pacer(o.rate), pacedPage(o.rate)
	}
	var total shard.MoveResult
	settingsLeft := 0
	settings := func(what string, r shard.SettingsMoved, err error) error {
		for _, l := range r.Left {
			fmt.Fprintf(e.stderr, "delayq move: %s not copied: %v\n", what, l)
		}
		settingsLeft += len(r.Left)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: copied %d", what, len(r.Copied))
		if len(r.Copied) > 0 {
			fmt.Fprintf(e.stdout, " (%s)", strings.Join(r.Copied, ", "))
		}
		fmt.Fprintf(e.stdout, ", the target's own kept %d", len(r.There))
		if len(r.There) > 0 {
			fmt.Fprintf(e.stdout, " (%s)", strings.Join(r.There, ", "))
		}
		fmt.Fprintln(e.stdout)
		return nil
	}
	// Flows, classes and the far tier's settings before the messages (none
	// refuses a message); quotas after them (see shard.MoveQuotas).
	if r, err := src.MoveSettings(ctx, dst); settings("settings", r, err) != nil {
		return e.fail("move", err)
	}
	// A page of dead messages a killed move copied: settled before any
	// message moves, so that one redriven on the source since goes over
	// as scheduled instead of meeting its dead copy there.
	var dr shard.StateMoveResult
	if dr, err = src.SettleDeadJournals(ctx, n, to); err != nil {
		return e.fail("move", err)
	}
	var bar *progress
	if isTerminal(e.stderr) {
		bar = &progress{w: e.stderr, start: time.Now(), noun: "moved"}
	}
	occurrences := 0 // of the last pass: each pass sees the same ones
	for pass := 1; o.passes == 0 || pass <= o.passes; pass++ {
		moved := 0
		occurrences = 0
		add := func(r shard.MoveResult, err error) error {
			moved += r.Moved + r.There
			occurrences += r.Occurrences
			total.Read, total.Moved, total.There, total.Changed = total.Read+r.Read, total.Moved+r.Moved, total.There+r.There, total.Changed+r.Changed
			for _, l := range r.Left {
				if bar != nil {
					bar.done()
				}
				fmt.Fprintf(e.stderr, "delayq move: left on the source: %v\n", l)
			}
			total.Left = append(total.Left, r.Left...)
			if err != nil {
				if bar != nil {
					bar.done()
				}
				fmt.Fprintf(e.stdout, "moved %d, there already %d, changed meanwhile %d before the error; run it again to go on\n",
					total.Moved, total.There, total.Changed)
				return err
			}
			if bar != nil {
				bar.update(total.Moved+total.There, 0)
			}
			return nil
		}
		for i := range n {
			cur := shard.ListCursor{}
			for more := true; more; {
				var r shard.MoveResult
				r, cur, more, err = src.MovePage(ctx, i, cur, page, to, mo)
				if err := add(r, err); err != nil {
					return e.fail("move", err)
				}
			}
			if err := add(src.MoveFar(ctx, i, page, to, mo)); err != nil {
				return e.fail("move", err)
			}
		}
		if bar != nil {
			bar.done()
		}
		fmt.Fprintf(e.stdout, "pass %d: %d moved\n", pass, moved)
		if moved == 0 {
			break
		}
	}
	fmt.Fprintf(e.stdout, "moved %d, there already %d (the source's copy removed), changed on the source meanwhile %d (left there), not moved %d\n",
		total.Moved, total.There, total.Changed, len(total.Left))
	if occurrences > 0 {
		fmt.Fprintf(e.stdout, "left to the source's fleet: %d pending occurrences of recurring schedules\n", occurrences)
	}
	// Then the schedules (each occurrence published by one side), and the
	// dead messages.
	sr, err := src.MoveSchedules(ctx, to, mo)
	if err != nil {
		fmt.Fprintf(e.stdout, "schedules: moved %d, there already %d before the error; run it again to go on\n", sr.Moved, sr.There)
		return e.fail("move", err)
	}
	fmt.Fprintf(e.stdout, "schedules: moved %d, there already %d (the target's kept), changed on the source meanwhile %d (run it again)\n",
		sr.Moved, sr.There, sr.Changed)
	for cur, more := (shard.DeadCursor{}), true; more; {
		var r shard.StateMoveResult
		r, cur, more, err = src.MoveDeadPage(ctx, n, cur, page, to, mo)
		dr.Moved, dr.There, dr.Changed = dr.Moved+r.Moved, dr.There+r.There, dr.Changed+r.Changed
		for _, l := range r.Left {
			fmt.Fprintf(e.stderr, "delayq move: left on the source: %v\n", l)
		}
		total.Left = append(total.Left, r.Left...)
		if err != nil {
			fmt.Fprintf(e.stdout, "dead: moved %d, there already %d before the error; run it again to go on\n", dr.Moved, dr.There)
			return e.fail("move", err)
		}
	}
	fmt.Fprintf(e.stdout, "dead: moved %d, there already %d, changed on the source meanwhile %d (left there)\n", dr.Moved, dr.There, dr.Changed)
	if r, err := src.MoveQuotas(ctx, dst); settings("quotas", r, err) != nil {
		return e.fail("move", err)
	}
	if len(total.Left) > 0 || settingsLeft > 0 {
		return exitFail
	}
	return exitOK
}

// pacer returns a MoveOptions.Pace that lets batches through at rate
// messages a second on average: each waits until the messages before it
// are due by the rate, counted from the first.
func pacer(rate float64) func(ctx context.Context, n int) error {
	var start time.Time
	sent := 0
	return func(ctx context.Context, n int) error {
		if start.IsZero() {
			start = time.Now()
		}
		wait := time.Until(start.Add(time.Duration(float64(sent) / rate * float64(time.Second))))
		sent += n
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
