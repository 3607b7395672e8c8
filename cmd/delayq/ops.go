package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/publisher"
	"github.com/delayq/delayq/scanner"
	"github.com/delayq/delayq/shard"
)

// readyRedisTimeout bounds /readyz's PING of Redis, so that a frozen Redis
// gets a 503 naming it within a Kubernetes probe's default timeout (1 s),
// not a probe that times out with no reason.
const readyRedisTimeout = 700 * time.Millisecond

// opsServer serves /metrics, /healthz and /readyz for a scanner.
type opsServer struct {
	reg      *prometheus.Registry // for the parts that add metrics (the ingress)
	srv      *http.Server
	ln       net.Listener
	started  atomic.Bool // every part of the process has started (Started)
	stopping atomic.Bool
	log      *zap.Logger
	served   sync.WaitGroup // the Serve goroutine
}

// newOps binds the listener at once (so a taken port is a startup error)
// and registers the metrics; Serve starts answering.
func newOps(addr string, profiles bool, rdb redis.UniversalClient, st *shard.Store, layout balance.Source, pub *publisher.Publisher,
	log *zap.Logger) (*opsServer, *scanner.Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := scanner.NewMetrics(reg)
	reg.MustRegister(scanner.NewShardCollector(st, layout), scanner.NewFlowCollector(st, layout), scanner.NewClassCollector(st, layout), scanner.NewQuotaCollector(st, layout), scanner.NewRedisCollector(st),
		scanner.NewScheduleCollector(st), scanner.NewMoveCollector(st, layout))
	b := readBuildInfo()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "delayq", Name: "build_info",
		Help: "Always 1; the labels say which build runs."}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	reg.MustRegister(build)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "delayq", Name: "amqp_ready",
		Help: "1 while connected to RabbitMQ and not blocked by a resource alarm."}, func() float64 {
		if pub.Ready() {
			return 1
		}
		return 0
	}))
	reg.MustRegister(nodeCollector{pub: pub, desc: prometheus.NewDesc("delayq_amqp_node",
		"1 for the RabbitMQ node (host:port) the scanner publishes through; absent while it is not connected.",
		[]string{"node"}, nil)})
	o := &opsServer{reg: reg, log: log.Named("ops")}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(o.log),
		EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		var problems []string
		if !o.started.Load() {
			problems = append(problems, "starting")
		}
		if o.stopping.Load() {
			problems = append(problems, "shutting down")
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyRedisTimeout)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			problems = append(problems, "redis: "+err.Error())
		}
		if !pub.Ready() {
			problems = append(problems, "amqp: not connected or blocked")
		}
		if _, err := layout.ShardCount(); err != nil {
			problems = append(problems, "shard count: "+err.Error())
		}
		if len(problems) > 0 {
			http.Error(w, "not ready: "+strings.Join(problems, "; "), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready (amqp node %s)\n", nodeHost(pub.Node()))
	})
	if profiles {
		// Block and mutex profiles record nothing unless asked to: every
		// blocking event over 10 µs, every 10th contended lock.
		runtime.SetBlockProfileRate(10_000)
		runtime.SetMutexProfileFraction(10)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s_METRICS_ADDR: %w", envPrefix, err)
	}
	o.ln = ln
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return o, metrics, nil
}

// nodeCollector exports delayq_amqp_node{node} for the connected node.
type nodeCollector struct {
	pub  *publisher.Publisher
	desc *prometheus.Desc
}

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	if n := c.pub.Node(); n != "" {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, nodeHost(n))
	}
}

// nodeHost is the host:port of a node's (redacted) URL.
func nodeHost(u string) string {
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return p.Host
	}
	return u
}

// Start answers requests in a goroutine until Stop.
func (o *opsServer) Start(context.Context) error {
	o.served.Go(func() {
		if err := o.srv.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("metrics listener stopped", zap.Error(err))
		}
	})
	o.log.Info("serving /metrics, /healthz, /readyz", zap.String("addr", o.ln.Addr().String()))
	return nil
}

// Started lets /readyz answer 200 (when Redis, RabbitMQ and M are fine):
// the listener serves /metrics and /healthz from the start, but the
// process is ready only once every part has started.
func (o *opsServer) Started() { o.started.Store(true) }

// Stopping makes /readyz answer 503 from now on.
func (o *opsServer) Stopping() { o.stopping.Store(true) }

// Stop closes the listener and waits, while ctx lasts, for the requests
// under way; then for the serving goroutine. Safe to call more than once.
func (o *opsServer) Stop(ctx context.Context) error {
	err := o.srv.Shutdown(ctx)
	_ = o.ln.Close() // never served (Start not called): release the port
	o.served.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
