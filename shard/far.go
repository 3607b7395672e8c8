package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The far-future tier's Go side: its settings, placement and promotion.
// doc.go ("The far-future tier") has the design, farscripts.go the
// scripts.

// FarSettings are a namespace's far-tier settings (FarKey).
type FarSettings struct {
	// Horizon: a message whose bucket starts at least this long after
	// now is stored far; a bucket is promoted once it starts within it.
	Horizon time.Duration
	// BucketWidth: far messages are grouped by due time in buckets this
	// wide. Fixed once set.
	BucketWidth time.Duration
	// IndexSlots: the id index's keys per shard. Fixed once set.
	IndexSlots int
	// Since: when placement far begins (unix ms, Redis clock). EnableFar
	// sets it, when zero, 2 × farCacheTTL after the settings are first
	// written, so that every producer checks the index before any far
	// record exists; a namespace no producer uses yet may start at once.
	Since int64
}

// The defaults of EnableFar, and how long a Store trusts the settings it
// read (a producer that has not seen the tier turned on yet enqueues near
// without looking at the index: Since waits twice that).
const (
	DefaultFarHorizon     = time.Hour
	DefaultFarBucketWidth = 10 * time.Minute
	DefaultFarIndexSlots  = 4096
	farCacheTTL           = 5 * time.Second
)

// FarKey is the namespace's HASH of far-tier settings: horizon_ms,
// width_ms, slots, since_ms.
func FarKey(ns string) string { return "delayq:{" + ns + "}:far" }

// farKeys are the far keys of shard i.
type farKeys struct{ p string }

func farKeysOf(ns string, i int) farKeys {
	return farKeys{p: "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:"}
}

func (k farKeys) dir() string           { return k.p + "fardir" }
func (k farKeys) meta() string          { return k.p + "farmeta" }
func (k farKeys) bucket(b int64) string { return k.p + "far:" + strconv.FormatInt(b, 10) }
func (k farKeys) lease(b int64) string  { return k.p + "farlease:" + strconv.FormatInt(b, 10) }
func (k farKeys) blocks(b int64) string { return k.p + "farz:" + strconv.FormatInt(b, 10) }
func (k farKeys) compact() string       { return k.p + "farcompact" }
func (k farKeys) index(id string, slots int) string {
	return k.p + "fidx:" + strconv.FormatUint(farSlot(id, slots), 10)
}

// farSlot is the index slot of id: the high half of its FNV-1a 64 hash
// (the low half, modulo M, picks its shard) modulo slots.
func farSlot(id string, slots int) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return (h >> 32) % uint64(slots)
}

// farCache is the settings a Store read, shared by its copies.
type farCache struct {
	mu      sync.Mutex
	at      time.Time
	on      bool
	sets    FarSettings
	codecs  farCodecs
	overdue map[int]time.Time // shard -> PromoteOverdue's last look at it: one entry a shard, never deleted
}

// EnableFar turns the far tier on for the namespace with fs (zero fields
// take the defaults). Placement far begins at fs.Since (see there).
// Width and slots cannot change once
// set: EnableFar on an enabled namespace changes only the horizon.
func (s *Store) EnableFar(ctx context.Context, fs FarSettings) error {
	if fs.Horizon <= 0 {
		fs.Horizon = DefaultFarHorizon
	}
	if fs.BucketWidth <= 0 {
		fs.BucketWidth = DefaultFarBucketWidth
	}
	if fs.IndexSlots <= 0 {
		fs.IndexSlots = DefaultFarIndexSlots
	}
	if fs.BucketWidth < 100*time.Millisecond || fs.Horizon < fs.BucketWidth {
		return invalid("far", "bucket width %s must be at least 100ms and at most the horizon %s", fs.BucketWidth, fs.Horizon)
	}
	old, on, err := s.readFar(ctx)
	if err != nil {
		return err
	}
	if on && (old.BucketWidth != fs.BucketWidth || old.IndexSlots != fs.IndexSlots) {
		return invalid("far", "bucket width %s and index slots %d are fixed once set (want %s and %d)",
			old.BucketWidth, old.IndexSlots, fs.BucketWidth, fs.IndexSlots)
	}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("far settings: %w", err)
	}
	fields := []any{"horizon_ms", fs.Horizon.Milliseconds()}
	if !on {
		if fs.Since <= 0 {
			fs.Since = now.Add(2 * farCacheTTL).UnixMilli()
		}
		fields = append(fields, "width_ms", fs.BucketWidth.Milliseconds(), "slots", fs.IndexSlots, "since_ms", fs.Since)
	}
	if err := s.rdb.HSet(ctx, FarKey(s.ns), fields...).Err(); err != nil {
		return fmt.Errorf("far settings: %w", err)
	}
	s.far.mu.Lock()
	s.far.at = time.Time{}
	s.far.mu.Unlock()
	return nil
}

// readFar reads the settings from Redis.
func (s *Store) readFar(ctx context.Context) (FarSettings, bool, error) {
	v, err := s.rdb.HGetAll(ctx, FarKey(s.ns)).Result()
	if err != nil {
		return FarSettings{}, false, fmt.Errorf("far settings: %w", err)
	}
	if len(v) == 0 {
		return FarSettings{}, false, nil
	}
	num := func(f string) (int64, error) {
		n, err := strconv.ParseInt(v[f], 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("far settings %s field %s: %q is not a positive whole number", FarKey(s.ns), f, v[f])
		}
		return n, nil
	}
	var fs FarSettings
	var errs []error
	h, err := num("horizon_ms")
	errs = append(errs, err)
	w, err := num("width_ms")
	errs = append(errs, err)
	k, err := num("slots")
	errs = append(errs, err)
	since, err := num("since_ms")
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return FarSettings{}, false, err
	}
	fs.Horizon, fs.BucketWidth, fs.IndexSlots, fs.Since = time.Duration(h)*time.Millisecond, time.Duration(w)*time.Millisecond, int(k), since
	return fs, true, nil
}

// farSettings returns the settings, read again after farCacheTTL.
func (s *Store) farSettings(ctx context.Context) (FarSettings, bool, error) {
	s.far.mu.Lock()
	defer s.far.mu.Unlock()
	if !s.far.at.IsZero() && time.Since(s.far.at) < farCacheTTL {
		return s.far.sets, s.far.on, nil
	}
	fs, on, err := s.readFar(ctx)
	if err != nil {
		return FarSettings{}, false, err
	}
	s.far.sets, s.far.on, s.far.at = fs, on, time.Now()
	return fs, on, nil
}

// place stores one message of shard i: far when the tier is on and its
// bucket is beyond the horizon, near otherwise (enqueueScript, checking
// the far index when the tier is on). It returns the due time, or the
// enqueue script's errors.
// With a reservation r, the quota'd variants run (quota.go).
func (s *Store) place(ctx context.Context, i int, m encodedMessage, upsert bool, shardCap int, r *reservation) (int64, error) {
	fs, on, err := s.farSettings(ctx)
	if err != nil {
		return 0, err
	}
	if !on {
		return s.enqueue(ctx, i, m, upsert, shardCap, nil, r)
	}
	due := m.ms
	if m.mode == "delay" {
		due += time.Now().UnixMilli()
	}
	w := fs.BucketWidth.Milliseconds()
	b := due / w
	// Try far when the bucket looks far by this clock (the script decides
	// by Redis's), with a second's margin for the clocks to differ.
	for try := 0; try < 2 && b*w >= time.Now().Add(fs.Horizon).UnixMilli()-1000; try++ {
		st, v, err := s.placeFar(ctx, i, m, upsert, shardCap, fs, b, r)
		if err != nil {
			return 0, err
		}
		switch st {
		case 4: // near after all
			try = 2
		case 5: // another bucket by Redis's clock
			b = v
		default:
			return enqueueStatus([]any{st, v}, nil)
		}
	}
	return s.enqueue(ctx, i, m, upsert, shardCap, &fs, r)
}

// placeFarBatch places far the messages of todo whose bucket looks beyond
// the horizon by this clock, in one pipelined round trip of
// farPlaceManyScript calls (by shard, chunked as the near enqueues are),
// filling in their results, and returns the rest of todo: the messages to
// enqueue near, with those the scripts sent near (within the horizon by
// Redis's clock, or in another bucket at a bucket's edge: near is always
// right, if less compact). Messages whose call failed get the error in
// their result; the first is also returned.
func (p *Producer) placeFarBatch(ctx context.Context, fs FarSettings, preps []prepared, res []BatchResult, todo []int, upsert bool) ([]int, error) {
	s := p.store
	w := fs.BucketWidth.Milliseconds()
	now := time.Now()
	edge := now.Add(fs.Horizon).UnixMilli() - 1000
	var nearTodo, farTodo []int
	bucket := make([]int64, len(preps)) // by index in preps
	for _, i := range todo {
		m := preps[i].enc
		due := m.ms
		if m.mode == "delay" {
			due += now.UnixMilli()
		}
		if b := due / w; b*w >= edge {
			farTodo = append(farTodo, i)
			bucket[i] = b
		} else {
			nearTodo = append(nearTodo, i)
		}
	}
	if len(farTodo) == 0 {
		return nearTodo, nil
	}
	up := "0"
	if upsert {
		up = "1"
	}
	// A call pays a bucket's writes once whatever the number of its
	// records, so a shard's messages go to the calls in bucket order: a
	// batch spread over many buckets then touches each in as few calls as
	// its size allows.
	slices.SortStableFunc(farTodo, func(x, y int) int {
		return cmp.Or(cmp.Compare(preps[x].shard, preps[y].shard), cmp.Compare(bucket[x], bucket[y]))
	})
	chunks := p.chunks(preps, farTodo)
	calls := make([]call, len(chunks))
	for c, chunk := range chunks {
		first := preps[chunk[0]]
		ks, fk := ShardKeys(s.ns, first.shard), farKeysOf(s.ns, first.shard)
		keys := make([]string, 0, 10+2*len(chunk))
		keys = append(keys, ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters, ks.Cancelled, fk.dir(), fk.meta(), fk.compact())
		args := make([]any, 0, 7+5*len(chunk))
		args = append(args, len(chunk), w, fs.Horizon.Milliseconds(), first.shardCap, up, fs.Since, farBlockRecords)
		// The chunk's messages are in bucket order: a bucket's key and
		// number are made once for all of its messages.
		var lastB int64
		var lastKey string
		var lastNum any
		for j, i := range chunk {
			m := preps[i].enc
			if b := bucket[i]; j == 0 || b != lastB {
				lastB, lastKey, lastNum = b, fk.bucket(b), b
			}
			keys = append(keys, fk.index(m.id, fs.IndexSlots), lastKey)
			args = append(args, m.id, m.env, m.mode, m.ms, lastNum)
		}
		calls[c] = call{farPlaceManyScript, keys, args}
		if r := first.res; r != nil {
			calls[c] = r.wrap(s.ns, first.shard, calls[c])
		}
	}
	var first error
	for c, cmd := range s.run(ctx, calls...) {
		chunk := chunks[c]
		v, err := preps[chunk[0]].res.take(cmd.Slice())
		if err == nil && len(v) != 2*len(chunk) {
			err = fmt.Errorf("far placement reply of %d fields for %d messages", len(v), len(chunk))
		}
		for j, i := range chunk {
			id := preps[i].enc.id
			if err != nil {
				res[i].Err = fmt.Errorf("enqueue %q: %w", id, err)
				continue
			}
			r := reply{v: v, what: "far placement reply"}
			if st := r.int(2 * j); st == 4 || st == 5 {
				nearTodo = append(nearTodo, i)
				continue
			}
			due, err := enqueueStatus(v[2*j:2*j+2], r.err)
			if err != nil {
				res[i].Err = fmt.Errorf("enqueue %q: %w", id, err)
				continue
			}
			res[i].Due = time.UnixMilli(due)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	slices.Sort(nearTodo)
	return nearTodo, first
}

// placeFar runs farPlaceScript for bucket b and returns its status and
// value.
func (s *Store) placeFar(ctx context.Context, i int, m encodedMessage, upsert bool, shardCap int, fs FarSettings, b int64, r *reservation) (int64, int64, error) {
	c := s.placeFarCall(i, m, upsert, shardCap, fs, b)
	if r != nil {
		c = r.wrap(s.ns, i, c)
	}
	v, err := r.take(s.run(ctx, c)[0].Slice())
	if err != nil {
		return 0, 0, err
	}
	rp := reply{v: v, what: "far placement reply"}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("unexpected far placement reply of %d fields", len(v))
	}
	st, val := rp.int(0), rp.int(1)
	return st, val, rp.err
}

// placeFarCall is the farPlaceScript call of m into bucket b of shard i.
func (s *Store) placeFarCall(i int, m encodedMessage, upsert bool, shardCap int, fs FarSettings, b int64) call {
	ks, fk := ShardKeys(s.ns, i), farKeysOf(s.ns, i)
	up := "0"
	if upsert {
		up = "1"
	}
	return call{farPlaceScript, []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts, ks.Dead, ks.Reason, ks.Counters, ks.Cancelled,
		fk.index(m.id, fs.IndexSlots), fk.dir(), fk.meta(), fk.bucket(b), fk.compact()},
		[]any{m.id, m.env, m.mode, m.ms, up, b, fs.BucketWidth.Milliseconds(), fs.Horizon.Milliseconds(), shardCap, fs.Since, farBlockRecords}}
}

// farNearKeys are the far keys a near enqueue or cancel of id in shard i
// adds, when the tier is on: its index key, the directory, the meta hash.
func (s *Store) farNearKeys(i int, id string, fs *FarSettings) []string {
	fk := farKeysOf(s.ns, i)
	return []string{fk.index(id, fs.IndexSlots), fk.dir(), fk.meta()}
}

// farPageRecords is how many records promotion reads in one LRANGE;
// farPromoteCall how many it hands to one farPromoteScript call (the
// call's work is about that of a claim of as many messages).
const (
	farPageRecords = 256
	farPromoteCall = 64
	farLease       = 30 * time.Second
)

// farStagger is how much later than the horizon shard i's buckets are
// promoted: a fraction of min(W, H/2) set by the shard (its index times
// the golden ratio, modulo 1, so any number of shards spreads evenly).
// Every shard's bucket b comes within the horizon at the same moment; the
// stagger spreads their promotions over a bucket's width instead of one
// burst of the whole fleet's bucket at that moment, which the near
// messages due meanwhile wait behind. The slack before a bucket's start
// stays at least half the horizon. Placement is unchanged: a message whose
// bucket is within the horizon goes near, promoted or not.
func farStagger(i int, fs FarSettings) time.Duration {
	spread := min(fs.BucketWidth, fs.Horizon/2)
	return time.Duration(math.Mod(float64(i)*0.6180339887498949, 1) * float64(spread))
}

// Promotion is what PromoteDue did in one shard.
type Promotion struct {
	Buckets  int     // buckets promoted and dropped
	Moved    int     // records moved near
	Dead     int     // records that did not decode, dead-lettered
	Unread   int     // records whose id could not be read: counted, dropped with their bucket
	Skipped  int     // records no longer live (cancelled, replaced, moved before)
	AheadMin float64 // seconds between the last promotion and its bucket's start (the least, when several)
}

// PromoteDue promotes the buckets of shard i that start within the
// horizon of now (less the shard's stagger, farStagger), at most max of
// them (doc.go: sealed, read in pages, moved in calls of farPromoteCall,
// dropped): what the process that takes the shard's wake-ups calls. Only
// one process works on a bucket at a time (a lease); another finds it
// taken and skips it. It does nothing when the tier is off.
func (s *Store) PromoteDue(ctx context.Context, i int, max int) (Promotion, error) {
	return s.promoteWithin(ctx, i, max, func(fs FarSettings) time.Duration { return fs.Horizon - farStagger(i, fs) })
}

// PromoteOverdue is PromoteDue for buckets that start within a third of
// the horizon, which the shard's owner should have promoted long before:
// what every other process calls, so that promotion outlives an owner
// that died or stalls (the membership drops a dead process only after a
// while, and a time-compressed horizon may be shorter). It reads Redis
// at most once each max(1 s, horizon/6) a shard and Store: on a healthy
// fleet it finds nothing, at a cost of one read a shard and process each
// sixth of the horizon.
func (s *Store) PromoteOverdue(ctx context.Context, i int, max int) (Promotion, error) {
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return Promotion{}, err
	}
	s.far.mu.Lock()
	last := s.far.overdue[i]
	due := last.IsZero() || time.Since(last) >= farOverdueEvery(fs)
	if due {
		if s.far.overdue == nil {
			s.far.overdue = map[int]time.Time{}
		}
		s.far.overdue[i] = time.Now()
	}
	s.far.mu.Unlock()
	if !due {
		return Promotion{}, nil
	}
	return s.promoteWithin(ctx, i, max, func(fs FarSettings) time.Duration { return fs.Horizon / 3 })
}

// farOverdueEvery is how often PromoteOverdue looks at a shard.
func farOverdueEvery(fs FarSettings) time.Duration { return max(time.Second, fs.Horizon/6) }

// farLeaseFor is a promoter's lease on a bucket: long enough for pages
// between renewals, short against the horizon, so that a promoter killed
// in the middle holds its bucket back by a small part of the slack.
func farLeaseFor(fs FarSettings) time.Duration {
	return min(farLease, max(500*time.Millisecond, fs.Horizon/6))
}

// promoteWithin promotes the buckets of shard i that start less than
// ahead(settings) after now, at most max of them.
func (s *Store) promoteWithin(ctx context.Context, i int, max int, ahead func(FarSettings) time.Duration) (Promotion, error) {
	var p Promotion
	fs, on, err := s.farSettings(ctx)
	if err != nil || !on {
		return p, err
	}
	fk := farKeysOf(s.ns, i)
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return p, fmt.Errorf("promote shard %d: %w", i, err)
	}
	bs, err := s.rdb.ZRangeByScoreWithScores(ctx, fk.dir(), &redis.ZRangeBy{
		Min: "-inf", Max: "(" + strconv.FormatInt(now.Add(ahead(fs)).UnixMilli(), 10), Count: int64(max)}).Result()
	if err != nil {
		return p, fmt.Errorf("promote shard %d: %w", i, err)
	}
	p.AheadMin = -1
	lease := farLeaseFor(fs)
	for _, z := range bs {
		b, err := strconv.ParseInt(fmt.Sprint(z.Member), 10, 64)
		if err != nil {
			return p, fmt.Errorf("promote shard %d: bucket %q in %s is not a number", i, z.Member, fk.dir())
		}
		ok, err := s.rdb.SetNX(ctx, fk.lease(b), "1", lease).Result()
		if isOutOfMemory(err) {
			// Promotion needs memory (a near message costs more than a far
			// one): at maxmemory the bucket waits, its messages far, until
			// deliveries free some. The horizon is the slack.
			err = s.redisFull(ctx, err)
		}
		if err != nil {
			return p, fmt.Errorf("promote shard %d bucket %d: %w", i, b, err)
		}
		if !ok {
			continue // another process promotes it
		}
		// The lease is renewed after each page; an error leaves it to
		// expire, after which another process may promote beside this one
		// (each skips what the other moved).
		renew := func() { _ = s.rdb.PExpire(ctx, fk.lease(b), lease).Err() }
		err = s.promoteBucket(ctx, i, fs, b, renew, &p)
		if err == nil {
			p.Buckets++
			ahead := (float64(z.Score) - float64(time.Now().UnixMilli())) / 1000
			if p.AheadMin < 0 || ahead < p.AheadMin {
				p.AheadMin = ahead
			}
		}
		_ = s.rdb.Del(ctx, fk.lease(b)).Err() // an error leaves it to expire
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// promoteBucket seals, moves and drops bucket b of shard i, calling renew
// after each page it reads.
func (s *Store) promoteBucket(ctx context.Context, i int, fs FarSettings, b int64, renew func(), p *Promotion) error {
	fk := farKeysOf(s.ns, i)
	where := func(err error) error { return fmt.Errorf("promote shard %d bucket %d: %w", i, b, err) }
	if _, err := s.run1(ctx, farSealScript, []string{fk.dir(), fk.meta()}, b).Int(); err != nil {
		return where(err)
	}
	start := b * fs.BucketWidth.Milliseconds()
	if err := s.promoteBlocks(ctx, i, fs, b, start, renew, p); err != nil {
		return where(err)
	}
	total, err := s.rdb.LLen(ctx, fk.bucket(b)).Result() // sealed: it no longer grows
	if err != nil {
		return where(err)
	}
	for off := int64(0); off < total; off += farPageRecords {
		page, err := s.rdb.LRange(ctx, fk.bucket(b), off, off+farPageRecords-1).Result()
		if err != nil {
			return where(err)
		}
		if err := s.promoteRecords(ctx, i, fs, b, start, page, p); err != nil {
			return where(err)
		}
		renew()
	}
	left, err := s.run1(ctx, farDropScript, []string{fk.bucket(b), fk.dir(), fk.meta(), fk.blocks(b), fk.compact()}, b).Int()
	if err != nil {
		return where(err)
	}
	if left > 0 {
		p.Unread += left
	}
	return nil
}

// promoteRecords hands records (raw, as stored: each with its length) of
// bucket b to farPromoteScript, in calls of at most farPromoteCall
// records sent in one pipelined round trip (each call is its own atomic
// step, as if sent one by one).
func (s *Store) promoteRecords(ctx context.Context, i int, fs FarSettings, b, start int64, raw []string, p *Promotion) error {
	var calls []call
	var sizes []int
	for len(raw) > 0 {
		k := min(len(raw), farPromoteCall)
		if c, n := s.promoteCall(i, fs, b, start, raw[:k]); n > 0 {
			calls, sizes = append(calls, c), append(sizes, n)
		}
		raw = raw[k:]
	}
	if len(calls) == 0 {
		return nil
	}
	var first error
	for j, cmd := range s.run(ctx, calls...) {
		v, err := cmd.Int64Slice()
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if len(v) == 2 {
			p.Moved += int(v[0])
			p.Dead += int(v[1])
			p.Skipped += sizes[j] - int(v[0]) - int(v[1])
		}
	}
	return first
}

// promoteCall is the farPromoteScript call of records raw of bucket b, and
// how many records it hands over.
func (s *Store) promoteCall(i int, fs FarSettings, b, start int64, raw []string) (call, int) {
	ks, fk := ShardKeys(s.ns, i), farKeysOf(s.ns, i)
	keys := []string{ks.Due, ks.Msg, fk.meta(), ks.Dead, ks.Reason, ks.Counters}
	args := []any{b, s.wake, i, 0}
	n := 0
	for _, rec := range raw {
		rs, bad := DecodeFarRecords([]byte(rec), start)
		switch {
		case len(rs) == 1 && len(bad) == 0:
			r := rs[0]
			keys = append(keys, fk.index(r.ID, fs.IndexSlots))
			args = append(args, r.ID, strconv.FormatUint(r.Seq, 10), r.DueMs, r.Envelope, "")
			n++
		case len(rs) > 0 || (len(bad) > 0 && bad[0].ID != ""):
			// Bytes past the record, or a record whose id reads but not
			// the rest: dead, with the reason.
			id, why := "", "bytes after the record"
			if len(rs) > 0 {
				id = rs[0].ID
			}
			if len(bad) > 0 {
				why = bad[0].Error()
				if id == "" {
					id = bad[0].ID
				}
			}
			keys = append(keys, fk.index(id, fs.IndexSlots))
			args = append(args, id, "", 0, rec, "corrupt far record: "+why)
			n++
		}
		// A record whose id cannot be read cannot be looked up: its
		// bucket's drop counts it out (Promotion.Unread).
	}
	args[3] = n
	return call{farPromoteScript, keys, args}, n
}

// FarMetaKeyOf is shard i's farmeta HASH (doc.go): its field live counts
// the shard's far messages.
func FarMetaKeyOf(ns string, i int) string { return farKeysOf(ns, i).meta() }

// FarDirKeyOf is shard i's fardir ZSET (doc.go): its far buckets, scored
// by their start (unix ms); the first is the next to be promoted.
func FarDirKeyOf(ns string, i int) string { return farKeysOf(ns, i).dir() }
