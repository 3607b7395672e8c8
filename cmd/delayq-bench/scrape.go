package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// freeAddr returns a loopback address with a port that was free a moment
// ago, for a scanner's metrics listener.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// histogram is a Prometheus histogram summed over the fleet: cumulative
// counts per upper bound, in ascending order of the bounds.
type histogram struct {
	bounds []float64
	counts []uint64
	count  uint64
}

// quantile returns the upper bound of the bucket that holds quantile q
// (+Inf above the last bound): coarse, but never below the true value.
func (h histogram) quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	for i, c := range h.counts {
		if c >= rank {
			return time.Duration(h.bounds[i] * float64(time.Second))
		}
	}
	return time.Duration(math.MaxInt64)
}

// scrapeHistograms reads the named histograms from the /metrics endpoint
// of every scanner of the fleet and sums them.
func (f *fleet) scrapeHistograms(ctx context.Context, names ...string) (map[string]histogram, error) {
	out := map[string]histogram{}
	for _, addr := range f.metrics {
		if err := scrapeOne(ctx, addr, names, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func scrapeOne(ctx context.Context, addr string, names []string, out map[string]histogram) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", addr, err)
	}
	for _, name := range names {
		fam := families[name]
		if fam != nil && len(fam.Metric) == 1 && fam.Metric[0].Counter != nil { // a counter: its value as the count
			h := out[name]
			h.count += uint64(fam.Metric[0].Counter.GetValue())
			out[name] = h
			continue
		}
		if fam == nil || len(fam.Metric) != 1 || fam.Metric[0].Histogram == nil {
			return fmt.Errorf("scrape %s: no histogram %s", addr, name)
		}
		src := fam.Metric[0].Histogram
		h := out[name]
		if h.bounds == nil {
			for _, b := range src.Bucket {
				h.bounds = append(h.bounds, b.GetUpperBound())
			}
			h.counts = make([]uint64, len(h.bounds))
		}
		if len(src.Bucket) != len(h.bounds) {
			return fmt.Errorf("scrape %s: %s has %d buckets, expected %d", addr, name, len(src.Bucket), len(h.bounds))
		}
		for i, b := range src.Bucket {
			h.counts[i] += b.GetCumulativeCount()
		}
		h.count += src.GetSampleCount()
		out[name] = h
	}
	return nil
}
