package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestRedisRestartLosesNothing: Redis (AOF, appendfsync always) is killed
// and restarted in the middle of a flow; every message still arrives, none
// early. Scanners back off while it is down, and reload their scripts
// (Redis forgets them) when it is back.
func TestRedisRestartLosesNothing(t *testing.T) {
	own, err := shardtest.StartRedis(shardtest.RedisOptions{AOF: true})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	w := newWorld(t, 8, "DELAYQ_REDIS_ADDRS="+own.Addr, "DELAYQ_LEASE=3s")
	w.consume()
	w.scan()
	w.scan()
	in, ids := w.jsonl(3000, 3*time.Second, "rr")
	if out, e, code := w.delayq(in, "enqueue", "-f", "-"); code != 0 || !strings.Contains(out, "enqueued 3000") {
		t.Fatalf("enqueue: %d %s %s", code, out, e)
	}
	w.waitSome(500, 30*time.Second)
	own.Kill()
	time.Sleep(time.Second) // the outage itself, not a wait for a condition
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	dups := w.waitDelivered(ids, 90*time.Second)
	t.Logf("Redis restarted mid-flow: %d duplicates", dups)
}
