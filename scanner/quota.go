package scanner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// The quotas' maintenance (shard/quota.go, "The design"): every
// quotaMaintainEvery each scanner asks for the fleet's round
// (shard.Store.MaintainQuotas), which runs in whichever process takes its
// lease first: it counts out the messages of quota'd scopes that are gone,
// and settles the reservations of producers that died between their
// reserve and their settle. No leader: the round's steps are safe to run
// twice or to stop at any line, and the lease only keeps the fleet from
// doing the work more than once a second. A namespace where no quota was
// ever set costs one EXISTS a scanner a second.
//
// A quota set on a scope that holds messages already counts them in by
// an adoption pass (shard.Store.AdoptQuotas: a bulk walk of the
// namespace), which a scanner looks for every quotaAdoptEvery and runs
// under a lease, in its own goroutine: a pass over millions of messages
// takes minutes, and holds back neither the maintenance nor the claims.
//
// The goroutines are started and stopped with the claims stage (Stop's
// step 1).

const (
	quotaMaintainEvery = time.Second
	quotaAdoptEvery    = 5 * time.Second
)

// adoptQuotas looks for quotas to adopt until life ends. Its Redis calls
// use life too: a pass cut short is safe (the next goes on where the tags
// say), and Stop does not wait for a pass of minutes.
func (s *Scanner) adoptQuotas(life context.Context) {
	s.everyRound(life, quotaAdoptEvery, "adopt quotas", func(hw int) {
		if n, err := s.d.Store.AdoptQuotas(life, hw); err != nil {
			if life.Err() == nil {
				s.errLog.warn("adopt quotas", err)
			}
		} else if n > 0 {
			s.log.Info("quota adoption: counted the messages a scope held when its quota was set", zap.Int("messages", n))
		}
	})
}

// maintainQuotas asks for the fleet's maintenance round until life ends;
// the Redis calls use workCtx.
func (s *Scanner) maintainQuotas(life, workCtx context.Context) {
	s.everyRound(life, quotaMaintainEvery, "maintain quotas", func(hw int) {
		if _, err := s.d.Store.MaintainQuotas(workCtx, hw, quotaMaintainEvery); err != nil {
			s.errLog.warn("maintain quotas", err)
		}
	})
}

// everyRound calls round every interval until life ends, with the number
// of shards that may hold messages (the layout's high-water mark); a
// round whose shard count cannot be read is skipped and logged as what.
func (s *Scanner) everyRound(life context.Context, every time.Duration, what string, round func(hw int)) {
	tick(life, every, func() {
		hw, err := s.d.Shards.HighWater()
		if err != nil {
			s.errLog.warn(what+": shard count", err)
			return
		}
		round(hw)
	})
}

// tick calls f every d until ctx ends (the first time after d).
func tick(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// QuotaCollector exports each scope's quota, read from Redis at scrape
// time (shard.Store.Quotas):
//
//	delayq_quota_pending{scope}         messages counted: held, and reserved by enqueues under way
//	delayq_quota_max_pending{scope}     the most it may hold; 0: no limit
//	delayq_quota_max_rate{scope}        the most it may enqueue a second; 0: no limit
//	delayq_quota_refused_total{scope}   messages the quota refused
//	delayq_quota_enqueued_total{scope}  messages stored under the quota
//	delayq_quota_up                     1 if the last read succeeded
//
// Like the shard gauges, every pod exports the same values: aggregate
// with max across pods.
type QuotaCollector struct {
	store   *shard.Store
	timeout time.Duration

	pending, maxPending, maxRate, refused, enqueued, up *prometheus.Desc
}

// NewQuotaCollector returns a collector of the quotas of store's
// namespace.
func NewQuotaCollector(store *shard.Store, _ balance.Source) *QuotaCollector {
	ns := ""
	if store != nil {
		ns = store.Namespace()
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("delayq_quota_"+name, help, labels, prometheus.Labels{"namespace": ns})
	}
	return &QuotaCollector{store: store, timeout: 5 * time.Second,
		pending:    d("pending", "Messages the scope's quota counts: held, and reserved by enqueues under way.", "scope"),
		maxPending: d("max_pending", "The most messages the scope may hold; 0: no limit.", "scope"),
		maxRate:    d("max_rate", "The most messages the scope may enqueue a second; 0: no limit.", "scope"),
		refused:    d("refused_total", "Messages the scope's quota refused since it was set.", "scope"),
		enqueued:   d("enqueued_total", "Messages stored under the scope's quota since it was set.", "scope"),
		up:         d("up", "1 if the last read of the quotas from Redis succeeded."),
	}
}

// Describe implements prometheus.Collector.
func (c *QuotaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.maxPending, c.maxRate, c.refused, c.enqueued, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *QuotaCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	qs, err := c.store.Quotas(ctx)
	if err != nil {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	for _, q := range qs {
		gauge(c.pending, float64(q.Count), q.Scope)
		gauge(c.maxPending, float64(q.MaxPending), q.Scope)
		gauge(c.maxRate, float64(q.MaxRate), q.Scope)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(q.Refused), q.Scope)
		ch <- prometheus.MustNewConstMetric(c.enqueued, prometheus.CounterValue, float64(q.Enqueued), q.Scope)
	}
}
