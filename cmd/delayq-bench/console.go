package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/delayq/delayq/shard"
)

// consoleResult times the console's pages and the API's reads over a
// namespace of M=256 shards holding a large backlog: each request must do
// bounded Redis work whatever the backlog.
type consoleResult struct {
	Shards    int               `json:"shards"`
	Pending   int               `json:"pending"`
	Requests  int               `json:"requests"`
	Endpoints []endpointLatency `json:"endpoints"`
}

type endpointLatency struct {
	Path string        `json:"path"`
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	Max  time.Duration `json:"max_ns"`
}

const consoleShards = 256

func (b *bench) console(ctx context.Context) error {
	ns := b.namespace("console")
	start := time.Now()
	if _, err := b.fillM(ctx, ns, b.c.consolePending, consoleShards, time.Hour, time.Time{}); err != nil {
		return err
	}
	say("console: %d messages over %d shards enqueued in %s", b.c.consolePending, consoleShards, time.Since(start).Round(time.Second))
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(b.c.delayq, "serve")
	cmd.Env = append(os.Environ(), "DELAYQ_REDIS_ADDRS="+b.rs.Addr, "DELAYQ_NAMESPACE="+ns,
		fmt.Sprintf("DELAYQ_SHARDS=%d", consoleShards), "DELAYQ_HTTP_ADDR="+addr, "DELAYQ_LOG_LEVEL=error", "DELAYQ_LOG_FORMAT=console")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	getOnce := func(path string) (time.Duration, error) {
		t0 := time.Now()
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("GET %s: %d", path, resp.StatusCode)
		}
		return time.Since(t0), nil
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := getOnce("/v1/openapi.json"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("console: serve never answered")
		}
		sleep(ctx, 50*time.Millisecond)
	}
	const requests = 50
	r := &consoleResult{Shards: consoleShards, Pending: b.c.consolePending, Requests: requests}
	for _, path := range []string{"/", "/v1/stats", "/v1/stats/due-profile", "/v1/stats/due-profile?resolution=hour", "/v1/stats/rates", "/dead", "/v1/dead",
		"/messages?id=" + ns + "-12345", "/v1/messages/" + ns + "-12345"} {
		var lat []time.Duration
		for range requests {
			d, err := getOnce(path)
			if err != nil {
				return err
			}
			lat = append(lat, d)
		}
		slices.Sort(lat)
		e := endpointLatency{Path: path, P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Max: lat[len(lat)-1]}
		r.Endpoints = append(r.Endpoints, e)
		say("console: GET %s p50 %s p99 %s max %s", path, ms(e.P50), ms(e.P99), ms(e.Max))
	}
	// The profile's computation itself (serve caches it 5 s per instance):
	// every shard's ZCOUNTs, straight from the store.
	st, err := shard.NewStore(b.rdb, ns)
	if err != nil {
		return err
	}
	// One topic's profile reads a bounded sample of envelopes (the same
	// work whether they match or not).
	for _, res := range []struct {
		name, topic string
		width       time.Duration
		n           int
	}{{"minute", "", time.Minute, 60}, {"hour", "", time.Hour, 168}, {"minute", "t", time.Minute, 60}, {"hour", "t", time.Hour, 168}} {
		var lat []time.Duration
		for range 20 {
			t0 := time.Now()
			var err error
			if res.topic == "" {
				_, err = st.DueProfile(ctx, consoleShards, res.width, res.n)
			} else {
				_, err = st.TopicProfile(ctx, consoleShards, res.topic, res.width, res.n)
			}
			if err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		of := ""
		if res.topic != "" {
			of = " of one topic"
		}
		e := endpointLatency{Path: "due profile" + of + " per " + res.name + ", uncached", P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Max: lat[len(lat)-1]}
		r.Endpoints = append(r.Endpoints, e)
		say("console: %s p50 %s p99 %s max %s", e.Path, ms(e.P50), ms(e.P99), ms(e.Max))
	}
	b.res.Console = r
	b.rdb.FlushAll(ctx)
	return nil
}
