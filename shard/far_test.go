package shard_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// farSetup is setup (one shard) with the far tier on at once: a horizon
// of 3 s and buckets of 1 s, so that tests compress hours into seconds.
func farSetup(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, 1)
	if err := b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: 3 * time.Second, BucketWidth: time.Second, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	return b
}

// farMid is a due time about d from now in the middle of a farSetup
// bucket (a second): a batch's delay ending at a bucket's edge can land
// in the next bucket by Redis's clock, and is then placed near (near is
// always right), which a test counting far records must not meet.
func farMid(d time.Duration) time.Time {
	return time.Now().Add(d).Truncate(time.Second).Add(500 * time.Millisecond)
}

// farRecords decodes every record of shard 0's far buckets.
func farRecords(t *testing.T, b *bundle) map[string]shard.FarRecord {
	t.Helper()
	ns := b.store.Namespace()
	out := map[string]shard.FarRecord{}
	bs, err := b.rdb.ZRangeWithScores(b.ctx, shard.FarDirKey(ns, 0), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range bs {
		bk, _ := strconv.ParseInt(z.Member.(string), 10, 64)
		recs, err := b.rdb.LRange(b.ctx, shard.FarBucketKey(ns, 0, bk), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range recs {
			rs, bad := shard.DecodeFarRecords([]byte(raw), int64(z.Score))
			if len(bad) > 0 || len(rs) != 1 {
				t.Fatalf("a record the placement script wrote does not decode: %v", bad)
			}
			out[rs[0].ID] = rs[0]
		}
	}
	return out
}

// A message due beyond the horizon waits in its bucket, not in the due
// set; its id is taken (enqueue, batch) and can be replaced or cancelled
// there; once its bucket comes within the horizon the promoter moves what
// is live into the due set at its own due time, and nothing else.
func TestFarMessageWaitsFarThenIsPromoted(t *testing.T) {
	b := farSetup(t)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	near := b.enqueue(t, "near", time.Second)
	f1 := b.enqueue(t, "f1", 6*time.Second)
	b.enqueue(t, "f2", 6500*time.Millisecond)
	b.enqueue(t, "f3", 7*time.Second)
	if b.rdb.ZScore(b.ctx, ks.Due, "near").Val() != float64(near.Due.UnixMilli()) {
		t.Fatal("a message within the horizon is not in the due set")
	}
	for _, id := range []string{"f1", "f2", "f3"} {
		if b.rdb.ZScore(b.ctx, ks.Due, id).Err() == nil || b.rdb.HExists(b.ctx, ks.Msg, id).Val() {
			t.Fatalf("%s, due beyond the horizon, is near", id)
		}
	}
	recs := farRecords(t, b)
	if r, ok := recs["f1"]; !ok || r.DueMs != f1.Due.UnixMilli() {
		t.Fatalf("f1's record: %+v, want due %d", r, f1.Due.UnixMilli())
	}
	info, err := b.prod.Inspect(b.ctx, "f1")
	if err != nil || info.State != shard.StateScheduled || !info.Far || !info.At.Equal(f1.Due) || info.Envelope == nil ||
		string(info.Envelope.Body) != "body of f1" {
		t.Fatalf("inspect of a far message: %+v, %v", info, err)
	}
	st, err := b.store.Stats(b.ctx, 1)
	if err != nil || st[0].Far != 3 || st[0].Scheduled != 1 {
		t.Fatalf("stats: %+v, %v; want 3 far and 1 near", st, err)
	}
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "f1", Topic: "t", Body: []byte("again"), Delay: time.Minute}); !errors.Is(err, shard.ErrDuplicate) {
		t.Fatalf("enqueue of an id waiting far: %v, want ErrDuplicate", err)
	}
	res, err := b.prod.EnqueueBatch(b.ctx, []shard.Message{{ID: "f1", Topic: "t", Body: []byte("x"), Delay: time.Second}})
	if err != nil || !errors.Is(res[0].Err, shard.ErrDuplicate) {
		t.Fatalf("batch enqueue near of an id waiting far: %v, %v; want ErrDuplicate", err, res[0].Err)
	}
	if _, err := b.prod.Upsert(b.ctx, shard.Message{ID: "f2", Topic: "t", Body: []byte("v2"), Delay: 6500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := b.prod.Cancel(b.ctx, "f3"); err != nil {
		t.Fatalf("cancel of a far message: %v", err)
	}
	if err := b.prod.Cancel(b.ctx, "f3"); !errors.Is(err, shard.ErrNotFound) {
		t.Fatalf("second cancel: %v, want ErrNotFound", err)
	}
	if live := b.rdb.HGet(b.ctx, shard.FarMetaKeyOf(b.store.Namespace(), 0), "live").Val(); live != "2" {
		t.Fatalf("live far messages %s, want 2", live)
	}

	// Promotion: once the buckets start within the horizon.
	var moved int
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		p, err := b.store.PromoteDue(b.ctx, 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		moved += p.Moved
		return b.rdb.ZCard(b.ctx, shard.FarDirKey(b.store.Namespace(), 0)).Val() == 0
	}, func() string { return "far buckets left" })
	if moved != 2 {
		t.Fatalf("promoted %d, want 2 (f1 and f2's replacement)", moved)
	}
	if got := b.rdb.ZScore(b.ctx, ks.Due, "f1").Val(); got != float64(f1.Due.UnixMilli()) {
		t.Fatalf("f1 promoted due %v, want %d", got, f1.Due.UnixMilli())
	}
	env, err := shard.DecodeEnvelope([]byte(b.rdb.HGet(b.ctx, ks.Msg, "f2").Val()))
	if err != nil || string(env.Body) != "v2" {
		t.Fatalf("f2 promoted with body %q (%v), want the upserted v2", env.Body, err)
	}
	if b.rdb.ZScore(b.ctx, ks.Due, "f3").Err() == nil {
		t.Fatal("a cancelled far message was promoted")
	}
	if live := b.rdb.HGet(b.ctx, shard.FarMetaKeyOf(b.store.Namespace(), 0), "live").Val(); live != "0" {
		t.Fatalf("live far messages %s after promotion, want 0", live)
	}
	// Near now: an enqueue of the id is a duplicate there.
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "f1", Topic: "t", Body: []byte("x"), Delay: time.Minute}); !errors.Is(err, shard.ErrDuplicate) {
		t.Fatalf("enqueue of a promoted id: %v, want ErrDuplicate", err)
	}
}

// PromoteOverdue, what every process that does not own a shard calls,
// leaves a bucket to its owner until it is within a third of the horizon,
// then promotes it before its start: promotion does not wait on an owner
// that died.
func TestFarOverduePromotionByAnyProcess(t *testing.T) {
	b := farSetup(t) // horizon 3 s, buckets of 1 s
	ns := b.store.Namespace()
	at := time.Now().Add(6 * time.Second).Truncate(time.Second).Add(500 * time.Millisecond)
	if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "o", Topic: "t", Body: []byte("o"), At: at}); err != nil {
		t.Fatal(err)
	}
	start := at.Truncate(time.Second)
	if p, err := b.store.PromoteOverdue(b.ctx, 0, 4); err != nil || p.Moved != 0 {
		t.Fatalf("overdue promotion of a bucket more than a third of the horizon ahead: %+v, %v; want nothing", p, err)
	}
	var moved shard.Promotion
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		p, err := b.store.PromoteOverdue(b.ctx, 0, 4)
		if err != nil {
			t.Fatal(err)
		}
		if p.Moved > 0 {
			moved = p
			if now := time.Now(); start.Sub(now) > time.Second {
				t.Errorf("promoted %s before its bucket's start, more than a third of the horizon", start.Sub(now))
			}
		}
		return b.rdb.ZCard(b.ctx, shard.FarDirKey(ns, 0)).Val() == 0
	}, func() string { return "the overdue bucket is still far" })
	if moved.Moved != 1 || moved.AheadMin <= 0 {
		t.Fatalf("overdue promotion: %+v; want the message moved before its bucket's start", moved)
	}
	if b.rdb.ZScore(b.ctx, shard.ShardKeys(ns, 0).Due, "o").Val() != float64(at.UnixMilli()) {
		t.Fatal("the promoted message is not due at its time")
	}
}

// A promote call made again (a promoter that crashed after it, and the
// next one) moves nothing twice; a message cancelled between the two is
// not brought back.
func TestFarPromotionRerunDoublesNothing(t *testing.T) {
	b := farSetup(t)
	ns := b.store.Namespace()
	at := time.Now().Add(10 * time.Second).Truncate(time.Second).Add(500 * time.Millisecond)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Body: []byte(id), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	bk := at.UnixMilli() / 1000
	raw := b.rdb.LRange(b.ctx, shard.FarBucketKey(ns, 0, bk), 0, -1).Val()
	if len(raw) != 3 {
		t.Fatalf("%d records in bucket %d, want 3", len(raw), bk)
	}
	if err := b.prod.Cancel(b.ctx, "c"); err != nil {
		t.Fatal(err)
	}
	p, err := b.store.PromoteRecords(b.ctx, 0, bk, raw)
	if err != nil || p.Moved != 2 || p.Skipped != 1 {
		t.Fatalf("first promote: %+v, %v; want 2 moved, 1 skipped (cancelled)", p, err)
	}
	p, err = b.store.PromoteRecords(b.ctx, 0, bk, raw)
	if err != nil || p.Moved != 0 || p.Skipped != 3 {
		t.Fatalf("promote again: %+v, %v; want nothing moved", p, err)
	}
	ks := shard.ShardKeys(ns, 0)
	if n := b.rdb.ZCard(b.ctx, ks.Due).Val(); n != 2 {
		t.Fatalf("%d due, want 2", n)
	}
	// Sealed: an enqueue for that time now goes near.
	s, err := b.prod.Enqueue(b.ctx, shard.Message{ID: "d", Topic: "t", Body: []byte("d"), At: at})
	if err != nil || b.rdb.ZScore(b.ctx, ks.Due, "d").Val() != float64(s.Due.UnixMilli()) {
		t.Fatalf("an enqueue into a sealed bucket: %v; want it near", err)
	}
}

// A record that does not decode goes to the dead set with its reason;
// the rest of its bucket is promoted.
func TestFarCorruptRecordIsDeadTheRestPromoted(t *testing.T) {
	b := farSetup(t)
	ns := b.store.Namespace()
	at := time.Now().Add(10 * time.Second).Truncate(time.Second).Add(500 * time.Millisecond)
	for _, id := range []string{"ok1", "ok2"} {
		if _, err := b.prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Body: []byte(id), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	bk := at.UnixMilli() / 1000
	// A record whose id reads and whose due offset does not (a varint
	// that never ends), indexed as a live record of the bucket.
	body := append(binary.AppendUvarint(nil, 3), "bad"...)
	body = append(body, 0xff, 0xff)
	bad := append(binary.AppendUvarint(nil, uint64(len(body))), body...)
	must(t, b.rdb.RPush(b.ctx, shard.FarBucketKey(ns, 0, bk), bad).Err())
	must(t, b.rdb.HSet(b.ctx, shard.FarIndexKey(ns, 0, "bad", 16), "bad", strconv.FormatInt(bk, 10)+":99").Err())
	raw := b.rdb.LRange(b.ctx, shard.FarBucketKey(ns, 0, bk), 0, -1).Val()
	p, err := b.store.PromoteRecords(b.ctx, 0, bk, raw)
	if err != nil || p.Moved != 2 || p.Dead != 1 {
		t.Fatalf("promote: %+v, %v; want 2 moved, 1 dead", p, err)
	}
	ks := shard.ShardKeys(ns, 0)
	if why := b.rdb.HGet(b.ctx, ks.Reason, "bad").Val(); !strings.HasPrefix(why, "corrupt far record") {
		t.Fatalf("dead reason %q", why)
	}
	if b.rdb.ZScore(b.ctx, ks.Dead, "bad").Err() != nil {
		t.Fatal("the corrupt record is not in the dead set")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A batch places far what is beyond the horizon and near the rest, in
// one round trip each; ids are checked across both.
func TestFarBatchPlacesBoth(t *testing.T) {
	b := farSetup(t)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	var msgs []shard.Message
	mid := farMid(time.Minute)
	for j := range 100 {
		msgs = append(msgs, shard.Message{ID: "far-" + strconv.Itoa(j), Topic: "t", Body: []byte("x"), At: mid.Add(time.Duration(j) * time.Second)})
	}
	for j := range 10 {
		msgs = append(msgs, shard.Message{ID: "near-" + strconv.Itoa(j), Topic: "t", Body: []byte("x"), Delay: time.Second})
	}
	res, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil || r.Due.IsZero() {
			t.Fatalf("%s: %v (due %v)", r.ID, r.Err, r.Due)
		}
	}
	if n := len(farRecords(t, b)); n != 100 {
		t.Fatalf("%d far records, want 100", n)
	}
	if n := b.rdb.ZCard(b.ctx, ks.Due).Val(); n != 10 {
		t.Fatalf("%d near, want 10", n)
	}
	res, err = b.prod.EnqueueBatch(b.ctx, []shard.Message{msgs[0], msgs[100]})
	if err != nil || !errors.Is(res[0].Err, shard.ErrDuplicate) || !errors.Is(res[1].Err, shard.ErrDuplicate) {
		t.Fatalf("a batch again: %v, %v, %v; want both duplicates", err, res[0].Err, res[1].Err)
	}
	// Upserting a far message to near, and a near one to far.
	msgs[0].At, msgs[0].Delay = time.Time{}, time.Second
	msgs[100].Delay, msgs[100].At = 0, mid.Add(time.Hour)
	res, err = b.prod.UpsertBatch(b.ctx, []shard.Message{msgs[0], msgs[100]})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("upsert batch: %v, %v, %v", err, res[0].Err, res[1].Err)
	}
	recs := farRecords(t, b)
	if b.rdb.ZScore(b.ctx, ks.Due, "far-0").Err() != nil || b.rdb.ZScore(b.ctx, ks.Due, "near-0").Err() == nil {
		t.Fatal("upserts did not move far-0 near and near-0 far")
	}
	if r, ok := recs["near-0"]; !ok || r.DueMs != res[1].Due.UnixMilli() {
		t.Fatalf("near-0's far record %+v, want due %v", r, res[1].Due)
	}
	if live := b.rdb.HGet(b.ctx, shard.FarMetaKeyOf(b.store.Namespace(), 0), "live").Val(); live != "100" {
		t.Fatalf("live far %s, want 100", live)
	}
}

// Records written by the placement script decode with the Go codec for
// every length of varint: due offsets up to a 10-minute bucket's width,
// sequence numbers across 2^21 and 2^28 (the script's branches) and past
// 2^32 (its loop).
func TestFarRecordsFromLuaDecode(t *testing.T) {
	b := setup(t, 1)
	if err := b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: 10 * time.Minute, BucketWidth: 10 * time.Minute, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(24 * time.Hour).Truncate(10 * time.Minute)
	want := map[string]int64{}
	after := map[string]uint64{} // the sequence each record must be past
	for _, seq := range []uint64{100, 1<<21 - 4, 1<<28 - 4, 4294967000} {
		must(t, b.rdb.HSet(b.ctx, shard.FarMetaKeyOf(b.store.Namespace(), 0), "seq", seq).Err())
		var msgs []shard.Message
		for j, off := range []time.Duration{0, time.Millisecond, 127 * time.Millisecond, 128 * time.Millisecond, 16383 * time.Millisecond,
			16384 * time.Millisecond, 2097151 * time.Millisecond, 10*time.Minute - time.Millisecond} {
			if off >= 10*time.Minute {
				continue
			}
			id := fmt.Sprintf("s%d-v%d%s", seq, j, strings.Repeat("i", j*20)) // ids up to 150 bytes: two-byte lengths
			msgs = append(msgs, shard.Message{ID: id, Topic: "t", Body: []byte(strings.Repeat("b", j*40)), At: start.Add(off)})
			want[id], after[id] = start.Add(off).UnixMilli(), seq
		}
		res, err := b.prod.EnqueueBatch(b.ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			must(t, r.Err)
		}
	}
	recs := farRecords(t, b)
	for id, due := range want {
		r, ok := recs[id]
		if !ok || r.DueMs != due || r.Seq <= after[id] || r.Seq > after[id]+8 {
			t.Errorf("%s: record %+v, want due %d and a sequence just past %d", id, r, due, after[id])
		}
		if env, err := shard.DecodeEnvelope(r.Envelope); err != nil || len(env.Body) == 0 && !strings.HasSuffix(id, "-v0") {
			t.Errorf("%s: envelope %v", id, err)
		}
	}
}

// Compaction swaps each run of 256 raw records for one compressed block;
// promotion reads blocks and raw records alike, skipping what was
// cancelled or replaced inside a block.
func TestFarCompactionThenPromotion(t *testing.T) {
	b := setup(t, 1)
	if err := b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: time.Second, BucketWidth: time.Second, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	ns := b.store.Namespace()
	at := time.Now().Add(4 * time.Second).Truncate(time.Second).Add(500 * time.Millisecond)
	var msgs []shard.Message
	for j := range 600 {
		msgs = append(msgs, shard.Message{ID: "c" + strconv.Itoa(j), Topic: "t", Body: []byte(`{"user":` + strconv.Itoa(j) + `,"event":"trial-end"}`), At: at})
	}
	res, err := b.prod.EnqueueBatch(b.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		must(t, r.Err)
	}
	bk := at.UnixMilli() / 1000
	n, err := b.store.CompactFar(b.ctx, 0, 16)
	if err != nil || n != 2 {
		t.Fatalf("compacted %d blocks (%v), want 2", n, err)
	}
	if z, l := b.rdb.LLen(b.ctx, shard.FarBlocksKey(ns, 0, bk)).Val(), b.rdb.LLen(b.ctx, shard.FarBucketKey(ns, 0, bk)).Val(); z != 2 || l != 88 {
		t.Fatalf("%d blocks and %d raw records, want 2 and 88", z, l)
	}
	if n, err := b.store.CompactFar(b.ctx, 0, 16); err != nil || n != 0 {
		t.Fatalf("compacted again: %d, %v; want nothing (88 raw records)", n, err)
	}
	for _, id := range []string{"c5", "c300", "c599"} { // in the first block, the second, and raw
		info, err := b.prod.Inspect(b.ctx, id)
		if err != nil || !info.Far || !info.At.Equal(at.Truncate(time.Millisecond)) || info.Envelope == nil {
			t.Fatalf("inspect %s: %+v, %v", id, info, err)
		}
	}
	must(t, b.prod.Cancel(b.ctx, "c3"))   // in the first block
	must(t, b.prod.Cancel(b.ctx, "c599")) // raw
	msgs[10].Body = []byte("replaced")    // in the first block, replaced near
	msgs[10].At = time.Time{}
	msgs[10].Delay = 500 * time.Millisecond
	if _, err := b.prod.Upsert(b.ctx, msgs[10]); err != nil {
		t.Fatal(err)
	}
	var moved int
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		p, err := b.store.PromoteDue(b.ctx, 0, 8)
		must(t, err)
		moved += p.Moved
		return b.rdb.ZCard(b.ctx, shard.FarDirKey(ns, 0)).Val() == 0
	}, func() string { return "bucket not promoted" })
	ks := shard.ShardKeys(ns, 0)
	if moved != 597 || b.rdb.ZCard(b.ctx, ks.Due).Val() != 598 {
		t.Fatalf("promoted %d (due set %d), want 597 and 598 with the replaced one", moved, b.rdb.ZCard(b.ctx, ks.Due).Val())
	}
	if b.rdb.ZScore(b.ctx, ks.Due, "c3").Err() == nil || b.rdb.ZScore(b.ctx, ks.Due, "c599").Err() == nil {
		t.Fatal("a cancelled message was promoted")
	}
	env, err := shard.DecodeEnvelope([]byte(b.rdb.HGet(b.ctx, ks.Msg, "c10").Val()))
	if err != nil || string(env.Body) != "replaced" {
		t.Fatalf("c10: %q, %v; want the replacement", env.Body, err)
	}
	if b.rdb.Exists(b.ctx, shard.FarBlocksKey(ns, 0, bk), shard.FarBucketKey(ns, 0, bk)).Val() != 0 {
		t.Fatal("the bucket's keys outlived its promotion")
	}
}

// Rescheduling a far message moves it to its new time: near when that is
// within the horizon, into another bucket when not; its envelope stays.
func TestFarReschedule(t *testing.T) {
	b := farSetup(t)
	ks := shard.ShardKeys(b.store.Namespace(), 0)
	b.enqueue(t, "r1", 20*time.Second)
	b.enqueue(t, "r2", 20*time.Second)
	b.enqueue(t, "r3", 20*time.Second)
	due, err := b.prod.RescheduleAfter(b.ctx, "r1", time.Second)
	if err != nil || b.rdb.ZScore(b.ctx, ks.Due, "r1").Val() != float64(due.UnixMilli()) {
		t.Fatalf("reschedule far to near: %v, %v", due, err)
	}
	later := time.Now().Add(40 * time.Second).Truncate(time.Millisecond)
	if due, err := b.prod.Reschedule(b.ctx, "r2", later); err != nil || !due.Equal(later) {
		t.Fatalf("reschedule far to far: %v, %v", due, err)
	}
	info, err := b.prod.Inspect(b.ctx, "r2")
	if err != nil || !info.Far || !info.At.Equal(later) || info.Envelope == nil || string(info.Envelope.Body) != "body of r2" {
		t.Fatalf("r2 after its reschedule: %+v, %v", info, err)
	}
	if info, err := b.prod.Inspect(b.ctx, "r1"); err != nil || info.Far || info.State != shard.StateScheduled || string(info.Envelope.Body) != "body of r1" {
		t.Fatalf("r1 after its reschedule: %+v, %v", info, err)
	}
	must(t, b.prod.Cancel(b.ctx, "r3"))
	if _, err := b.prod.RescheduleAfter(b.ctx, "r3", time.Minute); !errors.Is(err, shard.ErrNotFound) {
		t.Fatalf("reschedule of a cancelled far message: %v, want ErrNotFound", err)
	}
	if st, err := b.store.Stats(b.ctx, 1); err != nil || st[0].Far != 1 || st[0].Scheduled != 1 {
		t.Fatalf("stats: %+v, %v; want 1 far (r2) and 1 near (r1)", st, err)
	}
}

// A namespace's limit of pending messages counts far ones, near and far
// enqueues alike.
func TestFarMessagesCountInTheLimit(t *testing.T) {
	b := farSetup(t)
	prod := shard.NewProducer(b.store, fixed(1), shard.ProducerOptions{MaxPending: 3})
	for _, id := range []string{"a", "b", "c"} {
		if _, err := prod.Enqueue(b.ctx, shard.Message{ID: id, Topic: "t", Body: []byte("x"), Delay: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := prod.Enqueue(b.ctx, shard.Message{ID: "near", Topic: "t", Body: []byte("x"), Delay: time.Second}); !errors.Is(err, shard.ErrCapacity) {
		t.Fatalf("a near enqueue with 3 far of 3: %v, want ErrCapacity", err)
	}
	res, err := prod.EnqueueBatch(b.ctx, []shard.Message{{ID: "near2", Topic: "t", Body: []byte("x"), Delay: time.Second},
		{ID: "far2", Topic: "t", Body: []byte("x"), Delay: time.Minute}})
	if err != nil || !errors.Is(res[0].Err, shard.ErrCapacity) || !errors.Is(res[1].Err, shard.ErrCapacity) {
		t.Fatalf("a batch with 3 far of 3: %v, %v, %v; want ErrCapacity for both", err, res[0].Err, res[1].Err)
	}
}

// The due profile counts far messages where they fall due.
func TestFarMessagesInTheDueProfile(t *testing.T) {
	b := setup(t, 2)
	if err := b.store.EnableFar(b.ctx, shard.FarSettings{Horizon: time.Minute, BucketWidth: time.Minute, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	prod := shard.NewProducer(b.store, fixed(2), shard.ProducerOptions{})
	var msgs []shard.Message
	for j := range 30 {
		msgs = append(msgs, shard.Message{ID: "p" + strconv.Itoa(j), Topic: "t", Body: []byte("x"), Delay: 3*time.Hour + 10*time.Second})
	}
	for j := range 20 {
		msgs = append(msgs, shard.Message{ID: "q" + strconv.Itoa(j), Topic: "u", Body: []byte("x"), Delay: 3*time.Hour + 10*time.Second})
	}
	msgs = append(msgs, shard.Message{ID: "soon", Topic: "t", Body: []byte("x"), Delay: 30 * time.Second})
	res, err := prod.EnqueueBatch(b.ctx, msgs)
	must(t, err)
	for _, r := range res {
		must(t, r.Err)
	}
	st, err := b.store.Stats(b.ctx, 2)
	must(t, err)
	if st[0].Far+st[1].Far != 50 {
		t.Fatalf("far %d, want 50", st[0].Far+st[1].Far)
	}
	p, err := b.store.DueProfile(b.ctx, 2, time.Hour, 6)
	must(t, err)
	// (hour buckets from now rounded down: 30 s ahead is the next one in
	// the last 30 s of an hour, 3 h 10 s ahead is the fourth or fifth)
	if p.Counts[0]+p.Counts[1] != 1 || p.Counts[3]+p.Counts[4] != 50 {
		t.Fatalf("profile by hour %v, want the near one in the first hour and the 50 far ones three hours ahead", p.Counts)
	}
	// A topic's profile: its share of the far buckets, from their records
	// (here every record is read, so the estimate is the count).
	tp, err := b.store.TopicProfile(b.ctx, 2, "t", time.Hour, 6)
	must(t, err)
	if tp.Counts[0]+tp.Counts[1] != 1 || tp.Counts[3]+tp.Counts[4] != 30 || tp.Sampled[3]+tp.Sampled[4] != 50 {
		t.Fatalf("topic t by hour %v (sampled %v), want 1 now and 30 three hours ahead, from 50 records", tp.Counts, tp.Sampled)
	}
}
