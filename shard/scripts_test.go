package shard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

var (
	srv    *shardtest.Redis
	srvErr error
	// redisAddr is what the examples connect to: the test server when it
	// started.
	redisAddr = "127.0.0.1:6379"
)

func TestMain(m *testing.M) {
	srv, srvErr = shardtest.StartRedis(shardtest.RedisOptions{})
	if srv != nil {
		redisAddr = srv.Addr
	}
	code := m.Run()
	if srv != nil {
		srv.Close()
	}
	os.Exit(code)
}

type fixed int

func (f fixed) ShardCount() (int, error) { return int(f), nil }

// bundle is what most tests need: a fresh namespace on the shared server.
type bundle struct {
	ctx   context.Context
	rdb   *redis.Client
	store *shard.Store
	prod  *shard.Producer
	m     int
}

func setup(t *testing.T, m int) *bundle {
	t.Helper()
	shardtest.Require(t, srvErr)
	t.Parallel()
	rdb := srv.Client(t)
	st, err := shard.NewStore(rdb, shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{ctx: t.Context(), rdb: rdb, store: st, prod: shard.NewProducer(st, fixed(m), shard.ProducerOptions{}), m: m}
}

func (b *bundle) enqueue(t *testing.T, id string, delay time.Duration) shard.Scheduled {
	t.Helper()
	s, err := b.prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Body: []byte("body of " + id), Delay: delay})
	if err != nil {
		t.Fatalf("enqueue %s: %v", id, err)
	}
	return s
}

// claimAll claims from every shard once.
func (b *bundle) claimAll(t *testing.T, k int, lease time.Duration) []shard.Claimed {
	t.Helper()
	var out []shard.Claimed
	for i := range b.m {
		r, err := b.store.Claim(b.ctx, i, k, lease)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Msgs {
			if c.DueMs > r.NowMs {
				t.Fatalf("claimed %s due %d at Redis time %d: early", c.ID, c.DueMs, r.NowMs)
			}
		}
		out = append(out, r.Msgs...)
	}
	return out
}

func TestClaimNeverEarly(t *testing.T) {
	b := setup(t, 4)
	due := map[string]int64{}
	for i := range 40 {
		id := fmt.Sprintf("m%d", i)
		due[id] = b.enqueue(t, id, time.Duration(i*10)*time.Millisecond).Due.UnixMilli()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(due) > 0 && time.Now().Before(deadline) {
		for i := range b.m {
			r, err := b.store.Claim(b.ctx, i, 3, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range r.Msgs {
				if want := due[c.ID]; c.DueMs != want || r.NowMs < want {
					t.Fatalf("%s: claimed at %d, due %d (enqueue said %d)", c.ID, r.NowMs, c.DueMs, want)
				}
				if c.Attempt != 1 {
					t.Errorf("%s: attempt %d on first delivery", c.ID, c.Attempt)
				}
				env, err := shard.DecodeEnvelope(c.Envelope)
				if err != nil || string(env.Body) != "body of "+c.ID {
					t.Errorf("%s: envelope %+v, %v", c.ID, env, err)
				}
				delete(due, c.ID)
			}
			if r.HeadMs != -1 && r.HeadMs <= r.NowMs && len(r.Msgs) < 3 {
				t.Errorf("shard %d: head %d due at %d but claim returned only %d", i, r.HeadMs, r.NowMs, len(r.Msgs))
			}
		}
	}
	if len(due) > 0 {
		t.Fatalf("never claimed: %v", due)
	}
}

func TestClaimBatchAtMostK(t *testing.T) {
	b := setup(t, 1)
	for i := range 10 {
		b.enqueue(t, fmt.Sprintf("m%d", i), 0)
	}
	for _, c := range []struct{ k, want int }{{1, 1}, {3, 3}, {100, 6}} { // 10 due in all
		r, err := b.store.Claim(b.ctx, 0, c.k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Msgs) != c.want {
			t.Errorf("k=%d: claimed %d, want %d", c.k, len(r.Msgs), c.want)
		}
		for j := 1; j < len(r.Msgs); j++ {
			if r.Msgs[j].DueMs < r.Msgs[j-1].DueMs {
				t.Errorf("k=%d: not in due order", c.k)
			}
		}
	}
	if _, err := b.store.Claim(b.ctx, 0, 0, time.Minute); err == nil {
		t.Error("k=0 accepted")
	}
}

// TestClaimReportsTheHead: every claim reply says when the shard's next
// message is due (-1 when none is), whether it took all that was due or
// left some, at k = 1 (which reads the next entry with the due ones) and
// at larger k (which reads it apart).
func TestClaimReportsTheHead(t *testing.T) {
	for _, k := range []int{1, 4} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			b := setup(t, 1)
			claim := func(want int) shard.ClaimResult {
				t.Helper()
				r, err := b.store.Claim(b.ctx, 0, k, time.Minute)
				if err != nil || len(r.Msgs) != want {
					t.Fatalf("claimed %d (%v), want %d", len(r.Msgs), err, want)
				}
				return r
			}
			if r := claim(0); r.HeadMs != -1 {
				t.Fatalf("empty shard: head %d", r.HeadMs)
			}
			later := b.enqueue(t, "later", time.Hour).Due.UnixMilli()
			if r := claim(0); r.HeadMs != later {
				t.Fatalf("future head: %d, want %d", r.HeadMs, later)
			}
			for i := range k + 1 {
				b.enqueue(t, fmt.Sprintf("now%d", i), 0)
			}
			if r := claim(k); r.HeadMs < 0 || r.HeadMs > r.NowMs {
				t.Fatalf("one more due than k: head %d, now %d", r.HeadMs, r.NowMs)
			}
			if r := claim(1); r.HeadMs != later {
				t.Fatalf("all due taken: head %d, want %d", r.HeadMs, later)
			}
		})
	}
}

func TestCancelledIsNeverClaimed(t *testing.T) {
	b := setup(t, 2)
	b.enqueue(t, "keep", 0)
	b.enqueue(t, "drop", 0)
	if err := b.prod.Cancel(b.ctx, "drop"); err != nil {
		t.Fatal(err)
	}
	if err := b.prod.Cancel(b.ctx, "drop"); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("second cancel: %v, want ErrNotFound", err)
	}
	got := b.claimAll(t, 10, time.Minute)
	if len(got) != 1 || got[0].ID != "keep" {
		t.Fatalf("claimed %v", got)
	}
	if err := b.prod.Cancel(b.ctx, "keep"); !errors.Is(err, shard.ErrInFlight) {
		t.Errorf("cancel in flight: %v, want ErrInFlight", err)
	}
	if info, _ := b.prod.Inspect(b.ctx, "drop"); info.State != shard.StateUnknown {
		t.Errorf("cancelled message state %s", info.State)
	}
}

// TestCancelAheadRefusesTheMessage: a cancel that finds nothing leaves a
// tombstone when asked to: an enqueue of that id, alone or in a batch, is
// refused with ErrCancelled until the window ends, then accepted; a plain
// Cancel leaves none, nor does one that found its message. The tombstones'
// key expires with the last of them.
func TestCancelAheadRefusesTheMessage(t *testing.T) {
	b := setup(t, 2)
	const window = 500 * time.Millisecond
	start := time.Now()
	if err := b.prod.CancelAhead(b.ctx, "overtaken", window); !errors.Is(err, shard.ErrNotFound) {
		t.Fatalf("cancel ahead: %v, want ErrNotFound", err)
	}
	m := shard.Message{ID: "overtaken", Topic: "t", Body: []byte("b")}
	if _, err := b.prod.Enqueue(b.ctx, m); !errors.Is(err, shard.ErrCancelled) {
		t.Fatalf("enqueue after the cancel: %v, want ErrCancelled", err)
	}
	res, err := b.prod.EnqueueBatch(b.ctx, []shard.Message{m, {ID: "bystander", Topic: "t"}})
	if err != nil || !errors.Is(res[0].Err, shard.ErrCancelled) || res[1].Err != nil {
		t.Fatalf("batch: %+v, %v; want the first cancelled, the second scheduled", res, err)
	}
	i := shard.Of("overtaken", b.m)
	if ttl := b.rdb.PTTL(b.ctx, shard.ShardKeys(b.store.Namespace(), i).Cancelled).Val(); ttl <= 0 || ttl > window {
		t.Errorf("tombstones' key expires in %s, want within %s", ttl, window)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		_, err := b.prod.Enqueue(b.ctx, m)
		return err == nil
	}, func() string { return "the tombstone never expired" })
	if took := time.Since(start); took < window {
		t.Errorf("enqueued %s after the cancel, inside the %s window", took, window)
	}

	// A plain Cancel leaves no tombstone; nor does one that finds its message.
	if err := b.prod.Cancel(b.ctx, "plain"); !errors.Is(err, shard.ErrNotFound) {
		t.Fatal(err)
	}
	b.enqueue(t, "plain", time.Hour)
	b.enqueue(t, "found", time.Hour)
	if err := b.prod.CancelAhead(b.ctx, "found", time.Hour); err != nil {
		t.Fatalf("cancel ahead of a scheduled message: %v", err)
	}
	b.enqueue(t, "found", time.Hour)
}

func TestRescheduleMovesDue(t *testing.T) {
	b := setup(t, 1)
	s := b.enqueue(t, "m", time.Hour)
	due, err := b.prod.RescheduleAfter(b.ctx, "m", 0)
	if err != nil || !due.Before(s.Due) {
		t.Fatalf("reschedule earlier: %v, %v", due, err)
	}
	if got := b.claimAll(t, 1, time.Minute); len(got) != 1 || got[0].DueMs != due.UnixMilli() {
		t.Fatalf("claimed %+v, want due %d", got, due.UnixMilli())
	}
	if _, err := b.prod.RescheduleAfter(b.ctx, "m", time.Hour); !errors.Is(err, shard.ErrInFlight) {
		t.Errorf("reschedule in flight: %v", err)
	}
	if _, err := b.prod.RescheduleAfter(b.ctx, "nope", time.Hour); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("reschedule unknown: %v", err)
	}
	b.enqueue(t, "n", 0)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if due, err := b.prod.Reschedule(b.ctx, "n", at); err != nil || !due.Equal(at) {
		t.Fatalf("reschedule to %v: %v, %v", at, due, err)
	}
	if info, _ := b.prod.Inspect(b.ctx, "n"); !info.At.Equal(at) {
		t.Errorf("inspect after reschedule: due %v, want %v", info.At, at)
	}
	if got := b.claimAll(t, 1, time.Minute); len(got) != 0 {
		t.Errorf("claimed a message moved an hour ahead: %+v", got)
	}
}

func TestInspectStates(t *testing.T) {
	b := setup(t, 1)
	s := b.enqueue(t, "m", 0)
	info, err := b.prod.Inspect(b.ctx, "m")
	if err != nil || info.State != shard.StateScheduled || !info.At.Equal(s.Due) || info.Envelope == nil ||
		info.Envelope.Topic != "t" {
		t.Fatalf("scheduled: %+v, %v", info, err)
	}
	c := b.claimAll(t, 1, time.Minute)[0]
	if info, _ = b.prod.Inspect(b.ctx, "m"); info.State != shard.StateInFlight || info.At.UnixMilli() != c.Token {
		t.Fatalf("in flight: %+v", info)
	}
	if ok, err := b.store.DeadLetter(b.ctx, 0, c.Lease, "exchange missing"); !ok || err != nil {
		t.Fatalf("dead-letter: %v %v", ok, err)
	}
	if info, _ = b.prod.Inspect(b.ctx, "m"); info.State != shard.StateDead || info.Reason != "exchange missing" || info.Envelope == nil {
		t.Fatalf("dead: %+v", info)
	}
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "m", Topic: "t"}); !errors.Is(err, shard.ErrDuplicate) {
		t.Errorf("enqueue over a dead message: %v, want ErrDuplicate", err)
	}
	if info, _ = b.prod.Inspect(b.ctx, "never"); info.State != shard.StateUnknown {
		t.Fatalf("unknown: %+v", info)
	}
}

func TestDuplicatesRefusedUpsertReplaces(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "m", time.Hour)
	_, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "m", Topic: "other"})
	if !errors.Is(err, shard.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := b.prod.Upsert(b.ctx, shard.Message{ID: "m", Topic: "other"}); err != nil {
		t.Fatal(err)
	}
	got := b.claimAll(t, 1, time.Minute)
	if len(got) != 1 {
		t.Fatalf("upserted message not due now: %v", got)
	}
	if env, _ := shard.DecodeEnvelope(got[0].Envelope); env.Topic != "other" {
		t.Errorf("upsert kept old envelope: %+v", env)
	}
	if _, err := b.prod.Upsert(b.ctx, shard.Message{ID: "m", Topic: "x"}); !errors.Is(err, shard.ErrInFlight) {
		t.Errorf("upsert in flight: %v", err)
	}
}

// claimAgain claims from shard 0 until it gets one message (a lease that
// expires comes back) and returns it.
func (b *bundle) claimAgain(t *testing.T) shard.Claimed {
	t.Helper()
	var again shard.Claimed
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		r, err := b.store.Claim(b.ctx, 0, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Msgs) == 1 {
			again = r.Msgs[0]
		}
		return len(r.Msgs) == 1
	}, nil)
	return again
}

func TestExpiredLeaseIsRedeliveredWithAttempt(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "m", 0)
	first := b.claimAll(t, 1, 50*time.Millisecond)[0]
	again := b.claimAgain(t)
	if again.ID != "m" || again.Attempt != 2 || again.Token == first.Token {
		t.Fatalf("redelivery %+v after %+v", again, first)
	}
	// The first holder lost its lease: its ack changes nothing.
	if n, err := b.store.Ack(b.ctx, 0, first.Lease); n != 0 || err != nil {
		t.Errorf("ack with a lost lease: %d, %v", n, err)
	}
	if n, err := b.store.Ack(b.ctx, 0, again.Lease); n != 1 || err != nil {
		t.Errorf("ack: %d, %v", n, err)
	}
	if info, _ := b.prod.Inspect(b.ctx, "m"); info.State != shard.StateUnknown {
		t.Errorf("after ack: %+v", info)
	}
	if n, _ := b.rdb.HLen(b.ctx, shard.ShardKeys(b.store.Namespace(), 0).Attempts).Result(); n != 0 {
		t.Errorf("attempts hash keeps %d entries after ack", n)
	}
}

func TestReleaseRequeuesLater(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "m", 0)
	c := b.claimAll(t, 1, time.Minute)[0]
	if ok, err := b.store.Release(b.ctx, 0, c.Lease, time.Hour); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	info, _ := b.prod.Inspect(b.ctx, "m")
	if info.State != shard.StateScheduled || info.Attempts != 1 || time.Until(info.At) < 50*time.Minute {
		t.Fatalf("after release: %+v", info)
	}
	if ok, _ := b.store.Release(b.ctx, 0, c.Lease, 0); ok {
		t.Error("released twice")
	}
}

func TestWakeNoticeForNewHead(t *testing.T) {
	b := setup(t, 1)
	sub := b.rdb.Subscribe(b.ctx, shard.WakeChannel(b.store.Namespace()))
	defer sub.Close()
	if _, err := sub.Receive(b.ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}
	far := b.enqueue(t, "far", time.Hour) // the first head, however far
	s := b.enqueue(t, "near", 200*time.Millisecond)
	b.enqueue(t, "behind", 300*time.Millisecond) // not the head: no notice
	msg, err := sub.ReceiveMessage(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, due, _ := shard.ParseNotice(msg.Payload); due != far.Due.UnixMilli() {
		t.Fatalf("first notice %q, want the far head %d", msg.Payload, far.Due.UnixMilli())
	}
	if msg, err = sub.ReceiveMessage(b.ctx); err != nil {
		t.Fatal(err)
	}
	i, due, err := shard.ParseNotice(msg.Payload)
	if err != nil || i != 0 || due != s.Due.UnixMilli() {
		t.Fatalf("notice %q: %d %d %v, want shard 0 due %d", msg.Payload, i, due, err, s.Due.UnixMilli())
	}
	if _, err := b.prod.RescheduleAfter(b.ctx, "far", 0); err != nil {
		t.Fatal(err)
	}
	if msg, err = sub.ReceiveMessage(b.ctx); err != nil || !strings.HasPrefix(msg.Payload, "0:") {
		t.Fatalf("reschedule notice %v %v", msg, err)
	}
}

func TestEnqueueBatch(t *testing.T) {
	b := setup(t, 4)
	b.enqueue(t, "dup", time.Hour)
	msgs := []shard.Message{
		{ID: "a", Topic: "t"},
		{ID: "dup", Topic: "t"},
		{ID: "", Topic: "t"},
		{ID: "b", Exchange: "x", RoutingKey: "k", Delay: time.Hour},
	}
	// A flushed script cache (Redis restarted) must not fail the batch.
	if err := b.rdb.ScriptFlush(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[3].Err != nil || !errors.Is(res[1].Err, shard.ErrDuplicate) || !errors.Is(res[2].Err, shard.ErrInvalid) {
		t.Fatalf("results %+v", res)
	}
	if res[3].Shard != shard.Of("b", 4) || res[3].Due.IsZero() {
		t.Errorf("result for b: %+v", res[3])
	}
}

// EnqueueBatch sends one script call per shard and up to 64 messages:
// a batch bigger than that, into few shards, keeps every message's own
// result (duplicates inside the batch, absolute and relative due times)
// and counts what it created.
func TestEnqueueBatchManyPerShard(t *testing.T) {
	b := setup(t, 2)
	b.enqueue(t, "m7", time.Hour)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var msgs []shard.Message
	for i := range 300 {
		m := shard.Message{ID: fmt.Sprintf("m%d", i), Topic: "t", Body: []byte(fmt.Sprint(i))}
		if i%2 == 0 {
			m.At = at.Add(time.Duration(i) * time.Millisecond)
		} else {
			m.Delay = time.Minute
		}
		msgs = append(msgs, m)
	}
	msgs = append(msgs, shard.Message{ID: "m5", Topic: "t"}) // twice in the batch
	before := time.Now()
	res, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		switch {
		case i == 7 || i == 300:
			if !errors.Is(r.Err, shard.ErrDuplicate) {
				t.Errorf("%s: %v, want a duplicate", r.ID, r.Err)
			}
		case r.Err != nil:
			t.Errorf("%s: %v", r.ID, r.Err)
		case i%2 == 0 && !r.Due.Equal(msgs[i].At):
			t.Errorf("%s: due %s, want %s", r.ID, r.Due, msgs[i].At)
		case i%2 == 1 && (r.Due.Before(before.Add(time.Minute-time.Second)) || r.Due.After(time.Now().Add(time.Minute+time.Second))):
			t.Errorf("%s: due %s, want a minute after %s", r.ID, r.Due, before)
		case r.Shard != shard.Of(r.ID, 2):
			t.Errorf("%s: shard %d, want %d", r.ID, r.Shard, shard.Of(r.ID, 2))
		}
	}
	st, err := b.store.Stats(b.ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, enq := st[0].Scheduled+st[1].Scheduled, st[0].Enqueued+st[1].Enqueued; n != 300 || enq != 300 {
		t.Fatalf("%d scheduled, %d counted as enqueued; want 300 and 300", n, enq)
	}
	got, err := b.prod.Inspect(b.ctx, "m42")
	if err != nil || string(got.Envelope.Body) != "42" {
		t.Fatalf("inspect m42: %+v %v", got, err)
	}
}

// A batch that fills a shard: the messages past its share of MaxPending
// are refused with ErrCapacity, a duplicate is still a duplicate.
func TestEnqueueBatchCapacity(t *testing.T) {
	b := setup(t, 1)
	prod := shard.NewProducer(b.store, fixed(1), shard.ProducerOptions{MaxPending: 10})
	b.enqueue(t, "c0", time.Hour)
	msgs := []shard.Message{{ID: "c0", Topic: "t", Delay: time.Hour}}
	for i := 1; i <= 14; i++ {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("c%d", i), Topic: "t", Delay: time.Hour})
	}
	res, err := prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		var want error
		switch {
		case i == 0:
			want = shard.ErrDuplicate
		case i >= 10:
			want = shard.ErrCapacity
		}
		if !errors.Is(r.Err, want) || (want == nil && r.Err != nil) {
			t.Errorf("%s: %v, want %v", r.ID, r.Err, want)
		}
	}
}

// A batch announces the shard's new head once, when it brought the head
// earlier, and not at all when it did not.
func TestEnqueueBatchWakeNotice(t *testing.T) {
	b := setup(t, 1)
	sub := b.rdb.Subscribe(b.ctx, shard.WakeChannel(b.store.Namespace()))
	defer sub.Close()
	if _, err := sub.Receive(b.ctx); err != nil {
		t.Fatal(err)
	}
	head := b.enqueue(t, "head", time.Hour)
	if msg, err := sub.ReceiveMessage(b.ctx); err != nil || !strings.HasSuffix(msg.Payload, fmt.Sprint(head.Due.UnixMilli())) {
		t.Fatalf("notice for the first head: %v %v", msg, err)
	}
	later := []shard.Message{{ID: "l1", Topic: "t", Delay: 2 * time.Hour}, {ID: "l2", Topic: "t", Delay: 3 * time.Hour}}
	if _, err := b.prod.EnqueueBatch(b.ctx, later); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	earlier := []shard.Message{{ID: "e1", Topic: "t", At: at.Add(time.Second)}, {ID: "e2", Topic: "t", At: at},
		{ID: "e3", Topic: "t", At: at.Add(2 * time.Second)}}
	if _, err := b.prod.EnqueueBatch(b.ctx, earlier); err != nil {
		t.Fatal(err)
	}
	// The next notice is the earlier batch's: the later batch sent none.
	msg, err := sub.ReceiveMessage(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i, due, err := shard.ParseNotice(msg.Payload); err != nil || i != 0 || due != at.UnixMilli() {
		t.Fatalf("notice %q, want shard 0 due %d", msg.Payload, at.UnixMilli())
	}
}

func TestStats(t *testing.T) {
	b := setup(t, 2)
	b.enqueue(t, "now1", 0)
	b.enqueue(t, "now2", 0)
	b.enqueue(t, "later", time.Hour)
	st, err := b.store.Stats(b.ctx, b.m)
	if err != nil {
		t.Fatal(err)
	}
	var sched, dueNow int64
	for _, s := range st {
		sched += s.Scheduled
		dueNow += s.DueNow
	}
	var enq int64
	for _, s := range st {
		enq += s.Enqueued
	}
	if sched != 3 || dueNow != 2 || enq != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCorruptReplyTypesAreErrors(t *testing.T) {
	b := setup(t, 1)
	// Someone wrote a string where the due ZSET should be.
	if err := b.rdb.Set(b.ctx, shard.ShardKeys(b.store.Namespace(), 0).Due, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Claim(b.ctx, 0, 1, time.Minute); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("claim on a wrong-type key: %v", err)
	}
}

func TestValidation(t *testing.T) {
	b := setup(t, 1)
	ok := shard.Message{ID: "id", Topic: "t"}
	for name, c := range map[string]struct {
		mutate func(*shard.Message)
		field  string
	}{
		"empty id":        {func(m *shard.Message) { m.ID = "" }, "id"},
		"long id":         {func(m *shard.Message) { m.ID = strings.Repeat("x", 257) }, "id"},
		"control id":      {func(m *shard.Message) { m.ID = "a\nb" }, "id"},
		"negative delay":  {func(m *shard.Message) { m.Delay = -time.Second }, "delay"},
		"huge delay":      {func(m *shard.Message) { m.Delay = 200 * 365 * 24 * time.Hour }, "delay"},
		"absurd at":       {func(m *shard.Message) { m.At = time.Unix(5, 0) }, "at"},
		"far at":          {func(m *shard.Message) { m.At = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }, "at"},
		"big body":        {func(m *shard.Message) { m.Body = make([]byte, shard.DefaultMaxBody+1) }, "body"},
		"reserved header": {func(m *shard.Message) { m.Headers = amqp.Table{"X-DelayQ-Attempt": "1"} }, "headers[X-DelayQ-Attempt]"},
		"empty header":    {func(m *shard.Message) { m.Headers = amqp.Table{"": "v"} }, "headers"},
		"uint64 header":   {func(m *shard.Message) { m.Headers = amqp.Table{"n": uint64(1)} }, "headers[n]"},
		"deep header": {func(m *shard.Message) {
			var v any = "x"
			for range shard.MaxHeaderDepth + 1 {
				v = []any{v}
			}
			m.Headers = amqp.Table{"d": v}
		}, "headers[d]" + strings.Repeat("[0]", shard.MaxHeaderDepth)},
		"huge headers": {func(m *shard.Message) {
			m.Headers = amqp.Table{"a": strings.Repeat("x", shard.MaxHeaderBytes)}
		}, "headers"},
		"bad expiration":  {func(m *shard.Message) { m.Properties.Expiration = "1.5" }, "expiration"},
		"delivery mode 3": {func(m *shard.Message) { m.Properties.DeliveryMode = 3 }, "delivery_mode"},
		"no destination":  {func(m *shard.Message) { m.Topic = "" }, "destination"},
		"both":            {func(m *shard.Message) { m.Exchange = "x" }, "destination"},
		"long topic":      {func(m *shard.Message) { m.Topic = strings.Repeat("t", 256) }, "topic"},
		"expiry before due": {func(m *shard.Message) {
			m.At, m.ExpiresAt = time.Now().Add(time.Hour), time.Now().Add(time.Minute)
		}, "expires_at"},
		"expiry before delay": {func(m *shard.Message) {
			m.Delay, m.ExpiresAt = time.Hour, time.Now().Add(time.Minute)
		}, "expires_at"},
		"absurd expiry":          {func(m *shard.Message) { m.ExpiresAt = time.Unix(5, 0) }, "expires_at"},
		"negative max lateness":  {func(m *shard.Message) { m.MaxLateness = -time.Second }, "max_lateness"},
		"max lateness under 1ms": {func(m *shard.Message) { m.MaxLateness = time.Microsecond }, "max_lateness"},
	} {
		m := ok
		c.mutate(&m)
		_, err := b.prod.Enqueue(b.ctx, m)
		var ie *shard.InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, shard.ErrInvalid) || ie.Field != c.field {
			t.Errorf("%s: err %v, want invalid %s", name, err, c.field)
		}
	}
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "dx", RoutingKey: "queue"}); err != nil {
		t.Errorf("default exchange with a routing key: %v", err)
	}
}

// resizable is a ShardCounter whose M the test changes, with a high-water
// mark like balance.Layout's.
type resizable struct{ m, hw atomic.Int64 }

func (r *resizable) ShardCount() (int, error) { return int(r.m.Load()), nil }
func (r *resizable) HighWater() (int, error)  { return int(r.hw.Load()), nil }

func TestFindAcrossResize(t *testing.T) {
	b := setup(t, 1)
	var r resizable
	r.m.Store(4)
	r.hw.Store(4)
	prod := shard.NewProducer(b.store, &r, shard.ProducerOptions{})
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("m%d", i)
		ids = append(ids, id)
		if _, err := prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []int64{16, 2} { // grow, then shrink below the old M
		r.m.Store(m)
		r.hw.Store(max(r.hw.Load(), m))
		moved := 0
		for _, id := range ids {
			if shard.Of(id, int(m)) != shard.Of(id, 4) {
				moved++
			}
			info, err := prod.Inspect(b.ctx, id)
			if err != nil || info.State != shard.StateScheduled || info.Shard != shard.Of(id, 4) {
				t.Fatalf("M=%d: inspect %s: %+v %v", m, id, info, err)
			}
		}
		if moved == 0 {
			t.Fatalf("M=%d moves no id to another shard: the test proves nothing", m)
		}
	}
	if _, err := prod.RescheduleAfter(b.ctx, "m1", time.Minute); err != nil {
		t.Errorf("reschedule after resize: %v", err)
	}
	for _, id := range ids {
		if err := prod.Cancel(b.ctx, id); err != nil {
			t.Fatalf("cancel %s after resize: %v", id, err)
		}
	}
	if err := prod.Cancel(b.ctx, "m1"); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("cancel twice: %v", err)
	}
	if info, err := prod.Inspect(b.ctx, "m1"); err != nil || info.State != shard.StateUnknown {
		t.Errorf("inspect after cancel: %+v %v", info, err)
	}
}

func TestLayout(t *testing.T) {
	b := setup(t, 1)
	same := func(a, b shard.Layout) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	if l, err := b.store.ReadLayout(b.ctx); err != nil || !same(l, shard.Layout{}) {
		t.Fatalf("empty layout: %+v %v", l, err)
	}
	l, err := b.store.RaiseLayout(b.ctx, 8, 5)
	if err != nil || !same(l, shard.Layout{HighWater: 8, MaxEver: 8, M: 8, MIndex: 5, Used: []int{8}}) {
		t.Fatalf("raise to 8: %+v %v", l, err)
	}
	// A smaller M does not lower the mark; an older Consul index does not
	// overwrite the mirror.
	if l, _ = b.store.RaiseLayout(b.ctx, 4, 3); !same(l, shard.Layout{HighWater: 8, MaxEver: 8, M: 8, MIndex: 5, Used: []int{4, 8}}) {
		t.Fatalf("stale raise: %+v", l)
	}
	if l, _ = b.store.RaiseLayout(b.ctx, 4, 9); !same(l, shard.Layout{HighWater: 8, MaxEver: 8, M: 4, MIndex: 9, Used: []int{4, 8}}) {
		t.Fatalf("newer M: %+v", l)
	}
	if ok, err := b.store.SetHighWater(b.ctx, 7, 4); ok || err != nil {
		t.Errorf("CAS with a wrong old value: %v %v", ok, err)
	}
	if ok, err := b.store.SetHighWater(b.ctx, 8, 4); !ok || err != nil {
		t.Errorf("CAS: %v %v", ok, err)
	}
	if l, _ = b.store.ReadLayout(b.ctx); l.HighWater != 4 || l.MaxEver != 8 {
		t.Errorf("after CAS: %+v", l)
	}
	b.enqueue(t, "x", time.Hour) // M=1: shard 0
	occ, err := b.store.Occupied(b.ctx, 0, 3)
	if err != nil || !occ[0] || occ[1] || occ[2] {
		t.Errorf("occupied: %v %v", occ, err)
	}
}

func TestAckShardsSplitsAndSurvivesScriptFlush(t *testing.T) {
	b := setup(t, 2)
	var ids []string
	for i := range 150 {
		id := fmt.Sprintf("a%d", i)
		ids = append(ids, id)
		b.enqueue(t, id, 0)
	}
	leases := map[int][]shard.Confirmed{}
	for _, c := range b.claimAll(t, 1000, time.Minute) {
		leases[shard.Of(c.ID, 2)] = append(leases[shard.Of(c.ID, 2)], shard.Confirmed{Lease: c.Lease, Late: -1})
	}
	if err := b.rdb.ScriptFlush(b.ctx).Err(); err != nil { // as after a Redis restart
		t.Fatal(err)
	}
	n, err := b.store.AckShards(b.ctx, leases)
	if err != nil || n != 150 {
		t.Fatalf("AckShards = %d, %v; want 150", n, err)
	}
	for _, id := range ids {
		if info, _ := b.prod.Inspect(b.ctx, id); info.State != shard.StateUnknown {
			t.Fatalf("%s after ack: %s", id, info.State)
		}
	}
}

// TestAckShardsPacksShards: on a single server one call takes the leases
// of several shards (up to its limit, then the next call): every held
// lease is acked and counted in its own shard's counters, a lease lost
// meanwhile (its token no longer held) is left alone, and a lease sent
// twice counts once.
func TestAckShardsPacksShards(t *testing.T) {
	const m = 5
	b := setup(t, m)
	for i := range 700 {
		b.enqueue(t, fmt.Sprintf("p%d", i), 0)
	}
	leases := map[int][]shard.Confirmed{}
	held := map[int]int{}
	for _, c := range b.claimAll(t, 1000, time.Minute) {
		i := shard.Of(c.ID, m)
		leases[i] = append(leases[i], shard.Confirmed{Lease: c.Lease, Late: time.Millisecond})
		held[i]++
	}
	stale := leases[1][0]
	leases[1][0].Token-- // a lease this scanner no longer holds
	held[1]--
	leases[2] = append(leases[2], leases[2][0]) // the same lease twice
	n, err := b.store.AckShards(b.ctx, leases)
	if err != nil || n != 699 {
		t.Fatalf("AckShards = %d, %v; want 699", n, err)
	}
	for i := range m {
		got, err := b.rdb.HGet(b.ctx, shard.ShardKeys(b.store.Namespace(), i).Counters, "published").Int()
		if err != nil || got != held[i] {
			t.Errorf("shard %d: published %d (%v), want %d", i, got, err, held[i])
		}
	}
	if info, _ := b.prod.Inspect(b.ctx, stale.ID); info.State != shard.StateInFlight {
		t.Errorf("the lost lease's message: %s, want still in flight", info.State)
	}
}

func TestDeadListRedrivePurge(t *testing.T) {
	b := setup(t, 2)
	for _, id := range []string{"d1", "d2", "d3"} {
		b.enqueue(t, id, 0)
	}
	for _, c := range b.claimAll(t, 10, time.Minute) {
		if ok, err := b.store.DeadLetter(b.ctx, shard.Of(c.ID, 2), c.Lease, "no route for "+c.ID); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	list, err := b.store.DeadList(b.ctx, 2, 10)
	if err != nil || len(list) != 3 {
		t.Fatalf("dead list %+v, %v", list, err)
	}
	for _, d := range list {
		if d.Reason != "no route for "+d.ID || d.Shard != shard.Of(d.ID, 2) || d.Since.IsZero() {
			t.Errorf("dead entry %+v", d)
		}
	}
	if l, _ := b.store.DeadList(b.ctx, 2, 2); len(l) != 2 {
		t.Errorf("limit 2 gave %d", len(l))
	}
	if err := b.prod.Redrive(b.ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	if err := b.prod.Redrive(b.ctx, "d1"); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("redrive twice: %v", err)
	}
	got := b.claimAll(t, 10, time.Minute)
	if len(got) != 1 || got[0].ID != "d1" || got[0].Attempt != 1 {
		t.Fatalf("after redrive, claimed %+v", got)
	}
	if err := b.prod.Purge(b.ctx, "d2"); err != nil {
		t.Fatal(err)
	}
	if info, _ := b.prod.Inspect(b.ctx, "d2"); info.State != shard.StateUnknown {
		t.Errorf("purged message is %s", info.State)
	}
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "d2", Topic: "t"}); err != nil {
		t.Errorf("id not reusable after purge: %v", err)
	}
	if err := b.prod.Purge(b.ctx, "d1"); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("purge of an in-flight message: %v", err)
	}
	if ids, _ := b.store.DeadIDs(b.ctx, shard.Of("d3", 2), time.Now().Add(time.Hour).UnixMilli(), 10); len(ids) != 1 || ids[0] != "d3" {
		t.Errorf("dead ids %v", ids)
	}
}

func TestCapacity(t *testing.T) {
	b := setup(t, 4)
	prod := shard.NewProducer(b.store, fixed(4), shard.ProducerOptions{MaxPending: 40}) // 10 per shard
	accepted, full := 0, 0
	for i := range 100 {
		_, err := prod.Enqueue(b.ctx, shard.Message{ID: fmt.Sprintf("c%d", i), Topic: "t", Delay: time.Hour})
		switch {
		case err == nil:
			accepted++
		case errors.Is(err, shard.ErrCapacity):
			full++
		default:
			t.Fatal(err)
		}
	}
	if accepted != 40 || full != 60 {
		t.Fatalf("accepted %d, refused %d; want 40 and 60", accepted, full)
	}
	// Replacing a message does not grow the shard: allowed at capacity.
	if _, err := prod.Upsert(b.ctx, shard.Message{ID: "c0", Topic: "t", Delay: time.Hour}); err != nil {
		t.Errorf("upsert at capacity: %v", err)
	}
	// In-flight messages count; delivering them makes room.
	res, err := prod.EnqueueBatch(b.ctx, []shard.Message{{ID: "late", Topic: "t"}})
	if err != nil || !errors.Is(res[0].Err, shard.ErrCapacity) {
		t.Fatalf("batch at capacity: %+v %v", res, err)
	}
	if err := prod.Cancel(b.ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	i := shard.Of("c1", 4)
	for j := 0; ; j++ { // an id in c1's shard now fits
		id := fmt.Sprintf("x%d", j)
		if shard.Of(id, 4) != i {
			continue
		}
		if _, err := prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Delay: time.Hour}); err != nil {
			t.Fatalf("after a cancel the shard should have room: %v", err)
		}
		break
	}
}

// TestRetryBeforeAck: a consumer can get a message, fail and call Retry
// before the scanner acks it. The retry must survive that late ack.
func TestRetryBeforeAck(t *testing.T) {
	b := setup(t, 1)
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "r", Exchange: "x", RoutingKey: "k",
		Retry: []time.Duration{time.Hour}}); err != nil {
		t.Fatal(err)
	}
	c := b.claimAll(t, 1, time.Minute)[0] // published, not yet acked
	env, _ := shard.DecodeEnvelope(c.Envelope)
	headers := map[string]any{}
	for _, h := range env.Headers {
		headers[h.Key] = h.Value
	}
	d := shard.Delivery{MessageID: "r", Exchange: "x", RoutingKey: "k", Headers: headers}
	out, err := b.prod.Retry(b.ctx, d, "boom")
	if err != nil || out.Step != 1 || out.Duplicate {
		t.Fatalf("retry before ack: %+v %v", out, err)
	}
	if n, err := b.store.Ack(b.ctx, 0, c.Lease); n != 0 || err != nil {
		t.Fatalf("late ack: %d %v; want it to change nothing", n, err)
	}
	info, _ := b.prod.Inspect(b.ctx, "r")
	if info.State != shard.StateScheduled || time.Until(info.At) < 50*time.Minute {
		t.Fatalf("retry lost to the late ack: %+v", info)
	}
	if again, _ := b.prod.Retry(b.ctx, d, "boom"); !again.Duplicate {
		t.Errorf("same step retried twice: %+v", again)
	}
}

func TestStatsAfterScriptFlush(t *testing.T) {
	b := setup(t, 2)
	b.enqueue(t, "s", 0)
	if err := b.rdb.ScriptFlush(b.ctx).Err(); err != nil { // as after a Redis restart
		t.Fatal(err)
	}
	st, err := b.store.Stats(b.ctx, 2)
	if err != nil || st[0].Scheduled+st[1].Scheduled != 1 {
		t.Fatalf("stats after SCRIPT FLUSH: %+v %v", st, err)
	}
}

func TestClaimShardsPipelinesIndependentClaims(t *testing.T) {
	b := setup(t, 3)
	for i := range 30 {
		b.enqueue(t, fmt.Sprintf("p%d", i), 0)
	}
	b.enqueue(t, "later", time.Hour)
	if err := b.rdb.ScriptFlush(b.ctx).Err(); err != nil { // as after a Redis restart: NOSCRIPT first
		t.Fatal(err)
	}
	// Shard 0 twice: two claims of k=2 in the same round trip take four
	// different messages, each claim atomic on its own.
	res, errs := b.store.ClaimShards(b.ctx, []int{0, 0, 1, 2}, 2, time.Minute)
	seen := map[string]bool{}
	for j, r := range res {
		if errs[j] != nil {
			t.Fatalf("claim %d: %v", j, errs[j])
		}
		if len(r.Msgs) != 2 {
			t.Errorf("claim %d: %d messages, want 2", j, len(r.Msgs))
		}
		for _, c := range r.Msgs {
			if seen[c.ID] || c.DueMs > r.NowMs {
				t.Errorf("claim %d: %s twice or early (due %d, now %d)", j, c.ID, c.DueMs, r.NowMs)
			}
			seen[c.ID] = true
		}
	}
	_, errs = b.store.ClaimShards(b.ctx, []int{0}, 0, time.Minute)
	if errs[0] == nil {
		t.Error("k=0 accepted")
	}
	// Everything due ends up claimed exactly once; "later" never.
	for {
		res, errs := b.store.ClaimShards(b.ctx, []int{0, 1, 2}, 5, time.Minute)
		n := 0
		for j, r := range res {
			if errs[j] != nil {
				t.Fatal(errs[j])
			}
			for _, c := range r.Msgs {
				if seen[c.ID] || c.ID == "later" {
					t.Fatalf("%s claimed again or early", c.ID)
				}
				seen[c.ID] = true
				n++
			}
		}
		if n == 0 {
			break
		}
	}
	if len(seen) != 30 {
		t.Fatalf("claimed %d of 30", len(seen))
	}
}

func TestAckCountsEachLeaseOnce(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "x", 0)
	b.enqueue(t, "y", 0)
	cs := b.claimAll(t, 2, time.Minute)
	if len(cs) != 2 {
		t.Fatalf("claimed %d", len(cs))
	}
	stale := cs[1].Lease
	stale.Token--
	n, err := b.store.Ack(b.ctx, 0, cs[0].Lease, cs[0].Lease, stale)
	if err != nil || n != 1 {
		t.Fatalf("ack of a lease twice plus a stale token = %d, %v; want 1", n, err)
	}
	if info, _ := b.prod.Inspect(b.ctx, cs[1].ID); info.State != shard.StateInFlight {
		t.Fatalf("%s acked with a stale token: %s", cs[1].ID, info.State)
	}
}

// TestRedeliveryKeepsScheduledTime: a message whose lease expired, or
// whose publish failed, is delivered again saying the time it was
// scheduled for, not the time it was re-queued; a reschedule sets a new one.
func TestRedeliveryKeepsScheduledTime(t *testing.T) {
	b := setup(t, 1)
	s := b.enqueue(t, "m", 0)
	first := b.claimAll(t, 1, 50*time.Millisecond)[0]
	if first.DueMs != s.Due.UnixMilli() {
		t.Fatalf("first delivery due %d, scheduled %d", first.DueMs, s.Due.UnixMilli())
	}
	again := b.claimAgain(t)
	if again.Attempt != 2 || again.DueMs != s.Due.UnixMilli() {
		t.Fatalf("after an expired lease: attempt %d due %d, want attempt 2 due %d", again.Attempt, again.DueMs, s.Due.UnixMilli())
	}
	if ok, err := b.store.Release(b.ctx, 0, again.Lease, 0); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if info, _ := b.prod.Inspect(b.ctx, "m"); !info.Scheduled.Equal(s.Due) || info.Attempts != 2 {
		t.Errorf("inspect after release: scheduled %v attempts %d, want %v and 2", info.Scheduled, info.Attempts, s.Due)
	}
	third := b.claimAll(t, 1, time.Minute)[0]
	if third.Attempt != 3 || third.DueMs != s.Due.UnixMilli() {
		t.Fatalf("after a release: attempt %d due %d, want attempt 3 due %d", third.Attempt, third.DueMs, s.Due.UnixMilli())
	}
	if ok, _ := b.store.Release(b.ctx, 0, third.Lease, time.Hour); !ok {
		t.Fatal("release for an hour")
	}
	at, err := b.prod.RescheduleAfter(b.ctx, "m", 0)
	if err != nil {
		t.Fatal(err)
	}
	fourth := b.claimAll(t, 1, time.Minute)[0]
	if fourth.Attempt != 4 || fourth.DueMs != at.UnixMilli() {
		t.Fatalf("after a reschedule: attempt %d due %d, want attempt 4 due %d", fourth.Attempt, fourth.DueMs, at.UnixMilli())
	}
}

// TestExpiredLeasesComeBackInBoundedBatches: a crashed scanner's leases
// are re-queued MaxReap at a time, each claim reply says whether more have
// expired (lease head <= now) and when the next lease expires, and the
// earliest scheduled message is claimed first.
func TestExpiredLeasesComeBackInBoundedBatches(t *testing.T) {
	b := setup(t, 1)
	const n = 3*shard.MaxReap + 10
	var msgs []shard.Message
	base := time.Now().Add(-time.Hour)
	for i := range n {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("m%04d", i), Topic: "t", At: base.Add(time.Duration(i) * time.Millisecond)})
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	r, err := b.store.Claim(b.ctx, 0, n, 200*time.Millisecond) // the scanner that will crash
	if err != nil || len(r.Msgs) != n {
		t.Fatalf("claim all: %d %v", len(r.Msgs), err)
	}
	if r.LeaseHeadMs != r.Msgs[0].Token || r.NextWorkMs() != r.LeaseHeadMs {
		t.Fatalf("lease head %d, next work %d; want the lease deadline %d", r.LeaseHeadMs, r.NextWorkMs(), r.Msgs[0].Token)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		info, _ := b.store.Inspect(b.ctx, 0, "m0000")
		return info.NowMs > r.Msgs[0].Token
	}, nil)
	var got []shard.Claimed
	calls := 0
	for {
		c, err := b.store.Claim(b.ctx, 0, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if c.Reaped > shard.MaxReap {
			t.Fatalf("one claim re-queued %d leases, more than %d", c.Reaped, shard.MaxReap)
		}
		got = append(got, c.Msgs...)
		if len(c.Msgs) == 0 {
			break
		}
		if calls <= 3 && c.LeaseHeadMs > c.NowMs {
			t.Fatalf("claim %d: lease head %d after now %d while leases are still expired", calls, c.LeaseHeadMs, c.NowMs)
		}
	}
	if len(got) != n {
		t.Fatalf("claimed %d of %d again", len(got), n)
	}
	for i, c := range got {
		if want := fmt.Sprintf("m%04d", i); c.ID != want || c.Attempt != 2 || c.DueMs != base.Add(time.Duration(i)*time.Millisecond).UnixMilli() {
			t.Fatalf("claim %d: %s attempt %d due %d; want %s attempt 2, due as scheduled", i, c.ID, c.Attempt, c.DueMs, want)
		}
	}
}

// TestOldLeaseWithoutScheduledTime: a lease taken by a version that kept
// no scheduled time (a bare attempt count) is still re-queued.
func TestOldLeaseWithoutScheduledTime(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "m", 0)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	c := b.claimAll(t, 1, 50*time.Millisecond)[0]
	if err := b.rdb.HSet(b.ctx, ks.Attempts, "m", "2").Err(); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		r, err := b.store.Claim(b.ctx, 0, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Msgs) == 1 && (r.Msgs[0].Attempt != 4 || r.Msgs[0].DueMs < c.Token) {
			t.Fatalf("redelivery of an old lease: %+v", r.Msgs[0])
		}
		return len(r.Msgs) == 1
	}, nil)
}

// TestPinKeepsTheMarkUp: a scanner cannot lower the high-water mark below
// an M a producer pinned, until the pin expires.
func TestPinKeepsTheMarkUp(t *testing.T) {
	b := setup(t, 1)
	if _, err := b.store.RaiseLayout(b.ctx, 4, 1); err != nil {
		t.Fatal(err)
	}
	l, err := b.store.PinLayout(b.ctx, 16, 300*time.Millisecond)
	if err != nil || l.HighWater != 16 || l.MaxEver != 16 || l.M != 4 {
		t.Fatalf("pin 16: %+v %v", l, err)
	}
	if ok, err := b.store.SetHighWater(b.ctx, 16, 4); ok || !errors.Is(err, shard.ErrPinned) {
		t.Fatalf("lowering below a pin: %v %v", ok, err)
	}
	if ok, err := b.store.SetHighWater(b.ctx, 16, 20); !ok || err != nil {
		t.Fatalf("raising above a pin: %v %v", ok, err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		ok, err := b.store.SetHighWater(b.ctx, 20, 4)
		if err != nil && !errors.Is(err, shard.ErrPinned) {
			t.Fatal(err)
		}
		return ok
	}, nil)

}

// TestStaticProducerIsCovered: a producer given a larger M than the
// fleet's raises the mark, so the scanners cover what it writes.
func TestStaticProducerIsCovered(t *testing.T) {
	b := setup(t, 1)
	if _, err := b.store.RaiseLayout(b.ctx, 4, 1); err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(b.store, fixed(16), shard.ProducerOptions{})
	s, err := prod.Enqueue(b.ctx, shard.Message{ID: "x", Topic: "t", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.store.ReadLayout(b.ctx)
	if err != nil || l.HighWater != 16 || s.Shard >= 16 {
		t.Fatalf("layout after a write under M=16: %+v %v (shard %d)", l, err, s.Shard)
	}
	if ok, err := b.store.SetHighWater(b.ctx, 16, 4); ok || !errors.Is(err, shard.ErrPinned) {
		t.Fatalf("the fleet lowered the mark under a writing producer: %v %v", ok, err)
	}
}

// TestDedupeAcrossResize: after M grows or shrinks, Enqueue refuses an id
// still scheduled in the shard an older M put it in, EnqueueBatch reports
// it as a duplicate, and Upsert replaces that copy instead of adding one.
func TestDedupeAcrossResize(t *testing.T) {
	b := setup(t, 1)
	old := shard.NewProducer(b.store, fixed(4), shard.ProducerOptions{})
	var ids []string
	for i := range 40 {
		id := fmt.Sprintf("d%d", i)
		ids = append(ids, id)
		if _, err := old.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []int{16, 2} {
		prod := shard.NewProducer(b.store, fixed(m), shard.ProducerOptions{})
		var moved []string
		for _, id := range ids {
			if shard.Of(id, m) != shard.Of(id, 4) {
				moved = append(moved, id)
			}
		}
		if len(moved) < 2 {
			t.Fatalf("M=%d moves %d ids: the test proves nothing", m, len(moved))
		}
		if _, err := prod.Enqueue(b.ctx, shard.Message{ID: moved[0], Topic: "t", Delay: time.Hour}); !errors.Is(err, shard.ErrDuplicate) {
			t.Errorf("M=%d: enqueue of %s scheduled under M=4: %v, want a duplicate", m, moved[0], err)
		}
		res, err := prod.EnqueueBatch(b.ctx, []shard.Message{
			{ID: moved[1], Topic: "t", Delay: time.Hour}, {ID: fmt.Sprintf("new%d", m), Topic: "t", Delay: time.Hour}})
		if err != nil || !errors.Is(res[0].Err, shard.ErrDuplicate) || res[1].Err != nil {
			t.Errorf("M=%d: batch: %v %v %v", m, err, res[0].Err, res[1].Err)
		}
		s, err := prod.Upsert(b.ctx, shard.Message{ID: moved[0], Topic: "t2", Delay: 2 * time.Hour})
		if err != nil || s.Shard != shard.Of(moved[0], 4) {
			t.Errorf("M=%d: upsert of %s: shard %d %v, want the old copy's shard %d replaced", m, moved[0], s.Shard, err, shard.Of(moved[0], 4))
		}
		for i := range 16 {
			n, _ := b.rdb.HExists(b.ctx, shard.ShardKeys(b.store.Namespace(), i).Msg, moved[0]).Result()
			if n != (i == shard.Of(moved[0], 4)) {
				t.Errorf("M=%d: after upsert, shard %d holds %s: %v", m, i, moved[0], n)
			}
		}
	}
}

// TestUpsertBatch: a batch upsert creates new ids, replaces scheduled and
// dead ones, and refuses those in flight, each on its own.
func TestUpsertBatch(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "scheduled", time.Hour)
	b.enqueue(t, "flying", 0)
	c := b.claimAll(t, 1, time.Minute)[0]
	b.enqueue(t, "dead", 0)
	d := b.claimAll(t, 1, time.Minute)[0]
	if ok, err := b.store.DeadLetter(b.ctx, 0, d.Lease, "test"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	res, err := b.prod.UpsertBatch(b.ctx, []shard.Message{
		{ID: "scheduled", Topic: "new", Delay: 2 * time.Hour}, {ID: c.ID, Topic: "new"},
		{ID: "dead", Topic: "new", Delay: time.Hour}, {ID: "fresh", Topic: "new", Delay: time.Hour}})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, shard.ErrInFlight) || res[2].Err != nil || res[3].Err != nil {
		t.Fatalf("upsert batch: %v %+v", err, res)
	}
	for _, id := range []string{"scheduled", "dead", "fresh"} {
		info, _ := b.prod.Inspect(b.ctx, id)
		if info.State != shard.StateScheduled || info.Envelope == nil || info.Envelope.Topic != "new" {
			t.Errorf("%s after upsert: %+v", id, info)
		}
	}
	if st, _ := b.store.Stats(b.ctx, 1); st[0].Dead != 0 || st[0].Enqueued != 4 {
		t.Errorf("stats after upsert: %+v (want no dead, 4 created)", st[0])
	}
	// One id twice in one batch: the later message wins, body and due time,
	// as two calls in that order would leave it.
	res, err = b.prod.UpsertBatch(b.ctx, []shard.Message{
		{ID: "twice", Topic: "first", Delay: time.Hour}, {ID: "twice", Topic: "second", Delay: 3 * time.Hour}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("upsert of one id twice: %v %+v", err, res)
	}
	info, _ := b.prod.Inspect(b.ctx, "twice")
	if info.Envelope == nil || info.Envelope.Topic != "second" || time.Until(info.At) < 2*time.Hour {
		t.Errorf("after upserting one id twice: topic %v, due in %s; want the second's (3h)", info.Envelope, time.Until(info.At).Round(time.Minute))
	}
	// Without upsert the second is a duplicate and the first stays.
	res, err = b.prod.EnqueueBatch(b.ctx, []shard.Message{
		{ID: "once", Topic: "first", Delay: time.Hour}, {ID: "once", Topic: "second", Delay: 3 * time.Hour}})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, shard.ErrDuplicate) {
		t.Fatalf("enqueue of one id twice: %v %+v", err, res)
	}
	info, _ = b.prod.Inspect(b.ctx, "once")
	if info.Envelope == nil || info.Envelope.Topic != "first" || time.Until(info.At) > 2*time.Hour {
		t.Errorf("after enqueueing one id twice: topic %v, due in %s; want the first's (1h)", info.Envelope, time.Until(info.At).Round(time.Minute))
	}
}
