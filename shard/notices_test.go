package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestNoticesSayWhenResubscribed: after Redis restarts, the stream says
// that it subscribed again (notices published meanwhile are lost), then
// delivers the notices published after that.
func TestNoticesSayWhenResubscribed(t *testing.T) {
	own, err := shardtest.StartRedis(shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	rdb := redis.NewClient(&redis.Options{Addr: own.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, shardtest.Namespace(t))
	shardtest.Require(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := store.Notices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	prod := shard.NewProducer(store, balance.Static(1), shard.ProducerOptions{})
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "before", Exchange: "x", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if n, err := sub.Next(ctx); err != nil || n.Resubscribed || n.Shard != 0 {
		t.Fatalf("first notice: %+v, %v", n, err)
	}
	own.Kill()
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	n, err := sub.Next(ctx)
	if err != nil || !n.Resubscribed {
		t.Fatalf("after a restart: %+v, %v; want Resubscribed", n, err)
	}
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "after", Exchange: "x", Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n, err := sub.Next(ctx); err != nil || n.Resubscribed || n.DueMs == 0 {
		t.Fatalf("notice after the resubscription: %+v, %v", n, err)
	}
}
