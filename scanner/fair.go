package scanner

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// Fair release across classes, the scanner's part (the design is in the
// shard package's doc). Goroutines of the claims stage:
//
//   - refreshClasses reads the namespace's classes every classRefresh, so
//     a change made anywhere reaches every claim of the process within
//     that time; the claims then go through shard.Store.ClaimFair, which
//     sets a late shard's due messages apart into its classes' backlogs;
//   - fairReleasers goroutines release those backlogs by the classes'
//     shares: each takes a turn from the process's stride scheduler
//     (pick), claims up to its want of that class from the shards holding
//     its earliest (shard.Store.ClaimBacklog) and publishes them as a
//     worker does.
//
// The shares without a leader: every process runs the same scheduler
// over the same backlogs, which it learns from its own claims (at once)
// and from a scan of every shard's backlog sets each backlogScan (what
// the other processes set apart). Each process's releases split by the
// weights of the classes that have something due waiting, so the fleet's
// do too: a sum of releases split 3:1 is split 3:1, whatever each process
// releases. A shared pass table in Redis, the design's first plan, would
// give the same shares at the price of one more round trip to one slot
// for every release of the whole fleet; the scheduler here costs none.
//
// The scheduler is stride scheduling: a class's pass grows by n/weight
// for the n messages of each of its turns (charged when the turn is
// taken, the unused part given back after), and the turn goes to the
// smallest pass among the weighted classes with something due; a class
// coming back from idle starts at the smallest pass of those, so it
// cannot bank an idle spell. Strict classes go before every weighted
// class (the earliest due first among them), and classes of weight 0
// only when no other class has anything due waiting.

// classRefresh is how often a process reads the classes.
const classRefresh = 250 * time.Millisecond

// backlogScan is how often a process scans every shard's backlog sets.
const backlogScan = time.Second

// fairReleasers is how many goroutines of a process release backlogs: two,
// so that one claims while the other publishes.
const fairReleasers = 2

// classState is what a process knows of one class's backlog.
type classState struct {
	def   shard.Class        // its definition; a class no longer stored drains at weight 1
	heads map[int]shard.Held // by shard, what its backlog there holds
	pass  float64
}

func (c *classState) count() int64 {
	n := int64(0)
	for _, h := range c.heads {
		n += h.Count
	}
	return n
}

func (c *classState) earliest() int64 {
	e := int64(-1)
	for _, h := range c.heads {
		if h.Count > 0 && (e < 0 || h.HeadMs < e) {
			e = h.HeadMs
		}
	}
	return e
}

// weightOf is the weight a class's turns are charged by (weight 0 and
// strict classes are not charged: they do not take turns by pass).
func (c *classState) weight() float64 { return float64(max(c.def.Weight, 1)) }

// fairControl is the scanner's state of fair release.
type fairControl struct {
	plan   atomic.Pointer[shard.ClassPlan] // what the claims use; nil: no classes
	heard  chan int                        // shards where this process's claims just set messages apart
	window *semaphore.Weighted             // the releasers' places, as many as the claims'

	mu       sync.Mutex
	classes  map[string]*classState // the stored classes, the default, and any with a backlog known
	lastScan time.Time
	scanning bool
}

func newFairControl(window int) *fairControl {
	return &fairControl{heard: make(chan int, 64), window: semaphore.NewWeighted(int64(window)), classes: map[string]*classState{}}
}

// currentPlan is what the claims set apart by, nil without classes.
func (f *fairControl) currentPlan() *shard.ClassPlan { return f.plan.Load() }

// heardIn tells the releasers that a claim set messages apart in shard i.
func (f *fairControl) heardIn(i int) {
	if f.plan.Load() == nil {
		return
	}
	select {
	case f.heard <- i:
	default: // plenty to learn already; the next scan finds it
	}
}

// takeHeard returns the shards heard of (first, when >= 0, and what the
// channel holds), each once.
func (f *fairControl) takeHeard(first int) []int {
	var out []int
	if first >= 0 {
		out = append(out, first)
	}
	for len(out) < 64 {
		select {
		case j := <-f.heard:
			if !slices.Contains(out, j) {
				out = append(out, j)
			}
		default:
			return out
		}
	}
	return out
}

// set installs the classes read.
func (f *fairControl) set(classes []shard.Class) {
	f.plan.Store(shard.NewClassPlan(classes))
	f.mu.Lock()
	defer f.mu.Unlock()
	stored := map[string]bool{}
	for _, c := range append(classes, shard.Class{Name: shard.DefaultClass, Weight: 1}) {
		if stored[c.Name] {
			continue // the default class was stored
		}
		stored[c.Name] = true
		st := f.classes[c.Name]
		if st == nil {
			st = &classState{heads: map[int]shard.Held{}}
			f.classes[c.Name] = st
		}
		st.def = c
	}
	for name, st := range f.classes {
		if !stored[name] {
			if len(st.heads) == 0 {
				delete(f.classes, name)
			} else {
				st.def = shard.Class{Name: name, Weight: 1} // forgotten meanwhile: drain it
			}
		}
	}
}

// names are the classes whose backlogs a scan reads; none while no class
// was ever stored.
func (f *fairControl) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.classes) <= 1 && f.plan.Load() == nil {
		if st := f.classes[shard.DefaultClass]; st == nil || len(st.heads) == 0 {
			return nil // the default class alone, with nothing known: nothing to scan
		}
	}
	out := make([]string, 0, len(f.classes))
	for n := range f.classes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// learn records what shards hold of each class's backlog.
func (f *fairControl) learn(held map[string][]shard.Held) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, hs := range held {
		st := f.classes[name]
		if st == nil {
			st = &classState{def: shard.Class{Name: name, Weight: 1}, heads: map[int]shard.Held{}}
			f.classes[name] = st
		}
		idle := len(st.heads) == 0
		for _, h := range hs {
			if h.Count > 0 {
				st.heads[h.Shard] = h
			} else {
				delete(st.heads, h.Shard)
			}
		}
		if idle && len(st.heads) > 0 {
			f.wake(st)
		}
	}
}

// wake starts a class back from idle at the smallest pass of the weighted
// classes with a backlog: an idle spell earns no turns.
func (f *fairControl) wake(st *classState) {
	least := math.Inf(1)
	for _, o := range f.classes {
		if o != st && len(o.heads) > 0 && !o.def.Strict && o.def.Weight > 0 {
			least = min(least, o.pass)
		}
	}
	if !math.IsInf(least, 1) {
		st.pass = max(st.pass, least)
	}
}

// turn is a class's turn to release up to want messages from shards.
type turn struct {
	class  string
	want   int
	shards []int // holding its backlog, earliest head first
	apart  bool  // weight 0: its lateness is chosen
	charge float64
}

// pick takes the next turn: the earliest due strict class, else the
// weighted class with the smallest pass, else the earliest due class of
// weight 0; among those with something waiting (a backlog holds only what
// was due by the Redis clock, so no local clock is asked). most bounds
// want.
func (f *fairControl) pick(most int) (turn, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var strict, weighted, zero *classState
	var sName, wName, zName string
	for name, st := range f.classes {
		e := st.earliest()
		if e < 0 {
			continue
		}
		switch {
		case st.def.Strict:
			if strict == nil || e < strict.earliest() || e == strict.earliest() && name < sName {
				strict, sName = st, name
			}
		case st.def.Weight > 0:
			if weighted == nil || st.pass < weighted.pass || st.pass == weighted.pass && name < wName {
				weighted, wName = st, name
			}
		default:
			if zero == nil || e < zero.earliest() || e == zero.earliest() && name < zName {
				zero, zName = st, name
			}
		}
	}
	st, name := strict, sName
	if st == nil {
		st, name = weighted, wName
	}
	if st == nil {
		st, name = zero, zName
	}
	if st == nil {
		return turn{}, false
	}
	t := turn{class: name, want: max(int(min(st.count(), int64(most))), 1), apart: !st.def.Strict && st.def.Weight == 0}
	t.shards = shardsByHead(st.heads)
	if !st.def.Strict && st.def.Weight > 0 {
		t.charge = float64(t.want) / st.weight()
		st.pass += t.charge
	}
	return t, true
}

// done ends turn t: claimed of its want were released; heads are what
// the claims said the shards hold now.
func (f *fairControl) done(t turn, claimed int, heads map[int]shard.Held) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.classes[t.class]
	if st == nil {
		return
	}
	if t.charge > 0 && claimed < t.want {
		st.pass -= t.charge * float64(t.want-claimed) / float64(t.want)
	}
	for i, h := range heads {
		if h.Count > 0 {
			st.heads[i] = h
		} else {
			delete(st.heads, i)
		}
	}
}

// refreshClasses reads the classes until ctx ends.
func (s *Scanner) refreshClasses(ctx context.Context) {
	tick(ctx, classRefresh, func() { s.readClasses(ctx) })
}

// readClasses reads the classes once. Values it cannot read are reported
// and left out; the others apply.
func (s *Scanner) readClasses(ctx context.Context) {
	classes, err := s.d.Store.Classes(ctx)
	if err != nil {
		s.errLog.warn("read classes", err)
		if classes == nil {
			return // Redis unreachable: keep the last classes
		}
	}
	s.fair.set(classes)
}

// releaseBacklogs is one releaser's loop, until ctx ends; its claims and
// publishes use workCtx, as a worker's do.
func (s *Scanner) releaseBacklogs(ctx, workCtx context.Context) {
	wait := time.NewTimer(0)
	defer wait.Stop()
	most := max(s.cfg.Window/fairReleasers, 1)
	for ctx.Err() == nil {
		s.scanBacklogsIfDue(workCtx)
		// What this process's claims just set apart, before the next turn:
		// a class that had nothing waiting gets its turn at once, not after
		// the next full scan.
		if heard := s.fair.takeHeard(-1); len(heard) > 0 {
			s.scanBacklogs(workCtx, heard)
		}
		t, ok := s.fair.pick(min(most, maxGrant))
		if ok {
			if err := s.releaseTurn(ctx, workCtx, t); err != nil {
				s.errLog.warn("release a class's backlog", err)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		if !wait.Stop() {
			select {
			case <-wait.C:
			default:
			}
		}
		wait.Reset(backlogScan)
		select {
		case <-ctx.Done():
			return
		case i := <-s.fair.heard:
			s.scanBacklogs(workCtx, s.fair.takeHeard(i))
		case <-wait.C:
		}
	}
}

// scanBacklogsIfDue scans every shard's backlogs when the last full scan
// of the process is backlogScan old (one releaser does it).
func (s *Scanner) scanBacklogsIfDue(ctx context.Context) {
	f := s.fair
	f.mu.Lock()
	due := !f.scanning && time.Since(f.lastScan) >= backlogScan
	if due {
		f.scanning = true
	}
	f.mu.Unlock()
	if !due {
		return
	}
	s.scanBacklogs(ctx, nil)
	f.mu.Lock()
	f.scanning, f.lastScan = false, time.Now()
	f.mu.Unlock()
}

// scanBacklogs learns what shards hold (all shards below the high-water
// mark when shards is nil) in every class's backlog; after a full scan it
// forgets deleted classes whose backlogs are empty.
func (s *Scanner) scanBacklogs(ctx context.Context, shards []int) {
	names := s.fair.names()
	if len(names) == 0 {
		return
	}
	full := shards == nil
	if full {
		hw, err := s.d.Shards.HighWater()
		if err != nil {
			s.errLog.warn("scan class backlogs", err)
			return
		}
		shards = make([]int, hw)
		for i := range shards {
			shards[i] = i
		}
	}
	held, err := s.d.Store.BacklogIn(ctx, names, shards, s.d.Now().UnixMilli())
	if err != nil {
		s.errLog.warn("scan class backlogs", err)
		return
	}
	s.fair.learn(held)
	if !full {
		return
	}
	s.fair.mu.Lock()
	var gone []shard.Class
	cutoff := s.d.Now().Add(-forgetAfter).UnixMilli()
	// While the default class's backlog holds anything, a deleted class
	// stays: the last stored class gone, no process would look at the
	// backlogs any more (nor would a cancel).
	if def := s.fair.classes[shard.DefaultClass]; def == nil || len(def.heads) == 0 {
		for _, st := range s.fair.classes {
			if st.def.DeletedMs > 0 && st.def.DeletedMs < cutoff && len(st.heads) == 0 {
				gone = append(gone, st.def)
			}
		}
	}
	s.fair.mu.Unlock()
	for _, c := range gone {
		if ok, err := s.d.Store.ForgetClass(ctx, c); err != nil {
			s.errLog.warn("forget a deleted class", err)
		} else if ok {
			s.log.Info("class forgotten: deleted, and nothing waits in its backlog", zap.String("class", c.Name))
		}
	}
}

// releaseTurn releases up to t.want messages of class t.class, from the
// shards holding its earliest.
func (s *Scanner) releaseTurn(ctx, workCtx context.Context, t turn) (err error) {
	claimed := 0
	heads := map[int]shard.Held{}
	defer func() { s.fair.done(t, claimed, heads) }()
	if err := s.d.Publisher.WaitReady(ctx); err != nil {
		return nil // stopping
	}
	// Room to publish first, so that what is claimed goes out at once.
	if s.fair.window.Acquire(ctx, int64(t.want)) != nil {
		return nil // stopping
	}
	reserved := int64(t.want) // places not handed to deliver, given back at the end
	defer func() { s.fair.window.Release(reserved) }()
	for _, i := range t.shards {
		if claimed >= t.want || ctx.Err() != nil {
			break
		}
		hc, err := s.d.Store.ClaimBacklog(workCtx, i, t.class, t.want-claimed, s.cfg.Lease)
		if err != nil {
			return err
		}
		heads[i] = shard.Held{Shard: i, Count: hc.Left, HeadMs: hc.HeadMs}
		if len(hc.Msgs) == 0 {
			continue
		}
		claimed += len(hc.Msgs)
		reserved -= int64(len(hc.Msgs))
		s.d.Metrics.Claimed.Add(float64(len(hc.Msgs)))
		s.d.Metrics.ClassReleased.WithLabelValues(t.class).Add(float64(len(hc.Msgs)))
		s.deliver(workCtx, i, hc.NowMs, hc.Msgs, origin{class: t.class, apart: t.apart}, 0)
	}
	return nil
}

// ClassCollector exports each release class and its backlog, read from
// Redis at scrape time (shard.Store.ClassStatuses), once a class was set:
//
//	delayq_class_weight{class}          its weight; -1 strict
//	delayq_class_backlog{class}         due messages waiting in its backlogs (the fleet is behind)
//	delayq_class_oldest_seconds{class}  how long the earliest of them has waited
//	delayq_class_up                     1 if the last read succeeded
//
// Like the shard gauges, these are the namespace's numbers, labelled
// namespace="<ns>": every pod exports the same values, aggregate with max
// across pods. The rates are delayq_class_released_total and
// delayq_class_lateness_seconds (Metrics).
type ClassCollector struct {
	store   *shard.Store
	layout  balance.Source
	timeout time.Duration

	weight, backlog, oldest, up *prometheus.Desc
}

// NewClassCollector returns a collector of the classes of store's
// namespace, whose backlogs it counts on the shards layout covers.
func NewClassCollector(store *shard.Store, layout balance.Source) *ClassCollector {
	ns := ""
	if store != nil {
		ns = store.Namespace()
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("delayq_class_"+name, help, labels, prometheus.Labels{"namespace": ns})
	}
	return &ClassCollector{store: store, layout: layout, timeout: 5 * time.Second,
		weight:  d("weight", "The release class's weight; -1 for a strict class.", "class"),
		backlog: d("backlog", "Due messages waiting in the release class's backlogs while the fleet is behind.", "class"),
		oldest:  d("oldest_seconds", "How long the earliest message of the class's backlogs has waited since its due time.", "class"),
		up:      d("up", "1 if the last read of the classes from Redis succeeded."),
	}
}

// Describe implements prometheus.Collector.
func (c *ClassCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.weight, c.backlog, c.oldest, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Nothing but up while no class
// was ever set.
func (c *ClassCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := gaugeTo(ch)
	var sts []shard.ClassStatus
	if !readForScrape(c.layout, c.timeout, func(ctx context.Context, hw int) (err error) {
		sts, err = c.store.ClassStatuses(ctx, hw)
		if sts != nil {
			err = nil // unreadable values are left out, and logged by the scanners
		}
		return err
	}) {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	if shard.NoClasses(sts) {
		return
	}
	for _, s := range sts {
		w := float64(s.Weight)
		if s.Strict {
			w = -1
		}
		gauge(c.weight, w, s.Name)
		gauge(c.backlog, float64(s.Backlog), s.Name)
		gauge(c.oldest, s.WaitedFor().Seconds(), s.Name)
	}
}
