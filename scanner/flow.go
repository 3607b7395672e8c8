package scanner

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

// Flow control at release, the scanner's part (the design is in the shard
// package's doc). Two goroutines of the claims stage:
//
//   - refreshFlows reads the namespace's flows every flowRefresh, so a
//     change made anywhere (CLI, API, console, a routes file) reaches
//     every claim of the process within that time, and the claims set
//     apart the due messages of the topics it names (holdTopics);
//   - releaseHeld lets those messages go: for each topic with held messages
//     it takes a grant from the topic's bucket (for the whole fleet), and
//     claims that many from the shards holding its earliest ones.
//
// Every process runs both; no process leads. What a process knows of the
// held sets comes from its own claims (at once) and from a scan of every
// shard's held sets each heldScan (what the other processes held).

// flowRefresh is how often a process reads the flows.
const flowRefresh = 250 * time.Millisecond

// heldScan is how often a process scans every shard's held sets.
const heldScan = time.Second

// pauseMargin is how long after a pause's end (by this process's clock)
// the claims still set the topic apart: the releasers end the pause by the
// Redis clock, so a process whose clock runs ahead never publishes a
// paused topic's message; one whose clock lags only holds a little longer.
const pauseMargin = 2 * time.Second

// How a process sets the messages of limited and paused topics apart
// ahead of their due time (preHold): up to preHoldAhead before it, every
// preHoldEvery over every shard, reading at most preHoldRead entries a
// call, preHoldGroup shards a round trip, and making at most preHoldRounds
// calls a shard each time. A round trip holds Redis for at most
// preHoldGroup * preHoldRead entries (about 1 ms at 8 us an entry), so
// the claims of other topics interleave with the setting apart:
// pipelining every shard's call of 256 entries in one round trip would
// hold Redis for some 30 ms at a time (16 shards x 256 x about 8 us) when
// a limited backlog comes into the lookahead, and an unlimited topic's
// claims would wait behind it. An unlimited topic's p99 beside a limited
// drain was 82.7 ms in the run with this change, 130.0 ms in the run
// before it (single runs of scripts/bench.sh -only flow, whose spread from
// run to run is wide).
const (
	preHoldAhead  = 2 * time.Second
	preHoldEvery  = 250 * time.Millisecond
	preHoldRead   = 64
	preHoldGroup  = 2
	preHoldRounds = 32
)

// forgetAfter is how long a flow must have controlled nothing (no limit,
// no pause) before a process that finds nothing of it held removes it:
// longer than any process's refresh, so no claim still sets it apart.
const forgetAfter = 5 * time.Second

// minGrantWait is the least a releaser waits after its topic's bucket
// granted nothing.
const minGrantWait = 10 * time.Millisecond

// maxGrant is the most messages one grant asks for.
const maxGrant = 256

// flowState is what refreshFlows last read.
type flowState struct {
	flows map[string]shard.Flow
	hold  []string // the topics claims set apart, sorted
}

// flowControl is the scanner's state of flow control.
type flowControl struct {
	state atomic.Pointer[flowState]
	heard chan int // shards where this process's claims just set messages apart
}

func newFlowControl() *flowControl {
	f := &flowControl{heard: make(chan int, 64)}
	f.state.Store(&flowState{flows: map[string]shard.Flow{}})
	return f
}

// holdTopics are the topics the claims set apart now.
func (f *flowControl) holdTopics() []string { return f.state.Load().hold }

// heldIn tells the releaser that a claim set messages apart in shard i.
func (f *flowControl) heldIn(i int) {
	select {
	case f.heard <- i:
	default: // the releaser has plenty to learn; the next scan finds it
	}
}

// set installs flows read at now.
func (f *flowControl) set(flows []shard.Flow, now time.Time) {
	st := &flowState{flows: make(map[string]shard.Flow, len(flows))}
	nowMs := now.Add(-pauseMargin).UnixMilli()
	for _, fl := range flows {
		st.flows[fl.Topic] = fl
		if fl.Limited() || fl.Paused(nowMs) {
			st.hold = append(st.hold, fl.Topic)
		}
	}
	slices.Sort(st.hold)
	f.state.Store(st)
}

// refreshFlows reads the flows until ctx ends.
func (s *Scanner) refreshFlows(ctx context.Context) {
	tick(ctx, flowRefresh, func() { s.readFlows(ctx) })
}

// readFlows reads the flows once. Values it cannot read are reported and
// left out; the others apply.
func (s *Scanner) readFlows(ctx context.Context) {
	flows, err := s.d.Store.Flows(ctx)
	if err != nil {
		s.errLog.warn("read flows", err)
		if flows == nil {
			return // Redis unreachable: keep the last flows
		}
	}
	s.flow.set(flows, s.d.Now())
}

// preHold sets apart, ahead of their due time, the messages of the topics
// the claims hold (shard.Store.PreHold), until ctx ends: a limited
// backlog due at one instant is then out of the due sets before it falls
// due, and what falls due behind it is claimed on time. The cursor of
// each shard lives in Redis, so the fleet's processes share the reading.
// The releaser learns of what it set apart as it does from the claims.
func (s *Scanner) preHold(ctx, workCtx context.Context) {
	t := time.NewTicker(preHoldEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		topics := s.flow.holdTopics()
		if len(topics) == 0 {
			continue
		}
		hw, err := s.d.Shards.HighWater()
		if err != nil {
			s.errLog.warn("set apart ahead", err)
			continue
		}
		shards := make([]int, hw)
		for i := range shards {
			shards[i] = i
		}
		for round := 0; round < preHoldRounds && len(shards) > 0 && ctx.Err() == nil; round++ {
			var more []int
			for group := range slices.Chunk(shards, preHoldGroup) {
				if ctx.Err() != nil {
					break
				}
				res, errs := s.d.Store.PreHold(workCtx, group, topics, preHoldAhead, preHoldRead)
				for j, i := range group {
					switch {
					case errs[j] != nil:
						s.errLog.warn("set apart ahead", errs[j])
						continue
					case res[j].Moved > 0:
						s.flow.heldIn(i)
					}
					if res[j].More {
						more = append(more, i)
					}
				}
			}
			shards = more
		}
	}
}

// heldTopic is what the releaser knows of one topic's held messages: the
// due time of the earliest held message of each shard holding some.
type heldTopic struct {
	heads map[int]shard.Held // by shard
	next  time.Time          // no grant before then (the bucket said to wait)
}

// earliest is the due time of the earliest held message the process
// knows of (-1 if none).
func (h *heldTopic) earliest() int64 {
	e := int64(-1)
	for _, x := range h.heads {
		if x.HeadMs >= 0 && (e < 0 || x.HeadMs < e) {
			e = x.HeadMs
		}
	}
	return e
}

// count is how many messages of the topic the process knows are held.
func (h *heldTopic) count() int64 {
	n := int64(0)
	for _, x := range h.heads {
		n += x.Count
	}
	return n
}

// releaseHeld is the releaser's loop, until ctx ends; its claims and
// publishes use workCtx, as a worker's do.
func (s *Scanner) releaseHeld(ctx, workCtx context.Context) {
	topics := map[string]*heldTopic{}
	lastScan := time.Time{}
	wait := time.NewTimer(0)
	defer wait.Stop()
	for ctx.Err() == nil {
		if time.Since(lastScan) >= heldScan {
			s.scanHeld(workCtx, topics, nil)
			lastScan = time.Now()
		}
		now := time.Now()
		soonest := now.Add(heldScan)
		worked := false
		for _, t := range sortedTopics(topics) {
			h := topics[t]
			if len(h.heads) == 0 {
				continue
			}
			if head := h.earliest(); head > now.UnixMilli() {
				h.next = time.UnixMilli(head) // set apart ahead of its time (preHold): not due yet
			}
			if now.Before(h.next) {
				soonest = minTime(soonest, h.next)
				continue
			}
			n, err := s.releaseTopic(ctx, workCtx, t, h)
			if err != nil {
				s.errLog.warn("release held messages", err)
				h.next = now.Add(100 * time.Millisecond)
			}
			if n > 0 {
				worked = true
			}
			if len(h.heads) > 0 {
				soonest = minTime(soonest, h.next)
			}
		}
		if worked {
			continue
		}
		wait.Reset(max(time.Until(soonest), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case i := <-s.flow.heard:
			heard := []int{i}
		more:
			for len(heard) < 64 {
				select {
				case j := <-s.flow.heard:
					heard = append(heard, j)
				default:
					break more
				}
			}
			s.scanHeld(workCtx, topics, heard)
		case <-wait.C:
		}
		if !wait.Stop() {
			select {
			case <-wait.C:
			default:
			}
		}
	}
}

func sortedTopics(m map[string]*heldTopic) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// scanHeld learns what shards hold (all shards below the high-water mark
// when shards is nil) of every topic with a flow, and removes the flows
// that control nothing any more.
func (s *Scanner) scanHeld(ctx context.Context, topics map[string]*heldTopic, shards []int) {
	st := s.flow.state.Load()
	names := make([]string, 0, len(st.flows))
	for t := range st.flows {
		names = append(names, t)
	}
	for t, h := range topics { // held, but its flow is gone: drain it
		if _, ok := st.flows[t]; !ok && len(h.heads) > 0 {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	full := shards == nil
	if full {
		hw, err := s.d.Shards.HighWater()
		if err != nil {
			s.errLog.warn("scan held messages", err)
			return
		}
		shards = make([]int, hw)
		for i := range shards {
			shards[i] = i
		}
	}
	held, err := s.d.Store.HeldIn(ctx, names, shards, time.Now().UnixMilli())
	if err != nil {
		s.errLog.warn("scan held messages", err)
		return
	}
	for _, t := range names {
		h := topics[t]
		if h == nil {
			h = &heldTopic{heads: map[int]shard.Held{}}
			topics[t] = h
		}
		for _, x := range held[t] {
			if x.Count > 0 {
				h.heads[x.Shard] = x
			} else {
				delete(h.heads, x.Shard)
			}
		}
		if full {
			s.forgetIdle(ctx, st.flows[t], h.count())
		}
	}
}

// forgetIdle removes flow f when it has controlled nothing for a while and
// nothing of it is held.
func (s *Scanner) forgetIdle(ctx context.Context, f shard.Flow, held int64) {
	now := s.d.Now()
	if f.Topic == "" || held > 0 || f.ChangedMs > now.Add(-forgetAfter).UnixMilli() {
		return
	}
	if f.PausedUntilMs != 0 && f.Paused(now.Add(-forgetAfter).UnixMilli()) {
		return
	}
	if ok, err := s.d.Store.ForgetFlow(ctx, f, now.UnixMilli()); err != nil {
		s.errLog.warn("forget an idle flow", err)
	} else if ok {
		s.log.Info("flow removed: no limit, no pause, nothing held", zap.String("topic", f.Topic))
	}
}

// releaseTopic takes one grant for topic t and releases that many of its
// held messages, earliest first. It returns how many it claimed.
func (s *Scanner) releaseTopic(ctx, workCtx context.Context, t string, h *heldTopic) (int, error) {
	f, ok := s.flow.state.Load().flows[t]
	if !ok {
		f = shard.Flow{Topic: t} // its flow is gone: drain without a limit
	}
	// Half the releaser's window at most, so the next grant's places are
	// free while this one's confirms are under way: a quarter kept a
	// limited topic at 95 % of its limit beside other traffic (grants of
	// 64 at 5-10 ms a round trip), half reaches 99 % (scripts/bench.sh
	// -only flow).
	want := max(int(min(h.count(), maxGrant, int64(s.cfg.Window/2))), 1)
	if err := s.d.Publisher.WaitReady(ctx); err != nil {
		return 0, nil // stopping
	}
	// Room to publish first: a grant is used at once, not after a wait for
	// places in the window, so the releases keep the bucket's spacing.
	if s.releaseWindow.Acquire(ctx, int64(want)) != nil {
		return 0, nil // stopping
	}
	reserved := int64(want) // places not handed to deliver, given back at the end
	defer func() { s.releaseWindow.Release(reserved) }()
	var g shard.Grant
	if f.Limited() || f.PausedUntilMs != 0 {
		var err error
		if g, err = s.d.Store.TakeGrant(workCtx, f, want); err != nil {
			return 0, err
		}
		if g.N == 0 {
			w := g.Wait
			if w < 0 || w > flowRefresh {
				w = flowRefresh // paused: look again when the flows may have changed
			}
			// Not sooner than minGrantWait: a few grants of several
			// messages cost Redis less than many of one.
			h.next = time.Now().Add(max(w, minGrantWait))
			return 0, nil
		}
	} else {
		g.N = want
	}
	claimed := 0
	var err error
	for _, i := range shardsByHead(h.heads) {
		if claimed >= g.N || ctx.Err() != nil {
			break
		}
		var hc shard.HeldClaim
		if hc, err = s.d.Store.ClaimHeld(workCtx, i, t, g.N-claimed, s.cfg.Lease); err != nil {
			break
		}
		if hc.Left == 0 {
			delete(h.heads, i)
		} else {
			h.heads[i] = shard.Held{Shard: i, Count: hc.Left, HeadMs: hc.HeadMs}
		}
		if len(hc.Msgs) == 0 {
			continue
		}
		claimed += len(hc.Msgs)
		reserved -= int64(len(hc.Msgs))
		s.d.Metrics.Claimed.Add(float64(len(hc.Msgs)))
		s.d.Metrics.FlowReleased.WithLabelValues(t).Add(float64(len(hc.Msgs)))
		at := g.AtMs // the grant's time; without a limit or a pause, the claim's
		if at == 0 {
			at = hc.NowMs
		}
		s.deliver(workCtx, i, hc.NowMs, hc.Msgs, origin{topic: t, apart: true}, at)
	}
	if unused := g.N - claimed; unused > 0 {
		if rerr := s.d.Store.Refund(workCtx, f, g, unused); rerr != nil && err == nil {
			err = rerr
		}
		if len(h.heads) > 0 && claimed == 0 {
			h.next = time.Now().Add(10 * time.Millisecond) // the others took them: look again shortly
		}
	}
	return claimed, err
}

// shardsByHead orders the shards holding a topic by their earliest held
// message, so a topic leaves in due order (exact within a shard, close
// across shards).
func shardsByHead(heads map[int]shard.Held) []int {
	out := make([]int, 0, len(heads))
	for i := range heads {
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b int) int {
		if ha, hb := heads[a].HeadMs, heads[b].HeadMs; ha != hb {
			if ha < hb {
				return -1
			}
			return 1
		}
		return a - b
	})
	return out
}
