package shard

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the export of dead messages and their restore (delayq
// export --dead, then enqueue -f): a dead message goes back into its
// shard's dead set with its reason, time of death and deliveries, not into
// the due set (see "Moving to another Redis" in the package doc).

// DeadState is a dead message's death as an export carries it
// (Message.Dead).
type DeadState struct {
	Since  time.Time // when it was dead-lettered
	Reason string
}

// deadJSON is DeadState's JSON form, a line's "dead".
type deadJSON struct {
	SinceMs int64  `json:"since_ms"`
	Reason  string `json:"reason"`
}

// stateOf checks a line's dead: not in a schedule's message, and without
// a due time.
func (j *deadJSON) stateOf(template, timed bool) (*DeadState, error) {
	switch {
	case template:
		return nil, invalid("dead", "not for a schedule's message")
	case timed:
		return nil, invalid("dead", "a dead message has no due time: leave delay_ms and at_ms out")
	case j.SinceMs < minAt.UnixMilli() || j.SinceMs >= maxAt.UnixMilli():
		return nil, invalid("dead.since_ms", "%d is outside [%d, %d)", j.SinceMs, minAt.UnixMilli(), maxAt.UnixMilli())
	}
	return &DeadState{Since: time.UnixMilli(j.SinceMs), Reason: j.Reason}, nil
}

// ExportedDead is one dead message of ExportDead: its line (as enqueue -f
// reads it back into the dead set), or Err when its envelope cannot be
// read; Next is the cursor after it.
type ExportedDead struct {
	Line []byte
	Err  error
	Next DeadCursor
}

// ExportDead calls fn with each dead message of shards [0, shards) after
// the cursor, oldest first (DeadPage's order), n a page: its line has the
// message as AppendLine writes it, without a due time, its deliveries
// (attempts) and "dead": {"since_ms", "reason"}. An error of fn stops it.
func (s *Store) ExportDead(ctx context.Context, shards int, after DeadCursor, n int, fn func(ExportedDead) error) error {
	for {
		page, next, more, err := s.DeadPage(ctx, shards, after, n)
		if err != nil {
			return err
		}
		var stop error // fn's: no more calls after it
		err = s.readDead(ctx, page, func(d Dead, line []byte, err error) {
			x := ExportedDead{Line: line, Next: DeadCursor{SinceMs: d.Since.UnixMilli(), ID: d.ID}}
			if err != nil {
				x.Err = fmt.Errorf("export dead %q in shard %d: %w", d.ID, d.Shard, err)
			}
			if stop == nil {
				stop = fn(x)
			}
		})
		if err != nil {
			return fmt.Errorf("export dead messages: %w", err)
		}
		if stop != nil {
			return stop
		}
		if !more || len(page) == 0 {
			return nil
		}
		after = next
	}
}

// appendDeadLine is AppendLine for a dead message: no due time, its death.
func appendDeadLine(dst []byte, d Dead, attempts int, env *Envelope) ([]byte, error) {
	l, err := exportLineOf(d.ID, 0, attempts, env)
	if err != nil {
		return dst, err
	}
	l.Dead = &deadJSON{SinceMs: d.Since.UnixMilli(), Reason: d.Reason}
	return encodeLine(dst, d.ID, &l)
}

// restoreDeadScript puts dead messages back in a shard's dead set, each
// only when its id has no message in the shard (scheduled, in flight or
// dead).
//
//	KEYS[1] msg HASH   KEYS[2] dead ZSET   KEYS[3] reason HASH   KEYS[4] attempts HASH
//	ARGV[1] n, then n messages from ARGV[2]: id, envelope, since ms, reason,
//	attempts (0: none)
//
// Returns one status a message: 1 restored, 0 its id has a message here.
// Complexity: O(n log N).
var restoreDeadScript = redis.NewScript(`
local out = {}
for j = 0, tonumber(ARGV[1]) - 1 do
  local a = 2 + 5 * j
  local id = ARGV[a]
  if redis.call('HEXISTS', KEYS[1], id) == 1 then
    out[#out + 1] = 0
  else
    redis.call('HSET', KEYS[1], id, ARGV[a + 1])
    redis.call('ZADD', KEYS[2], ARGV[a + 2], id)
    redis.call('HSET', KEYS[3], id, ARGV[a + 3])
    if ARGV[a + 4] ~= '0' then redis.call('HSET', KEYS[4], id, ARGV[a + 4]) end
    out[#out + 1] = 1
  end
end
return out
`)

// enqueueWithDead is enqueueBatch of msgs some of which are dead (Dead
// set): those go back into their shards' dead sets (restoreDead), the
// others are scheduled; results[i] belongs to msgs[i].
func (p *Producer) enqueueWithDead(ctx context.Context, msgs []Message, upsert bool) ([]BatchResult, error) {
	var live []Message
	var liveAt, deadAt []int
	for i := range msgs {
		if msgs[i].Dead != nil {
			deadAt = append(deadAt, i)
		} else {
			live, liveAt = append(live, msgs[i]), append(liveAt, i)
		}
	}
	res := make([]BatchResult, len(msgs))
	var batchErr error
	if len(live) > 0 {
		lr, err := p.enqueueBatch(ctx, live, upsert)
		for j, i := range liveAt {
			res[i] = lr[j]
		}
		batchErr = err
	}
	if err := p.restoreDead(ctx, msgs, deadAt, res); err != nil && batchErr == nil {
		batchErr = err
	}
	return res, batchErr
}

// restoreDead puts msgs[at] back in their shards' dead sets: one pipelined
// script call a shard. An id that has a message in its shard gets
// ErrDuplicate; a message refused by its checks, ErrInvalid.
func (p *Producer) restoreDead(ctx context.Context, msgs []Message, at []int, res []BatchResult) error {
	n, err := p.shards.ShardCount()
	if err == nil {
		_, err = p.pinned(ctx, n) // redrive puts it in the due set: a shard the fleet must cover
	}
	if err != nil {
		err = fmt.Errorf("restore dead messages: %w", err)
		for _, i := range at {
			res[i].ID, res[i].Err = msgs[i].ID, err
		}
		return err
	}
	byShard := map[int][]int{}
	args := map[int][]any{}
	for _, i := range at {
		m := msgs[i]
		res[i].ID = m.ID
		d := m.Dead
		m.Dead = nil
		env, err := m.envelope(p.maxBody, p.now())
		if err == nil {
			err = validateID(m.ID)
		}
		if err != nil {
			res[i].Err = fmt.Errorf("restore dead %q: %w", m.ID, err)
			continue
		}
		sh := Of(m.ID, n)
		res[i].Shard = sh
		byShard[sh] = append(byShard[sh], i)
		args[sh] = append(args[sh], m.ID, AppendEnvelope(nil, &env), d.Since.UnixMilli(), d.Reason, m.Attempts)
	}
	shards := slices.Sorted(maps.Keys(byShard))
	calls := make([]call, len(shards))
	for c, sh := range shards {
		ks := ShardKeys(p.store.ns, sh)
		calls[c] = call{script: restoreDeadScript, keys: []string{ks.Msg, ks.Dead, ks.Reason, ks.Attempts},
			args: append([]any{len(byShard[sh])}, args[sh]...)}
	}
	var batchErr error
	for c, cmd := range p.store.run(ctx, calls...) {
		sh := shards[c]
		ids := byShard[sh]
		sts, err := cmd.Int64Slice()
		if err == nil && len(sts) != len(ids) {
			err = fmt.Errorf("unexpected reply of %d statuses for %d messages", len(sts), len(ids))
		}
		for k, i := range ids {
			switch {
			case err != nil:
				res[i].Err = fmt.Errorf("restore dead %q: %w", msgs[i].ID, err)
				batchErr = cmp.Or(batchErr, fmt.Errorf("restore dead messages: %w", err))
			case sts[k] == 0:
				res[i].Err = fmt.Errorf("restore dead %q: %w (it has a message in shard %d)", msgs[i].ID, ErrDuplicate, sh)
			default:
				res[i].Due = msgs[i].Dead.Since
			}
		}
	}
	return batchErr
}
