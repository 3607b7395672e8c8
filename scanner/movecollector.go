package scanner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// MoveCollector exports, read from Redis at scrape time
// (shard.Store.MoveJournalAge), how long the oldest journal of a live
// move (delayq move) has waited:
//
//	delayq_move_journal_age_seconds  0 when none; a running move's journals live for moments
//	delayq_move_up                   1 if the last read succeeded
//
// A journal that ages names a batch a mover cut short left on both sides
// of the move; run the move again before its messages fall due
// (DelayqMoveCutShort). Every pod exports the same value, labelled
// namespace="<ns>": aggregate with max.
type MoveCollector struct {
	store   *shard.Store
	layout  balance.Source
	timeout time.Duration

	age, up *prometheus.Desc
}

// NewMoveCollector returns a collector of the move journals of store's
// namespace, on the shards layout covers.
func NewMoveCollector(store *shard.Store, layout balance.Source) *MoveCollector {
	ns := ""
	if store != nil {
		ns = store.Namespace()
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("delayq_move_"+name, help, nil, prometheus.Labels{"namespace": ns})
	}
	return &MoveCollector{store: store, layout: layout, timeout: 5 * time.Second,
		age: d("journal_age_seconds", "How long the oldest journal of a delayq move has waited: a batch a mover cut short left on both sides; 0 when none."),
		up:  d("up", "1 if the last read of the move journals from Redis succeeded."),
	}
}

// Describe implements prometheus.Collector.
func (c *MoveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *MoveCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := gaugeTo(ch)
	var age time.Duration
	if !readForScrape(c.layout, c.timeout, func(ctx context.Context, hw int) (err error) {
		age, err = c.store.MoveJournalAge(ctx, hw)
		return err
	}) {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	gauge(c.age, age.Seconds())
}
