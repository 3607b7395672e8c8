package shard_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// replyDropper makes Redis connections whose next reply can be lost: once
// armed, the read of the reply to the next write waits until the test says the call ran
// (it sees the lease from another client), then closes the connection, as
// a Redis killed after it ran a call (or a connection cut) does.
type replyDropper struct {
	armed atomic.Bool
	ran   chan struct{} // closed by the test: the call took effect
}

func (d *replyDropper) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &droppingConn{Conn: c, d: d}, nil
}

// droppingConn loses the reply to the first script call after d is
// armed (not to a new connection's handshake).
type droppingConn struct {
	net.Conn
	d    *replyDropper
	drop atomic.Bool
}

func (c *droppingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(p, []byte("evalsha")) && c.d.armed.CompareAndSwap(true, false) {
		c.drop.Store(true)
	}
	return n, err
}

func (c *droppingConn) Read(p []byte) (int, error) {
	if c.drop.Load() {
		<-c.d.ran
		c.Conn.Close()
		return 0, io.EOF // what a connection Redis closed gives; go-redis sends most commands again after it
	}
	return c.Conn.Read(p)
}

// lossySetup is setup with a client (one connection) whose replies the
// test can lose.
func lossySetup(t *testing.T, m int) (*bundle, *replyDropper) {
	b := setup(t, m)
	return b, b.lossy(t, srv.Addr)
}

// lossy makes b's store use a client of the server at addr (one
// connection) whose replies the test can lose.
func (b *bundle) lossy(t *testing.T, addr string) *replyDropper {
	d := &replyDropper{}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, Dialer: d.dial})
	t.Cleanup(func() { rdb.Close() })
	st, err := shard.NewStore(rdb, b.store.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Load(b.ctx); err != nil { // so the lost reply is the call's, not NOSCRIPT
		t.Fatal(err)
	}
	b.store = st
	return d
}

// loseNextReply arms d and lets the call go through once inflight (a
// key read by another client) holds a lease.
func loseNextReply(t *testing.T, b *bundle, d *replyDropper, inflight string) {
	t.Helper()
	d.ran = make(chan struct{})
	d.armed.Store(true)
	go func() {
		for {
			if n, err := b.rdb.ZCard(context.Background(), inflight).Result(); err != nil || n > 0 {
				close(d.ran)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
}

// A claim that Redis ran but whose reply was lost is sent once (go-redis
// would otherwise run it again and lease a second message), leaves a
// receipt, and Recover puts its message back at once, due when it was
// and with no delivery counted; the next claim delivers it as a first
// delivery.
func TestLostClaimReplyIsRecovered(t *testing.T) {
	b, d := lossySetup(t, 1)
	b.enqueue(t, "a", 0)
	b.enqueue(t, "b", 0)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	due, err := b.rdb.ZScore(b.ctx, ks.Due, "a").Result()
	if err != nil {
		t.Fatal(err)
	}
	c := shard.NewClaimant()
	loseNextReply(t, b, d, ks.Inflight)
	_, errs := b.store.ClaimFor(b.ctx, c, []int{0}, 1, time.Minute, nil)
	if errs[0] == nil {
		t.Fatal("a claim whose reply was lost succeeded: the client sent it again")
	}
	if n := b.rdb.ZCard(b.ctx, ks.Inflight).Val(); n != 1 {
		t.Fatalf("%d leases after one lost claim, want 1 (a second run leased more)", n)
	}
	if c.Lost() != 1 {
		t.Fatalf("claimant keeps %d receipts, want 1", c.Lost())
	}
	n, err := b.store.Recover(b.ctx, c)
	if err != nil || n != 1 {
		t.Fatalf("recover: %d, %v; want 1 message re-queued", n, err)
	}
	if c.Lost() != 0 {
		t.Fatalf("claimant keeps %d receipts after recovering, want 0", c.Lost())
	}
	if got := b.rdb.ZScore(b.ctx, ks.Due, "a").Val(); got != due {
		t.Fatalf("re-queued at %v, want its due time %v", got, due)
	}
	if b.rdb.ZCard(b.ctx, ks.Inflight).Val() != 0 {
		t.Fatal("the lease is still held after recovering")
	}
	res, errs := b.store.ClaimFor(b.ctx, c, []int{0, 0}, 1, time.Minute, nil)
	for j, e := range errs {
		if e != nil {
			t.Fatalf("claim %d after recovering: %v", j, e)
		}
	}
	got := map[string]int{}
	for _, r := range res {
		for _, m := range r.Msgs {
			got[m.ID] = m.Attempt
			if m.ID == "a" && float64(m.DueMs) != due {
				t.Fatalf("a delivered as scheduled for %d, want %v", m.DueMs, due)
			}
		}
	}
	if got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("claims after recovering delivered %v, want a and b as first deliveries", got)
	}
	// The claims that succeeded left receipts no one presents: they expire
	// with their leases.
	if ttl := b.rdb.PTTL(b.ctx, receiptKeys(t, b)[0]).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("a receipt lives %v, want at most its lease", ttl)
	}
}

// receiptKeys lists the receipts of b's namespace (a test may SCAN).
func receiptKeys(t *testing.T, b *bundle) []string {
	t.Helper()
	keys, err := b.rdb.Keys(b.ctx, "delayq:{"+b.store.Namespace()+":*}:claimed:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("receipts: %v, %v", keys, err)
	}
	return keys
}

// A receipt re-queues nothing whose lease changed since the lost claim
// (reaped and claimed again: another scanner may be publishing it), nor
// anything once presented, nor with a claim under flow control whose
// reply came back.
func TestReceiptReQueuesOnlyItsOwnLease(t *testing.T) {
	b, d := lossySetup(t, 1)
	b.enqueue(t, "a", 0)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	c := shard.NewClaimant()
	loseNextReply(t, b, d, ks.Inflight)
	if _, errs := b.store.ClaimFor(b.ctx, c, []int{0}, 1, time.Minute, []string{"other"}); errs[0] == nil {
		t.Fatal("lost claim succeeded")
	}
	// Someone else's lease now (as after a reap and a new claim).
	if err := b.rdb.ZAdd(b.ctx, ks.Inflight, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "a"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.store.Recover(b.ctx, c); err != nil || n != 0 {
		t.Fatalf("recover re-queued %d (%v) of a lease that is no longer the lost claim's", n, err)
	}
	if b.rdb.ZCard(b.ctx, ks.Due).Val() != 0 {
		t.Fatal("a message leased by another claim went back to the due set")
	}
}

// Recover keeps a receipt while Redis does not answer and presents it
// once it does; presenting one twice (a reply of Recover's lost, and the
// client sending it again) re-queues once.
func TestRecoverWaitsForRedis(t *testing.T) {
	b, d := lossySetup(t, 1)
	b.enqueue(t, "a", 0)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	c := shard.NewClaimant()
	loseNextReply(t, b, d, ks.Inflight)
	if _, errs := b.store.ClaimFor(b.ctx, c, []int{0}, 1, time.Minute, nil); errs[0] == nil {
		t.Fatal("lost claim succeeded")
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	away, err := shard.NewStore(down, b.store.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := away.Recover(b.ctx, c); err == nil {
		t.Fatal("recover without Redis succeeded")
	}
	if c.Lost() != 1 {
		t.Fatalf("%d receipts kept after a failed recover, want 1", c.Lost())
	}
	loseNextReply(t, b, d, ks.Due)
	if n, err := b.store.Recover(b.ctx, c); err != nil || n != 0 {
		t.Fatalf("recover sent again after its reply was lost: %d, %v; want 0 (the first run re-queued it)", n, err)
	}
	if c.Lost() != 0 {
		t.Fatalf("%d receipts kept, want 0", c.Lost())
	}
	if b.rdb.ZScore(b.ctx, ks.Due, "a").Err() != nil || b.rdb.ZCard(b.ctx, ks.Inflight).Val() != 0 {
		t.Fatal("the message is not back in the due set")
	}
}

// An ack sent again after its call failed tells a message already acked
// (gone: the failed call ran) from a lease lost meanwhile (the message is
// due again, or leased by another claim).
// An error Redis answers with means the call did not run: Recover keeps
// the receipt and presents it again once Redis serves. Here the error is
// BUSY (a long script); after a restart it is LOADING while Redis reads
// its AOF, and dropping the receipt then left the message leased until
// its lease expired.
func TestRecoverKeepsReceiptsThroughRedisErrors(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	own, err := shardtest.StartRedis(shardtest.RedisOptions{Args: []string{"--lua-time-limit", "10"}})
	shardtest.Require(t, err)
	t.Cleanup(own.Close)
	rdb := own.Client(t)
	st, err := shard.NewStore(rdb, shardtest.Namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{ctx: t.Context(), rdb: rdb, store: st, prod: shard.NewProducer(st, fixed(1), shard.ProducerOptions{}), m: 1}
	d := b.lossy(t, own.Addr)
	b.enqueue(t, "a", 0)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	c := shard.NewClaimant()
	loseNextReply(t, b, d, ks.Inflight)
	if _, errs := b.store.ClaimFor(b.ctx, c, []int{0}, 1, time.Minute, nil); errs[0] == nil {
		t.Fatal("lost claim succeeded")
	}

	busy := redis.NewClient(&redis.Options{Addr: own.Addr, MaxRetries: -1})
	defer busy.Close()
	ended := make(chan error, 1)
	go func() { ended <- busy.Eval(context.Background(), "while true do end", nil).Err() }()
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		err := b.rdb.Ping(b.ctx).Err()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	}, func() string { return "Redis never answered BUSY" })
	if _, err := b.store.Recover(b.ctx, c); err == nil || !strings.Contains(err.Error(), "BUSY") {
		t.Fatalf("recover behind a busy script: %v, want BUSY", err)
	}
	if c.Lost() != 1 {
		t.Fatalf("%d receipts kept after Redis answered BUSY, want 1", c.Lost())
	}
	if err := b.rdb.ScriptKill(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-ended
	if n, err := b.store.Recover(b.ctx, c); err != nil || n != 1 {
		t.Fatalf("recover once Redis serves: %d, %v; want 1", n, err)
	}
	if b.rdb.ZScore(b.ctx, ks.Due, "a").Err() != nil || b.rdb.ZCard(b.ctx, ks.Inflight).Val() != 0 {
		t.Fatal("the message is not back in the due set")
	}
}

func TestAckResentTellsGoneFromLost(t *testing.T) {
	b := setup(t, 1)
	b.enqueue(t, "done", 0)
	b.enqueue(t, "lost", 0)
	ms := b.claimAll(t, 2, time.Minute)
	if len(ms) != 2 {
		t.Fatalf("claimed %d, want 2", len(ms))
	}
	var done, lost shard.Lease
	for _, m := range ms {
		if m.ID == "done" {
			done = m.Lease
		} else {
			lost = m.Lease
		}
	}
	if n, err := b.store.Ack(b.ctx, 0, done); err != nil || n != 1 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	// lost's lease is taken over, as by a reap and a new claim.
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	if err := b.rdb.ZAdd(b.ctx, ks.Inflight, redis.Z{Score: float64(lost.Token + 1), Member: "lost"}).Err(); err != nil {
		t.Fatal(err)
	}
	acked, gone, err := b.store.AckResent(b.ctx, map[int][]shard.Confirmed{0: {{Lease: done, Late: -1}, {Lease: lost, Late: -1}}})
	if err != nil || acked != 0 || gone != 1 {
		t.Fatalf("ack sent again: acked %d, gone %d, %v; want 0 acked, 1 gone (and 1 lost)", acked, gone, err)
	}
}

// An enqueue whose reply was lost is sent again by go-redis; the second
// run finds its own write and says so, instead of calling the message a
// duplicate of itself.
func TestEnqueueSentAgainIsNotItsOwnDuplicate(t *testing.T) {
	b, d := lossySetup(t, 1)
	prod := shard.NewProducer(b.store, fixed(1), shard.ProducerOptions{})
	if _, err := prod.Enqueue(b.ctx, shard.Message{ID: "warm", Topic: "t", Body: []byte("x"), Delay: time.Hour}); err != nil {
		t.Fatal(err) // the producer's first call checks Redis's settings
	}
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	d.ran = make(chan struct{})
	d.armed.Store(true)
	go func() {
		for b.rdb.ZScore(context.Background(), ks.Due, "once").Err() != nil {
			time.Sleep(time.Millisecond)
		}
		close(d.ran)
	}()
	s, err := prod.Enqueue(b.ctx, shard.Message{ID: "once", Topic: "t", Body: []byte("x"), Delay: time.Hour})
	if err != nil {
		t.Fatalf("enqueue whose first reply was lost: %v", err)
	}
	if got := b.rdb.ZScore(b.ctx, ks.Due, "once").Val(); int64(got) != s.Due.UnixMilli() {
		t.Fatalf("told due %v, stored %v", s.Due, got)
	}
	if _, err := prod.Enqueue(b.ctx, shard.Message{ID: "once", Topic: "t", Body: []byte("x"), Delay: time.Hour}); !errors.Is(err, shard.ErrDuplicate) {
		t.Fatalf("a second enqueue of the id: %v, want ErrDuplicate", err)
	}
}
