package main_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
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

// TestRedisFullLosesNothing fills a Redis of 6 MB (noeviction) with 50,000
// enqueues through the SDK, the HTTP API and the AMQP ingress while
// nothing is due: every refused enqueue says Redis is full and names the
// limit, nothing is half-written, and the ingress holds what it cannot
// store in its queue. When the messages fall due the scanner delivers
// them at the limit, its acks free memory, and the ingress queue drains:
// every accepted message arrives, none early.
func TestRedisFullLosesNothing(t *testing.T) {
	full, err := shardtest.StartRedis(shardtest.RedisOptions{Args: []string{"--maxmemory", "6mb", "--maxmemory-policy", "noeviction"}})
	shardtest.Require(t, err)
	t.Cleanup(full.Close)
	const m = 4
	w := newWorld(t, m, "DELAYQ_REDIS_ADDRS="+full.Addr)
	s := newIngress(t, w)
	w.consume()
	ctx := context.Background()
	rdb := full.Client(t)
	st, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	prod := shard.NewProducer(st, balance.Static(m), shard.ProducerOptions{})
	due := time.Now().Add(20 * time.Second) // nothing falls due (and frees memory) while Redis fills
	body := []byte(strings.Repeat("b", 200))
	var accepted []string
	refused := 0
	for b := 0; b < 60; b++ { // 30,000 through the SDK
		msgs := make([]shard.Message, 500)
		for j := range msgs {
			msgs[j] = shard.Message{ID: fmt.Sprintf("sdk-%d-%d", b, j), Exchange: w.exchange, RoutingKey: "rk", Body: body, At: due}
		}
		res, _ := prod.EnqueueBatch(ctx, msgs)
		for _, r := range res {
			switch {
			case r.Err == nil:
				accepted = append(accepted, r.ID)
			case errors.Is(r.Err, shard.ErrRedisFull) && strings.Contains(r.Err.Error(), "maxmemory 6.0 MB"):
				refused++
			default:
				t.Fatalf("enqueue %s: %v, want ok or a clear 'Redis is full'", r.ID, r.Err)
			}
		}
	}
	if refused == 0 {
		t.Fatalf("%d accepted and none refused: Redis never filled up", len(accepted))
	}
	// The API answers 503 Redis is full.
	base, _ := w.serveLogged(t)
	fullAnswers := 0
	for j := range 100 {
		id := fmt.Sprintf("http-%d", j)
		code, answer := postJSON(t, base+"/v1/messages", fmt.Sprintf(
			`{"id":%q,"exchange":%q,"routing_key":"rk","at_ms":%d,"body":"x"}`, id, w.exchange, due.UnixMilli()))
		switch {
		case code == 201:
			accepted = append(accepted, id)
		case code == 503 && strings.Contains(answer, `"title":"Redis is full"`) && strings.Contains(answer, "maxmemory"):
			fullAnswers++
		default:
			t.Fatalf("POST %s: %d %s", id, code, answer)
		}
	}
	if fullAnswers == 0 {
		t.Errorf("no POST was refused as Redis is full")
	}
	// Nothing half-written: every envelope has its due entry and back.
	for i := range m {
		ks := shard.ShardKeys(w.ns, i)
		ids, err := rdb.HKeys(ctx, ks.Msg).Result()
		must(t, err)
		dues, err := rdb.ZRange(ctx, ks.Due, 0, -1).Result()
		must(t, err)
		slices.Sort(ids)
		slices.Sort(dues)
		if !slices.Equal(ids, dues) {
			t.Fatalf("shard %d: %d envelopes, %d due entries", i, len(ids), len(dues))
		}
	}
	if out, _, _ := w.delayq("", "stats"); !strings.Contains(out, "FULL") {
		t.Errorf("delayq stats does not say Redis is full:\n%s", out)
	}
	if _, e, code := w.delayq("", "enqueue", "--id", "cli-1", "--exchange", w.exchange, "--routing-key", "rk", "--delay", "1s"); code != 1 ||
		!strings.Contains(e, "redis is full") || !strings.Contains(e, "maxmemory 6.0 MB") {
		t.Errorf("delayq enqueue on a full Redis: exit %d\n%s", code, e)
	}
	if code, answer := getJSON(t, base+"/v1/stats"); code != 200 || !strings.Contains(answer, `"full":true`) {
		t.Errorf("GET /v1/stats does not say Redis is full: %d %s", code, answer)
	}
	// The ingress cannot store: its messages wait in RabbitMQ.
	ingressIDs := s.burst(t, 20_000, "amqp")
	p := w.scan(s.env)
	shardtest.WaitFor(t, 15*time.Second, func() bool {
		return strings.Contains(p.log.String(), "holding them unacked") && strings.Contains(p.log.String(), "redis is full")
	}, func() string {
		return "the ingress does not say it holds messages for a full Redis:\n" + p.log.String()
	})
	q, err := s.ch.QueueDeclarePassive(s.inQueue, true, false, false, false,
		amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx-" + w.ns})
	must(t, err)
	if time.Now().Before(due) && q.Messages == 0 {
		t.Errorf("Redis is full and nothing waits in the ingress queue")
	}
	t.Logf("Redis full: %d accepted, %d refused by the SDK, %d by the API; %d waiting in the ingress queue",
		len(accepted), refused, fullAnswers, q.Messages)
	// Due: delivered at the limit; acks free memory; the ingress drains.
	w.waitDelivered(append(accepted, ingressIDs...), 180*time.Second)
}

// postJSON posts body to url with the admin token.
func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	return apiCall(t, "POST", url, body)
}

// getJSON gets url with the admin token.
func getJSON(t *testing.T, url string) (int, string) {
	t.Helper()
	return apiCall(t, "GET", url, "")
}

func apiCall(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	return apiCallAs(t, consoleAdmin, method, url, body)
}

// apiCallAs is apiCall with token.
func apiCallAs(t *testing.T, token, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRedisSettingsAreWatched: a scanner on a Redis with persistence logs
// no warning of it; when the master loses its persistence (as a failover
// to a replica without an append-only file would), the scanner's next
// read logs it as an error and its gauge says so.
func TestRedisSettingsAreWatched(t *testing.T) {
	r, err := shardtest.StartRedis(shardtest.RedisOptions{AOF: true})
	shardtest.Require(t, err)
	t.Cleanup(r.Close)
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+r.Addr)
	p := w.scan("DELAYQ_REDIS_CHECK_INTERVAL=200ms")
	mode := func(m string) bool {
		return strings.Contains(p.scrape(t), `delayq_redis_persistence{master="`+r.Addr+`",mode="`+m+`"} 1`)
	}
	shardtest.WaitFor(t, 20*time.Second, func() bool { return mode("aof-always") },
		func() string { return "no aof-always gauge:\n" + p.scrape(t) })
	must(t, r.Client(t).ConfigSet(context.Background(), "appendonly", "no").Err())
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(p.log.String(), "redis settings changed: redis "+r.Addr+": no persistence") && mode("none")
	}, func() string { return "the lost persistence was not reported:\n" + p.log.String() })
	if strings.Contains(p.log.String(), "WARN\tredis settings: redis "+r.Addr+": no persistence") {
		t.Errorf("a warning of no persistence at the start, on a Redis with an append-only file:\n%s", p.log.String())
	}
}

// TestRedisSettingsNotReadable: where an ACL forbids CONFIG (as managed
// services do), the scanner says once that it cannot read appendfsync and
// save, and runs.
func TestRedisSettingsNotReadable(t *testing.T) {
	r, err := shardtest.StartRedis(shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(r.Close)
	must(t, r.Client(t).Do(context.Background(), "ACL", "SETUSER", "app", "on", ">app-password-123", "~*", "&*", "+@all", "-config").Err())
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+r.Addr, "DELAYQ_REDIS_USERNAME=app", "DELAYQ_REDIS_PASSWORD=app-password-123")
	p := w.scan("DELAYQ_REDIS_CHECK_INTERVAL=100ms")
	shardtest.WaitFor(t, 20*time.Second, func() bool {
		code, _ := get("http://" + p.metrics + "/readyz")
		return code == 200
	}, func() string { return "the scanner never got ready:\n" + p.log.String() })
	// A few more reads of the settings (CONFIG GETs the ACL refused),
	// which must not repeat the warning.
	admin := r.Client(t)
	refusedConfigs := func() int {
		stats, _ := admin.Info(context.Background(), "commandstats").Result()
		_, line, _ := strings.Cut(stats, "cmdstat_config|get:")
		_, rest, _ := strings.Cut(line, "rejected_calls=")
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		return n
	}
	seen := refusedConfigs()
	shardtest.WaitFor(t, 10*time.Second, func() bool { return seen > 0 && refusedConfigs() >= seen+3 },
		func() string {
			stats, _ := admin.Info(context.Background(), "commandstats").Result()
			return "the scanner stopped reading the settings:\n" + stats
		})
	if n := strings.Count(p.log.String(), "CONFIG GET is not allowed"); n != 1 {
		t.Errorf("the scanner said %d times that it cannot read CONFIG:\n%s", n, p.log.String())
	}
	if !strings.Contains(p.scrape(t), `delayq_redis_persistence{master="`+r.Addr+`",mode="unknown"} 1`) {
		t.Errorf("/metrics does not say the persistence is unknown")
	}
}
