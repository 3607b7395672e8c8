package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/scope"
	"github.com/delayq/delayq/shard/shardtest"
)

// switching is a ShardCounter whose M changes while producers write: a
// resize.
type switching struct{ m atomic.Int64 }

func (s *switching) ShardCount() (int, error) { return int(s.m.Load()), nil }

// held counts the messages of namespace ns's shards below m whose id
// starts with prefix: scheduled, in flight and dead (every msg hash
// field).
func held(t *testing.T, rdb redis.UniversalClient, ns string, m int, prefix string) int {
	t.Helper()
	n := 0
	for i := range m {
		ids, err := rdb.HKeys(context.Background(), shard.ShardKeys(ns, i).Msg).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if strings.HasPrefix(id, prefix) {
				n++
			}
		}
	}
	return n
}

func quotaOf(t *testing.T, st *shard.Store, name string) shard.QuotaUsage {
	t.Helper()
	qs, err := st.Quotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Scope == name {
			return q
		}
	}
	t.Fatalf("no quota %q in %+v", name, qs)
	return shard.QuotaUsage{}
}

// TestQuotaExactUnderConcurrency: 32 producers of one team, by single
// enqueues, batches and upserts, against a pending quota of 10,000 while
// M goes 8 -> 16 -> 8: exactly 10,000 are stored, every other is refused
// with the quota named, and another team's enqueues all succeed.
func TestQuotaExactUnderConcurrency(t *testing.T) {
	b := setup(t, 8)
	quotaRace(t, b.store, b.rdb)
}

// TestQuotaOnCluster is TestQuotaExactUnderConcurrency on a real 3-master
// Redis Cluster, where the count (the namespace's slot) and the messages
// (the shards' slots) are on different masters: with no producer killed
// it is exact there too.
func TestQuotaOnCluster(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := shard.NewStore(rdb, "quotacluster")
	must(t, err)
	quotaRace(t, st, rdb)
}

// quotaRace is the race of TestQuotaExactUnderConcurrency on st.
func quotaRace(t *testing.T, st *shard.Store, rdb redis.UniversalClient) {
	ctx := context.Background()
	if err := st.SetQuota(ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.*", MaxPending: 10000}); err != nil {
		t.Fatal(err)
	}
	var m switching
	m.m.Store(8)
	const producers, each = 32, 625 // 20,000 billing messages
	var stored, refused, other atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		prod := shard.NewProducer(st, &m, shard.ProducerOptions{})
		wg.Go(func() {
			for k := 0; k < each; {
				if p == 0 && k == each/3 {
					m.m.Store(16)
				} else if p == 0 && k == 2*each/3 {
					m.m.Store(8)
				}
				var msgs []shard.Message
				n := 1 + (k*7+p)%40
				if k+n > each {
					n = each - k
				}
				for j := range n {
					msgs = append(msgs, shard.Message{ID: fmt.Sprintf("b-%d-%d", p, k+j), Topic: "billing.invoice", Body: []byte("x"), Delay: time.Hour})
				}
				k += n
				var results []error
				switch {
				case n == 1:
					_, err := prod.Enqueue(ctx, msgs[0])
					results = append(results, err)
				case p%3 == 0:
					rs, err := prod.UpsertBatch(ctx, msgs)
					if err != nil && !errors.Is(err, shard.ErrQuota) {
						errs <- err
						return
					}
					for _, r := range rs {
						results = append(results, r.Err)
					}
				default:
					rs, err := prod.EnqueueBatch(ctx, msgs)
					if err != nil && !errors.Is(err, shard.ErrQuota) {
						errs <- err
						return
					}
					for _, r := range rs {
						results = append(results, r.Err)
					}
				}
				for _, err := range results {
					var qe *shard.QuotaError
					switch {
					case err == nil:
						stored.Add(1)
					case errors.As(err, &qe) && qe.Scope == "billing" && qe.Quota == "pending" && qe.Limit == 10000:
						refused.Add(1)
					default:
						errs <- err
						return
					}
				}
				// another team, no quota: never refused
				if _, err := prod.Enqueue(ctx, shard.Message{ID: fmt.Sprintf("s-%d-%d", p, k), Topic: "search.index", Body: []byte("y"), Delay: time.Hour}); err != nil {
					errs <- fmt.Errorf("another team's enqueue: %w", err)
					return
				}
				other.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if stored.Load() != 10000 || refused.Load() != 10000 {
		t.Fatalf("stored %d and refused %d of 20,000; want 10,000 each", stored.Load(), refused.Load())
	}
	if got := held(t, rdb, st.Namespace(), 16, "b-"); got != 10000 {
		t.Fatalf("Redis holds %d billing messages, want 10,000", got)
	}
	if q := quotaOf(t, st, "billing"); q.Count != 10000 || q.Refused != 10000 || q.Enqueued != 10000 {
		t.Fatalf("quota counts %d held, %d enqueued and %d refused, want 10,000 each", q.Count, q.Enqueued, q.Refused)
	}
	if other.Load() == 0 {
		t.Fatal("no enqueue of the other team ran")
	}
	// Cancelled messages leave the count at the maintenance's sweep (its
	// reads go to every master), and make room for as many.
	prod := shard.NewProducer(st, &m, shard.ProducerOptions{})
	cancelled := 0
	for p := range producers {
		for k := range 20 {
			if err := prod.Cancel(ctx, fmt.Sprintf("b-%d-%d", p, k)); err == nil {
				cancelled++
			} else if !errors.Is(err, shard.ErrNotFound) {
				t.Fatal(err)
			}
		}
	}
	swept := 0
	shardtest.WaitFor(t, 30*time.Second, func() bool { // a round sweeps for 50 ms at most
		r, err := st.MaintainQuotas(ctx, 16, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		swept += r.Swept
		return swept >= cancelled
	}, func() string { return fmt.Sprintf("%d of %d cancels swept", swept, cancelled) })
	if q := quotaOf(t, st, "billing"); swept != cancelled || cancelled == 0 || q.Count != int64(10000-cancelled) {
		t.Fatalf("count %d after %d cancels (%d swept), want %d", q.Count, cancelled, swept, 10000-cancelled)
	}
}

// TestQuotaCountsOutRemovals: cancelled, published and purged messages
// leave the count at the next maintenance round, and make room again;
// an upsert within the scope counts once.
func TestQuotaCountsOutRemovals(t *testing.T) {
	b := setup(t, 4)
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.*", MaxPending: 100}); err != nil {
		t.Fatal(err)
	}
	msg := func(id string, d time.Duration) shard.Message {
		return shard.Message{ID: id, Topic: "billing.x", Body: []byte("x"), Delay: d}
	}
	var batch []shard.Message
	for k := range 100 {
		d := time.Hour
		if k < 20 {
			d = 0 // due now: published below
		}
		batch = append(batch, msg(fmt.Sprintf("id-%d", k), d))
	}
	rs, err := b.prod.EnqueueBatch(b.ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if _, err := b.prod.Upsert(b.ctx, msg("id-50", 2*time.Hour)); err != nil {
		t.Fatalf("an upsert of a message held, at the quota: %v", err)
	}
	_, err = b.prod.Enqueue(b.ctx, msg("one-more", time.Hour))
	if !errors.Is(err, shard.ErrQuota) || !strings.Contains(err.Error(), "holds 100 of its quota of 100") {
		t.Fatalf("enqueue past the quota: %v", err)
	}
	for k := 20; k < 30; k++ {
		if err := b.prod.Cancel(b.ctx, fmt.Sprintf("id-%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	published := 0
	for i := range 4 {
		r, err := b.store.Claim(b.ctx, i, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Msgs {
			if _, err := b.store.Ack(b.ctx, i, c.Lease); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}
	if published != 20 {
		t.Fatalf("published %d, want the 20 due", published)
	}
	r, err := b.store.MaintainQuotas(b.ctx, 4, time.Millisecond)
	if err != nil || !r.Ran || r.Swept != 10 {
		t.Fatalf("maintenance: %+v, %v; want the 10 cancelled swept (the 20 published counted themselves out)", r, err)
	}
	if q := quotaOf(t, b.store, "billing"); q.Count != 70 {
		t.Fatalf("count %d after 30 removals, want 70", q.Count)
	}
	for k := range 30 {
		if _, err := b.prod.Enqueue(b.ctx, msg(fmt.Sprintf("again-%d", k), time.Hour)); err != nil {
			t.Fatalf("enqueue into room made by removals: %v", err)
		}
	}
	if _, err := b.prod.Enqueue(b.ctx, msg("past", time.Hour)); !errors.Is(err, shard.ErrQuota) {
		t.Fatalf("enqueue past the quota again: %v", err)
	}
	// A quota deleted and set again starts from 0: the old tags count
	// nothing in it.
	if err := b.store.DeleteQuota(b.ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.*", MaxPending: 5}); err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if err := b.prod.Cancel(b.ctx, fmt.Sprintf("again-%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.MaintainQuotas(b.ctx, 4, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if q := quotaOf(t, b.store, "billing"); q.Count != 0 {
		t.Fatalf("a new quota counts %d after removals of the old one's messages, want 0", q.Count)
	}
}

// TestQuotaRate: a rate quota grants at most its rate in a second of the
// Redis clock, and names itself with a retry within the second.
func TestQuotaRate(t *testing.T) {
	b := setup(t, 4)
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "sms", Rules: "topic=sms", MaxRate: 50}); err != nil {
		t.Fatal(err)
	}
	var batch []shard.Message
	for k := range 200 {
		batch = append(batch, shard.Message{ID: fmt.Sprintf("sms-%d", k), Topic: "sms", Body: []byte("x"), Delay: time.Hour})
	}
	start := time.Now()
	rs, err := b.prod.EnqueueBatch(b.ctx, batch)
	if err != nil && !errors.Is(err, shard.ErrQuota) {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range rs {
		var qe *shard.QuotaError
		switch {
		case r.Err == nil:
			ok++
		case errors.As(r.Err, &qe) && qe.Quota == "rate" && qe.Limit == 50 && qe.RetryAfter > 0 && qe.RetryAfter <= time.Second:
		default:
			t.Fatalf("%s: %v", r.ID, r.Err)
		}
	}
	if ok != 50 {
		t.Fatalf("%d of 200 granted in a burst, want the rate, 50", ok)
	}
	// the next second grants again
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		_, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "sms-next", Topic: "sms", Body: []byte("x"), Delay: time.Hour})
		return err == nil
	}, func() string { return fmt.Sprintf("no grant %s after the burst", time.Since(start)) })
}

// TestQuotaBadInput: limits below zero, no limit, rules that overlap
// another quota's scope and rules that do not parse are refused naming
// what was wrong, and change nothing.
func TestQuotaBadInput(t *testing.T) {
	b := setup(t, 1)
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.*", MaxPending: 10}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q    shard.Quota
		want string
	}{
		{shard.Quota{Scope: "a", Rules: "topic=a", MaxPending: -1}, "max_pending -1 is below zero"},
		{shard.Quota{Scope: "a", Rules: "topic=a", MaxRate: -5}, "max_rate -5 is below zero"},
		{shard.Quota{Scope: "a", Rules: "topic=billing.x", MaxPending: 1}, `overlaps scope "billing"`},
		{shard.Quota{Scope: "a", Rules: "topic=", MaxPending: 1}, "quota \"a\""},
		{shard.Quota{Scope: "a b", Rules: "topic=x", MaxPending: 1}, "quota \"a b\""},
	} {
		err := b.store.SetQuota(b.ctx, c.q)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetQuota(%+v): %v, want an error with %q", c.q, err, c.want)
		}
	}
	qs, err := b.store.Quotas(b.ctx)
	if err != nil || len(qs) != 1 || qs[0].MaxPending != 10 {
		t.Fatalf("quotas after refusals: %+v, %v", qs, err)
	}
	// A definition that does not parse is named with its key and field.
	if err := b.rdb.HSet(b.ctx, "delayq:{"+b.store.Namespace()+"}:quotadefs", "billing", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Quotas(b.ctx); !errors.Is(err, shard.ErrCorruptQuota) || !strings.Contains(err.Error(), `HASH quotadefs, field "billing"`) {
		t.Fatalf("a corrupt definition: %v", err)
	}
	// Producers go on without it (its scope is neither counted nor
	// limited), and setting it again mends it.
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "billing-x", Topic: "billing.x", Body: []byte("x"), Delay: time.Hour}); err != nil {
		t.Fatalf("an enqueue beside a corrupt quota: %v", err)
	}
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.*", MaxPending: 10}); err != nil {
		t.Fatalf("setting a corrupt quota again: %v", err)
	}
	if qs, err := b.store.Quotas(b.ctx); err != nil || len(qs) != 1 {
		t.Fatalf("after mending: %+v, %v", qs, err)
	}
	// Two quotas whose rules overlap (two SetQuota calls at once): the
	// later by name is left out and named; the other still counts.
	if err := b.rdb.HSet(b.ctx, "delayq:{"+b.store.Namespace()+"}:quotadefs", "zz",
		`{"scope":"zz","rules":"topic=billing.x","max_pending":1,"gen":9}`).Err(); err != nil {
		t.Fatal(err)
	}
	qs, err = b.store.Quotas(b.ctx)
	if !errors.Is(err, shard.ErrCorruptQuota) || !strings.Contains(err.Error(), `the quota of "zz" (HASH quotadefs) is left out`) || len(qs) != 1 {
		t.Fatalf("overlapping stored quotas: %+v, %v", qs, err)
	}
	fresh, err := shard.NewStore(b.rdb, b.store.Namespace()) // a producer that reads the quotas now
	if err != nil {
		t.Fatal(err)
	}
	p := shard.NewProducer(fresh, fixed(1), shard.ProducerOptions{})
	for k := range 12 {
		_, err := p.Enqueue(b.ctx, shard.Message{ID: fmt.Sprintf("billing-o%d", k), Topic: "billing.x", Body: []byte("x"), Delay: time.Hour})
		if k < 10 && err != nil || k >= 10 && !errors.Is(err, shard.ErrQuota) {
			t.Fatalf("enqueue %d beside overlapping quotas: %v (billing's quota is 10)", k, err)
		}
	}
}

// TestQuotaCountsFarMessages: far messages count in the quota like near
// ones; a far message cancelled leaves the count, one promoted stays in
// it.
func TestQuotaCountsFarMessages(t *testing.T) {
	b := farSetup(t)
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "trial", Rules: "topic=trial", MaxPending: 40}); err != nil {
		t.Fatal(err)
	}
	var batch []shard.Message
	at := farMid(time.Hour)
	for k := range 50 {
		batch = append(batch, shard.Message{ID: fmt.Sprintf("t-%d", k), Topic: "trial", Body: []byte("x"), At: at})
	}
	rs, err := b.prod.EnqueueBatch(b.ctx, batch)
	if err != nil && !errors.Is(err, shard.ErrQuota) {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range rs {
		if r.Err == nil {
			ok++
		} else if !errors.Is(r.Err, shard.ErrQuota) {
			t.Fatal(r.Err)
		}
	}
	if ok != 40 {
		t.Fatalf("%d far messages stored, want the quota, 40", ok)
	}
	if far := len(farRecords(t, b)); far != 40 {
		t.Fatalf("%d far records, want 40: the batch went far", far)
	}
	for k := range 5 {
		if err := b.prod.Cancel(b.ctx, fmt.Sprintf("t-%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := b.store.MaintainQuotas(b.ctx, b.m, time.Millisecond)
	if err != nil || r.Swept != 5 {
		t.Fatalf("maintenance: %+v, %v; want the 5 cancelled swept, the far ones kept", r, err)
	}
	if q := quotaOf(t, b.store, "trial"); q.Count != 35 {
		t.Fatalf("count %d, want 35", q.Count)
	}
}

// TestQuotasFromTheScopesFile: the scopes file's quotas are written at
// start, a change made at runtime stays through later starts, and a
// quota the file no longer gives is deleted only if it came from the
// file.
func TestQuotasFromTheScopesFile(t *testing.T) {
	b := setup(t, 1)
	apply := func(file string) map[string]shard.QuotaUsage {
		t.Helper()
		set, err := scope.ParseSet(strings.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.ApplyScopeQuotas(b.ctx, set); err != nil {
			t.Fatal(err)
		}
		qs, err := b.store.Quotas(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]shard.QuotaUsage{}
		for _, q := range qs {
			out[q.Scope] = q
		}
		return out
	}
	qs := apply("billing topic=billing.* ids=billing- pending=100 rate=10\nsearch topic=search.* pending=5\nops topic=ops.*\n")
	if q := qs["billing"]; len(qs) != 2 || q.MaxPending != 100 || q.MaxRate != 10 || q.Source != shard.QuotaFromFile || q.Rules != "topic=billing.* ids=billing-" {
		t.Fatalf("quotas from the file: %+v", qs)
	}
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "search", Rules: "topic=search.*", MaxPending: 50, Source: "cli"}); err != nil {
		t.Fatal(err)
	}
	qs = apply("billing topic=billing.* ids=billing- pending=200\nsearch topic=search.* pending=5\n")
	if qs["billing"].MaxPending != 200 || qs["billing"].MaxRate != 0 || qs["search"].MaxPending != 50 {
		t.Fatalf("a restart with new file values: %+v; want billing's from the file, search's as changed at runtime", qs)
	}
	qs = apply("billing topic=billing.* ids=billing-\nsearch topic=search.*\n")
	if _, ok := qs["billing"]; ok || qs["search"].MaxPending != 50 {
		t.Fatalf("the file's quotas removed: %+v; want billing's gone, search's (set at runtime) kept", qs)
	}
	if err := b.store.ApplyScopeQuotas(b.ctx, nil); err != nil || len(apply("search topic=search.*\n")) != 1 {
		t.Fatalf("no scopes file: %v", err)
	}
}

// TestQuotaAdoptsWhatTheScopeHolds: a quota set on a scope that holds
// messages already, near and far, counts them once the adoption pass has
// run, then refuses past its limit; another scope's messages are left
// alone, and a second pass counts nothing again.
func TestQuotaAdoptsWhatTheScopeHolds(t *testing.T) {
	b := farSetup(t) // one shard, far tier on with a 3 s horizon
	var msgs []shard.Message
	for k := range 500 {
		m := shard.Message{ID: fmt.Sprintf("bill-%d", k), Topic: "billing.x", Body: []byte("x")} // near: due now (no scanner runs)
		if k%5 < 2 {
			m.At = farMid(time.Hour) // far
		}
		msgs = append(msgs, m)
	}
	for k := range 100 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("other-%d", k), Topic: "search.x", Body: []byte("x")})
	}
	rs, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if far := len(farRecords(t, b)); far != 200 {
		t.Fatalf("%d far, want 200", far)
	}
	if err := b.store.SetQuota(b.ctx, shard.Quota{Scope: "billing", Rules: "topic=billing.*", MaxPending: 1000}); err != nil {
		t.Fatal(err)
	}
	if q := quotaOf(t, b.store, "billing"); !q.Adopting || q.Count != 0 {
		t.Fatalf("a new quota: %+v, want adopting and 0 counted", q)
	}
	n, err := b.store.AdoptQuotas(b.ctx, b.m)
	if err != nil || n != 500 {
		t.Fatalf("adoption counted %d, %v; want the 500 billing messages held", n, err)
	}
	if _, err := b.store.MaintainQuotas(b.ctx, b.m, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if q := quotaOf(t, b.store, "billing"); q.Adopting || q.Count != 500 {
		t.Fatalf("after the adoption: %+v, want 500 counted", q)
	}
	if n, err := b.store.AdoptQuotas(b.ctx, b.m); err != nil || n != 0 {
		t.Fatalf("a second pass counted %d, %v", n, err)
	}
	msgs = msgs[:0]
	for k := range 600 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("new-%d", k), Topic: "billing.y", Body: []byte("x")})
	}
	rs, err = b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil && !errors.Is(err, shard.ErrQuota) {
		t.Fatal(err)
	}
	stored := 0
	for _, r := range rs {
		if r.Err == nil {
			stored++
		} else if !errors.Is(r.Err, shard.ErrQuota) {
			t.Fatal(r.Err)
		}
	}
	if stored != 500 {
		t.Fatalf("%d of 600 stored past the 500 adopted, want 500 (the quota is 1000)", stored)
	}
}
