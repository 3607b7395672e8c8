package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestFarPromotionSurvivesKills: 200,000 messages wait in the far tier
// (a horizon of 3 s and buckets of 0.5 s: hours compressed into seconds),
// each enqueued 4-14 s before it is due, while one of two scanners is
// SIGKILLed again and again, from the first enqueue until the last
// bucket is promoted. Every message arrives, none before its due time,
// each with the due time it was given, and a second delivery is only ever
// a redelivery (attempt > 1): a promotion cut short and done again never
// makes two copies; and no bucket is left far for the horizon past its
// start.
func TestFarPromotionSurvivesKills(t *testing.T) {
	const n = 200_000
	w := newWorld(t, 8, "DELAYQ_LEASE=2s", "DELAYQ_GOROUTINES=16")
	w.consume()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	must(t, store.EnableFar(context.Background(), shard.FarSettings{Horizon: 3 * time.Second, BucketWidth: 500 * time.Millisecond, IndexSlots: 256, Since: 1}))
	prod := shard.NewProducer(store, balance.Static(8), shard.ProducerOptions{})
	steady := w.scan()
	victim := w.scan()

	// The producer, in its own goroutine: batches of 5,000, each due 4-14
	// s after it is sent, so that each is far when placed however slow
	// the box is.
	type placed struct {
		ids  []string
		due  map[string]int64
		last int64
		err  error
	}
	done := make(chan placed, 1)
	go func() {
		p := placed{due: make(map[string]int64, n)}
		defer func() { done <- p }()
		for from := 0; from < n; from += 5000 {
			at := time.Now().Add(4 * time.Second)
			msgs := make([]shard.Message, 0, 5000)
			for i := from; i < from+5000; i++ {
				msgs = append(msgs, shard.Message{ID: fmt.Sprintf("far-%d", i), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"),
					At: at.Add(time.Duration(rand.Int64N(int64(10 * time.Second))))})
			}
			res, err := prod.EnqueueBatch(context.Background(), msgs)
			for _, r := range res {
				if err == nil {
					err = r.Err
				}
				p.ids, p.due[r.ID], p.last = append(p.ids, r.ID), r.Due.UnixMilli(), max(p.last, r.Due.UnixMilli())
			}
			if p.err = err; err != nil {
				return
			}
		}
	}()
	// Kill until a second before the last message is due; meanwhile watch
	// how many wait far (placed and not yet promoted) at most, and how long
	// past its start a bucket was seen still far (promotion is meant to be
	// done a good part of the horizon before: shard's doc.go).
	kills, peak := 0, int64(0)
	var worst time.Duration
	var p placed
	for got := false; !got || time.Now().Before(time.UnixMilli(p.last).Add(-time.Second)); {
		select {
		case p = <-done:
			got = true
			must(t, p.err)
		case <-time.After(time.Duration(300+rand.IntN(400)) * time.Millisecond): // random moments, by design
			victim.kill()
			kills++
			victim = w.scan()
		}
		var live int64
		for i := range 8 {
			v, _ := rdb.HGet(context.Background(), shard.FarMetaKeyOf(w.ns, i), "live").Int64()
			live += v
			if head, _ := rdb.ZRangeWithScores(context.Background(), shard.FarDirKeyOf(w.ns, i), 0, 0).Result(); len(head) > 0 {
				worst = max(worst, time.Since(time.UnixMilli(int64(head[0].Score))))
			}
		}
		peak = max(peak, live)
	}
	// On this load the box is saturated (the deliveries run seconds late),
	// and every round trip of a promoter waits behind the claims; still,
	// any process promotes a bucket its owner left (a victim, killed
	// before its first round, owns shards until the membership drops it),
	// so none is left far for as long as the horizon past its start.
	if worst > 3*time.Second {
		t.Errorf("a bucket was still far %s after its start: promotion fell behind by more than the horizon", worst)
	}
	if peak < n/4 {
		t.Fatalf("at most %d of %d messages waited far at once; want a good share of them", peak, n)
	}
	dups := w.waitDelivered(p.ids, 180*time.Second)
	w.mu.Lock()
	twice := 0
	var lastArrival time.Time
	for _, id := range p.ids {
		firsts := 0
		for _, r := range w.got[id] {
			if r.dueMs != p.due[id] {
				t.Errorf("%s delivered as due %d, enqueued due %d", id, r.dueMs, p.due[id])
			}
			if r.attempt == 1 {
				firsts++
				if r.at.After(lastArrival) {
					lastArrival = r.at
				}
			}
		}
		if firsts > 1 {
			twice++
		}
	}
	w.mu.Unlock()
	if twice > 0 {
		t.Errorf("%d messages delivered twice as first deliveries: promoted twice", twice)
	}
	// 200,000 messages fall due within about 10 s, more than this box
	// publishes in that time under the race detector and the kills: the
	// last arrives some 30 s after its due time; a bound of 90 s catches a
	// fleet that stalls (a bucket left unpromoted, leases that never end).
	if tail := lastArrival.Sub(time.UnixMilli(p.last)); tail > 90*time.Second {
		t.Errorf("the last message arrived %s after the last due time", tail)
	}
	t.Logf("%d messages (up to %d far at once), %d SIGKILLs during placement and promotion, a bucket far at most %s past its start; %d duplicates, all redeliveries",
		n, peak, kills, max(0, worst), dups)
	if err := steady.term(30 * time.Second); err != nil {
		t.Errorf("steady scanner: %v", err)
	}
}

// TestFarTierFromTheCLI: delayq far turns the tier on only once every
// live scanner promotes far messages (an older process is named), shows
// what waits far, lists a far message as far, and turns the tier off, after
// which the scanners promote what was far. Bad input is refused naming
// the flag.
func TestFarTierFromTheCLI(t *testing.T) {
	w := newWorld(t, 2)
	for _, args := range [][]string{
		{"far", "on", "--horizon", "-1h"},
		{"far", "off", "--horizon", "1h"},
		{"far", "sideways"},
		{"far", "on", "now"},
	} {
		if _, e, code := w.delayq("", args...); code != 2 || !strings.Contains(e, "usage") {
			t.Errorf("%v: exit %d %q, want 2 with the usage", args, code, e)
		}
	}
	if out, _, code := w.delayq("", "far"); code != 0 || !strings.Contains(out, "far tier: off") {
		t.Fatalf("far before on: exit %d %q", code, out)
	}
	// An older scanner: a fleet member without the mark.
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	old := redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "0123456789abcdef"}
	must(t, rdb.ZAdd(context.Background(), shard.ScannersKey(w.ns), old).Err())
	if _, e, code := w.delayq("", "far", "on"); code != 1 || !strings.Contains(e, "0123456789abcdef") || !strings.Contains(e, "upgrade every process") {
		t.Fatalf("far on with an older scanner: exit %d %q", code, e)
	}
	must(t, rdb.ZRem(context.Background(), shard.ScannersKey(w.ns), old.Member).Err())
	scanner := w.scan()
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		out, _, _ := w.delayq("", "far")
		return strings.Contains(out, "scanners: 1 live\n")
	}, func() string { return "the scanner never joined: " + scanner.log.String() })
	out, e, code := w.delayq("", "far", "on", "--horizon", "2h", "--width", "10m")
	if code != 0 || !strings.Contains(out, "far tier: on; messages due more than 2h0m0s ahead") || !strings.Contains(e, "far on") {
		t.Fatalf("far on: exit %d %q %q", code, out, e)
	}
	// Placement far begins 10 s after the tier is turned on (producers
	// that have not seen it yet enqueue near until then): wait for it.
	farID := ""
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		id := fmt.Sprintf("later-%d", time.Now().UnixNano())
		farID = id
		if _, _, code := w.delayq("", "enqueue", "--id", id, "--exchange", w.exchange, "--delay", "5h", "--body", "x"); code != 0 {
			return false
		}
		out, _, _ := w.delayq("", "inspect", "--json", id)
		return strings.Contains(out, `"far": true`)
	}, func() string { return "no enqueue went far" })
	out, _, code = w.delayq("", "far", "--json")
	if code != 0 || !strings.Contains(out, `"state": "on"`) || !strings.Contains(out, `"horizon": "2h0m0s"`) {
		t.Fatalf("far --json: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "list", "--prefix", farID); code != 0 || !strings.Contains(out, " far ") {
		t.Fatalf("list: exit %d %q", code, out)
	}
	if out, _, code = w.delayq("", "far", "off"); code != 0 || !strings.Contains(out, "far tier: turned off") {
		t.Fatalf("far off: exit %d %q", code, out)
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		out, _, _ := w.delayq("", "far", "--json")
		return strings.Contains(out, `"far": 0`)
	}, func() string { out, _, _ := w.delayq("", "far"); return "far messages were not promoted: " + out })
	if out, _, code = w.delayq("", "list", "--prefix", farID); code != 0 || strings.Contains(out, " far ") || !strings.Contains(out, " near ") {
		t.Fatalf("list after off: exit %d %q", code, out)
	}
}

// TestConsoleShowsFarMessages: in headless Chromium, the overview counts
// the messages waiting far, the Scheduled page lists a far message in its
// place, marked far, and the Far page shows the tier and turns it off
// after a confirmation (an admin's), after which the far message is
// promoted.
func TestConsoleShowsFarMessages(t *testing.T) {
	w := newWorld(t, 2)
	ctx := browser(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	must(t, store.EnableFar(context.Background(), shard.FarSettings{Horizon: time.Hour, BucketWidth: 10 * time.Minute, Since: 1}))
	for _, c := range []struct{ id, delay string }{{"soon-1", "30m"}, {"trial-end-7", "72h"}} {
		if _, e, code := w.delayq("", "enqueue", "--id", c.id, "--topic", "t", "--delay", c.delay); code != 0 {
			t.Fatal(e)
		}
	}
	base := w.serve(t)
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleAdmin), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("totals"))))
	far, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("t-far")))
	must(t, err)
	scheduled, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("t-scheduled")))
	must(t, err)
	if far != "1" || scheduled != "1" {
		t.Errorf("overview: far %q, scheduled %q; want 1 and 1", far, scheduled)
	}
	must(t, chromedp.Do(ctx, chromedp.Navigate(base+"/scheduled"), chromedp.WaitVisible(chromedp.ID("scheduled"))))
	rows, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#scheduled tbody")))
	must(t, err)
	if i, j := strings.Index(rows, "soon-1"), strings.Index(rows, "trial-end-7"); i < 0 || j < i || strings.Count(rows, "far") != 1 ||
		!strings.Contains(rows[j:], "far") {
		t.Errorf("scheduled page rows:\n%s\nwant soon-1, then trial-end-7 marked far", rows)
	}
	scanner := w.scan() // the promoter, once the tier is off
	must(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("nav-far")), chromedp.WaitVisible(chromedp.ID("far-status"))))
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("far-state")))
	must(t, err)
	count, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("far-count")))
	must(t, err)
	if state != "on" || count != "1" {
		t.Errorf("far page: state %q, %q far; want on, 1", state, count)
	}
	must(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("far-turn-off")), chromedp.WaitVisible(chromedp.ID("question")),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("done"))))
	if state, err = chromedp.Run(ctx, chromedp.Text(chromedp.ID("far-state"))); err != nil || state != "turned-off" {
		t.Errorf("after turning off: state %q, %v", state, err)
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		out, _, _ := w.delayq("", "inspect", "--json", "trial-end-7")
		return strings.Contains(out, `"state": "scheduled"`) && !strings.Contains(out, `"far": true`)
	}, func() string { return "trial-end-7 was not promoted: " + scanner.log.String() })
}

// TestFarPromotionAcrossResize: three scanner processes, a producer placing
// far messages all the time (a horizon of 3 s, buckets of 0.5 s), and M
// changed 8 -> 16 -> 8 from Consul while buckets placed under each M are
// promoted. Every message arrives once as a first delivery, none early,
// each with the due time it was given: the scanners promote the shards up
// to the high-water mark, so the far buckets an older M filled are
// promoted like the others.
func TestFarPromotionAcrossResize(t *testing.T) {
	w := newWorld(t, 16)
	key := w.withConsul(t)
	w.consume()
	w.setM(8)
	for range 3 {
		w.scan()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	prod, layout := w.consulProducer(t, consul.Client(), key, rdb)
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	must(t, store.EnableFar(context.Background(), shard.FarSettings{Horizon: 3 * time.Second, BucketWidth: 500 * time.Millisecond, IndexSlots: 256, Since: 1}))

	// Batches of 500 every 100 ms, each due 4-8 s after it is sent: far
	// when placed, promoted 1-5 s later.
	var mu sync.Mutex
	due := map[string]int64{}
	far := 0
	stop := make(chan struct{})
	var producer sync.WaitGroup
	producer.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // a steady producer, not a wait
			}
			msgs := make([]shard.Message, 500)
			for i := range msgs {
				msgs[i] = shard.Message{ID: fmt.Sprintf("fr-%d-%d", n, i), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"),
					Delay: 4*time.Second + time.Duration(rand.Int64N(int64(4*time.Second)))}
			}
			res, err := prod.EnqueueBatch(context.Background(), msgs)
			if err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			mu.Lock()
			for _, r := range res {
				if r.Err != nil {
					t.Errorf("enqueue %s: %v", r.ID, r.Err)
					continue
				}
				due[r.ID] = r.Due.UnixMilli()
			}
			mu.Unlock()
			var live int64
			for i := range 16 {
				v, _ := rdb.HGet(context.Background(), shard.FarMetaKeyOf(w.ns, i), "live").Int64()
				live += v
			}
			mu.Lock()
			far = max(far, int(live))
			mu.Unlock()
		}
	})
	for _, m := range []int{16, 8} {
		time.Sleep(2 * time.Second) // far buckets fill under each M, by design
		w.setM(m)
		shardtest.WaitFor(t, 5*time.Second, func() bool { n, err := layout.ShardCount(); return err == nil && n == m },
			func() string { return fmt.Sprintf("producer did not see M=%d", m) })
	}
	time.Sleep(2 * time.Second)
	close(stop)
	producer.Wait()
	mu.Lock()
	ids := make([]string, 0, len(due))
	for id := range due {
		ids = append(ids, id)
	}
	peak := far
	mu.Unlock()
	if peak < len(ids)/10 {
		t.Fatalf("at most %d of %d messages waited far at once: the test proves nothing", peak, len(ids))
	}
	w.waitDelivered(ids, 90*time.Second)
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
		if firsts != 1 {
			t.Errorf("%s delivered %d times as a first delivery", id, firsts)
		}
	}
	t.Logf("%d far messages placed while M went 8 -> 16 -> 8 (up to %d far at once), all delivered once", len(ids), peak)
}

// TestFarBulkCancelSurvivesItsCaller: 40,000 of 80,000 far messages (an id
// prefix) are cancelled in bulk; the first `delayq clear` is SIGKILLed after
// its 100th page (a page is a far bucket here), the same command run again
// ends with the exact total, a dry run then finds none, and every other
// far message is still there.
func TestFarBulkCancelSurvivesItsCaller(t *testing.T) {
	w := newWorld(t, 8)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	must(t, store.EnableFar(context.Background(), shard.FarSettings{Horizon: time.Hour, BucketWidth: time.Minute, Since: 1}))
	// 2-3 h ahead, over 60 buckets, each at the middle of its bucket: a
	// delay ending at a bucket's edge can land in the next bucket by
	// Redis's clock, and is then placed near (near is always right).
	mid := time.Now().Add(2 * time.Hour).Truncate(time.Minute).Add(30 * time.Second).UnixMilli()
	var in strings.Builder
	for i := range 40_000 {
		for _, prefix := range []string{"keep", "campaign-9"} {
			fmt.Fprintf(&in, `{"id":"%s-%06d","exchange":%q,"routing_key":"rk","at_ms":%d,"body":"x"}`+"\n",
				prefix, i, w.exchange, mid+int64(i%60)*60_000)
		}
	}
	if out, e, code := w.delayq(in.String(), "enqueue", "-f", "-"); code != 0 || !strings.Contains(out, "enqueued 80000") {
		t.Fatalf("enqueue: exit %d %s %s", code, out, e)
	}
	if st, err := store.FarStatus(context.Background(), 8); err != nil || st.Far != 80_000 {
		t.Fatalf("far status %+v, %v; want 80000 far", st, err)
	}
	cmd := exec.Command(bin, "clear", "--prefix", "campaign-9-", "--yes")
	cmd.Env = append(append([]string{}, w.env...), "DELAYQ_TEST_KILL_AT=page:100")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the first clear ended with %v, want SIGKILL after its 100th page:\n%s", err, out)
	}
	st, err := store.FarStatus(context.Background(), 8)
	must(t, err)
	if st.Far <= 40_000 || st.Far >= 80_000 {
		t.Fatalf("%d far after the killed clear: want some of the campaign cancelled, not all", st.Far)
	}
	left := st.Far
	stdout, e, code := w.delayq("", "clear", "--prefix", "campaign-9-", "--yes")
	if code != 0 || !strings.Contains(stdout, "cancelled 40000 (") || !strings.Contains(stdout, "by an earlier run of this job") {
		t.Fatalf("clear run again: exit %d %q %q, want cancelled 40000 with the earlier run's share", code, stdout, e)
	}
	if stdout, _, _ := w.delayq("", "clear", "--prefix", "campaign-9-", "--dry-run"); !strings.Contains(stdout, "would cancel 0 ") {
		t.Errorf("a dry run after the clear: %s", stdout)
	}
	if st, err := store.FarStatus(context.Background(), 8); err != nil || st.Far != 40_000 {
		t.Fatalf("far status after the clear %+v, %v; want the 40000 kept", st, err)
	}
	t.Logf("killed with %d of 80000 still far; run again: %s", left, strings.TrimSpace(stdout))
}
