package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestEndToEndCluster: the flow on a 3-master Redis Cluster, with a master
// killed and restarted (AOF, appendfsync always) in the middle: every
// message still arrives, none early; stats shows which node holds a shard.
func TestEndToEndCluster(t *testing.T) {
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{AOF: true})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	w := newWorld(t, 16, "DELAYQ_REDIS_ADDRS="+strings.Join(c.Addrs, ","), "DELAYQ_LEASE=3s")
	w.consume()
	w.scan()
	w.scan()
	in, ids := w.jsonl(3000, 3*time.Second, "cl")
	if out, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 || !strings.Contains(out, "enqueued 3000") {
		t.Fatalf("enqueue: %d %s %s", code, out, e)
	}
	w.waitSome(500, 30*time.Second)
	victim := c.Nodes[1]
	victim.Kill()
	w.mu.Lock()
	seen := len(w.got)
	w.mu.Unlock()
	t.Logf("master %s killed after %d deliveries", victim.Addr, seen)
	time.Sleep(time.Second) // the outage itself, not a wait for a condition
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	dups := w.waitDelivered(ids, 90*time.Second)
	t.Logf("cluster flow with a master restart: %d duplicates", dups)
	out, _, code := w.delayq("", "stats", "--json")
	var v struct {
		Shards []struct {
			Node string `json:"node"`
		} `json:"shards"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("stats: %d %v %s", code, err, out)
	}
	nodes := map[string]bool{}
	for _, s := range v.Shards {
		nodes[s.Node] = true
	}
	if len(nodes) != 3 || nodes[""] {
		t.Errorf("stats shows shards on nodes %v, want the 3 masters", nodes)
	}
}
