package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet's rates: messages enqueued, published and dead-lettered a
// second, and the lateness of publishes, over the last minutes, for the
// whole fleet rather than one process's memory.
//
// Counting adds no round trip: the scripts that create, ack and bury
// messages write the shard's counters HASH in the same atomic call as the
// change they count (enqueued, published, dead, and late:<class> for the
// lateness bucket of each publish, LatenessClasses): totals, exact, that
// survive any process. A series needs those totals at known times:
// SampleRates sums every shard's counters and appends the sum to the
// namespace's rates ZSET (RatesKey; score = Redis time), at most once an
// interval for the whole fleet. Any process may call it (delayq scan and
// serve do, every 10 s): the first one after the interval takes the
// sample, the others find it taken after one script call. No leader, no
// lock: a process that dies while sampling leaves a gap, which Rates
// spans. Samples are kept RatesKeep.
//
// Rates are the differences of consecutive samples over their distance in
// time; a total that went down (Redis lost data) counts as no change. The
// lateness p99 is the upper bound of the bucket that holds the 99th
// percentile of the window's publishes; messages a topic's limit held back
// are not in it (their lateness is the limit's), as in the scanners'
// delayq_dispatch_lateness_seconds.

// RatesKeep is how long samples of the fleet's counters are kept.
const RatesKeep = 16 * time.Minute

// RatesKey is the namespace's ZSET of samples of the fleet's counters:
// member "<unix ms> <JSON totals>", score the same unix ms (Redis clock).
func RatesKey(ns string) string { return "delayq:{" + ns + "}:rates" }

// counterTotals is one sample: the sum of every shard's counters.
type counterTotals struct {
	Enqueued  int64            `json:"e"`
	Published int64            `json:"p"`
	Dead      int64            `json:"d"`
	Late      map[string]int64 `json:"l,omitempty"` // lateness bucket -> publishes
	// Released counts what each release class let go from its backlog
	// (fair.go): class -> messages.
	Released map[string]int64 `json:"r,omitempty"`
}

// ratesSampleScript takes a sample of the fleet's counters when none was
// taken in the last interval.
//
//	KEYS[1] rates ZSET
//	ARGV[1] interval ms   ARGV[2] ms samples are kept
//	ARGV[3] the totals (JSON), or "" only to ask whether a sample is due
//
// Returns 1 when no sample is younger than the interval (and, with
// totals, adds "<now> <totals>" at now and drops the samples older than
// ARGV[2]), else 0. Complexity: O(log N) plus the samples dropped.
var ratesSampleScript = redis.NewScript(nowMs + `
local last = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #last > 0 and now - tonumber(last[2]) < tonumber(ARGV[1]) then return 0 end
if ARGV[3] == '' then return 1 end
redis.call('ZADD', KEYS[1], now, now .. ' ' .. ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// SampleRates adds a sample of the fleet's counters to RatesKey unless one
// was taken in the last interval (by any process), reading every shard
// ever used (the layout's largest M) in one pipelined round trip. It
// reports whether it took the sample; a counter that is not a number is
// left out of it, and the error names it.
func (s *Store) SampleRates(ctx context.Context, interval time.Duration) (bool, error) {
	key := RatesKey(s.ns)
	args := []any{interval.Milliseconds(), RatesKeep.Milliseconds()}
	due, err := s.run1(ctx, ratesSampleScript, []string{key}, append(args, "")...).Int()
	if err != nil || due == 0 {
		return false, wrapRates(err)
	}
	lay, err := s.ReadLayout(ctx)
	if err != nil {
		return false, fmt.Errorf("rates: %w", err)
	}
	n := max(lay.MaxEver, lay.HighWater) // 0: nothing was ever written, a sample of zeros
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, n)
	for i := range cmds {
		cmds[i] = pipe.HGetAll(ctx, ShardKeys(s.ns, i).Counters)
	}
	if _, err := pipe.Exec(ctx); err != nil && n > 0 {
		return false, fmt.Errorf("rates: read the counters: %w", err)
	}
	t := counterTotals{Late: map[string]int64{}, Released: map[string]int64{}}
	var bad error // a counter that is not a number (only a hand could write one): left out, said
	for i, c := range cmds {
		for f, v := range c.Val() {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				if bad == nil {
					bad = fmt.Errorf("rates: counter %s of %s is %q, left out of the sample: %w", f, ShardKeys(s.ns, i).Counters, v, err)
				}
				continue
			}
			switch {
			case f == "enqueued":
				t.Enqueued += x
			case f == "published":
				t.Published += x
			case f == "dead":
				t.Dead += x
			case strings.HasPrefix(f, "late:"):
				t.Late[f[len("late:"):]] += x
			case strings.HasPrefix(f, "released:"):
				t.Released[f[len("released:"):]] += x
			}
		}
	}
	b, err := json.Marshal(t)
	if err != nil {
		return false, fmt.Errorf("rates: %w", err)
	}
	took, err := s.run1(ctx, ratesSampleScript, []string{key}, append(args, string(b))...).Int()
	if err == nil && bad != nil {
		return took == 1, bad
	}
	return took == 1, wrapRates(err)
}

func wrapRates(err error) error {
	if err != nil {
		return fmt.Errorf("rates: %w", err)
	}
	return nil
}

// Rates are the fleet's rates over a window (Store.Rates).
type Rates struct {
	Now    time.Time // the Redis clock
	Window time.Duration
	// Enqueued, Published and Dead are messages a second over the
	// samples in the window (0 with fewer than two samples).
	Enqueued, Published, Dead float64
	// Lateness is the p99 of the window's publishes.
	Lateness LatenessP99
	// Released is, by release class, the messages a second it let go
	// from its backlog while the fleet was behind (fair.go).
	Released map[string]float64
	Points   []RatePoint // one per pair of consecutive samples, oldest first
	// Sampled is the time the window's samples span: less than Window
	// when the fleet started (or stopped sampling) within it.
	Sampled time.Duration
	// Corrupt counts members of RatesKey that are not samples, skipped.
	Corrupt int
}

// RatePoint is the rates between two consecutive samples, ending At.
type RatePoint struct {
	At                        time.Time
	Seconds                   float64 // the time since the sample before
	Enqueued, Published, Dead float64 // a second
	Lateness                  LatenessP99
}

// LatenessP99 is a p99 of lateness as the buckets of LatenessClasses tell
// it: at most UpTo; Over when it is beyond the largest bucket (UpTo is
// then the largest); Count publishes were counted (0: no p99).
type LatenessP99 struct {
	UpTo  time.Duration
	Over  bool
	Count int64
}

// Rates reads the fleet's rates over the last window (at most RatesKeep)
// from the samples in RatesKey.
func (s *Store) Rates(ctx context.Context, window time.Duration) (Rates, error) {
	if window <= 0 || window > RatesKeep {
		return Rates{}, invalid("window", "%s: want more than 0 and at most %s", window, RatesKeep)
	}
	nowMs, err := s.redisNowMs(ctx)
	if err != nil {
		return Rates{}, fmt.Errorf("rates: %w", err)
	}
	r := Rates{Now: time.UnixMilli(nowMs), Window: window}
	raw, err := s.rdb.ZRangeByScore(ctx, RatesKey(s.ns), &redis.ZRangeBy{Min: strconv.FormatInt(nowMs-window.Milliseconds(), 10), Max: "+inf"}).Result()
	if err != nil {
		return Rates{}, fmt.Errorf("rates: %w", err)
	}
	type sample struct {
		at time.Time
		t  counterTotals
	}
	var samples []sample
	for _, m := range raw {
		ms, js, _ := strings.Cut(m, " ")
		at, err := strconv.ParseInt(ms, 10, 64)
		var t counterTotals
		if err == nil {
			err = json.Unmarshal([]byte(js), &t)
		}
		if err != nil { // not written by SampleRates: the rates span it
			r.Corrupt++
			continue
		}
		samples = append(samples, sample{time.UnixMilli(at), t})
	}
	if len(samples) < 2 {
		return r, nil
	}
	for j := 1; j < len(samples); j++ {
		a, b := samples[j-1], samples[j]
		sec := b.at.Sub(a.at).Seconds()
		if sec <= 0 {
			continue
		}
		e, p, d, late := delta(a.t, b.t)
		r.Points = append(r.Points, RatePoint{At: b.at, Seconds: sec, Enqueued: float64(e) / sec, Published: float64(p) / sec,
			Dead: float64(d) / sec, Lateness: p99Of(late)})
	}
	first, last := samples[0], samples[len(samples)-1]
	r.Sampled = last.at.Sub(first.at)
	if sec := r.Sampled.Seconds(); sec > 0 {
		var e, p, d int64
		late, released := map[string]int64{}, map[string]int64{}
		for j := 1; j < len(samples); j++ { // by intervals, so that a reset counts as no change
			de, dp, dd, dl := delta(samples[j-1].t, samples[j].t)
			e, p, d = e+de, p+dp, d+dd
			for c, n := range dl {
				late[c] += n
			}
			for c, n := range samples[j].t.Released {
				released[c] += max(0, n-samples[j-1].t.Released[c])
			}
		}
		if len(released) > 0 {
			r.Released = make(map[string]float64, len(released))
			for c, n := range released {
				r.Released[c] = float64(n) / sec
			}
		}
		r.Enqueued, r.Published, r.Dead, r.Lateness = float64(e)/sec, float64(p)/sec, float64(d)/sec, p99Of(late)
	}
	return r, nil
}

// delta is what the counters grew by from a to b; a counter that went
// down counts as 0.
func delta(a, b counterTotals) (e, p, d int64, late map[string]int64) {
	grew := func(x, y int64) int64 { return max(0, y-x) }
	late = map[string]int64{}
	for c, n := range b.Late {
		if g := grew(a.Late[c], n); g > 0 {
			late[c] = g
		}
	}
	return grew(a.Enqueued, b.Enqueued), grew(a.Published, b.Published), grew(a.Dead, b.Dead), late
}

// p99Of reads the p99 from publishes counted per class.
func p99Of(late map[string]int64) LatenessP99 {
	var total int64
	for _, n := range late {
		total += n
	}
	if total == 0 {
		return LatenessP99{}
	}
	rank := (total*99 + 99) / 100 // the 99th percentile's rank, 1-based
	var seen int64
	for _, c := range LatenessClasses {
		if seen += late[strconv.FormatInt(c, 10)]; seen >= rank {
			return LatenessP99{UpTo: time.Duration(c) * time.Millisecond, Count: total}
		}
	}
	return LatenessP99{UpTo: time.Duration(LatenessClasses[len(LatenessClasses)-1]) * time.Millisecond, Over: true, Count: total}
}
