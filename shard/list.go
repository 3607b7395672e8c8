package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/shard/scope"
)

// Listed is one scheduled message, as List shows it.
type Listed struct {
	ID       string
	Shard    int
	Due      time.Time // the due ZSET's score: when it is next due
	Attempts int       // deliveries so far that were not acked
	Far      bool      // it waits in the far tier (doc.go), not yet in the due set
	Envelope *Envelope // nil when Corrupt is set
	Corrupt  error     // why the stored envelope could not be decoded

	raw      []byte // the envelope as stored (List; the move compares it)
	farEntry string // its far index entry, "<b>:<seq>", when the move read it far
}

// ListCursor is where a listing of one shard goes on: after the entry with
// this id and due time. The zero value starts at the earliest.
type ListCursor struct {
	ID    string
	DueMs int64
}

// maxListPage bounds one list script call.
const maxListPage = 1000

// BrowseQuery selects the scheduled messages of a paged listing (delayq
// list, the console's scheduled page).
type BrowseQuery struct {
	Shard         int // only this shard; -1: every shard, in turn
	Topic, Prefix string
	// From and To bound the due time to [From, To), half-open like the
	// due profile's buckets, so that a bucket's link selects what the
	// bucket counts and adjacent windows never share a message (zero:
	// open). Messages are in due order within a shard, so From starts each
	// shard's walk there and To ends it.
	From, To time.Time
	After    BrowseCursor // where the last page ended; zero: the start
	Limit    int          // messages on a page, 1 to 10,000
	// MaxScan bounds the entries a page reads (filters may match few):
	// the page then ends early with a cursor to go on from. 0: no bound.
	MaxScan int
	// Within, when set, keeps only the messages of these scopes (a
	// message whose envelope does not decode is in none).
	Within []*scope.Scope
}

// ParseWindowEnd reads one end of a due window (the from and to of a
// listing or a bulk filter) as people write it: a duration from now
// ("30m", "-1h") or an RFC 3339 time. The error is an *InvalidError
// naming field.
func ParseWindowEnd(field, v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, invalid(field, "%q: give a duration from now (30m, -1h) or a time (2030-01-01T09:00:00Z)", v)
}

// BrowseCursor is where a listing goes on: after entry After of Shard.
type BrowseCursor struct {
	Shard int
	After ListCursor
}

// String is the cursor as people pass it back: "<shard>:<due ms>:<id>".
func (c BrowseCursor) String() string {
	return fmt.Sprintf("%d:%d:%s", c.Shard, c.After.DueMs, c.After.ID)
}

// ParseBrowseCursor reads BrowseCursor.String ("" is the start).
func ParseBrowseCursor(s string) (BrowseCursor, error) {
	if s == "" {
		return BrowseCursor{}, nil
	}
	f := strings.SplitN(s, ":", 3) // the id may hold colons
	bad := fmt.Errorf("%q: want <shard>:<due ms>:<id> as a previous page gave it", s)
	if len(f) != 3 {
		return BrowseCursor{}, bad
	}
	i, err1 := strconv.Atoi(f[0])
	due, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || i < 0 || due < 0 {
		return BrowseCursor{}, bad
	}
	return BrowseCursor{Shard: i, After: ListCursor{ID: f[2], DueMs: due}}, nil
}

// Browse returns a page of the scheduled messages of shards [0, shards)
// that q selects, shard after shard, each in due order, and the cursor of
// the next page (nil at the end). It reads pages of at most 500 entries
// (List) and, with q.MaxScan, no more than that many entries in all. Far
// messages (the far tier) come in their place in due order, Listed.Far
// set: a page that reaches a far bucket reads it whole (farlist.go).
func (s *Store) Browse(ctx context.Context, shards int, q BrowseQuery) (page []Listed, next *BrowseCursor, err error) {
	if q.Limit < 1 || q.Limit > 10000 {
		return nil, nil, invalid("limit", "%d: want 1 to 10000", q.Limit)
	}
	from, to := q.After.Shard, shards
	if q.Shard >= 0 {
		if q.Shard >= shards {
			return nil, nil, invalid("shard", "%d: the namespace has shards 0 to %d", q.Shard, shards-1)
		}
		from, to = max(from, q.Shard), q.Shard+1
	}
	scanned := 0
	// What the next page of a due set reads: 500 entries, or with no
	// filter what fills the page and tells whether there is more, and
	// never past MaxScan.
	nearPage := func() int {
		n := 500
		if q.Topic == "" && q.Prefix == "" {
			n = min(n, q.Limit-len(page)+1)
		}
		if q.MaxScan > 0 {
			n = min(n, q.MaxScan-scanned)
		}
		return max(n, 1)
	}
	var toMs int64 // the far buckets that start before To: To's ms, rounded up
	if !q.To.IsZero() {
		toMs = q.To.Add(time.Millisecond - 1).UnixMilli()
	}
	for i := from; i < to; i++ {
		after := q.After.After
		if i > q.After.Shard || after == (ListCursor{}) {
			after = ListCursor{}
			if !q.From.IsZero() {
				after.DueMs = q.From.UnixMilli()
			}
		}
		w, err := s.walkShard(ctx, i, after, toMs)
		if err != nil {
			return page, nil, err
		}
		for {
			if q.MaxScan > 0 && scanned >= q.MaxScan {
				return page, &BrowseCursor{Shard: i, After: after}, nil
			}
			l, ok, err := w.next(ctx, nearPage())
			if err != nil {
				return page, nil, err
			}
			if !ok || !q.To.IsZero() && !l.Due.Before(q.To) {
				break // due order: the rest of the shard is later
			}
			scanned++
			if len(page) == q.Limit {
				return page, &BrowseCursor{Shard: i, After: after}, nil
			}
			after = ListCursor{ID: l.ID, DueMs: l.Due.UnixMilli()}
			if q.matches(&l) {
				page = append(page, l)
			}
		}
	}
	return page, nil, nil
}

// matches reports whether l passes the topic and prefix filters.
func (q *BrowseQuery) matches(l *Listed) bool {
	if q.Prefix != "" && !strings.HasPrefix(l.ID, q.Prefix) {
		return false
	}
	if len(q.Within) > 0 && (l.Envelope == nil ||
		!withinAny(q.Within, scope.Target{ID: l.ID, Topic: l.Envelope.Topic, Exchange: l.Envelope.Exchange, RoutingKey: l.Envelope.RoutingKey})) {
		return false
	}
	return q.Topic == "" || l.Envelope != nil && l.Envelope.Topic == q.Topic
}

// List returns up to n (at most 1000) messages of shard i's due set in due
// order (Browse adds the far tier's), starting after the cursor, and the cursor of the next page; more
// is false when the shard has nothing after this page. Each call is one
// script call of O(log N + n) work, so a listing never blocks Redis, and a
// listing of a set that changes meanwhile is a walk, not a snapshot.
func (s *Store) List(ctx context.Context, i int, after ListCursor, n int) (page []Listed, next ListCursor, more bool, err error) {
	return s.listSet(ctx, i, ShardKeys(s.ns, i).Due, after, n)
}

// listSet is List of the ZSET key of shard i (its due set, a held set, a
// class's backlog: id -> due).
func (s *Store) listSet(ctx context.Context, i int, key string, after ListCursor, n int) (page []Listed, next ListCursor, more bool, err error) {
	if n < 1 || n > maxListPage {
		return nil, after, false, fmt.Errorf("list shard %d: page size %d: want 1 to %d", i, n, maxListPage)
	}
	ks := ShardKeys(s.ns, i)
	v, err := s.run1(ctx, listScript, []string{key, ks.Msg, ks.Attempts}, after.ID, after.DueMs, n).Slice()
	if err != nil {
		return nil, after, false, fmt.Errorf("list shard %d: %w", i, err)
	}
	if len(v)%4 != 0 {
		return nil, after, false, fmt.Errorf("list shard %d: unexpected reply of %d fields", i, len(v))
	}
	r := reply{v: v, what: "list reply"}
	for o := 0; o < len(v); o += 4 {
		l := Listed{ID: r.str(o), Shard: i, Due: time.UnixMilli(r.int(o + 1))}
		l.raw = r.optBytes(o + 2)
		if raw := l.raw; raw == nil {
			l.Corrupt = errors.New("envelope missing from the msg hash")
		} else if env, err := DecodeEnvelope(raw); err != nil {
			l.Corrupt = err
		} else {
			l.Envelope = &env
		}
		if m := r.optBytes(o + 3); m != nil {
			a, _, _ := strings.Cut(string(m), ":")
			l.Attempts, _ = strconv.Atoi(a)
		}
		page = append(page, l)
	}
	if r.err != nil {
		return nil, after, false, fmt.Errorf("list shard %d: %w", i, r.err)
	}
	if len(page) == 0 {
		return nil, after, false, nil
	}
	last := page[len(page)-1]
	return page, ListCursor{ID: last.ID, DueMs: last.Due.UnixMilli()}, len(page) == n, nil
}

// maxCancelMany bounds one cancelMany script call.
const maxCancelMany = 64

// CancelMany cancels the scheduled messages ids of shard i, with one
// script call per 64 ids, all in one pipelined round trip. errs[j] is nil,
// or wraps ErrNotFound (not scheduled in this shard) or ErrInFlight.
func (s *Store) CancelMany(ctx context.Context, i int, ids []string) (errs []error, err error) {
	errs = make([]error, len(ids))
	ks := ShardKeys(s.ns, i)
	fs, far, err := s.farSettings(ctx)
	if err != nil {
		return errs, fmt.Errorf("cancel messages of shard %d: %w", i, err)
	}
	fk := farKeysOf(s.ns, i)
	var calls []call
	for lo := 0; lo < len(ids); lo += maxCancelMany {
		keys := []string{ks.Due, ks.Msg, ks.Inflight, ks.Attempts}
		if far {
			keys = append(keys, fk.dir(), fk.meta())
		}
		args := make([]any, 0, maxCancelMany)
		for _, id := range ids[lo:min(lo+maxCancelMany, len(ids))] {
			args = append(args, id)
			if far {
				keys = append(keys, fk.index(id, fs.IndexSlots))
			}
		}
		calls = append(calls, call{cancelManyScript, keys, args})
	}
	cmds := s.run(ctx, calls...)
	for c, cmd := range cmds {
		st, err := cmd.Int64Slice()
		if err != nil {
			return errs, fmt.Errorf("cancel messages of shard %d: %w", i, err)
		}
		for k, status := range st {
			j := c*maxCancelMany + k
			switch status {
			case 0:
				errs[j] = fmt.Errorf("cancel %q: %w", ids[j], ErrNotFound)
			case -1:
				errs[j] = fmt.Errorf("cancel %q: %w", ids[j], ErrInFlight)
			}
		}
	}
	return errs, nil
}

// CancelBatch cancels scheduled messages by id, wherever a resize left
// them: one script call per shard and 64 ids; for the ids not scheduled in
// the shard they hash to now, when another M was used (Layout.Used), a
// look-up in the shards older Ms put them in and the cancels there. errs[j]
// belongs to ids[j]: nil, or wraps ErrNotFound, ErrInFlight or ErrInvalid.
// The returned error is set when Redis itself failed.
func (p *Producer) CancelBatch(ctx context.Context, ids []string) (errs []error, err error) {
	errs = make([]error, len(ids))
	m, err := p.shards.ShardCount()
	if err != nil {
		return errs, fmt.Errorf("cancel batch: shard count: %w", err)
	}
	lay, err := p.pinned(ctx, m)
	if err != nil {
		return errs, fmt.Errorf("cancel batch: %w", err)
	}
	byShard := map[int][]int{} // shard -> positions in ids
	for j, id := range ids {
		if err := validateID(id); err != nil {
			errs[j] = fmt.Errorf("cancel %q: %w", id, err)
			continue
		}
		byShard[Of(id, m)] = append(byShard[Of(id, m)], j)
	}
	var missing []int // positions not scheduled in their shard
	cancel := func(groups map[int][]int, collect bool) error {
		for i, pos := range groups {
			sub := make([]string, len(pos))
			for k, j := range pos {
				sub[k] = ids[j]
			}
			res, err := p.store.CancelMany(ctx, i, sub)
			if err != nil {
				return err
			}
			for k, j := range pos {
				errs[j] = res[k]
				if collect && errors.Is(res[k], ErrNotFound) {
					missing = append(missing, j)
				}
			}
		}
		return nil
	}
	if err := cancel(byShard, len(lay.Used) > 1); err != nil {
		return errs, err
	}
	if len(missing) == 0 {
		return errs, nil
	}
	look, in := make([]string, len(missing)), make([][]int, len(missing))
	for k, j := range missing {
		look[k], in[k] = ids[j], olderShards(ids[j], m, lay.Used)
	}
	found, err := p.store.locateEach(ctx, look, in)
	if err != nil {
		return errs, err
	}
	again := map[int][]int{}
	for k, j := range missing {
		if found[k] >= 0 {
			again[found[k]] = append(again[found[k]], j)
		}
	}
	return errs, cancel(again, false)
}
