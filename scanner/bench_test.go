package scanner_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
)

// BenchmarkDispatch drains a backlog of due messages through an in-process
// scanner (claim, publish with confirm, ack) and reports messages per
// second; b.N is the backlog size.
func BenchmarkDispatch(b *testing.B) {
	for _, k := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", k), func(b *testing.B) {
			f := newFleet(b, 16, scanner.Config{Goroutines: 32, ClaimBatch: k}, rabbit.URL)
			var msgs []shard.Message
			var ids []string
			for i := range b.N {
				id := fmt.Sprintf("d-%d", i)
				ids = append(ids, id)
				msgs = append(msgs, shard.Message{ID: id, Topic: "t", Body: make([]byte, 100), Delay: time.Second})
			}
			for start := 0; start < len(msgs); start += 2000 {
				if _, err := f.prod.EnqueueBatch(b.Context(), msgs[start:min(len(msgs), start+2000)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			f.waitAll(ids, time.Minute)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
