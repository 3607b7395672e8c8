package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/httpapi"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestLiveMoveBetweenNamespaces: 3,000 messages due 8-16 s ahead move to
// another namespace while a scanner runs on each side and the source
// cancels 150 of them meanwhile; the mover is SIGKILLed twice between a
// batch's copy and its removal, and run again. Every other message is
// delivered once as a first delivery, none early, with the due time it
// was given; no cancelled message is delivered. The scanners export the
// age of the journal a kill left until the rerun. Bad flags exit 2 naming
// them.
func TestLiveMoveBetweenNamespaces(t *testing.T) {
	w := newWorld(t, 4)
	w.consume()
	to := w.sibling("-to")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"move"}, "--to-redis is required"},
		{[]string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--keep", "1s"}, "want at least 5s"},
		{[]string{"move", "--to-redis", redisSrv.Addr}, "the target is the source"},
		{[]string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--rate", "-5"}, "--rate are 0 or more"},
	} {
		if _, e, code := w.delayq("", c.args...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d %q, want 2 saying %q", c.args, code, e, c.want)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	prod := shard.NewProducer(store, balance.Static(4), shard.ProducerOptions{})
	due := map[string]int64{}
	var ids []string
	start := time.Now()
	for from := 0; from < 3000; from += 500 {
		msgs := make([]shard.Message, 0, 500)
		for j := from; j < from+500; j++ {
			msgs = append(msgs, shard.Message{ID: fmt.Sprintf("mv-%04d", j), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"),
				At: start.Add(8*time.Second + time.Duration(rand.Int64N(int64(8*time.Second))))})
		}
		res, err := prod.EnqueueBatch(context.Background(), msgs)
		must(t, err)
		for _, r := range res {
			must(t, r.Err)
			due[r.ID] = r.Due.UnixMilli()
			ids = append(ids, r.ID)
		}
	}
	source := w.scan()
	to.scan()
	var mu sync.Mutex
	cancelled := map[string]bool{}
	var wg sync.WaitGroup
	wg.Go(func() { // the source's cancels, racing the move
		for j := 0; j < 3000; j += 20 {
			id := fmt.Sprintf("mv-%04d", j)
			err := prod.Cancel(context.Background(), id)
			if err == nil {
				mu.Lock()
				cancelled[id] = true
				mu.Unlock()
			} else if !errors.Is(err, shard.ErrNotFound) {
				t.Errorf("cancel %s: %v", id, err)
			}
		}
	})
	// The mover SIGKILLed twice between a batch's copy and its removal
	// from the source, then run to the end: each rerun finishes the batch
	// the last one left on both sides first.
	move := []string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--keep", "5s", "--to-shards", "4"}
	for _, at := range []string{"copied:3", "copied:2"} {
		killed := w.sibling("", "DELAYQ_TEST_KILL_AT="+at)
		if _, e, code := killed.delayq("", move...); code != -1 {
			t.Fatalf("a mover to be killed at %s: exit %d %s", at, code, e)
		}
	}
	// The scanners export the age of the journal the kill left (the
	// DelayqMoveCutShort alert's gauge).
	journalAge := func() float64 {
		v, _ := metricValue(source.scrape(t), "delayq_move_journal_age_seconds", "")
		return v
	}
	shardtest.WaitFor(t, 10*time.Second, func() bool { return journalAge() > 0 },
		func() string { return "no delayq_move_journal_age_seconds above 0 after the kill" })
	out, e, code := w.delayq("", move...)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "moved ") {
		t.Fatalf("move: exit %d %s %s", code, out, e)
	}
	t.Logf("move: %s", strings.TrimSpace(out))
	if age := journalAge(); age != 0 {
		t.Errorf("after the rerun, delayq_move_journal_age_seconds %g, want 0", age)
	}
	var want []string
	for _, id := range ids {
		if !cancelled[id] {
			want = append(want, id)
		}
	}
	w.waitDelivered(want, 90*time.Second)
	last := int64(0)
	for _, d := range due {
		last = max(last, d)
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool { return time.Now().UnixMilli() > last+2000 },
		func() string { return "the last due time did not pass" })
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		firsts := 0
		for _, r := range w.got[id] {
			if r.dueMs != due[id] {
				t.Errorf("%s delivered as due %d, enqueued due %d", id, r.dueMs, due[id])
			}
			if r.attempt == 1 {
				firsts++
			}
		}
		switch {
		case cancelled[id] && len(w.got[id]) > 0:
			t.Errorf("%s was cancelled on the source, yet delivered", id)
		case !cancelled[id] && firsts != 1:
			t.Errorf("%s first delivered %d times", id, firsts)
		}
	}
	if len(cancelled) == 0 {
		t.Errorf("no cancel raced the move")
	}
}

// TestMoveRefusesATarget: a target whose policy can evict, one that is
// full, and a target namespace that records another M are each refused
// before anything is copied, with an error naming why; a target that
// fills up during the move stops it, each message on exactly one side,
// and a rerun once it has room finishes the move.
func TestMoveRefusesATarget(t *testing.T) {
	w := newWorld(t, 4)
	ctx := context.Background()
	var b strings.Builder
	body := strings.Repeat("b", 2000)
	at := time.Now().Add(time.Hour).UnixMilli()
	for j := range 2000 {
		fmt.Fprintf(&b, `{"id":"rf-%04d","exchange":"x","routing_key":"rk","at_ms":%d,"body":%q}`+"\n", j, at+int64(j), body)
	}
	if out, e, code := w.delayq(b.String(), "enqueue", "-f", "-"); code != 0 {
		t.Fatalf("enqueue: exit %d %s %s", code, out, e)
	}
	exported := func(w *world) map[string]bool {
		t.Helper()
		out, e, code := w.delayq("", "export")
		if code != 0 {
			t.Fatalf("export: exit %d %s", code, e)
		}
		ids := map[string]bool{}
		for l := range strings.Lines(out) {
			m, err := shard.ParseLine([]byte(l))
			must(t, err)
			ids[m.ID] = true
		}
		return ids
	}
	target := func(args ...string) (*shardtest.Redis, *redis.Client) {
		r, err := shardtest.StartRedis(shardtest.RedisOptions{Args: args})
		shardtest.Require(t, err)
		t.Cleanup(r.Close)
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = c.Close() })
		return r, c
	}
	refused := func(addr, want string, tc *redis.Client) {
		t.Helper()
		keys := tc.DBSize(ctx).Val()
		out, e, code := w.delayq("", "move", "--to-redis", addr, "--to-shards", "4", "--keep", "5s")
		if code != 1 || !strings.Contains(e, want) {
			t.Errorf("move to %s: exit %d %s %s, want 1 saying %q", addr, code, out, e, want)
		}
		if n := tc.DBSize(ctx).Val(); n != keys {
			t.Errorf("move to %s: refused, yet the target went from %d to %d keys", addr, keys, n)
		}
		if n := len(exported(w)); n != 2000 {
			t.Errorf("move to %s: refused, yet the source holds %d of 2000", addr, n)
		}
	}

	evicting, ec := target("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	refused(evicting.Addr, "maxmemory-policy allkeys-lru evicts", ec)

	full, fc := target()
	must(t, fc.Set(ctx, "filler", strings.Repeat("f", 3<<20), 0).Err())
	used, err := fc.MemoryUsage(ctx, "filler").Result()
	must(t, err)
	must(t, fc.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*10/9+1<<20, 10)).Err()) // about 90 % used
	refused(full.Addr, "is full", fc)

	other, oc := target()
	dst, err := shard.NewStore(oc, w.ns)
	must(t, err)
	_, err = dst.RaiseLayout(ctx, 8, 0)
	must(t, err)
	refused(other.Addr, "uses M = 8, not 4", oc)

	// Room for about half: the move stops at the batch the target
	// refused, naming it full; every message is on one side.
	small, sc := target("--maxmemory", "4mb")
	out, e, code := w.delayq("", "move", "--to-redis", small.Addr, "--to-shards", "4", "--keep", "5s")
	if code != 1 || !strings.Contains(e, "the target is full") || !strings.Contains(e, "redis is full") {
		t.Fatalf("move to a target filling up: exit %d %s %s, want 1 saying the target is full", code, out, e)
	}
	t.Logf("move to a target filling up: %s", strings.TrimSpace(out))
	to := w.sibling("", "DELAYQ_REDIS_ADDRS="+small.Addr)
	left, moved := exported(w), exported(to)
	if len(moved) == 0 || len(left) == 0 || len(left)+len(moved) != 2000 {
		t.Errorf("after the target filled up: %d on the source and %d on the target, want some on each, 2000 in all", len(left), len(moved))
	}
	for id := range moved {
		if left[id] {
			t.Errorf("%s is on both sides", id)
		}
	}
	must(t, sc.ConfigSet(ctx, "maxmemory", "0").Err())
	if out, e, code := w.delayq("", "move", "--to-redis", small.Addr, "--to-shards", "4", "--keep", "5s", "--rate", "20000"); code != 0 {
		t.Fatalf("the move again, with room (paced): exit %d %s %s", code, out, e)
	}
	if left, moved := exported(w), exported(to); len(left) != 0 || len(moved) != 2000 {
		t.Errorf("after the rerun: %d on the source and %d on the target, want 0 and 2000", len(left), len(moved))
	}
}

// TestLiveMoveToClusterAtScale: 200,000 messages due over 60 s move from
// one Redis to a 3-master cluster while a fleet runs on each side and
// producers write 1,000 messages a second, to the source for the first
// half, to both sides for a second, then to the target; some messages
// are cancelled or rescheduled meanwhile, on the source first and on the
// target when the source no longer has them; the mover is SIGKILLed twice
// mid-batch and run again, and run once more after the switch (the
// operations guide's steps). Every message is delivered, none early, each
// at the due time it was last given, each first delivered once (a second
// delivery only a redelivery of the same id); no cancelled one is
// delivered. Run alone: its deliveries are timed.
func TestLiveMoveToClusterAtScale(t *testing.T) {
	const total, m = 200_000, 8
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	w := newWorld(t, m)
	w.consume()
	to := w.sibling("", "DELAYQ_REDIS_ADDRS="+strings.Join(c.Addrs, ","))
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	src, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	crdb := c.Client()
	t.Cleanup(func() { _ = crdb.Close() })
	dst, err := shard.NewStore(crdb, w.ns)
	must(t, err)
	onSource := shard.NewProducer(src, balance.Static(m), shard.ProducerOptions{})
	onTarget := shard.NewProducer(dst, balance.Static(m), shard.ProducerOptions{})

	var mu sync.Mutex
	due := map[string]int64{} // the due time each id was last given
	cancelled := map[string]bool{}
	enqueue := func(p *shard.Producer, msgs []shard.Message) {
		res, err := p.EnqueueBatch(ctx, msgs)
		if err != nil {
			t.Errorf("enqueue: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range res {
			switch {
			case r.Err == nil:
				due[r.ID] = r.Due.UnixMilli()
			case !errors.Is(r.Err, shard.ErrDuplicate):
				t.Errorf("enqueue %s: %v", r.ID, r.Err)
			}
		}
	}
	msg := func(id string, at time.Time) shard.Message {
		return shard.Message{ID: id, Exchange: w.exchange, RoutingKey: "rk", Body: []byte("move " + id), At: at}
	}
	start := time.Now()
	for from := 0; from < total; from += 1000 {
		msgs := make([]shard.Message, 0, 1000)
		for j := from; j < from+1000; j++ {
			msgs = append(msgs, msg(fmt.Sprintf("big-%06d", j), start.Add(20*time.Second+time.Duration(rand.Int64N(int64(60*time.Second))))))
		}
		enqueue(onSource, msgs)
	}
	t.Logf("%d messages enqueued on the source in %s", total, time.Since(start).Round(time.Millisecond))
	w.scan()
	to.scan()

	var wg sync.WaitGroup
	switched := make(chan struct{})
	var produced []string
	wg.Go(func() { // 1,000 a second for 40 s, 50 every 50 ms
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for b := range 800 {
			<-tick.C
			now := time.Now()
			msgs := make([]shard.Message, 50)
			for j := range msgs {
				id := fmt.Sprintf("new-%03d-%02d", b, j)
				msgs[j] = msg(id, now.Add(6*time.Second+time.Duration(rand.Int64N(int64(30*time.Second)))))
				produced = append(produced, id)
			}
			switch {
			case b < 400:
				enqueue(onSource, msgs)
			case b < 420: // the switch: to both sides, the same ids and times
				for j := range msgs {
					msgs[j].At = now.Add(20*time.Second + time.Duration(rand.Int64N(int64(16*time.Second))))
				}
				enqueue(onSource, msgs)
				enqueue(onTarget, msgs)
			default:
				if b == 420 {
					close(switched)
				}
				enqueue(onTarget, msgs)
			}
		}
	})
	rescheduled, onTargetToo := 0, 0
	wg.Go(func() {
		// Racing the move, as the operations guide says: cancel one in 97
		// and reschedule one in 89 by 10 s, on the source first and, when
		// it says not found (moved already), on the target. Each not due
		// within 5 s is found on one side.
		for j := 0; j < total; j++ {
			id := fmt.Sprintf("big-%06d", j)
			mu.Lock()
			soon := due[id] < time.Now().Add(5*time.Second).UnixMilli()
			mu.Unlock()
			switch {
			case soon: // may be published by now: not the move's to answer
			case j%97 == 0:
				err := onSource.Cancel(ctx, id)
				if errors.Is(err, shard.ErrNotFound) {
					onTargetToo++
					err = onTarget.Cancel(ctx, id)
				}
				if err != nil {
					t.Errorf("cancel %s: %v", id, err)
					continue
				}
				mu.Lock()
				cancelled[id] = true
				mu.Unlock()
			case j%89 == 0:
				mu.Lock()
				at := due[id] + 10_000
				mu.Unlock()
				_, err := onSource.Reschedule(ctx, id, time.UnixMilli(at))
				if errors.Is(err, shard.ErrNotFound) {
					onTargetToo++
					_, err = onTarget.Reschedule(ctx, id, time.UnixMilli(at))
				}
				if err != nil {
					t.Errorf("reschedule %s: %v", id, err)
					continue
				}
				mu.Lock()
				due[id] = at
				rescheduled++
				mu.Unlock()
			}
		}
	})
	move := []string{"move", "--to-redis", strings.Join(c.Addrs, ","), "--keep", "5s", "--to-shards", strconv.Itoa(m)}
	for _, at := range []string{"copied:30", "copied:100"} {
		killed := w.sibling("", "DELAYQ_TEST_KILL_AT="+at)
		if _, e, code := killed.delayq("", move...); code != -1 {
			t.Fatalf("a mover to be killed at %s: exit %d %s", at, code, e)
		}
	}
	out, e, code := w.delayq("", move...)
	if code != 0 {
		t.Fatalf("move: exit %d %s %s", code, out, e)
	}
	t.Logf("move, after two killed: %s (done %s after the enqueue began)", strings.Join(strings.Fields(out), " "), time.Since(start).Round(time.Second))
	<-switched
	out, e, code = w.delayq("", move...)
	if code != 0 {
		t.Fatalf("move after the switch: exit %d %s %s", code, out, e)
	}
	t.Logf("move after the switch: %s", strings.Join(strings.Fields(out), " "))
	wg.Wait()

	mu.Lock()
	var want []string
	for id := range due {
		if !cancelled[id] {
			want = append(want, id)
		}
	}
	last := int64(0)
	for _, d := range due {
		last = max(last, d)
	}
	t.Logf("%d messages (%d produced during the move), %d cancelled and %d rescheduled (%d of them on the target, moved already)",
		len(due), len(produced), len(cancelled), rescheduled, onTargetToo)
	mu.Unlock()
	dups := w.waitDelivered(want, 150*time.Second)
	shardtest.WaitFor(t, 30*time.Second, func() bool { return time.Now().UnixMilli() > last+2000 },
		func() string { return "the last due time did not pass" })
	// The operations guide's sign that the source's fleet may stop.
	var stats struct {
		Total struct {
			Scheduled int64 `json:"scheduled"`
			InFlight  int64 `json:"in_flight"`
		} `json:"total"`
	}
	must(t, json.Unmarshal([]byte(w.succeed("", "stats", "--json")), &stats))
	if stats.Total.Scheduled != 0 || stats.Total.InFlight != 0 {
		t.Errorf("the source holds %d scheduled and %d in flight after every message arrived, want none", stats.Total.Scheduled, stats.Total.InFlight)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	redelivered := 0
	for id, d := range due {
		firsts := 0
		for _, r := range w.got[id] {
			if r.dueMs != d {
				t.Errorf("%s delivered as due %d, last given due %d", id, r.dueMs, d)
			}
			if r.attempt == 1 {
				firsts++
			} else {
				redelivered++
			}
		}
		switch {
		case cancelled[id] && len(w.got[id]) > 0:
			t.Errorf("%s was cancelled on the source, yet delivered", id)
		case !cancelled[id] && firsts != 1:
			t.Errorf("%s first delivered %d times", id, firsts)
		}
	}
	t.Logf("%d duplicates, all redeliveries of the same id after a lease ran out: %d", dups, redelivered)
	if onTargetToo == 0 || onTargetToo == len(cancelled)+rescheduled {
		t.Errorf("%d of %d cancels and reschedules found their message moved, want some but not all", onTargetToo, len(cancelled)+rescheduled)
	}
}

// TestLiveMoveTakesSchedulesAndDead: the move hands the recurring
// schedules over while a scanner runs on each side, the mover SIGKILLed
// once between a schedule's copy and its handover and run again: every
// occurrence of a schedule firing each second is published once (by one
// side or the other, none missed; a second publish only of one due between
// the kill and the rerun, as documented), the target's copies keep their
// state (created, paused); the dead messages go over with their reasons
// and times (the same export lines), none left on the source.
func TestLiveMoveTakesSchedulesAndDead(t *testing.T) {
	w := newWorld(t, 4, "DELAYQ_MAX_REFUSALS=1")
	w.consume()
	to := w.sibling("-to")
	ctx := context.Background()
	_, src, dst := storesOf(t, w, to)
	w.succeed("", "schedule", "set", "tick", "@every 1s", "--exchange", w.exchange, "--routing-key", "rk", "--body", "tick")
	w.succeed("", "schedule", "set", "hourly", "@hourly", "--topic", "reports")
	w.succeed("", "schedule", "set", "held", "@daily", "--topic", "reports")
	w.succeed("", "schedule", "pause", "held")
	for j := range 20 {
		w.succeed("", "enqueue", "--id", fmt.Sprintf("dead-%02d", j), "--exchange", w.exchange, "--routing-key", "none", "--delay", "10ms")
	}
	w.scan()
	to.scan()
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		info, err := src.ScheduleInfo(ctx, "tick")
		dead, derr := src.DeadList(ctx, 4, 100)
		return err == nil && derr == nil && info.Fired >= 3 && len(dead) == 20
	}, func() string { return "tick did not fire 3 times, or the 20 are not dead" })
	deadBefore := w.succeed("", "export", "--dead")
	created := map[string]time.Time{}
	infos, err := src.Schedules(ctx)
	must(t, err)
	for _, in := range infos {
		created[in.Name] = in.Created
	}

	move := []string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--keep", "5s", "--to-shards", "4"}
	killed := w.sibling("", "DELAYQ_TEST_KILL_AT=schedule-copied:2")
	windowFrom := time.Now()
	if _, e, code := killed.delayq("", move...); code != -1 {
		t.Fatalf("a mover to be killed at its second schedule's handover: exit %d %s", code, e)
	}
	out := w.succeed("", move...)
	windowTo := time.Now()
	t.Logf("move: %s", strings.Join(strings.Fields(out), " "))
	if !strings.Contains(out, "schedules: moved 2") || !strings.Contains(out, "dead: moved 20, there already 0") {
		t.Errorf("move: %s, want the 2 schedules the killed mover had not handed over, and 20 dead, moved", out)
	}
	if left, err := src.Schedules(ctx); err != nil || len(left) != 0 {
		t.Errorf("schedules left on the source: %d %v", len(left), err)
	}
	for _, name := range []string{"tick", "hourly", "held"} {
		info, err := dst.ScheduleInfo(ctx, name)
		if err != nil || !info.Created.Equal(created[name]) || info.Paused != (name == "held") {
			t.Errorf("%s on the target: created %s paused %v (%v), want created %s", name, info.Created, info.Paused, err, created[name])
		}
	}
	if out := w.succeed("", "export", "--dead"); out != "" {
		t.Errorf("dead left on the source:\n%s", out)
	}
	if out := to.succeed("", "export", "--dead"); out != deadBefore {
		t.Errorf("the dead on the target differ from the source's:\n%s\n%s", deadBefore, out)
	}

	// Four more seconds of tick from the target, then every occurrence
	// from the first: once each, none missed.
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		info, err := dst.ScheduleInfo(ctx, "tick")
		return err == nil && info.Last.After(windowTo.Add(4*time.Second))
	}, func() string { return "tick did not go on firing on the target" })
	w.mu.Lock()
	defer w.mu.Unlock()
	var nominal []int64
	for id, rs := range w.got {
		name, at, ok := strings.Cut(id, "@")
		if !ok || name != "tick" {
			continue
		}
		ms, err := strconv.ParseInt(at, 10, 64)
		must(t, err)
		nominal = append(nominal, ms)
		firsts := 0
		for _, r := range rs {
			if r.attempt == 1 {
				firsts++
			}
		}
		inWindow := ms >= windowFrom.Add(-time.Second).UnixMilli() && ms <= windowTo.Add(time.Second).UnixMilli()
		if firsts != 1 && !(firsts == 2 && inWindow) {
			t.Errorf("%s first published %d times", id, firsts)
		}
	}
	slices.Sort(nominal)
	for j := 1; j < len(nominal); j++ {
		if nominal[j]-nominal[j-1] != 1000 {
			t.Errorf("tick: occurrence %d then %d: one missed", nominal[j-1], nominal[j])
		}
	}
	t.Logf("tick: %d occurrences, each published once", len(nominal))
}

// storesOf returns a client of the test Redis and stores of the
// namespaces of w and to on it.
func storesOf(t *testing.T, w, to *world) (*redis.Client, *shard.Store, *shard.Store) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	src, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	dst, err := shard.NewStore(rdb, to.ns)
	must(t, err)
	return rdb, src, dst
}

// TestLiveMoveDeadSurvivesAKill: the mover SIGKILLed between a page of
// dead messages' copy and their removal from the source, then, before the
// rerun, one of them redriven on the source and one purged there. The
// rerun finds the others on the target and removes them from the source,
// and purges the copies of the two from the target: each message ends on
// one side, as the source left it (the redriven one scheduled there, due
// within --keep, for the source's fleet).
func TestLiveMoveDeadSurvivesAKill(t *testing.T) {
	w := newWorld(t, 4)
	to := w.sibling("-to")
	ctx := context.Background()
	rdb, src, dst := storesOf(t, w, to)
	var in strings.Builder
	since := time.Now().Add(-time.Hour).UnixMilli()
	for j := range 30 {
		fmt.Fprintf(&in, `{"id":"dead-%02d","topic":"t","body":"b%d","dead":{"since_ms":%d,"reason":"NO_ROUTE"}}`+"\n", j, j, since+int64(j))
	}
	w.succeed(in.String(), "enqueue", "-f", "-")
	dead := func(st *shard.Store) map[string]bool {
		t.Helper()
		ds, err := st.DeadList(ctx, 4, 100)
		must(t, err)
		ids := map[string]bool{}
		for _, d := range ds {
			ids[d.ID] = true
		}
		return ids
	}

	move := []string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--keep", "5s", "--to-shards", "4"}
	killed := w.sibling("", "DELAYQ_TEST_KILL_AT=dead-copied:1")
	if _, e, code := killed.delayq("", move...); code != -1 {
		t.Fatalf("a mover to be killed after its first page of dead messages is copied: exit %d %s", code, e)
	}
	if s, d := dead(src), dead(dst); len(s) != 30 || len(d) != 30 {
		t.Fatalf("after the kill: %d dead on the source and %d on the target, want 30 on both", len(s), len(d))
	}
	journals := 0
	for i := range 4 {
		n, err := rdb.Exists(ctx, shard.MoveDeadJournalKey(w.ns, i)).Result()
		must(t, err)
		journals += int(n)
	}
	if journals == 0 {
		t.Fatal("the killed mover left no dead journal")
	}
	w.succeed("", "dead", "redrive", "dead-03")
	w.succeed("", "dead", "purge", "dead-07")

	out := w.succeed("", move...)
	t.Logf("move: %s", strings.Join(strings.Fields(out), " "))
	if !strings.Contains(out, "dead: moved 0, there already 28, changed on the source meanwhile 2") {
		t.Errorf("move: %s\nwant the 28 found on the target, and the 2 changed on the source", out)
	}
	if s := dead(src); len(s) != 0 {
		t.Errorf("dead left on the source: %v", s)
	}
	d := dead(dst)
	if len(d) != 28 || d["dead-03"] || d["dead-07"] {
		t.Errorf("dead on the target: %d %v, want the 28 others", len(d), d)
	}
	if out := w.succeed("", "inspect", "dead-03"); !strings.Contains(out, "scheduled") {
		t.Errorf("the redriven message on the source:\n%s", out)
	}
	if _, _, code := to.delayq("", "inspect", "dead-03"); code == 0 {
		t.Error("the redriven message has a copy on the target too")
	}
	for i := range 4 {
		if n, err := rdb.Exists(ctx, shard.MoveDeadJournalKey(w.ns, i)).Result(); err != nil || n != 0 {
			t.Errorf("shard %d's dead journal is still there (%d, %v)", i, n, err)
		}
	}
}

// TestLiveMoveTakesTheSettings: the move copies what operators set at
// runtime: flow limits and pauses, release classes and the far tier's
// settings before the messages, quotas after them (the target's scanner
// then counts what arrived); a setting the target has already stays as
// the target has it.
func TestLiveMoveTakesTheSettings(t *testing.T) {
	w := newWorld(t, 4)
	to := w.sibling("-to")
	w.succeed("", "flow", "limit", "billing.x", "50", "--burst", "10")
	w.succeed("", "flow", "pause", "mail.x")
	w.succeed("", "flow", "limit", "sms.x", "5")
	to.succeed("", "flow", "limit", "sms.x", "7") // the target's own
	w.succeed("", "class", "set", "urgent", "--topics", "auth.*", "--strict")
	w.succeed("", "class", "set", "reports", "--topics", "report.*", "--weight", "3")
	w.succeed("", "far", "on", "--horizon", "2h", "--width", "10m")
	w.succeed("", "quota", "set", "billing", "--pending", "1000", "--rules", "topic=billing.*")
	var in strings.Builder
	for k := range 150 {
		delay := time.Hour // near: within the horizon
		if k >= 100 {
			delay = 24 * time.Hour // far
		}
		fmt.Fprintf(&in, `{"id":"s-%03d","topic":"billing.x","delay_ms":%d,"body":"x"}`+"\n", k, delay.Milliseconds())
	}
	w.succeed(in.String(), "enqueue", "-f", "-")

	out := w.succeed("", "move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--to-shards", "4", "--keep", "5s")
	t.Logf("move: %s", strings.Join(strings.Fields(out), " "))
	for _, want := range []string{"settings: copied 5 (flow billing.x, flow mail.x, class reports, class urgent, far tier), the target's own kept 1 (flow sms.x)",
		"moved 150,", "quotas: copied 1 (quota billing)"} {
		if !strings.Contains(out, want) {
			t.Errorf("move: %s\nwant %q", out, want)
		}
	}
	var flows []httpapi.Flow
	must(t, json.Unmarshal([]byte(to.succeed("", "flow", "--json")), &flows))
	got := map[string]string{}
	for _, f := range flows {
		got[f.Topic] = fmt.Sprintf("rate %g burst %d paused %v", f.Rate, f.Burst, f.Paused)
	}
	for topic, want := range map[string]string{"billing.x": "rate 50 burst 10 paused false", "mail.x": "rate 0 burst 0 paused true", "sms.x": "rate 7 burst 0 paused false"} {
		if got[topic] != want {
			t.Errorf("the target's flow of %s: %q, want %q (all: %v)", topic, got[topic], want, got)
		}
	}
	if out := to.succeed("", "class"); !strings.Contains(out, "urgent") || !strings.Contains(out, "reports") {
		t.Errorf("the target's classes:\n%s", out)
	}
	if out := to.succeed("", "far"); !strings.Contains(out, "2h") {
		t.Errorf("the target's far tier:\n%s", out)
	}
	// The target's scanner counts the 150 that arrived in the quota.
	to.scan()
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		var qs []shard.QuotaUsage
		out, _, code := to.delayq("", "quota", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &qs) == nil && len(qs) == 1 && qs[0].Count == 150
	}, func() string {
		out, _, _ := to.delayq("", "quota")
		return "the target's quota does not count the 150:\n" + out
	})
}
