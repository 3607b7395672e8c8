package main_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestLiveMoveBetweenNamespaces: 3,000 messages due 8-16 s ahead move to
// another namespace while a scanner runs on each side and the source
// cancels 150 of them meanwhile; the mover is SIGKILLed twice between a
// batch's copy and its removal, and run again. Every other message is
// delivered once as a first delivery, none early, with the due time it
// was given; no cancelled message is delivered. Bad flags exit 2 naming
// them.
func TestLiveMoveBetweenNamespaces(t *testing.T) {
	w := newWorld(t, 4)
	w.consume()
	to := &world{t: t, ns: w.ns + "-to", exchange: w.exchange, got: map[string][]received{}}
	to.env = append(slices.Clone(w.env), "DELAYQ_NAMESPACE="+to.ns)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"move"}, "--to-redis is required"},
		{[]string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--keep", "1s"}, "want at least 5s"},
		{[]string{"move", "--to-redis", redisSrv.Addr}, "the target is the source"},
	} {
		if _, e, code := w.delayq("", c.args...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d %q, want 2 saying %q", c.args, code, e, c.want)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	prod := shard.NewProducer(store, balance.Static(4), shard.ProducerOptions{})
	due := map[string]int64{}
	var ids []string
	start := time.Now()
	for from := 0; from < 3000; from += 500 {
		msgs := make([]shard.Message, 0, 500)
		for j := from; j < from+500; j++ {
			msgs = append(msgs, shard.Message{ID: fmt.Sprintf("mv-%04d", j), Exchange: w.exchange, RoutingKey: "rk", Body: []byte("x"),
				At: start.Add(8*time.Second + time.Duration(rand.Int64N(int64(8*time.Second))))})
		}
		res, err := prod.EnqueueBatch(context.Background(), msgs)
		must(t, err)
		for _, r := range res {
			must(t, r.Err)
			due[r.ID] = r.Due.UnixMilli()
			ids = append(ids, r.ID)
		}
	}
	w.scan()
	to.scan()
	var mu sync.Mutex
	cancelled := map[string]bool{}
	var wg sync.WaitGroup
	wg.Go(func() { // the source's cancels, racing the move
		for j := 0; j < 3000; j += 20 {
			id := fmt.Sprintf("mv-%04d", j)
			err := prod.Cancel(context.Background(), id)
			if err == nil {
				mu.Lock()
				cancelled[id] = true
				mu.Unlock()
			} else if !errors.Is(err, shard.ErrNotFound) {
				t.Errorf("cancel %s: %v", id, err)
			}
		}
	})
	// The mover SIGKILLed twice between a batch's copy and its removal
	// from the source, then run to the end: each rerun finishes the batch
	// the last one left on both sides first.
	move := []string{"move", "--to-redis", redisSrv.Addr, "--to-namespace", to.ns, "--keep", "5s", "--to-shards", "4"}
	for _, at := range []string{"copied:3", "copied:2"} {
		killed := &world{t: t, ns: w.ns, exchange: w.exchange, got: map[string][]received{}}
		killed.env = append(slices.Clone(w.env), "DELAYQ_TEST_KILL_AT="+at)
		if _, e, code := killed.delayq("", move...); code != -1 {
			t.Fatalf("a mover to be killed at %s: exit %d %s", at, code, e)
		}
	}
	out, e, code := w.delayq("", move...)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "moved ") {
		t.Fatalf("move: exit %d %s %s", code, out, e)
	}
	t.Logf("move: %s", strings.TrimSpace(out))
	var want []string
	for _, id := range ids {
		if !cancelled[id] {
			want = append(want, id)
		}
	}
	w.waitDelivered(want, 90*time.Second)
	last := int64(0)
	for _, d := range due {
		last = max(last, d)
	}
	shardtest.WaitFor(t, 30*time.Second, func() bool { return time.Now().UnixMilli() > last+2000 },
		func() string { return "the last due time did not pass" })
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		firsts := 0
		for _, r := range w.got[id] {
			if r.dueMs != due[id] {
				t.Errorf("%s delivered as due %d, enqueued due %d", id, r.dueMs, due[id])
			}
			if r.attempt == 1 {
				firsts++
			}
		}
		switch {
		case cancelled[id] && len(w.got[id]) > 0:
			t.Errorf("%s was cancelled on the source, yet delivered", id)
		case !cancelled[id] && firsts != 1:
			t.Errorf("%s first delivered %d times", id, firsts)
		}
	}
	if len(cancelled) == 0 {
		t.Errorf("no cancel raced the move")
	}
}
