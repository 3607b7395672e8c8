package main_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/balance/consultest"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestOneShotCommandsLeaveNoConsulQuery: commands run in a loop against
// an agent that allows a client address 12 connections. A one-shot
// command reads M once; a blocking query it left behind would hold a
// connection on the agent for its wait time after the process exited, and
// the agent would refuse the address (HTTP 429) after a dozen runs.
func TestOneShotCommandsLeaveNoConsulQuery(t *testing.T) {
	own, err := consultest.StartConsulWith(consultest.Options{MaxConnsPerClient: 12})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	w := newWorld(t, 16, "DELAYQ_CONSUL_ADDR="+own.Addr)
	w.setM(4)
	for i := range 30 {
		_, e, code := w.delayq("", "schedule", "show", fmt.Sprintf("none-%d", i))
		if code != 1 || !strings.Contains(e, "schedule not found") || strings.Contains(e, "429") {
			t.Fatalf("run %d: exit %d %s", i, code, e)
		}
	}
	w.setM(8) // the agent still answers this address
}

// TestConsulOutageAndBadValue: under a flowing load, a bad M is written to
// Consul (ignored, the last good M stays), then Consul is stopped for 30 s
// and restarted (a dev agent comes back empty: the key is missing, still
// ignored). Scanners and the producer keep the last good M throughout and
// every message arrives.
func TestConsulOutageAndBadValue(t *testing.T) {
	own, err := consultest.StartConsul()
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	w := newWorld(t, 16, "DELAYQ_CONSUL_ADDR="+own.Addr)
	key := balance.DefaultConsulKey(w.ns)
	w.consume()
	w.setM(8)
	w.scan()
	w.scan()
	prod, layout := w.consulProducer(t, own.Client(), key, redisSrv.Client(t))
	flow := w.produce(t, prod, "co", 50*time.Millisecond, 10, time.Second, nil)
	w.waitSome(100, 20*time.Second)
	must(t, own.Put(t.Context(), key, "abc"))
	time.Sleep(time.Second) // load flows with the bad value in place
	if m, err := layout.ShardCount(); err != nil || m != 8 {
		t.Errorf("after a bad value M is %d, %v; want the last good 8", m, err)
	}
	own.Kill()
	time.Sleep(30 * time.Second) // the outage the fault matrix asks for
	if m, err := layout.ShardCount(); err != nil || m != 8 {
		t.Errorf("during the outage M is %d, %v; want 8", m, err)
	}
	must(t, own.Start())
	time.Sleep(2 * time.Second) // load flows with Consul back but the key gone
	all := flow.Stop()
	dups := w.waitDelivered(all, 60*time.Second)
	t.Logf("%d messages through a bad M and a 30 s Consul outage, %d duplicates", len(all), dups)
	// The restarted dev agent is empty: delayq shards says so.
	if out, _, _ := w.delayq("", "shards"); !strings.Contains(out, "is not set") {
		t.Errorf("delayq shards after the restart:\n%s", out)
	}
}

// TestWrongCredentialsFailClearly: a wrong Redis password or wrong AMQP
// credentials stop delayq scan at start with an error that says what is
// wrong, without the password, instead of running half connected.
func TestWrongCredentialsFailClearly(t *testing.T) {
	guarded, err := shardtest.StartRedis(shardtest.RedisOptions{Password: "right-horse"})
	shardtest.Require(t, err)
	t.Cleanup(guarded.Close)
	w := newWorld(t, 4)
	for _, c := range []struct {
		env        []string
		want, leak string
	}{
		{[]string{"DELAYQ_REDIS_ADDRS=" + guarded.Addr, "DELAYQ_REDIS_PASSWORD=wrong-staple"}, "WRONGPASS", "wrong-staple"},
		{[]string{"DELAYQ_REDIS_ADDRS=" + guarded.Addr}, "NOAUTH", "right-horse"},
		{[]string{"DELAYQ_AMQP_URL=" + strings.Replace(rabbit.URL, "guest:guest", "guest:battery", 1)}, "refused the credentials", "battery"},
	} {
		cmd := exec.Command(bin, "scan")
		cmd.Env = append(append(append([]string{}, w.env...), "DELAYQ_METRICS_ADDR=off"), c.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) || strings.Contains(string(out), c.leak) {
			t.Errorf("%v: err %v, output should say %q and not %q:\n%s", c.env, err, c.want, c.leak, out)
		}
	}
}
