package scanner_test

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
)

// TestFarMessagesArriveOnTime: with the far tier on (a horizon of 2 s,
// buckets of 0.5 s), messages due 3-6 s ahead wait far, the scanner
// promotes their buckets as they come within the horizon, and each is
// published once, never early.
func TestFarMessagesArriveOnTime(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, scanner.Config{Goroutines: 4}, rabbit.URL)
	if err := f.store.EnableFar(t.Context(), shard.FarSettings{Horizon: 2 * time.Second, BucketWidth: 500 * time.Millisecond, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	due := map[string]time.Time{}
	var ids []string
	for i := range 200 {
		id := fmt.Sprintf("trial-%d", i)
		s, err := f.prod.Enqueue(t.Context(), shard.Message{ID: id, Topic: "t", Body: []byte("end " + id),
			Delay: 3*time.Second + time.Duration(i)*15*time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids, due[id] = append(ids, id), s.Due
	}
	far := 0
	for i := range 4 {
		far += int(redisSrv.Client(t).ZCard(t.Context(), shard.ShardKeys(f.ns, i).Due).Val())
	}
	if far > 100 {
		t.Fatalf("%d of 200 messages due 3-6 s ahead are in the due sets; want most far", far)
	}
	f.waitAll(ids, 30*time.Second)
	for _, id := range ids {
		d := f.delivered(id)[0]
		if d.at.Before(due[id]) || d.dueMs != due[id].UnixMilli() || d.attempt != 1 || len(f.delivered(id)) != 1 {
			t.Errorf("%s: received %s (attempt %d, %d deliveries), due %s (header %d)", id, d.at.Format(time.StampMicro),
				d.attempt, len(f.delivered(id)), due[id].Format(time.StampMicro), d.dueMs)
		}
	}
	var m dto.Metric
	if err := f.metrics.FarPromoted.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n < float64(200-far) {
		t.Errorf("promoted %v, want the %d placed far", n, 200-far)
	}
}
