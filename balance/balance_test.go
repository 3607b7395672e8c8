package balance_test

import (
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard/shardtest"
)

func TestNewStatic(t *testing.T) {
	for _, bad := range []int{0, -3, balance.MaxShards + 1} {
		if _, err := balance.NewStatic(bad); err == nil {
			t.Errorf("NewStatic(%d) accepted", bad)
		}
	}
	s, err := balance.NewStatic(16)
	if m, _ := s.ShardCount(); err != nil || m != 16 {
		t.Fatalf("NewStatic(16) = %d, %v", m, err)
	}
}

var (
	srv    *shardtest.Redis
	srvErr error
)

func itoa(i int) string { return strconv.Itoa(i) }

func TestMain(m *testing.M) {
	srv, srvErr = shardtest.StartRedis(shardtest.RedisOptions{})
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

// TestCursorRoundCoversEveryShard: however many goroutines share the
// cursor, any M consecutive INCRs visit every shard exactly once.
func TestCursorRoundCoversEveryShard(t *testing.T) {
	shardtest.Require(t, srvErr)
	const m, goroutines, rounds = 7, 5, 20
	c := balance.NewCursor(srv.Client(t), shardtest.Namespace(t), balance.Static(m))
	visits := make([]int, m)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range m * rounds / goroutines {
				s, covered, err := c.Next(t.Context())
				if err != nil || covered != m {
					t.Error(err, covered)
					return
				}
				mu.Lock()
				visits[s]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for s, v := range visits {
		if v != rounds {
			t.Errorf("shard %d visited %d times in %d rounds", s, v, rounds)
		}
	}
}
