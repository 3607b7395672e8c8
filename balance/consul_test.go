package balance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/balance/consultest"
	"github.com/delayq/delayq/shard/shardtest"
)

func TestParseShardCount(t *testing.T) {
	for _, ok := range []struct {
		in   string
		want int
	}{{"4", 4}, {" 16\n", 16}, {"4096", 4096}} {
		if m, err := balance.ParseShardCount(ok.in); err != nil || m != ok.want {
			t.Errorf("ParseShardCount(%q) = %d, %v", ok.in, m, err)
		}
	}
	for _, bad := range []string{"abc", "0", "-3", "1e9", "", "  ", "4097", "3.5", "0x10"} {
		if _, err := balance.ParseShardCount(bad); err == nil {
			t.Errorf("ParseShardCount(%q) accepted", bad)
		}
	}
}

// startConsul starts an agent for one test.
func startConsul(t *testing.T) *consultest.Consul {
	t.Helper()
	c, err := consultest.StartConsul()
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	return c
}

func watcher(t *testing.T, c *consultest.Consul, key string) (*balance.ConsulWatcher, *observer.ObservedLogs, error) {
	core, logs := observer.New(zap.InfoLevel)
	w := balance.NewConsulWatcher(c.Client(), key, zap.New(core))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := w.Start(ctx)
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, logs, err
}

func waitM(t *testing.T, w *balance.ConsulWatcher, want int) {
	t.Helper()
	shardtest.WaitFor(t, 5*time.Second, func() bool { m, err := w.ShardCount(); return err == nil && m == want },
		func() string {
			m, err := w.ShardCount()
			return "M is " + itoa(m) + " " + errString(err) + ", want " + itoa(want)
		})
}

func TestWatcherFollowsTheKey(t *testing.T) {
	t.Parallel()
	c := startConsul(t)
	key := "delayq/test/shards"
	if err := c.Put(t.Context(), key, "4"); err != nil {
		t.Fatal(err)
	}
	w, logs, err := watcher(t, c, key)
	if err != nil {
		t.Fatal(err)
	}
	waitM(t, w, 4)
	changed := w.Changed()
	start := time.Now()
	if err := c.Put(t.Context(), key, "8"); err != nil {
		t.Fatal(err)
	}
	<-changed
	waitM(t, w, 8)
	t.Logf("change seen after %s", time.Since(start))
	if time.Since(start) > time.Second {
		t.Errorf("a change took %s to arrive, want about a second at most", time.Since(start))
	}

	// Bad values and a deleted key: logged with key and value, last good M kept.
	for _, bad := range []string{"abc", "0", "-3", "1e9", "", "99999"} {
		if err := c.Put(t.Context(), key, bad); err != nil {
			t.Fatal(err)
		}
		shardtest.WaitFor(t, 5*time.Second, func() bool {
			for _, e := range logs.FilterMessage("bad shard count in consul; keeping the last good M").All() {
				f := e.ContextMap()
				if f["key"] == key && f["value"] == bad {
					return true
				}
			}
			return false
		}, func() string {
			var all []string
			for _, e := range logs.All() {
				all = append(all, fmt.Sprint(e.Message, e.ContextMap()))
			}
			return "no error logged for value " + bad + "; logged: " + strings.Join(all, "; ")
		})
		if m, err := w.ShardCount(); err != nil || m != 8 {
			t.Errorf("after %q: M %d, %v; want the last good 8", bad, m, err)
		}
	}
	if err := c.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool { return logs.FilterMessage("consul key missing; keeping the last good M").Len() > 0 },
		func() string { return "deleted key not logged" })
	if m, _ := w.ShardCount(); m != 8 {
		t.Errorf("after delete: M %d, want 8", m)
	}
	if err := c.Put(t.Context(), key, "2"); err != nil {
		t.Fatal(err)
	}
	waitM(t, w, 2)
}

func TestWatcherSurvivesConsulRestart(t *testing.T) {
	t.Parallel()
	c := startConsul(t)
	key := "delayq/restart/shards"
	if err := c.Put(t.Context(), key, "4"); err != nil {
		t.Fatal(err)
	}
	w, logs, err := watcher(t, c, key)
	if err != nil {
		t.Fatal(err)
	}
	waitM(t, w, 4)
	c.Kill()
	shardtest.WaitFor(t, 10*time.Second, func() bool { return logs.FilterMessage("consul unreachable; keeping the last good M").Len() > 0 },
		func() string { return "outage not logged" })
	if m, err := w.ShardCount(); err != nil || m != 4 {
		t.Fatalf("while consul is down: %d %v", m, err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// A dev agent forgets its KV: the key is missing until written again.
	if err := c.Put(t.Context(), key, "6"); err != nil {
		t.Fatal(err)
	}
	waitM(t, w, 6)
}

func TestWatcherStartsWithoutConsul(t *testing.T) {
	t.Parallel()
	port, _ := shardtest.FreePort()
	cl, _ := api.NewClient(&api.Config{Address: "127.0.0.1:" + itoa(port)})
	core, logs := observer.New(zap.InfoLevel)
	w := balance.NewConsulWatcher(cl, "k", zap.New(core))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := w.Start(ctx)
	defer func() { _ = w.Stop(context.Background()) }()
	if err != nil {
		t.Errorf("start without consul: %v (the watch runs all the same)", err)
	}
	if logs.FilterMessage("consul unreachable; keeping the last good M").Len() == 0 {
		t.Errorf("the failed first read was not logged: %v", logs.All())
	}
	if _, err := w.ShardCount(); !errors.Is(err, balance.ErrShardCountUnknown) {
		t.Errorf("ShardCount without consul: %v", err)
	}
}

func TestRegistrationAndFleet(t *testing.T) {
	t.Parallel()
	c := startConsul(t)
	r := balance.NewRegistration(c.Client(), "fleet-ns", zap.NewNop())
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	members, err := balance.Fleet(t.Context(), c.Client(), "fleet-ns")
	if err != nil || len(members) != 1 || members[0].ID != r.ID() || members[0].Status != api.HealthPassing {
		t.Fatalf("fleet %+v, %v", members, err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if members, _ = balance.Fleet(t.Context(), c.Client(), "fleet-ns"); len(members) != 0 {
		t.Errorf("after deregister: %+v", members)
	}
}

func TestSetShardCountIsCheckAndSet(t *testing.T) {
	t.Parallel()
	c := startConsul(t)
	key := "delayq/cas/shards"
	if ok, err := balance.SetShardCount(t.Context(), c.Client(), key, 4, 0); !ok || err != nil {
		t.Fatalf("create: %v %v", ok, err)
	}
	pair, _, err := c.Client().KV().Get(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := balance.SetShardCount(t.Context(), c.Client(), key, 8, 0); ok {
		t.Error("create over an existing key succeeded")
	}
	if ok, err := balance.SetShardCount(t.Context(), c.Client(), key, 8, pair.ModifyIndex); !ok || err != nil {
		t.Fatalf("CAS: %v %v", ok, err)
	}
	if ok, _ := balance.SetShardCount(t.Context(), c.Client(), key, 16, pair.ModifyIndex); ok {
		t.Error("a second writer with the same read index won the race")
	}
	if _, err := balance.SetShardCount(t.Context(), c.Client(), key, 0, 0); err == nil {
		t.Error("M=0 accepted")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}
