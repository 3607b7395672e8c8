package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/delayq/delayq/shard"
)

// ---- fair: what release classes cost a drain, and how they share it ----

// fairResult compares, for each claim batch k of -batches, a saturated
// drain with one scanner of messages of one topic and no classes (today's
// path) with the same drain of two topics in two classes at weights 3:1,
// both backlogged (every message due at one instant), the two in turn,
// Rounds times. Split is, for each round with classes, the heavy class's
// deliveries over the light one's while both still waited (from the first
// second of the drain to a second before the first of them drained).
type fairResult struct {
	Runs []fairRun `json:"runs"`
}

// fairRun is the fair scenario at one claim batch.
type fairRun struct {
	K      int       `json:"k"`
	Single []float64 `json:"single_class"`
	Shared []float64 `json:"two_classes"`
	Ratio  float64   `json:"two_over_single"` // medians
	Split  []float64 `json:"split_3_to_1"`
}

// fairEnv writes a routes file for namespace ns (topics heavy and light to
// the bench's queue; with classes, heavy at weight 3 and light at 1) and
// returns the scanners' variable naming it.
func (b *bench) fairEnv(ns string, classes bool) ([]string, error) {
	routes := fmt.Sprintf("routes:\n  heavy: {exchange: %[1]s, routing_key: %[2]s}\n  light: {exchange: %[1]s, routing_key: %[2]s}\n", exchange, ns)
	if classes {
		routes += "classes:\n  heavy: {topics: [heavy], weight: 3}\n  light: {topics: [light], weight: 1}\n"
	}
	dir, err := os.MkdirTemp("", "delayq-bench-fair")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(path, []byte(routes), 0o600); err != nil {
		return nil, err
	}
	return []string{"DELAYQ_ROUTES_FILE=" + path}, nil
}

func (b *bench) fair(ctx context.Context) error {
	b.res.Fair = &fairResult{}
	for _, k := range b.c.batches {
		if err := b.fairAt(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// fairAt runs the fair scenario at claim batch k.
func (b *bench) fairAt(ctx context.Context, k int) error {
	r := fairRun{K: k}
	n := b.c.backlog
	for round := range b.c.rounds {
		for j := range 2 {
			classes := (j+round)%2 == 0
			s := drainSetup{env: func(ns string) ([]string, error) { return b.fairEnv(ns, classes) }}
			if classes {
				// Three heavy messages for one light one, interleaved.
				s.topic = func(i int) string { return map[bool]string{true: "light", false: "heavy"}[i%4 == 3] }
				s.setup = func(ns string) error {
					st, err := shard.NewStore(b.rdb, ns)
					if err != nil {
						return err
					}
					// Stored before the scanners start, as their routes
					// file would: the first claims already know them.
					for _, c := range []shard.Class{{Name: "heavy", Topics: []string{"heavy"}, Weight: 3}, {Name: "light", Topics: []string{"light"}, Weight: 1}} {
						if _, _, err := st.SetRoutesClass(ctx, c); err != nil {
							return err
						}
					}
					return nil
				}
			} else {
				s.topic = func(int) string { return "heavy" }
			}
			rate, _, _, t, err := b.drainBacklogHow(ctx, fmt.Sprintf("fair-%v", classes), n, k, 1, s)
			if err != nil {
				return err
			}
			if !classes {
				r.Single = append(r.Single, rate)
				say("fair: saturated dispatch k=%d, round %d, one topic, no classes: %.0f msg/s", k, round+1, rate)
				continue
			}
			r.Shared = append(r.Shared, rate)
			split := splitWhileBoth(t.byClass["heavy"], t.byClass["light"])
			r.Split = append(r.Split, split)
			say("fair: saturated dispatch k=%d, round %d, two classes 3:1: %.0f msg/s, split %.3f:1 while both waited", k, round+1, rate, split)
		}
	}
	r.Ratio = median(r.Shared) / median(r.Single)
	say("fair: k=%d, two classes over one, medians: %.3f of the single-class saturated rate; splits %v", k, r.Ratio, r.Split)
	b.res.Fair.Runs = append(b.res.Fair.Runs, r)
	return nil
}

// splitWhileBoth is a's deliveries over b's from a second after the first
// delivery to a second before the first of the two ended.
func splitWhileBoth(a, b []time.Time) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	slices.SortFunc(a, func(x, y time.Time) int { return x.Compare(y) })
	slices.SortFunc(b, func(x, y time.Time) int { return x.Compare(y) })
	from := a[0]
	if b[0].Before(from) {
		from = b[0]
	}
	from = from.Add(time.Second)
	to := a[len(a)-1]
	if b[len(b)-1].Before(to) {
		to = b[len(b)-1]
	}
	to = to.Add(-time.Second)
	count := func(at []time.Time) int {
		n := 0
		for _, x := range at {
			if !x.Before(from) && x.Before(to) {
				n++
			}
		}
		return n
	}
	if nb := count(b); nb > 0 {
		return float64(count(a)) / float64(nb)
	}
	return 0
}
