package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// withConsul adds the Consul settings to a world.
func (w *world) withConsul(t *testing.T) string {
	t.Helper()
	shardtest.Require(t, consulErr)
	key := balance.DefaultConsulKey(w.ns)
	w.env = append(w.env, "DELAYQ_CONSUL_ADDR="+consul.Addr)
	return key
}

func (w *world) setM(m int) {
	w.t.Helper()
	out, e, code := w.delayq("", "shards", "set", fmt.Sprint(m))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("-> %d", m)) {
		w.t.Fatalf("shards set %d: %d %s %s", m, code, out, e)
	}
}

// TestResizeUnderLoad: 3 scanner processes, a producer writing all the
// time, M changed 4 -> 16 -> 2 -> 8. Every message arrives, none early,
// cancelled ones never; messages written under an old M can still be
// cancelled and rescheduled; at the end every shard is empty.
func TestResizeUnderLoad(t *testing.T) {
	w := newWorld(t, 16)
	resizeUnderLoad(t, w, redisSrv.Client(t))
}

// TestResizeUnderLoadOnCluster: the same on a 3-master Redis Cluster.
func TestResizeUnderLoadOnCluster(t *testing.T) {
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	w := newWorld(t, 16, "DELAYQ_REDIS_ADDRS="+strings.Join(c.Addrs, ","))
	resizeUnderLoad(t, w, rdb)
}

func resizeUnderLoad(t *testing.T, w *world, rdb redis.UniversalClient) {
	key := w.withConsul(t)
	w.consume()
	w.setM(4)
	for range 3 {
		w.scan()
	}

	// The test's producer follows M from Consul like a service would.
	prod, layout := w.consulProducer(t, consul.Client(), key, rdb)

	// Far-future messages written under M=4, cancelled or moved later.
	var far []shard.Message
	for i := range 100 {
		far = append(far, shard.Message{ID: fmt.Sprintf("far-%d", i), Exchange: w.exchange, RoutingKey: "rk", Delay: time.Hour})
	}
	if _, err := prod.EnqueueBatch(t.Context(), far); err != nil {
		t.Fatal(err)
	}

	var cancelMu sync.Mutex
	cancelled := map[string]bool{}
	live := w.produce(t, prod, "live", 20*time.Millisecond, 40, 1500*time.Millisecond, func(n, i int, id string) bool {
		if i != 0 || n%5 != 0 { // cancel some right away
			return true
		}
		err := prod.Cancel(t.Context(), id)
		if err == nil {
			cancelMu.Lock()
			cancelled[id] = true
			cancelMu.Unlock()
			return false
		}
		if !errors.Is(err, shard.ErrInFlight) {
			t.Errorf("cancel %s: %v", id, err)
		}
		return true
	})
	for _, m := range []int{16, 2, 8} {
		time.Sleep(1500 * time.Millisecond) // load flows between resizes, by design
		w.setM(m)
		shardtest.WaitFor(t, 5*time.Second, func() bool { n, err := layout.ShardCount(); return err == nil && n == m },
			func() string { return fmt.Sprintf("producer did not see M=%d", m) })
	}
	time.Sleep(1500 * time.Millisecond)
	expect := live.Stop()

	// Written under M=4, found under M=8 after passing through 16 and 2.
	for i := range 100 {
		id := fmt.Sprintf("far-%d", i)
		if i%2 == 0 {
			must(t, prod.Cancel(t.Context(), id))
			continue
		}
		if _, err := prod.RescheduleAfter(t.Context(), id, 0); err != nil {
			t.Fatalf("reschedule %s across resizes: %v", id, err)
		}
		expect = append(expect, id)
	}
	ids := expect
	w.waitDelivered(ids, 60*time.Second)
	w.mu.Lock()
	for id := range cancelled {
		if len(w.got[id]) > 0 {
			t.Errorf("cancelled %s was delivered", id)
		}
	}
	for i := 0; i < 100; i += 2 {
		if len(w.got[fmt.Sprintf("far-%d", i)]) > 0 {
			t.Errorf("cancelled far-%d was delivered", i)
		}
	}
	w.mu.Unlock()
	t.Logf("%d delivered, %d cancelled while M went 4 -> 16 -> 2 -> 8", len(ids), len(cancelled)+50)

	shardtest.WaitFor(t, 10*time.Second, func() bool {
		out, _, _ := w.delayq("", "stats", "--json")
		var v struct {
			Shards []any                                     `json:"shards"`
			Total  struct{ Scheduled, InFlight, Dead int64 } `json:"total"`
		}
		return json.Unmarshal([]byte(out), &v) == nil && len(v.Shards) >= 16 &&
			v.Total.Scheduled+v.Total.InFlight+v.Total.Dead == 0
	}, func() string { out, _, _ := w.delayq("", "stats"); return "shards not empty:\n" + out })
	out, _, _ := w.delayq("", "shards")
	if !strings.Contains(out, "M 8 from consul") || !strings.Contains(out, "3 scanner(s) registered") {
		t.Errorf("delayq shards:\n%s", out)
	}
	if out, _, _ = w.delayq("", "stats"); !strings.Contains(out, "3 scanner(s) registered") {
		t.Errorf("delayq stats does not show the fleet:\n%s", out)
	}
}

func TestShardsSetValidates(t *testing.T) {
	w := newWorld(t, 16)
	w.withConsul(t)
	for _, bad := range []string{"abc", "0", "-3", "1e9", "5000"} {
		if _, e, code := w.delayq("", "shards", "set", bad); code != 2 || !strings.Contains(e, "M ") {
			t.Errorf("shards set %s: code %d, %s", bad, code, e)
		}
	}
	w.setM(4)
	if out, _, _ := w.delayq("", "shards"); !strings.Contains(out, "M 4 from consul") {
		t.Errorf("after set: %s", out)
	}
}
