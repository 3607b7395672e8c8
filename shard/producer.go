package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/shard/scope"
	"github.com/delayq/delayq/shard/tracing"
)

// ShardCounter tells producers how many shards to write to. balance
// implements it (static, or from Consul KV).
type ShardCounter interface {
	// ShardCount returns M, the number of shards new messages hash onto, or
	// an error when M is not known (a producer must not guess).
	ShardCount() (int, error)
}

// highWaterer is implemented by counters that know how many shards may
// hold messages (balance.Layout); Cancel, Reschedule and Inspect then find
// messages written under an older M.
type highWaterer interface {
	HighWater() (int, error)
}

// ProducerOptions configure a Producer. The zero value is valid.
type ProducerOptions struct {
	// MaxBody is the largest body accepted, in bytes. Default DefaultMaxBody.
	MaxBody int
	// Now is the producer's clock, used only for the informational enqueue
	// time in the envelope (due times come from Redis). Default time.Now.
	Now func() time.Time
	// MaxPending limits the messages a namespace holds (scheduled and in
	// flight); past it Enqueue returns ErrCapacity instead of letting Redis
	// run out of memory. Each shard enforces its share, ceil(MaxPending/M),
	// inside the enqueue script, so there is no namespace-wide counter to
	// contend on; the namespace may hold slightly less than MaxPending when
	// ids spread unevenly. 0 = no limit (default).
	MaxPending int
	// Pin is how long the producer's pin of its M lasts in the layout
	// (see Producer); it is renewed every Pin/4 while the producer writes.
	// Default 1 minute.
	Pin time.Duration
	// AllowEviction accepts a Redis whose maxmemory-policy can evict
	// scheduled messages (allkeys-*). Without it the producer's first call
	// reads every master's settings (CheckRedis) and refuses to write
	// there with an error wrapping ErrUnsafeRedis.
	AllowEviction bool
	// AtStep, when set, is called at the steps of a quota'd enqueue
	// (QuotaReserved: room reserved, nothing stored yet; QuotaStored:
	// stored, the reservation not yet settled), so that the crash tests
	// can kill a producer there. Nil in production.
	AtStep func(step string)
}

// The steps ProducerOptions.AtStep is called at.
const (
	QuotaReserved = "reserved"
	QuotaStored   = "stored"
)

// Producer is the SDK: it schedules, cancels, reschedules and inspects
// messages. It is safe for concurrent use.
//
// Whatever M its ShardCounter gives, a Producer pins that M in the
// namespace's layout in Redis (Store.PinLayout) before it writes, and
// renews the pin while it keeps writing: the scanners cover
// every shard below the high-water mark, and no scanner lowers the mark
// below a pinned M. So a producer given a larger M than the fleet's (a
// static M in its config) still has every message published; one given a
// smaller M writes to shards the fleet covers anyway.
//
// Ids stay unique across a resize. The layout records every M messages
// were written under (Layout.Used); an id can only be in shard Of(id, u)
// for one of them. When one of those shards is not the id's shard under
// the current M, Enqueue, Upsert and EnqueueBatch look for the id there
// first (one more pipelined round trip of HEXISTS), and Upsert replaces
// the copy where it is. When only one M was ever used, or the other Ms
// put the id in the same shard, they cost no extra round trip. The look-up
// and the write are two steps: two producers that enqueue the same id at
// the same moment under different M can both succeed (the consumer's
// dedupe on message_id catches that rare copy). Once every message is in
// the shard the current M puts it in, the scanners' sweep has the layout
// forget the older Ms (balance.Layout.Settle), and the look-up stops. Ms
// used before the layout recorded them (older delayq versions) are not
// known.
type Producer struct {
	store         *Store
	shards        ShardCounter
	maxBody       int
	maxPending    int
	now           func() time.Time
	allowEviction bool
	atStep        func(string)

	pinTTL time.Duration // ProducerOptions.Pin
	pin    pinState
	topics topicsSeen
}

// topicsSeen are the topics this producer has recorded in TopicsKey: each
// costs one SADD the first time a process uses it.
type topicsSeen struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// maxTopicsSeen bounds topicsSeen; past it the set starts over (topics are
// meant to be few, like routes; many only cost an SADD now and then).
const maxTopicsSeen = 10000

// noteTopics records the topics of msgs not recorded yet by this
// producer, in one SADD.
func (p *Producer) noteTopics(ctx context.Context, msgs ...*Message) error {
	var fresh []any
	p.topics.mu.Lock()
	for _, m := range msgs {
		if m.Topic == "" {
			continue
		}
		if _, ok := p.topics.seen[m.Topic]; !ok && !slices.Contains(fresh, any(m.Topic)) {
			fresh = append(fresh, m.Topic)
		}
	}
	p.topics.mu.Unlock()
	if len(fresh) == 0 {
		return nil
	}
	if err := p.store.rdb.SAdd(ctx, TopicsKey(p.store.ns), fresh...).Err(); err != nil {
		return fmt.Errorf("record topics: %w", err)
	}
	p.topics.mu.Lock()
	if p.topics.seen == nil || len(p.topics.seen) >= maxTopicsSeen {
		p.topics.seen = map[string]struct{}{}
	}
	for _, t := range fresh {
		p.topics.seen[t.(string)] = struct{}{}
	}
	p.topics.mu.Unlock()
	return nil
}

// defaultPin is ProducerOptions.Pin's default. A pin is renewed when a
// quarter of it has passed, long before it expires, so every write
// happens under a pin.
const defaultPin = time.Minute

// pinState is the producer's last pin of its M and what Redis said of the
// layout then.
type pinState struct {
	mu      sync.Mutex
	m       int       // the M pinned
	lay     Layout    // the layout after that pin
	at      time.Time // when the pin was sent (monotonic clock)
	checked bool      // Redis's settings were found safe (CheckRedis)
}

// pinned pins m (at most every pinTTL/4; the calls that find the pin
// fresh cost nothing) and returns the layout as of the last pin. Calls
// that come while a renewal is under way wait for it.
func (p *Producer) pinned(ctx context.Context, m int) (Layout, error) {
	p.pin.mu.Lock()
	defer p.pin.mu.Unlock()
	if p.pin.m == m && time.Since(p.pin.at) < p.pinTTL/4 {
		return p.pin.lay, nil
	}
	if !p.pin.checked { // the producer's first call: may Redis lose what it writes?
		servers, err := p.store.RedisServers(ctx)
		if err != nil {
			return Layout{}, err
		}
		if _, err := CheckRedis(servers, p.allowEviction); err != nil {
			return Layout{}, err
		}
		p.pin.checked = true
	}
	sent := time.Now()
	lay, err := p.store.PinLayout(ctx, m, p.pinTTL)
	if err != nil {
		return Layout{}, err
	}
	p.pin.m, p.pin.lay, p.pin.at = m, lay, sent
	return lay, nil
}

// spread returns how many shards may hold an id when it hashes onto m:
// the mark as of the last pin, or a Layout's own mark when that is higher
// (fresher).
func (p *Producer) spread(ctx context.Context, m int) (int, error) {
	lay, err := p.pinned(ctx, m)
	if err != nil {
		return 0, err
	}
	upTo := max(m, lay.HighWater)
	if hw, ok := p.shards.(highWaterer); ok {
		if h, err := hw.HighWater(); err == nil {
			upTo = max(upTo, h)
		}
	}
	return upTo, nil
}

// olderShards returns the shards other than Of(id, m) where an older M
// may have put id (nil: none, the usual case).
func olderShards(id string, m int, used []int) []int {
	own := Of(id, m)
	var out []int
	for _, u := range used {
		if i := Of(id, u); i != own && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// NewProducer returns a Producer writing through store, hashing ids onto
// shards.ShardCount() shards.
func NewProducer(store *Store, shards ShardCounter, opts ProducerOptions) *Producer {
	p := &Producer{store: store, shards: shards, maxBody: opts.MaxBody, maxPending: max(0, opts.MaxPending), now: opts.Now,
		allowEviction: opts.AllowEviction, atStep: opts.AtStep}
	if p.atStep == nil {
		p.atStep = func(string) {}
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBody
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.pinTTL = opts.Pin; p.pinTTL <= 0 {
		p.pinTTL = defaultPin
	}
	return p
}

// Scheduled says where and when an enqueued message will be published.
type Scheduled struct {
	ID    string
	Shard int
	Due   time.Time // by the Redis clock
}

// Store is the store the producer writes to.
func (p *Producer) Store() *Store { return p.store }

// Enqueue schedules m. It returns ErrDuplicate if a message with m.ID
// exists, and an *InvalidError (ErrInvalid) if m breaks a rule.
func (p *Producer) Enqueue(ctx context.Context, m Message) (Scheduled, error) {
	return p.enqueue(ctx, m, false)
}

// Upsert schedules m, replacing a scheduled or dead message with the same
// id. It returns ErrInFlight if that message is being published.
func (p *Producer) Upsert(ctx context.Context, m Message) (Scheduled, error) {
	return p.enqueue(ctx, m, true)
}

func (p *Producer) enqueue(ctx context.Context, m Message, upsert bool) (Scheduled, error) {
	if m.Attempts > 0 { // an exported message read back: the batch restores its attempts
		res, err := p.enqueueBatch(ctx, []Message{m}, upsert)
		if err == nil {
			err = res[0].Err
		}
		return res[0].Scheduled, err
	}
	ctx, span := tracing.StartCreate(ctx, destinationOf(&m), 1)
	if span != nil {
		defer span.End()
	}
	pm, err := p.prepare(ctx, &m)
	if err != nil {
		return Scheduled{}, fmt.Errorf("enqueue %q: %w", m.ID, err)
	}
	lay, err := p.pinned(ctx, pm.m)
	if err == nil {
		err = p.noteTopics(ctx, &m)
	}
	if err != nil {
		return Scheduled{}, fmt.Errorf("enqueue %q: %w", m.ID, err)
	}
	if in := olderShards(m.ID, pm.m, lay.Used); in != nil { // an older M may have left the id there
		found, err := p.store.locateEach(ctx, []string{m.ID}, [][]int{in})
		switch {
		case err != nil:
			return Scheduled{}, fmt.Errorf("enqueue %q: %w", m.ID, err)
		case found[0] >= 0 && !upsert:
			return Scheduled{}, fmt.Errorf("enqueue %q: %w (in shard %d, written under an older shard count)", m.ID, ErrDuplicate, found[0])
		case found[0] >= 0:
			pm.shard = found[0] // replace it where it is: one atomic script call
		}
	}
	if pm.quota != nil {
		r, refused, err := p.store.reserve(ctx, pm.quota, 1)
		switch {
		case err != nil:
			return Scheduled{}, fmt.Errorf("enqueue %q: %w", m.ID, err)
		case refused != nil && upsert && refused.Quota == "pending":
			r = replaceOnly(pm.quota, refused) // it may still replace a message of the scope
		case refused != nil:
			return Scheduled{}, fmt.Errorf("enqueue %q: %w", m.ID, refused)
		}
		pm.res = r
		p.atStep(QuotaReserved)
		// A settle that fails is not the enqueue's failure: the
		// maintenance settles the reservation once due (quota.go).
		defer func() {
			p.atStep(QuotaStored)
			_ = p.store.settle(context.WithoutCancel(ctx), r)
		}()
	}
	due, err := p.store.place(ctx, pm.shard, pm.enc, upsert, pm.shardCap, pm.res)
	if err != nil {
		return Scheduled{}, fmt.Errorf("enqueue %q: %w", m.ID, err)
	}
	return Scheduled{ID: m.ID, Shard: pm.shard, Due: time.UnixMilli(due)}, nil
}

// prepared is a message checked and encoded, with the shard it goes to.
type prepared struct {
	m        int // the shard count the id was hashed onto
	shard    int
	shardCap int // this shard's share of MaxPending, 0 = none
	enc      encodedMessage
	quota    *Quota       // the quota the message counts in, or nil (quota.go)
	res      *reservation // its reservation under that quota, once reserved
}

// destinationOf names where m goes, for its create span.
func destinationOf(m *Message) string {
	if m.Topic != "" {
		return m.Topic
	}
	return m.Exchange
}

// prepare checks and encodes m, with the trace context of ctx as its
// traceparent and tracestate headers unless it has its own (package
// tracing: a malformed one is dropped).
func (p *Producer) prepare(ctx context.Context, m *Message) (prepared, error) {
	if m.Dead != nil {
		return prepared{}, invalid("dead", "a dead message is restored by EnqueueBatch, not scheduled")
	}
	traced := *m
	traced.Headers = tracing.Capture(ctx, m.Headers)
	m = &traced
	env, err := m.envelope(p.maxBody, p.now())
	if err != nil {
		return prepared{}, err
	}
	mode, ms, err := validateWhen(m.Delay, m.At)
	if err != nil {
		return prepared{}, err
	}
	n, err := p.shards.ShardCount()
	if err != nil {
		return prepared{}, fmt.Errorf("shard count: %w", err)
	}
	pm := prepared{m: n, shard: Of(m.ID, n), enc: encodedMessage{
		id: m.ID, env: AppendEnvelope(make([]byte, 0, env.EncodedSize()), &env), mode: mode, ms: ms}}
	if p.maxPending > 0 {
		pm.shardCap = (p.maxPending + n - 1) / n
	}
	if pm.quota, err = p.store.quotaOf(ctx, scope.Target{ID: m.ID, Topic: m.Topic, Exchange: m.Exchange, RoutingKey: m.RoutingKey}); err != nil {
		return prepared{}, err
	}
	return pm, nil
}

// BatchResult is the outcome of one message of EnqueueBatch.
type BatchResult struct {
	Scheduled
	Err error // nil, or wraps ErrDuplicate, ErrInvalid, ...
}

// EnqueueBatch schedules msgs in one pipeline (one round trip), with one
// script call per shard and up to 64 messages, like Sidekiq's push_bulk:
// about 2.5 times the messages per second of one call per message
// (BenchmarkEnqueue). It never replaces a message (no upsert). Each
// message succeeds or fails on its own: results[i] belongs to msgs[i]. The
// returned error is set when Redis itself failed (not for duplicates or
// invalid messages); the results of the messages it hit carry it too.
func (p *Producer) EnqueueBatch(ctx context.Context, msgs []Message) ([]BatchResult, error) {
	return p.enqueueBatch(ctx, msgs, false)
}

// UpsertBatch is EnqueueBatch that replaces scheduled or dead messages
// with the same ids, as Upsert does; a message in flight gets ErrInFlight.
func (p *Producer) UpsertBatch(ctx context.Context, msgs []Message) ([]BatchResult, error) {
	return p.enqueueBatch(ctx, msgs, true)
}

func (p *Producer) enqueueBatch(ctx context.Context, msgs []Message, upsert bool) ([]BatchResult, error) {
	if slices.ContainsFunc(msgs, func(m Message) bool { return m.Dead != nil }) {
		return p.enqueueWithDead(ctx, msgs, upsert) // restored dead messages: deadrestore.go
	}
	if len(msgs) > 0 {
		var span trace.Span
		if ctx, span = tracing.StartCreate(ctx, destinationOf(&msgs[0]), len(msgs)); span != nil {
			defer span.End()
		}
	}
	res := make([]BatchResult, len(msgs))
	preps := make([]prepared, len(msgs))
	todo := make([]int, 0, len(msgs))
	var batchErr error
	given := make(map[string]bool, len(msgs))
	for i := range msgs {
		res[i].ID = msgs[i].ID
		if !upsert && given[msgs[i].ID] {
			// Given twice: a duplicate of the first, answered here, since the
			// two may go in different script calls (enqueueManyScript).
			res[i].Err = fmt.Errorf("enqueue %q: %w (given twice in this batch)", msgs[i].ID, ErrDuplicate)
			continue
		}
		pm, err := p.prepare(ctx, &msgs[i])
		if err != nil {
			res[i].Err = fmt.Errorf("enqueue %q: %w", msgs[i].ID, err)
			continue
		}
		given[msgs[i].ID] = true
		preps[i] = pm
		res[i].Shard = pm.shard
		todo = append(todo, i)
	}
	if len(todo) > 0 {
		ms := make([]*Message, len(todo))
		for j, i := range todo {
			ms[j] = &msgs[i]
		}
		if err := p.noteTopics(ctx, ms...); err != nil {
			return res, p.failAll(res, todo, err)
		}
		if err := p.findElsewhere(ctx, msgs, preps, res, &todo, upsert); err != nil {
			return res, p.failAll(res, todo, err)
		}
	}
	rs, err := p.reserveBatch(ctx, preps, res, &todo, upsert)
	if err != nil && batchErr == nil {
		batchErr = fmt.Errorf("enqueue batch: %w", err)
	}
	// A settle that fails is not the batch's failure: the maintenance
	// settles the reservations once due (quota.go).
	if len(rs) > 0 {
		p.atStep(QuotaReserved)
		defer func() {
			p.atStep(QuotaStored)
			_ = p.store.settle(context.WithoutCancel(ctx), rs...)
		}()
	}
	fs, farOn, err := p.store.farSettings(ctx)
	if err != nil {
		return res, p.failAll(res, todo, err)
	}
	var far *FarSettings
	if farOn {
		far = &fs
		if todo, err = p.placeFarBatch(ctx, fs, preps, res, todo, upsert); err != nil && batchErr == nil {
			batchErr = fmt.Errorf("enqueue batch: %w", err)
		}
	}
	chunks := p.chunks(preps, todo)
	calls := make([]enqueueChunk, len(chunks))
	for c, chunk := range chunks {
		first := preps[chunk[0]]
		calls[c] = enqueueChunk{shard: first.shard, shardCap: first.shardCap, msgs: make([]encodedMessage, len(chunk)), res: first.res}
		for j, i := range chunk {
			calls[c].msgs[j] = preps[i].enc
		}
	}
	for c, cmd := range p.store.enqueueChunks(ctx, calls, upsert, far) {
		chunk := chunks[c]
		v, err := preps[chunk[0]].res.take(cmd.Slice())
		if err == nil && len(v) != 2*len(chunk) {
			err = fmt.Errorf("enqueue reply of %d fields for %d messages", len(v), len(chunk))
		}
		if err != nil { // Redis or network failure: not the messages' fault
			for _, i := range chunk {
				res[i].Err = fmt.Errorf("enqueue %q: %w", msgs[i].ID, err)
			}
			if batchErr == nil {
				batchErr = fmt.Errorf("enqueue batch: %w", err)
			}
			continue
		}
		for j, i := range chunk {
			due, err := enqueueStatus(v[2*j:2*j+2], nil)
			if err != nil {
				res[i].Err = fmt.Errorf("enqueue %q: %w", msgs[i].ID, err)
				continue
			}
			res[i].Due = time.UnixMilli(due)
		}
	}
	if err := p.restoreAttempts(ctx, msgs, res); err != nil && batchErr == nil {
		batchErr = fmt.Errorf("enqueue batch: %w", err)
	}
	return res, batchErr
}

// findElsewhere looks for the ids of todo in the shards older Ms put them
// in (one pipelined round trip, only when another M was used:
// Layout.Used). A message found there is a duplicate, dropped from todo,
// or with upsert goes to that shard to replace the copy.
func (p *Producer) findElsewhere(ctx context.Context, msgs []Message, preps []prepared, res []BatchResult, todo *[]int, upsert bool) error {
	lay, err := p.pinned(ctx, preps[(*todo)[0]].m)
	if err != nil || len(lay.Used) < 2 {
		return err
	}
	ids, in := make([]string, len(*todo)), make([][]int, len(*todo))
	for j, i := range *todo {
		ids[j], in[j] = msgs[i].ID, olderShards(msgs[i].ID, preps[i].m, lay.Used)
	}
	found, err := p.store.locateEach(ctx, ids, in)
	if err != nil {
		return err
	}
	kept := (*todo)[:0]
	for j, i := range *todo {
		if found[j] >= 0 && upsert {
			preps[i].shard, res[i].Shard = found[j], found[j]
		} else if found[j] >= 0 {
			res[i].Err = fmt.Errorf("enqueue %q: %w (in shard %d, written under an older shard count)", ids[j], ErrDuplicate, found[j])
			continue
		}
		kept = append(kept, i)
	}
	*todo = kept
	return nil
}

// Bounds of one enqueueManyScript call: its work, and the size of its
// arguments (Redis parses them all before the script runs).
const (
	maxEnqueueMany      = 64
	maxEnqueueManyBytes = 1 << 20
)

// chunks groups the messages todo (indexes into preps) by shard, in order,
// into script calls of at most maxEnqueueMany messages and about
// maxEnqueueManyBytes of envelopes (a bigger envelope goes alone).
func (p *Producer) chunks(preps []prepared, todo []int) [][]int {
	type chunkKey struct {
		shard int
		res   *reservation // a call is under one reservation, or none
	}
	var out [][]int
	open := map[chunkKey]int{} // shard -> index in out of its chunk being filled
	size := map[chunkKey]int{} // shard -> bytes of that chunk
	for _, i := range todo {
		sh := chunkKey{preps[i].shard, preps[i].res}
		n := len(preps[i].enc.env) + len(preps[i].enc.id)
		c, ok := open[sh]
		if !ok || len(out[c]) >= maxEnqueueMany || size[sh]+n > maxEnqueueManyBytes {
			out = append(out, nil)
			c, open[sh], size[sh] = len(out)-1, len(out)-1, 0
		}
		out[c] = append(out[c], i)
		size[sh] += n
	}
	return out
}

func (p *Producer) failAll(res []BatchResult, todo []int, err error) error {
	err = fmt.Errorf("enqueue batch: %w", err)
	for _, i := range todo {
		res[i].Err = err
	}
	return err
}

// shardOf returns the shard an id hashes to now, and how many shards may
// hold it (for a lookup after a resize).
func (p *Producer) shardOf(ctx context.Context, id string) (shard, upTo int, err error) {
	if err := validateID(id); err != nil {
		return 0, 0, err
	}
	n, err := p.shards.ShardCount()
	if err != nil {
		return 0, 0, fmt.Errorf("shard count: %w", err)
	}
	if upTo, err = p.spread(ctx, n); err != nil {
		return 0, 0, err
	}
	return Of(id, n), upTo, nil
}

// elsewhere runs op on the shard of id and, when that says ErrNotFound,
// on the shard that holds id after a resize, if any.
func (p *Producer) elsewhere(ctx context.Context, id string, op func(shard int) error) error {
	i, upTo, err := p.shardOf(ctx, id)
	if err != nil {
		return err
	}
	err = op(i)
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	j, found, lerr := p.store.locateElsewhere(ctx, id, i, upTo)
	if lerr != nil {
		return lerr
	}
	if !found {
		return err
	}
	return op(j)
}

// Cancel removes a scheduled message. It returns ErrNotFound if no message
// with that id is scheduled and ErrInFlight if it is being published.
func (p *Producer) Cancel(ctx context.Context, id string) error {
	return p.CancelAhead(ctx, id, 0)
}

// CancelAhead is Cancel for a cancel that may overtake its message: the
// AMQP ingress, where a message and its cancel published one after the
// other can be settled by two consumers in either order. When no message
// with that id is scheduled, it leaves a tombstone in the shard a new
// message with that id would go to: for window, an enqueue of id is
// refused with ErrCancelled. It still returns ErrNotFound then (the
// message may also have been delivered already, or never come). A window
// of 0 or less leaves no tombstone: Cancel.
// Non-guarantee: a message enqueued under another M (a resize within the
// window) does not see the tombstone.
func (p *Producer) CancelAhead(ctx context.Context, id string, window time.Duration) error {
	err := p.elsewhere(ctx, id, func(i int) error { return p.store.CancelAhead(ctx, i, id, window) })
	var ie *InvalidError
	if errors.As(err, &ie) {
		return fmt.Errorf("cancel %q: %w", id, err)
	}
	return err
}

// Reschedule moves a scheduled message to time at.
func (p *Producer) Reschedule(ctx context.Context, id string, at time.Time) (time.Time, error) {
	return p.move(ctx, id, 0, at)
}

// RescheduleAfter moves a scheduled message to delay after now (Redis clock).
func (p *Producer) RescheduleAfter(ctx context.Context, id string, delay time.Duration) (time.Time, error) {
	return p.move(ctx, id, delay, time.Time{})
}

func (p *Producer) move(ctx context.Context, id string, delay time.Duration, at time.Time) (time.Time, error) {
	mode, ms, err := validateWhen(delay, at)
	if err != nil {
		return time.Time{}, fmt.Errorf("reschedule %q: %w", id, err)
	}
	var due int64
	err = p.elsewhere(ctx, id, func(i int) (err error) {
		due, err = p.store.reschedule(ctx, i, id, mode, ms)
		return err
	})
	var ie *InvalidError
	if errors.As(err, &ie) {
		return time.Time{}, fmt.Errorf("reschedule %q: %w", id, err)
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(due), nil
}

// Inspect reports where message id is: scheduled, in flight, dead or unknown.
func (p *Producer) Inspect(ctx context.Context, id string) (Info, error) {
	var info Info
	err := p.elsewhere(ctx, id, func(i int) (err error) {
		if info, err = p.store.Inspect(ctx, i, id); err == nil && info.State == StateUnknown {
			return ErrNotFound
		}
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return info, nil // unknown is an answer, not an error
	}
	if err != nil {
		return Info{}, fmt.Errorf("inspect %q: %w", id, err)
	}
	return info, nil
}

// reserveBatch reserves room under their quotas for the messages of todo
// that count in one, one reservation a quota (quota.go): a message the
// quota has no room for gets the *QuotaError and leaves todo (the last
// ones of the batch are refused), except an upsert's, which goes on alone
// and may only replace a message of the scope (replaceOnly). It returns the reservations, for the
// settle. A message whose reservation failed gets the error.
func (p *Producer) reserveBatch(ctx context.Context, preps []prepared, res []BatchResult, todo *[]int, upsert bool) ([]*reservation, error) {
	var byQuota map[*Quota][]int
	for _, i := range *todo {
		if q := preps[i].quota; q != nil {
			if byQuota == nil {
				byQuota = map[*Quota][]int{}
			}
			byQuota[q] = append(byQuota[q], i)
		}
	}
	if byQuota == nil {
		return nil, nil
	}
	var rs []*reservation
	var first error
	dropped := map[int]bool{}
	for q, idx := range byQuota {
		r, refused, err := p.store.reserve(ctx, q, len(idx))
		if err != nil {
			for _, i := range idx {
				res[i].Err, dropped[i] = fmt.Errorf("enqueue %q: %w", preps[i].enc.id, err), true
			}
			first = cmp.Or(first, err)
			continue
		}
		granted := 0
		if r != nil {
			rs, granted = append(rs, r), int(r.granted)
		} else if refused == nil {
			granted = len(idx) // the quota is gone: nothing to count
		}
		for k, i := range idx {
			if k < granted {
				preps[i].res = r
				continue
			}
			if upsert && refused.Quota == "pending" {
				// It may still replace a message of the scope: a call of
				// its own, refused whole otherwise.
				preps[i].res = replaceOnly(q, refused)
				continue
			}
			res[i].Err, dropped[i] = fmt.Errorf("enqueue %q: %w", preps[i].enc.id, refused), true
		}
	}
	if len(dropped) > 0 {
		*todo = slices.DeleteFunc(*todo, func(i int) bool { return dropped[i] })
	}
	return rs, first
}
