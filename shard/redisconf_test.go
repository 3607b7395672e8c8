package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

func TestCheckRedisJudgesEachSetting(t *testing.T) {
	safe := shard.RedisServer{Addr: "a:1", Known: true, Policy: "noeviction", AOF: true, ConfigKnown: true, AppendFsync: "always"}
	if w, err := shard.CheckRedis([]shard.RedisServer{safe}, false); err != nil || len(w) != 0 {
		t.Fatalf("safe settings: warnings %q, error %v", w, err)
	}
	lru := safe
	lru.Addr, lru.Policy = "b:2", "allkeys-lru"
	_, err := shard.CheckRedis([]shard.RedisServer{safe, lru}, false)
	if !errors.Is(err, shard.ErrUnsafeRedis) || !strings.Contains(err.Error(), "redis b:2: maxmemory-policy allkeys-lru") ||
		!strings.Contains(err.Error(), "noeviction") || strings.Contains(err.Error(), "a:1") {
		t.Fatalf("allkeys-lru: %v", err)
	}
	if w, err := shard.CheckRedis([]shard.RedisServer{lru}, true); err != nil || len(w) != 1 || !strings.Contains(w[0], "accepted") {
		t.Fatalf("allkeys-lru accepted: warnings %q, error %v", w, err)
	}
	for _, c := range []struct {
		name string
		edit func(*shard.RedisServer)
		want string
	}{
		{"volatile", func(r *shard.RedisServer) { r.Policy = "volatile-ttl" }, "tombstones"},
		{"full", func(r *shard.RedisServer) { r.MaxMemory, r.UsedMemory = 10<<20, 9<<20 }, "90 % of maxmemory 10.0 MB"},
		{"no persistence", func(r *shard.RedisServer) { r.AOF, r.Save = false, "" }, "a restart empties every shard"},
		{"rdb only", func(r *shard.RedisServer) { r.AOF, r.Save = false, "3600 1" }, "RDB snapshots only"},
		{"fsync no", func(r *shard.RedisServer) { r.AppendFsync = "no" }, "appendfsync no"},
		{"no CONFIG", func(r *shard.RedisServer) { r.ConfigKnown, r.AppendFsync = false, "" }, "CONFIG GET is not allowed"},
		{"no INFO", func(r *shard.RedisServer) { *r = shard.RedisServer{Addr: r.Addr} }, "INFO is not allowed"},
	} {
		r := safe
		c.edit(&r)
		w, err := shard.CheckRedis([]shard.RedisServer{r}, false)
		if err != nil || len(w) != 1 || !strings.Contains(w[0], c.want) || !strings.Contains(w[0], "redis a:1") {
			t.Errorf("%s: warnings %q, error %v; want one naming the master and %q", c.name, w, err, c.want)
		}
	}
}

// TestRedisServersReadsTheSettings reads a server started with known
// settings.
func TestRedisServersReadsTheSettings(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	r, err := shardtest.StartRedis(shardtest.RedisOptions{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru", "--save", "900 1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	st, err := shard.NewStore(r.Client(t), shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.RedisServers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Addr != r.Addr || got[0].Policy != "allkeys-lru" || got[0].MaxMemory != 64<<20 ||
		got[0].UsedMemory <= 0 || got[0].AOF || !got[0].EvictsMessages() || got[0].Persistence() != "rdb" {
		t.Fatalf("read %+v", got)
	}
	// A Producer refuses to write there, unless told to accept it.
	ctx := context.Background()
	_, err = shard.NewProducer(st, fixed(2), shard.ProducerOptions{}).Enqueue(ctx, shard.Message{ID: "a", Topic: "t"})
	if !errors.Is(err, shard.ErrUnsafeRedis) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("enqueue on allkeys-lru: %v", err)
	}
	if _, err := shard.NewProducer(st, fixed(2), shard.ProducerOptions{AllowEviction: true}).Enqueue(ctx, shard.Message{ID: "a", Topic: "t"}); err != nil {
		t.Fatalf("enqueue on allkeys-lru, accepted: %v", err)
	}
}

// TestRedisFullRefusesWholeCallsAndDeliveriesGoOn fills a Redis whose
// maxmemory is 4 MB (noeviction): every refused enqueue says Redis is full
// and names the limit, nothing is half-written, claims and acks go on at
// the limit, and enqueues succeed again once acks freed memory.
func TestRedisFullRefusesWholeCallsAndDeliveriesGoOn(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	r, err := shardtest.StartRedis(shardtest.RedisOptions{Args: []string{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	ctx := context.Background()
	rdb := r.Client(t)
	ns := shardtest.Namespace(t)
	st, err := shard.NewStore(rdb, ns)
	if err != nil {
		t.Fatal(err)
	}
	const m = 4
	prod := shard.NewProducer(st, fixed(m), shard.ProducerOptions{})
	body := []byte(strings.Repeat("x", 1000))
	accepted, refused := map[string]bool{}, 0
	for b := 0; refused == 0 && b < 200; b++ {
		msgs := make([]shard.Message, 64)
		for j := range msgs {
			msgs[j] = shard.Message{ID: fmt.Sprintf("m-%d-%d", b, j), Topic: "t", Body: body}
		}
		res, _ := prod.EnqueueBatch(ctx, msgs)
		for _, br := range res {
			switch {
			case br.Err == nil:
				accepted[br.ID] = true
			case errors.Is(br.Err, shard.ErrRedisFull):
				refused++
				if !strings.Contains(br.Err.Error(), "maxmemory 4.0 MB") || !strings.Contains(br.Err.Error(), "noeviction") {
					t.Fatalf("the refusal does not name the limit: %v", br.Err)
				}
			default:
				t.Fatalf("enqueue %s: %v", br.ID, br.Err)
			}
		}
	}
	if refused == 0 || len(accepted) == 0 {
		t.Fatalf("accepted %d, refused %d: Redis never filled up", len(accepted), refused)
	}
	// Single enqueues too, until one is refused (memory moves a little
	// around the limit).
	for j := 0; ; j++ {
		id := fmt.Sprintf("single-%d", j)
		_, err := prod.Enqueue(ctx, shard.Message{ID: id, Topic: "t", Body: body})
		if err == nil && j < 1000 {
			accepted[id] = true
			continue
		}
		if !errors.Is(err, shard.ErrRedisFull) || !strings.Contains(err.Error(), "maxmemory 4.0 MB") {
			t.Fatalf("a single enqueue at the limit: %v", err)
		}
		break
	}
	// Nothing half-written: every envelope has its due entry and back.
	held := 0
	for i := range m {
		ks := shard.ShardKeys(ns, i)
		ids, err := rdb.HKeys(ctx, ks.Msg).Result()
		if err != nil {
			t.Fatal(err)
		}
		due, err := rdb.ZRange(ctx, ks.Due, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		slices.Sort(due)
		if !slices.Equal(ids, due) {
			t.Fatalf("shard %d: %d envelopes, %d due entries", i, len(ids), len(due))
		}
		for _, id := range ids {
			if !accepted[id] {
				t.Fatalf("shard %d holds %s, whose enqueue was refused", i, id)
			}
		}
		held += len(ids)
	}
	if held != len(accepted) {
		t.Fatalf("Redis holds %d messages, %d were accepted", held, len(accepted))
	}
	// Deliveries go on at the limit: claim and ack everything.
	acked := 0
	for i := range m {
		for {
			res, err := st.Claim(ctx, i, 64, time.Minute)
			if err != nil {
				t.Fatalf("claim at the limit: %v", err)
			}
			if len(res.Msgs) == 0 {
				break
			}
			leases := make([]shard.Lease, len(res.Msgs))
			for j, c := range res.Msgs {
				leases[j] = c.Lease
			}
			n, err := st.Ack(ctx, i, leases...)
			if err != nil {
				t.Fatalf("ack at the limit: %v", err)
			}
			acked += n
		}
	}
	if acked != len(accepted) {
		t.Fatalf("acked %d of %d", acked, len(accepted))
	}
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "one-more", Topic: "t", Body: body}); err != nil {
		t.Fatalf("enqueue once acks freed memory: %v", err)
	}
}
