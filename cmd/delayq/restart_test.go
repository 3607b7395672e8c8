package main_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestRedisRestartUnderLoad: two scanners, M = 16, a producer at 300
// msg/s with delays of 0.3-6 s; Redis (AOF, appendfsync always) is killed
// and restarted from its AOF 2 s later, while the fleet drains a burst of
// 3,000 messages that fell due 0.1 s before. Every acknowledged enqueue
// arrives, none early; once Redis is back, no shard is late beyond the
// reconnect (the workers' backoff, at most 2 s) plus a second, the burst's
// last message included: the scanners sweep their shards when they
// reconnect instead of waiting for the patrol to find those whose wake-up
// notices were lost, and the claims Redis ran just before the kill, whose
// replies were lost with it, are put back by their receipts instead of
// waiting for their lease (their first delivery is a first attempt). A
// duplicate is allowed only for a publish whose confirm did not come in
// time or came after its lease: the duplicates
// are counted against what the scanners released for a retry and the
// leases they lost, and named when those do not explain them.
func TestRedisRestartUnderLoad(t *testing.T) {
	own, err := shardtest.StartRedis(shardtest.RedisOptions{AOF: true})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	const lease = 8 * time.Second
	w := newWorld(t, 16, "DELAYQ_REDIS_ADDRS="+own.Addr, "DELAYQ_LEASE="+lease.String())
	w.consume()
	scanners := []*proc{w.scan(), w.scan()}

	rdb := redis.NewClient(&redis.Options{Addr: own.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	prod := shard.NewProducer(store, balance.Static(16), shard.ProducerOptions{})

	// The producer: 300 msg/s for 16 s; Redis is down from 6 s to 8 s.
	// Only what Redis acknowledged must arrive.
	var mu sync.Mutex
	var acked []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; n < 4800 && ctx.Err() == nil; n += 3 {
			<-tick.C
			for j := n; j < n+3; j++ {
				id := fmt.Sprintf("rs-%d", j)
				delay := 300*time.Millisecond + time.Duration(rand.Int64N(int64(5700*time.Millisecond)))
				cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, err := prod.Enqueue(cctx, shard.Message{ID: id, Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"), Delay: delay})
				ccancel()
				if err == nil {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				}
			}
		}
	})
	time.Sleep(5700 * time.Millisecond) // load before the outage: the test's timeline, not a wait for a condition
	// A burst due just before the kill, so that the kill finds the fleet
	// in the middle of it.
	burstDue := time.Now().Add(300 * time.Millisecond)
	burst := make([]shard.Message, 3000)
	for j := range burst {
		burst[j] = shard.Message{ID: fmt.Sprintf("burst-%d", j), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"), At: burstDue}
	}
	res, err := prod.EnqueueBatch(ctx, burst)
	must(t, err)
	for _, r := range res {
		must(t, r.Err)
	}
	time.Sleep(time.Until(burstDue.Add(100 * time.Millisecond)))
	own.Kill()
	killedAt := time.Now()
	w.mu.Lock()
	burstBefore := 0
	for j := range burst {
		if len(w.got[burst[j].ID]) > 0 {
			burstBefore++
		}
	}
	w.mu.Unlock()
	time.Sleep(2 * time.Second) // the outage itself
	must(t, own.Start())
	backAt := time.Now()
	wg.Wait()
	mu.Lock()
	ids := append([]string(nil), acked...)
	mu.Unlock()
	if len(ids) < 3000 {
		t.Fatalf("only %d enqueues acknowledged", len(ids))
	}
	for j := range burst {
		ids = append(ids, burst[j].ID)
	}
	dups := w.waitDelivered(ids, 60*time.Second)

	// Lateness once Redis was back: a message due before it returned
	// counts from its return.
	const allowed = 3 * time.Second // reconnect (backoff at most 2 s) + 1 s
	w.mu.Lock()
	var worst time.Duration
	orphaned := 0
	lateByShard := map[int]int{}
	var dupLines []string
	for _, id := range ids {
		rs := w.got[id]
		first := rs[0]
		from := time.UnixMilli(first.dueMs)
		if from.Before(backAt) {
			from = backAt
		}
		late := first.at.Sub(from)
		if first.dueMs < killedAt.UnixMilli() && first.attempt > 1 {
			// Leased by a claim Redis ran and persisted just before the
			// kill, whose reply was lost with it: its receipt should have
			// put it back at once, not its lease.
			orphaned++
		}
		worst = max(worst, late)
		if late > allowed {
			lateByShard[shard.Of(id, 16)]++
		}
		if len(rs) > 1 {
			dupLines = append(dupLines, fmt.Sprintf("%s due %d, deliveries at %v (attempts %d..%d)", id, first.dueMs,
				deliveryTimes(rs, backAt), rs[0].attempt, rs[len(rs)-1].attempt))
		}
	}
	w.mu.Unlock()
	var lastBurst time.Time
	w.mu.Lock()
	for j := range burst {
		lastBurst = maxTime(lastBurst, w.got[burst[j].ID][0].at)
	}
	w.mu.Unlock()
	t.Logf("Redis restarted under load: %d acknowledged, %d duplicates, worst lateness after its return %s; "+
		"the burst: %d of 3000 delivered before the kill, its last %s after Redis returned",
		len(ids), dups, worst, burstBefore, lastBurst.Sub(backAt).Round(time.Millisecond))
	if orphaned > 0 {
		t.Errorf("%d messages leased when Redis was killed were first delivered as a redelivery (attempt > 1): "+
			"their claims' receipts did not bring them back", orphaned)
	}
	if len(lateByShard) > 0 {
		t.Errorf("messages later than %s after Redis returned, by shard: %v", allowed, lateByShard)
	}
	// A duplicate needs a reason its scanner counted: a publish whose
	// confirm did not come in time (released for a retry), or a confirm
	// that came after its lease expired (a lost lease). An ack that failed
	// while Redis was away is sent again, so it is never one.
	released, lost, recovered := 0.0, 0.0, 0.0
	logs := ""
	for _, p := range scanners {
		_, body := get("http://" + p.metrics + "/metrics")
		r, _ := metricValue(body, "delayq_messages_released_total", "")
		l, _ := metricValue(body, "delayq_leases_lost_total", "")
		c, _ := metricValue(body, "delayq_claims_recovered_total", "")
		released, lost, recovered = released+r, lost+l, recovered+c
		logs += p.log.String()
	}
	t.Logf("duplicates %d; the scanners released %v publishes for a retry and lost %v leases; "+
		"%v messages whose claim's reply was lost with Redis were due again at once", dups, released, lost, recovered)
	if float64(dups) > released+lost {
		sort.Strings(dupLines)
		t.Errorf("%d duplicates, %v explained; first ones:\n%s\nscanner logs (tail):\n%s", dups, released+lost,
			strings.Join(dupLines[:min(20, len(dupLines))], "\n"), shardtest.Tail(logs, 60))
	}
}

// deliveryTimes lists when each delivery came, relative to since.
func deliveryTimes(rs []received, since time.Time) []string {
	out := make([]string, len(rs))
	for j, r := range rs {
		out[j] = r.at.Sub(since).Round(time.Millisecond).String()
	}
	return out
}

// TestReadyzAnswersOnAFrozenRedis: with Redis frozen (SIGSTOP), /readyz
// answers 503 naming Redis within a Kubernetes probe's default timeout
// of 1 s, and 200 again once Redis runs.
func TestReadyzAnswersOnAFrozenRedis(t *testing.T) {
	own, err := shardtest.StartRedis(shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+own.Addr)
	p := w.scan()
	base := "http://" + p.metrics
	shardtest.WaitFor(t, 20*time.Second, func() bool { code, _ := get(base + "/readyz"); return code == 200 },
		func() string { _, b := get(base + "/readyz"); return "never ready: " + b + "\n" + p.log.String() })
	must(t, syscall.Kill(own.Pid(), syscall.SIGSTOP))
	defer func() { _ = syscall.Kill(own.Pid(), syscall.SIGCONT) }()
	probe := &http.Client{Timeout: time.Second}
	for range 3 { // the first probe may find a pooled connection, the next ones wait for new ones
		resp, err := probe.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("/readyz on a frozen Redis: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(b), "redis") {
			t.Fatalf("/readyz on a frozen Redis: %d %q, want 503 naming redis", resp.StatusCode, b)
		}
	}
	must(t, syscall.Kill(own.Pid(), syscall.SIGCONT))
	shardtest.WaitFor(t, 20*time.Second, func() bool { code, _ := get(base + "/readyz"); return code == 200 },
		func() string { _, b := get(base + "/readyz"); return "not ready again: " + b })
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
