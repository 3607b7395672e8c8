package main_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestRedisThatCanEvictIsRefused: on a Redis whose maxmemory-policy is
// allkeys-lru, delayq scan, delayq serve and delayq enqueue refuse to
// start, naming the master, the setting and the fix; with
// DELAYQ_REDIS_ALLOW_EVICTION=true they run and warn. That Redis has no
// persistence either: the scanner warns of it at start and its gauges say
// both.
func TestRedisThatCanEvictIsRefused(t *testing.T) {
	lru, err := shardtest.StartRedis(shardtest.RedisOptions{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	shardtest.Require(t, err)
	t.Cleanup(lru.Close)
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+lru.Addr)
	for _, args := range [][]string{{"scan"}, {"serve"}, {"enqueue", "--id", "refused", "--topic", "t", "--delay", "1m"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(append([]string{}, w.env...), "DELAYQ_METRICS_ADDR=off", "DELAYQ_HTTP_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		cancel()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 {
			t.Errorf("delayq %v on allkeys-lru: %v, want exit 1\n%s", args, err, out)
		}
		for _, want := range []string{"redis " + lru.Addr + ": maxmemory-policy allkeys-lru", "maxmemory-policy noeviction", "DELAYQ_REDIS_ALLOW_EVICTION=true"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("delayq %v on allkeys-lru does not say %q:\n%s", args, want, out)
			}
		}
	}

	// Accepted: they run, and say what they accepted.
	w.env = append(w.env, "DELAYQ_REDIS_ALLOW_EVICTION=true")
	if out, _, _ := w.delayq("", "inspect", "refused"); !strings.Contains(out, "unknown") {
		t.Errorf("the refused enqueue wrote something:\n%s", out)
	}
	p := w.scan()
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		code, _ := get("http://" + p.metrics + "/readyz")
		return code == 200
	}, func() string { return "the scanner never got ready:\n" + p.log.String() })
	for _, want := range []string{"maxmemory-policy allkeys-lru", "accepted by configuration", "no persistence"} {
		if !strings.Contains(p.log.String(), want) {
			t.Errorf("the scanner's log does not warn %q:\n%s", want, p.log.String())
		}
	}
	body := p.scrape(t)
	for _, series := range []string{
		`delayq_redis_evicts_messages{master="` + lru.Addr + `",policy="allkeys-lru"} 1`,
		`delayq_redis_persistence{master="` + lru.Addr + `",mode="none"} 1`,
		`delayq_redis_maxmemory_bytes{master="` + lru.Addr + `"} 6.7108864e+07`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	_, log := w.serveLogged(t)
	shardtest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(log.String(), "accepted by configuration") },
		func() string { return "serve does not warn:\n" + log.String() })
	if _, e, code := w.delayq("", "enqueue", "--id", "accepted", "--topic", "t", "--delay", "1m"); code != 0 {
		t.Errorf("enqueue with the override: exit %d\n%s", code, e)
	}
	if out, _, _ := w.delayq("", "stats"); !strings.Contains(out, "redis "+lru.Addr+": used") || !strings.Contains(out, "UNSAFE") {
		t.Errorf("stats does not show the master's settings:\n%s", out)
	}
}
