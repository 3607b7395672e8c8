package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// consulProducer returns a producer of the world's namespace that follows
// M from Consul key like a service would (watcher and layout stopped at
// cleanup), and its layout.
func (w *world) consulProducer(t *testing.T, consul *api.Client, key string, rdb redis.UniversalClient) (*shard.Producer, *balance.Layout) {
	t.Helper()
	st, err := shard.NewStore(rdb, w.ns)
	must(t, err)
	watcher := balance.NewConsulWatcher(consul, key, zaptest.NewLogger(t))
	must(t, watcher.Start(t.Context()))
	t.Cleanup(func() { _ = watcher.Stop(context.Background()) })
	layout := balance.NewLayout(watcher, st, balance.LayoutOptions{Log: zaptest.NewLogger(t)})
	must(t, layout.Start(t.Context()))
	t.Cleanup(func() { _ = layout.Stop(context.Background()) })
	return shard.NewProducer(st, layout, shard.ProducerOptions{}), layout
}

// producing is a steady producer running in the background.
type producing struct {
	mu   sync.Mutex
	ids  []string
	stop chan struct{}
	wg   sync.WaitGroup
}

// produce enqueues batch messages due within maxDelay every interval, to
// the world's exchange, until Stop. keep is asked about every enqueued id
// (n counts batches, i the place in the batch) and returns false for ids
// that must not be expected (for example ones it cancelled).
func (w *world) produce(t *testing.T, prod *shard.Producer, prefix string, every time.Duration, batch int,
	maxDelay time.Duration, keep func(n, i int, id string) bool) *producing {
	p := &producing{stop: make(chan struct{})}
	p.wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-p.stop:
				return
			case <-time.After(every): // a steady producer, not a wait
			}
			msgs := make([]shard.Message, batch)
			for i := range msgs {
				msgs[i] = shard.Message{ID: fmt.Sprintf("%s-%d-%d", prefix, n, i), Exchange: w.exchange, RoutingKey: "rk",
					Delay: time.Duration(rand.Int64N(int64(maxDelay)))}
			}
			res, err := prod.EnqueueBatch(t.Context(), msgs)
			if err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			p.mu.Lock()
			for i, r := range res {
				if r.Err != nil {
					t.Errorf("enqueue %s: %v", r.ID, r.Err)
				} else if keep == nil || keep(n, i, r.ID) {
					p.ids = append(p.ids, r.ID)
				}
			}
			p.mu.Unlock()
		}
	})
	return p
}

// Stop ends production and returns the ids to expect.
func (p *producing) Stop() []string {
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...)
}
