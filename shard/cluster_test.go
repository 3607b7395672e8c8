package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestScriptsOnCluster runs the life of messages on a real 3-master Redis
// Cluster: every script stays in one slot (the {ns:i} hash tag), the
// shards spread over the masters, pipelines span slots, and wake-up
// notices published inside scripts reach a cluster subscriber.
func TestScriptsOnCluster(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	st, err := shard.NewStore(rdb, "cluster")
	if err != nil {
		t.Fatal(err)
	}
	const m = 16
	prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
	sub := rdb.Subscribe(ctx, shard.WakeChannel("cluster"))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := make([]shard.Message, 400)
	for i := range msgs {
		msgs[i] = shard.Message{ID: fmt.Sprintf("c%d", i), Topic: "t"}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil { // EnqueueBatch must load scripts on every master
		t.Fatal(err)
	}
	res, err := prod.EnqueueBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if _, err := sub.ReceiveMessage(ctx); err != nil {
		t.Fatalf("no wake-up notice across the cluster: %v", err)
	}
	// The producer read every master's settings before it wrote.
	servers, err := st.RedisServers(ctx)
	if err != nil || len(servers) != 3 {
		t.Fatalf("RedisServers on a 3-master cluster: %+v, %v", servers, err)
	}
	for _, r := range servers {
		if !r.Known || r.Policy != "noeviction" || r.Persistence() != "none" {
			t.Errorf("master %+v", r)
		}
	}
	// Shards live on different masters, as Store.ShardNodes says.
	nodes := map[string]bool{}
	all := make([]int, m)
	for i := range m {
		all[i] = i
	}
	said, err := st.ShardNodes(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		slot, err := rdb.ClusterKeySlot(ctx, shard.ShardKeys("cluster", i).Due).Result()
		if err != nil {
			t.Fatal(err)
		}
		node := nodeOf(t, c, slot)
		nodes[node] = true
		if said[i] != node {
			t.Errorf("ShardNodes says shard %d is on %s; CLUSTER SHARDS says %s", i, said[i], node)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("16 shards sit on %d of 3 masters", len(nodes))
	}
	// The fleet's rates: samples in the namespace's slot, of counters on
	// every master.
	if took, err := st.SampleRates(ctx, 50*time.Millisecond); !took || err != nil {
		t.Fatalf("sample across masters: %v %v", took, err)
	}
	claimed := 0
	leases := map[int][]shard.Confirmed{}
	for i := range m {
		r, err := st.Claim(ctx, i, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(r.Msgs)
		for _, c := range r.Msgs {
			leases[i] = append(leases[i], shard.Confirmed{Lease: c.Lease, Late: time.Duration(len(leases[i])) * time.Millisecond})
		}
	}
	if claimed != 400 {
		t.Fatalf("claimed %d of 400", claimed)
	}
	if n, err := st.AckShards(ctx, leases); err != nil || n != 400 {
		t.Fatalf("AckShards across masters: %d %v", n, err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool { took, err := st.SampleRates(ctx, 50*time.Millisecond); return took && err == nil },
		func() string { return "no second sample" })
	if r, err := st.Rates(ctx, time.Minute); err != nil || len(r.Points) != 1 || r.Lateness.Count != 400 ||
		int(r.Points[0].Published*r.Points[0].Seconds+0.5) != 400 {
		t.Errorf("rates across masters: %+v %v", r, err)
	}
	stats, err := st.Stats(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Scheduled+s.InFlight != 0 || s.Enqueued == 0 {
			t.Errorf("shard %d after ack: %+v", s.Shard, s)
		}
	}
	if _, err := st.RaiseLayout(ctx, m, 0); err != nil { // the namespace-wide key
		t.Fatal(err)
	}
	if occ, err := st.Occupied(ctx, 0, m); err != nil || len(occ) != m {
		t.Fatalf("occupied across masters: %v %v", occ, err)
	}

	// Recurring schedules: the registry in the namespace's slot, each
	// schedule and its occurrences in its shard's; fired, listed, paused,
	// resumed and deleted across the masters.
	for j := range 12 {
		if _, err := prod.UpsertSchedule(ctx, shard.Schedule{Name: fmt.Sprintf("sc%d", j), Spec: "@every 1s",
			Message: shard.Message{Topic: "t"}}); err != nil {
			t.Fatal(err)
		}
	}
	fired := map[string]bool{}
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		for i := range m {
			r, err := st.Claim(ctx, i, 8, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range r.Msgs {
				env, err := shard.DecodeEnvelope(c.Envelope)
				if err != nil {
					t.Fatal(err)
				}
				f, err := st.FireOccurrence(ctx, i, &c, &env, r.NowMs)
				if err != nil || !f.Publish {
					t.Fatalf("fire %s: %+v %v", c.ID, f, err)
				}
				fired[env.Occurrence.Schedule] = true
			}
		}
		return len(fired) == 12
	}, func() string { return fmt.Sprintf("%d of 12 schedules fired", len(fired)) })
	list, err := st.Schedules(ctx)
	if err != nil || len(list) != 12 {
		t.Fatalf("schedules across masters: %d %v", len(list), err)
	}
	for _, info := range list {
		if info.Fired < 1 || info.Pending == "" {
			t.Errorf("%s after firing: %+v", info.Name, info)
		}
	}
	if _, err := st.PauseSchedule(ctx, "sc3"); err != nil {
		t.Fatal(err)
	}
	if info, err := st.ResumeSchedule(ctx, "sc3"); err != nil || info.Pending == "" {
		t.Fatalf("resume on a cluster: %+v %v", info, err)
	}
	if err := st.DeleteSchedule(ctx, "sc3"); err != nil {
		t.Fatal(err)
	}
}

// nodeOf returns the address of the master serving slot.
func nodeOf(t *testing.T, c *shardtest.Cluster, slot int64) string {
	t.Helper()
	rdb := c.Client()
	defer rdb.Close()
	shards, err := rdb.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		for _, r := range s.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range s.Nodes {
					if n.Role == "master" {
						return fmt.Sprintf("%s:%d", n.IP, n.Port)
					}
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return ""
}

// TestBatchDuringSlotMigrationCountsItsOwnWrites: while Redis Cluster
// moves one shard's slot (some of its keys moved, so its script gets
// TRYAGAIN), go-redis runs again every call of that node's pipeline,
// those that ran included. A batch whose first call is that shard's still
// reports the other shards' new messages as enqueued, not as duplicates
// of themselves, and that shard's as a Redis failure.
func TestBatchDuringSlotMigrationCountsItsOwnWrites(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const ns, m = "moving", 16
	st, err := shard.NewStore(rdb, ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Load(ctx); err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
	// Shard a, the one whose slot moves, and the others on its node.
	nodeOfShard := map[int]string{}
	slotOf := map[int]int64{}
	for i := range m {
		slot, err := rdb.ClusterKeySlot(ctx, shard.ShardKeys(ns, i).Due).Result()
		if err != nil {
			t.Fatal(err)
		}
		slotOf[i], nodeOfShard[i] = slot, nodeOf(t, c, slot)
	}
	a := 0
	var same []int
	for i := 1; i < m; i++ {
		if nodeOfShard[i] == nodeOfShard[a] {
			same = append(same, i)
		}
	}
	if len(same) == 0 {
		t.Fatalf("no other shard on %s: %v", nodeOfShard[a], nodeOfShard)
	}
	idIn := func(i int, prefix string) string {
		for n := 0; ; n++ {
			if id := fmt.Sprintf("%s-%d", prefix, n); shard.Of(id, m) == i {
				return id
			}
		}
	}
	if _, err := prod.Enqueue(ctx, shard.Message{ID: idIn(a, "seed"), Topic: "t", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Move shard a's slot, and its due key only, to another master.
	from := redis.NewClient(&redis.Options{Addr: nodeOfShard[a]})
	t.Cleanup(func() { _ = from.Close() })
	var toAddr string
	for _, addr := range c.Addrs {
		if addr != nodeOfShard[a] {
			toAddr = addr
			break
		}
	}
	to := redis.NewClient(&redis.Options{Addr: toAddr})
	t.Cleanup(func() { _ = to.Close() })
	fromID, err := from.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	toID, err := to.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	slot := slotOf[a]
	if err := to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(toAddr, ":")
	if err := from.Do(ctx, "MIGRATE", host, port, shard.ShardKeys(ns, a).Due, 0, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	msgs := []shard.Message{{ID: idIn(a, "moving"), Topic: "t", Delay: time.Hour}}
	for _, i := range same {
		msgs = append(msgs, shard.Message{ID: idIn(i, "staying"), Topic: "t", Delay: time.Hour})
	}
	res, err := prod.EnqueueBatch(ctx, msgs)
	if err == nil || res[0].Err == nil || errors.Is(res[0].Err, shard.ErrDuplicate) {
		t.Errorf("the migrating shard's message: %v (batch %v); want a Redis failure", res[0].Err, err)
	}
	for _, r := range res[1:] {
		if r.Err != nil {
			t.Errorf("%s in shard %d: %v; want enqueued", r.ID, r.Shard, r.Err)
		}
	}
}
