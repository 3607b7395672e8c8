package scanner

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
)

// Metrics are a scanner's Prometheus metrics. Cardinality is bounded: the
// only label beyond fixed enumerations is shard, below the high-water mark.
type Metrics struct {
	Claimed     prometheus.Counter
	Published   prometheus.Counter
	Redelivered prometheus.Counter
	Released    prometheus.Counter
	Dead        *prometheus.CounterVec // reason: corrupt, no_route, exchange_missing, returned, nacked
	// Reaped counts expired leases this process's claims re-queued (a
	// crashed or stuck scanner's messages); LostLeases counts confirmed
	// messages whose lease had expired first (a duplicate follows). An ack
	// sent again after Redis went away, which Redis had run before (its
	// reply lost), finds the message gone and is not counted.
	Reaped     prometheus.Counter
	LostLeases prometheus.Counter
	// Recovered counts messages whose claim's reply was lost (Redis went
	// away after running it), put back as due at once by their receipts
	// (shard.Store.Recover) instead of after their lease.
	Recovered prometheus.Counter
	// FarPromoted counts far messages moved near by this process's
	// promotions (scanner/far.go); FarPromotionAhead is, per promoted
	// bucket, how long before its start it was promoted: near zero or
	// below means promotion is behind.
	FarPromoted       prometheus.Counter
	FarPromotionAhead prometheus.Histogram
	// FarCompacted counts the blocks of far records this process
	// compressed (shard/farcompact.go).
	FarCompacted prometheus.Counter
	// EmptyClaims counts claims that found nothing due: another goroutine
	// or scanner process took the head first, or the head this process
	// knew was stale. Per message, it is the work that wake-ups waste.
	EmptyClaims prometheus.Counter
	// Occurrences of recurring schedules: fired to be published, and
	// missed ones their policy skipped.
	Occurrences, OccurrencesSkipped prometheus.Counter
	Lateness                        prometheus.Histogram // confirm time - due time
	// ClaimLateness is the Redis time of the claim minus the due time: how
	// far behind the fleet is in reaching due messages. Lateness minus
	// ClaimLateness is what publishing and confirming add.
	ClaimLateness prometheus.Histogram
	ClaimTime     prometheus.Histogram
	ConfirmTime   prometheus.Histogram // publish to confirm
	// FlowReleased counts held messages the releaser let go, by topic;
	// FlowLateness is their confirm time minus due time: the lateness
	// their topic's limit or pause chose, kept out of Lateness and
	// ClaimLateness so that the fleet's lateness alert does not fire for
	// it. The topic label takes only topics with a flow.
	FlowReleased *prometheus.CounterVec
	FlowLateness *prometheus.HistogramVec
	// ScopePublished and ScopeLateness are Published and the confirm
	// time minus due time (flow-held messages included) by the scope of
	// each message (Deps.Scopes; a message of no scope is not counted
	// here). The scope label takes the scopes file's names.
	ScopePublished *prometheus.CounterVec
	ScopeLateness  *prometheus.HistogramVec
	// ClassReleased counts messages the class releasers let go from a
	// class's backlog while the fleet was behind (fair.go); ClassLateness
	// is their confirm time minus due time. Those of a class of weight 0,
	// late by choice, are kept out of Lateness (as a limit's are); the
	// others are in it too: their lateness is the fleet's, shared by
	// weight. The class label takes the classes' names.
	ClassReleased *prometheus.CounterVec
	ClassLateness *prometheus.HistogramVec
}

// Dead-letter reasons, the values of the reason label.
const (
	ReasonCorrupt         = "corrupt"
	ReasonNoRoute         = "no_route"
	ReasonExchangeMissing = "exchange_missing"
	ReasonReturned        = "returned"
	ReasonNacked          = "nacked"
	ReasonExpired         = "expired" // claimed past its deadline (shard.Message.ExpiresAt, MaxLateness)
)

// NewMetrics creates the scanner's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	latency := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "delayq", Name: name, Help: help, Buckets: buckets})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "delayq", Name: name, Help: help})
	}
	m := &Metrics{
		Claimed:      counter("messages_claimed_total", "Messages claimed from Redis."),
		Published:    counter("messages_published_total", "Messages confirmed by the broker."),
		Redelivered:  counter("messages_redelivered_total", "Messages published with x-delayq-attempt > 1."),
		Released:     counter("messages_released_total", "Publishes that failed for now; the message is due again shortly."),
		Reaped:       counter("leases_reaped_total", "Expired leases re-queued by this process's claims."),
		LostLeases:   counter("leases_lost_total", "Confirmed messages whose lease had expired before the ack (a duplicate follows)."),
		Recovered:    counter("claims_recovered_total", "Messages whose claim's reply was lost (Redis went away after running it), put back as due at once instead of after their lease."),
		FarCompacted: counter("far_blocks_compacted_total", "Blocks of 256 far-future records this process compressed."),
		FarPromoted:  counter("far_promoted_total", "Far-future messages this process moved into the due set as their bucket came within the horizon."),
		FarPromotionAhead: latency("far_promotion_ahead_seconds", "How long before its start each far bucket was promoted (near zero or below: promotion is behind).",
			[]float64{0, 1, 10, 60, 300, 600, 1200, 1800, 2700, 3600, 7200}),
		EmptyClaims:        counter("claims_empty_total", "Claims that found nothing due (another goroutine or process took the head first, or it was stale)."),
		Occurrences:        counter("schedule_occurrences_total", "Occurrences of recurring schedules fired to be published (missed ones a policy publishes count when they are fired)."),
		OccurrencesSkipped: counter("schedule_occurrences_skipped_total", "Missed occurrences of recurring schedules that their policy skipped."),
		Dead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: "messages_dead_total",
			Help: "Messages moved to the dead set, by reason."}, []string{"reason"}),
		// 1 ms to 1 h.
		Lateness: latency("dispatch_lateness_seconds", "Broker confirm time minus due time.",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}),
		// 0.5 ms to 1 h: a fleet that keeps up claims within a few ms.
		ClaimLateness: latency("claim_lateness_seconds", "Redis time of the claim minus due time.",
			[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}),
		ClaimTime: latency("claim_duration_seconds", "Duration of one claim script call.",
			prometheus.ExponentialBuckets(.0001, 2.5, 12)),
		ConfirmTime: latency("publish_confirm_seconds", "Time from publish to the broker's confirm.",
			prometheus.ExponentialBuckets(.0001, 2.5, 14)),
		FlowReleased: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: "flow_released_total",
			Help: "Held messages of a topic under flow control released at its limit."}, []string{"topic"}),
		FlowLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "delayq", Name: "flow_lateness_seconds",
			Help:    "Broker confirm time minus due time of messages held by their topic's limit or pause.",
			Buckets: []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400}}, []string{"topic"}),
		ScopePublished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: "scope_published_total",
			Help: "Messages confirmed by the broker, by the scope (team) they belong to."}, []string{"scope"}),
		ScopeLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "delayq", Name: "scope_lateness_seconds",
			Help:    "Broker confirm time minus due time, by the scope (team) of the message.",
			Buckets: []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}}, []string{"scope"}),
		ClassReleased: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: "class_released_total",
			Help: "Messages released from a release class's backlog while the fleet was behind."}, []string{"class"}),
		ClassLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "delayq", Name: "class_lateness_seconds",
			Help:    "Broker confirm time minus due time of messages released from a release class's backlog.",
			Buckets: []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400}}, []string{"class"}),
	}
	for _, r := range []string{ReasonCorrupt, ReasonNoRoute, ReasonExchangeMissing, ReasonReturned, ReasonNacked} {
		m.Dead.WithLabelValues(r) // export zeros, so alerts on rate() work from the start
	}
	reg.MustRegister(m.Claimed, m.Published, m.Redelivered, m.Released, m.Reaped, m.LostLeases, m.Recovered, m.FarPromoted, m.FarPromotionAhead, m.FarCompacted, m.EmptyClaims, m.Dead, m.Occurrences, m.OccurrencesSkipped,
		m.Lateness, m.ClaimLateness, m.ClaimTime, m.ConfirmTime, m.FlowReleased, m.FlowLateness, m.ScopePublished, m.ScopeLateness,
		m.ClassReleased, m.ClassLateness)
	return m
}

// counts reads the running totals from the metrics themselves, so there
// is one count of each thing.
func (m *Metrics) counts() Counts {
	dead := 0.0
	for _, r := range []string{ReasonCorrupt, ReasonNoRoute, ReasonExchangeMissing, ReasonReturned, ReasonNacked} {
		dead += value(m.Dead.WithLabelValues(r))
	}
	return Counts{
		Claimed: int64(value(m.Claimed)), Published: int64(value(m.Published)), Redelivered: int64(value(m.Redelivered)),
		Dead: int64(dead), Released: int64(value(m.Released)), LostLeases: int64(value(m.LostLeases)), Reaped: int64(value(m.Reaped)),
		EmptyClaims: int64(value(m.EmptyClaims)), Recovered: int64(value(m.Recovered)),
	}
}

// value is a counter's current value.
func value(c prometheus.Counter) float64 {
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		return 0 // a plain counter always writes
	}
	return out.GetCounter().GetValue()
}

// ShardCollector exports per-shard gauges (scheduled, due now, in flight,
// dead, oldest overdue) and the layout (M, high-water mark), read from
// Redis at scrape time in one pipeline.
//
// These are the namespace's numbers, not the process's: every scanner pod
// of a namespace exports the same values, labelled namespace="<ns>". So
// aggregate them across pods with max (or any one pod) before summing over
// shards, e.g. sum by (namespace) (max by (namespace, shard)
// (delayq_shard_due)); a plain sum counts each message once per pod.
type ShardCollector struct {
	store   *shard.Store
	layout  balance.Source
	timeout time.Duration

	scheduled, dueNow, inFlight, dead, overdue, enqueued, m, hwm, up *prometheus.Desc
}

// NewShardCollector returns a collector over the shards layout covers.
func NewShardCollector(store *shard.Store, layout balance.Source) *ShardCollector {
	ns := ""
	if store != nil {
		ns = store.Namespace()
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("delayq_"+name, help, labels, prometheus.Labels{"namespace": ns})
	}
	return &ShardCollector{
		store: store, layout: layout, timeout: 5 * time.Second,
		scheduled: d("shard_scheduled", "Messages scheduled in the shard, due or not.", "shard"),
		dueNow:    d("shard_due", "Messages due and not yet claimed: the backlog.", "shard"),
		inFlight:  d("shard_in_flight", "Messages claimed and not yet acked.", "shard"),
		dead:      d("shard_dead", "Messages in the shard's dead set.", "shard"),
		overdue:   d("shard_oldest_overdue_seconds", "How long the earliest due message has waited.", "shard"),
		enqueued:  d("messages_enqueued_total", "Messages enqueued into the shard by any producer, as counted in Redis.", "shard"),
		m:         d("shards", "M, the number of shards new messages hash onto."),
		hwm:       d("shards_high_water", "Shards the scanners cover (at least M)."),
		up:        d("shard_stats_up", "1 if the last read of the shard counts from Redis succeeded."),
	}
}

// Describe implements prometheus.Collector.
func (c *ShardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.scheduled, c.dueNow, c.inFlight, c.dead, c.overdue, c.enqueued, c.m, c.hwm, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ShardCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if m, err := c.layout.ShardCount(); err == nil {
		gauge(c.m, float64(m))
	}
	hw, err := c.layout.HighWater()
	if err != nil {
		gauge(c.up, 0)
		return
	}
	gauge(c.hwm, float64(hw))
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	stats, err := c.store.Stats(ctx, hw)
	if err != nil {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	for _, s := range stats {
		l := strconv.Itoa(s.Shard)
		gauge(c.scheduled, float64(s.Scheduled), l)
		gauge(c.dueNow, float64(s.DueNow), l)
		gauge(c.inFlight, float64(s.InFlight), l)
		gauge(c.dead, float64(s.Dead), l)
		gauge(c.overdue, s.OldestOverdue().Seconds(), l)
		ch <- prometheus.MustNewConstMetric(c.enqueued, prometheus.CounterValue, float64(s.Enqueued), l)
	}
}

// gaugeTo returns a function that sends a gauge's value to ch.
func gaugeTo(ch chan<- prometheus.Metric) func(d *prometheus.Desc, v float64, labels ...string) {
	return func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
}

// readForScrape calls read with the shards' high-water mark and a context
// bounded by timeout, and reports whether both succeeded: a collector's
// up.
func readForScrape(layout balance.Source, timeout time.Duration, read func(ctx context.Context, hw int) error) bool {
	hw, err := layout.HighWater()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return read(ctx, hw) == nil
}

// FlowCollector exports each topic's flow control, read from Redis at
// scrape time (shard.Store.FlowStatuses):
//
//	delayq_flow_limit{topic}                messages a second for the fleet; 0: no limit
//	delayq_flow_burst{topic}
//	delayq_flow_paused{topic}               1 while paused
//	delayq_flow_held{topic}                 due messages held back
//	delayq_flow_held_oldest_seconds{topic}  how long the earliest of them has waited
//	delayq_flow_up                          1 if the last read succeeded
//
// Like the shard gauges, these are the namespace's numbers, labelled
// namespace="<ns>": every pod exports the same values, aggregate with max
// across pods.
type FlowCollector struct {
	store   *shard.Store
	layout  balance.Source
	timeout time.Duration

	limit, burst, paused, held, oldest, up *prometheus.Desc
}

// NewFlowCollector returns a collector of the flows of store's namespace,
// whose held sets it counts on the shards layout covers.
func NewFlowCollector(store *shard.Store, layout balance.Source) *FlowCollector {
	ns := ""
	if store != nil {
		ns = store.Namespace()
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("delayq_flow_"+name, help, labels, prometheus.Labels{"namespace": ns})
	}
	return &FlowCollector{store: store, layout: layout, timeout: 5 * time.Second,
		limit:  d("limit", "The topic's release limit, messages a second for the whole fleet; 0: none.", "topic"),
		burst:  d("burst", "How many more than its limit the topic may release in a second after a quiet spell.", "topic"),
		paused: d("paused", "1 while the topic is paused.", "topic"),
		held:   d("held", "Due messages of the topic held back by its limit or pause.", "topic"),
		oldest: d("held_oldest_seconds", "How long the earliest held message of the topic has waited since its due time.", "topic"),
		up:     d("up", "1 if the last read of the flows from Redis succeeded."),
	}
}

// Describe implements prometheus.Collector.
func (c *FlowCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.limit, c.burst, c.paused, c.held, c.oldest, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A flow whose stored value is
// unreadable is left out (the scanners log it with its key); up stays 1
// for the others.
func (c *FlowCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := gaugeTo(ch)
	var sts []shard.FlowStatus
	if !readForScrape(c.layout, c.timeout, func(ctx context.Context, hw int) (err error) {
		sts, err = c.store.FlowStatuses(ctx, hw)
		if sts != nil {
			err = nil // unreadable values are left out, and logged by the scanners
		}
		return err
	}) {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	for _, s := range sts {
		paused := 0.0
		if s.Paused(s.NowMs) {
			paused = 1
		}
		gauge(c.limit, s.Rate, s.Topic)
		gauge(c.burst, float64(s.Burst), s.Topic)
		gauge(c.paused, paused, s.Topic)
		gauge(c.held, float64(s.Held), s.Topic)
		gauge(c.oldest, s.HeldFor().Seconds(), s.Topic)
	}
}

// RedisCollector exports the settings of every Redis master that decide
// whether delayq can lose or refuse messages, read at scrape time
// (shard.Store.RedisServers: INFO, and CONFIG GET where allowed):
//
//	delayq_redis_used_memory_bytes{master}, delayq_redis_maxmemory_bytes{master} (0: no limit)
//	delayq_redis_evicts_messages{master,policy}  1 when maxmemory-policy can evict scheduled messages
//	delayq_redis_persistence{master,mode}        always 1; mode is aof-always, aof-everysec, aof-no,
//	                                             aof, rdb, none or unknown (INFO or CONFIG GET refused)
//
// Like the shard gauges, every pod exports the same values: aggregate
// with max across pods.
type RedisCollector struct {
	store   *shard.Store
	timeout time.Duration

	used, max, evicts, persistence *prometheus.Desc
}

// NewRedisCollector returns a collector over the masters store uses.
func NewRedisCollector(store *shard.Store) *RedisCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("delayq_redis_"+name, help, labels, nil)
	}
	return &RedisCollector{store: store, timeout: 5 * time.Second,
		used:        d("used_memory_bytes", "Redis used_memory of the master.", "master"),
		max:         d("maxmemory_bytes", "Redis maxmemory of the master; 0 means no limit.", "master"),
		evicts:      d("evicts_messages", "1 when the master's maxmemory-policy can evict scheduled messages (allkeys-*).", "master", "policy"),
		persistence: d("persistence", "Always 1: how the master keeps data across a restart (mode).", "master", "mode"),
	}
}

// Describe implements prometheus.Collector.
func (c *RedisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.used, c.max, c.evicts, c.persistence} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *RedisCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	servers, err := c.store.RedisServers(ctx)
	if err != nil {
		return // Redis unreachable: delayq_shard_stats_up says so
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range servers {
		gauge(c.persistence, 1, r.Addr, r.Persistence())
		if !r.Known {
			continue
		}
		gauge(c.used, float64(r.UsedMemory), r.Addr)
		gauge(c.max, float64(r.MaxMemory), r.Addr)
		evicts := 0.0
		if r.EvictsMessages() {
			evicts = 1
		}
		gauge(c.evicts, evicts, r.Addr, r.Policy)
	}
}

// ScheduleCollector exports the namespace's recurring schedules, read
// from Redis at scrape time (one HLEN of the registry):
//
//	delayq_schedules     schedules in the namespace
//	delayq_schedules_up  1 if the last read succeeded
//
// Occurrences fired and skipped are the counters
// delayq_schedule_occurrences_total and
// delayq_schedule_occurrences_skipped_total of each scanner. Labelled
// namespace="<ns>" like the shard gauges: aggregate with max across pods.
type ScheduleCollector struct {
	store     *shard.Store
	timeout   time.Duration
	count, up *prometheus.Desc
}

// NewScheduleCollector returns a collector of store's schedules.
func NewScheduleCollector(store *shard.Store) *ScheduleCollector {
	ns := ""
	if store != nil {
		ns = store.Namespace()
	}
	labels := prometheus.Labels{"namespace": ns}
	return &ScheduleCollector{store: store, timeout: 5 * time.Second,
		count: prometheus.NewDesc("delayq_schedules", "Recurring schedules in the namespace.", nil, labels),
		up:    prometheus.NewDesc("delayq_schedules_up", "1 if the last read of the schedules from Redis succeeded.", nil, labels)}
}

// Describe implements prometheus.Collector.
func (c *ScheduleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.count; ch <- c.up }

// Collect implements prometheus.Collector.
func (c *ScheduleCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	n, err := c.store.ScheduleCount(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n))
}
