package shard_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// TestMovePageRacesTheSource: a move of 3,000 messages from one namespace
// to another, page by page, while the source cancels 300 of them and
// reschedules 300, and a producer has written 100 of them to the target
// too. At the end every message is in exactly one place: a cancelled one
// nowhere, a rescheduled one at its new time (on whichever side the move
// left it), one written to both sides once, on the target; what falls due
// within the margin stays on the source; every other message is on the
// target as it was.
func TestMovePageRacesTheSource(t *testing.T) {
	ctx := t.Context()
	_, src, dst := moveStores(t)
	from := shard.NewProducer(src, fixed(4), shard.ProducerOptions{})
	to := shard.NewProducer(dst, fixed(4), shard.ProducerOptions{})
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var msgs []shard.Message
	for j := range 3000 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("m-%04d", j), Topic: "t", Body: []byte("x"), At: base.Add(time.Duration(j) * time.Millisecond)})
	}
	for j := range 20 { // within the margin: the source's to publish
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("soon-%d", j), Topic: "t", Body: []byte("x"), Delay: 20 * time.Second})
	}
	for k := 0; k < len(msgs); k += 500 {
		if _, err := from.EnqueueBatch(ctx, msgs[k:min(k+500, len(msgs))]); err != nil {
			t.Fatal(err)
		}
	}
	for j := range 100 { // a producer that writes to both sides
		m := msgs[2000+j]
		m.Body = []byte("target's")
		if _, err := to.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cancelled, rescheduled := map[string]bool{}, map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() { // the source's own operations, racing the move
		for j := 0; j < 600; j++ {
			if j*5 >= 2000 && j*5 < 2100 {
				continue // written to both sides: a cancel on one side leaves the other's (the producer's to cancel too)
			}
			id := fmt.Sprintf("m-%04d", j*5)
			if j%2 == 0 {
				err := from.Cancel(ctx, id)
				mu.Lock()
				if err == nil {
					cancelled[id] = true
				}
				mu.Unlock()
				if err != nil && !errors.Is(err, shard.ErrNotFound) {
					t.Error(err)
				}
				continue
			}
			due, err := from.Reschedule(ctx, id, base.Add(2*time.Hour))
			mu.Lock()
			if err == nil {
				rescheduled[id] = due
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, shard.ErrNotFound) {
				t.Error(err)
			}
		}
	})
	var total shard.MoveResult
	for pass := 0; pass < 3; pass++ { // a pass after the races ends them
		if pass == 1 {
			wg.Wait()
		}
		for i := range 4 {
			cur := shard.ListCursor{}
			for more := true; more; {
				var r shard.MoveResult
				var err error
				r, cur, more, err = src.MovePage(ctx, i, cur, 97, to, shard.MoveOptions{Keep: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Left) > 0 {
					t.Fatalf("left: %v", r.Left)
				}
				total.Read, total.Moved, total.There, total.Changed = total.Read+r.Read, total.Moved+r.Moved, total.There+r.There, total.Changed+r.Changed
			}
		}
	}
	t.Logf("read %d, moved %d, there already %d, changed meanwhile %d; cancelled %d, rescheduled %d",
		total.Read, total.Moved, total.There, total.Changed, len(cancelled), len(rescheduled))
	for _, m := range msgs {
		a, errA := from.Inspect(ctx, m.ID)
		b, errB := to.Inspect(ctx, m.ID)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		onA, onB := a.State == shard.StateScheduled, b.State == shard.StateScheduled
		switch {
		case cancelled[m.ID]:
			if onA || onB {
				t.Errorf("%s was cancelled, yet scheduled (source %v, target %v)", m.ID, onA, onB)
			}
		case onA == onB:
			t.Errorf("%s: scheduled on the source %v and on the target %v, want exactly one", m.ID, onA, onB)
		case len(m.ID) > 5 && m.ID[:5] == "soon-":
			if !onA {
				t.Errorf("%s is due within the margin, yet moved", m.ID)
			}
		case !rescheduled[m.ID].IsZero():
			at := a.At
			if onB {
				at = b.At
			}
			if !at.Equal(rescheduled[m.ID]) {
				t.Errorf("%s rescheduled to %s, is due %s", m.ID, rescheduled[m.ID], at)
			}
		default:
			if !onB || !b.At.Equal(m.At) {
				t.Errorf("%s: on the target %v at %s, want at %s", m.ID, onB, b.At, m.At)
			}
		}
	}
	if total.There < 100 {
		t.Errorf("%d found on the target already, want the 100 written to both sides", total.There)
	}
}

// TestMoveFinishesAKilledBatch: a move that dies between a batch's copy
// and its removal from the source (a panic at the step, in place of a
// SIGKILL) leaves the batch on both sides and its ids in the shard's
// journal; the next MovePage of the shard finishes it first, even for
// messages now within its margin: the source's copies go, the target's
// stay, once each; one cancelled on the source since is cancelled on the
// target, one rescheduled since goes at its new time.
func TestMoveFinishesAKilledBatch(t *testing.T) {
	ctx := t.Context()
	rdb, src, dst := moveStores(t)
	from := shard.NewProducer(src, fixed(1), shard.ProducerOptions{})
	to := shard.NewProducer(dst, fixed(1), shard.ProducerOptions{})
	var msgs []shard.Message
	for j := range 50 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("k-%02d", j), Topic: "t", Body: []byte("x"), Delay: time.Hour})
	}
	if _, err := from.EnqueueBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the move did not reach its step")
			}
		}()
		_, _, _, _ = src.MovePage(ctx, 0, shard.ListCursor{}, 20, to,
			shard.MoveOptions{Keep: time.Minute, AtStep: func(string) { panic("killed") }})
	}()
	if n, err := rdb.Exists(ctx, shard.MoveJournalKey(src.Namespace(), 0)).Result(); err != nil || n != 1 {
		t.Fatalf("journal after the kill: %d, %v", n, err)
	}
	// Between the kill and the rerun the source cancels one of the batch
	// and reschedules another.
	if err := from.Cancel(ctx, "k-00"); err != nil {
		t.Fatal(err)
	}
	later, err := from.RescheduleAfter(ctx, "k-01", 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// A margin past every due time: the pass moves nothing more, the
	// journal's batch is finished all the same.
	r, _, _, err := src.MovePage(ctx, 0, shard.ListCursor{}, 20, to, shard.MoveOptions{Keep: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved+r.There != 19 || r.Changed != 1 {
		t.Errorf("finishing the journal: %+v, want 19 given up by the source and the cancelled one's copy cancelled", r)
	}
	for j, m := range msgs {
		a, _ := from.Inspect(ctx, m.ID)
		b, _ := to.Inspect(ctx, m.ID)
		onA, onB := a.State == shard.StateScheduled, b.State == shard.StateScheduled
		switch {
		case j == 0:
			if onA || onB {
				t.Errorf("%s was cancelled on the source after its copy, yet scheduled (source %v, target %v)", m.ID, onA, onB)
			}
		case j == 1 && !b.At.Equal(later):
			t.Errorf("%s rescheduled on the source after its copy to %s, is due %s on the target", m.ID, later, b.At)
		case j < 20 && (onA || !onB) || j >= 20 && (!onA || onB):
			t.Errorf("%s: on the source %v, on the target %v", m.ID, onA, onB)
		}
	}
	if n, _ := rdb.Exists(ctx, shard.MoveJournalKey(src.Namespace(), 0)).Result(); n != 0 {
		t.Errorf("the journal is still there")
	}
}

// TestMoveTakesTheFarTier: messages waiting in the far tier move with
// MoveFar, each record removed from the source only while its index still
// names the record read: one cancelled on the source between the copy and
// the removal has its copy cancelled, one rescheduled there stays at its
// new time (and goes over on the next call); a batch killed between copy
// and removal is finished from the journal, its far ids found far; an
// occurrence of a schedule is left to the source, counted.
func TestMoveTakesTheFarTier(t *testing.T) {
	ctx := t.Context()
	rdb, src, dst := moveStores(t)
	for _, st := range []*shard.Store{src, dst} {
		if err := st.EnableFar(ctx, shard.FarSettings{Horizon: 10 * time.Minute, BucketWidth: 10 * time.Minute, IndexSlots: 16, Since: 1}); err != nil {
			t.Fatal(err)
		}
	}
	from := shard.NewProducer(src, fixed(1), shard.ProducerOptions{})
	to := shard.NewProducer(dst, fixed(1), shard.ProducerOptions{})
	// At fixed times inside one bucket, whatever the clock: MoveFar lists
	// a bucket's records when it comes to the bucket, so with the 300
	// across a bucket's edge the source's changes at the third step below
	// could come before f-250's bucket was listed (then neither counts as
	// changed); and a delay ending at an edge can land in the next bucket
	// by Redis's clock, which places that message near.
	start := time.Now().Add(2 * time.Hour).Truncate(10 * time.Minute).Add(10 * time.Minute)
	var msgs []shard.Message
	for j := range 300 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("f-%03d", j), Topic: "t", Body: []byte(fmt.Sprint("far ", j)),
			At: start.Add(time.Duration(j) * time.Second), Attempts: j % 3})
	}
	res, err := from.EnqueueBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if _, err := from.UpsertSchedule(ctx, shard.Schedule{Name: "daily", Spec: "@daily", Message: shard.Message{Topic: "t"}}); err != nil {
		t.Fatal(err)
	}
	if info, _ := from.Inspect(ctx, "f-000"); !info.Far {
		t.Fatalf("f-000 is not far: %+v", info)
	}
	// Killed after the copy of the first batch of 100.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the move did not reach its step")
			}
		}()
		_, _ = src.MoveFar(ctx, 0, 100, to, shard.MoveOptions{Keep: time.Minute, AtStep: func(string) { panic("killed") }})
	}()
	// Between the kill and the rerun, and between the rerun's copies and
	// removals, the source cancels and reschedules.
	if err := from.Cancel(ctx, "f-000"); err != nil {
		t.Fatal(err)
	}
	step := 0
	var later time.Time
	r, err := src.MoveFar(ctx, 0, 100, to, shard.MoveOptions{Keep: time.Minute, AtStep: func(string) {
		step++
		if step == 3 { // the second batch after the journal's: f-200 .. f-299
			if err := from.Cancel(ctx, "f-250"); err != nil {
				t.Error(err)
			}
			if later, err = from.RescheduleAfter(ctx, "f-251", 5*time.Hour); err != nil {
				t.Error(err)
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved+r.There != 297 || r.Changed != 3 || r.Occurrences != 0 {
		t.Errorf("MoveFar: %+v, want 297 moved, 3 changed (cancelled before the rerun, cancelled and rescheduled during it)", r)
	}
	r, err = src.MoveFar(ctx, 0, 100, to, shard.MoveOptions{Keep: time.Minute})
	if err != nil || r.Moved != 1 {
		t.Errorf("MoveFar again: %+v %v, want the rescheduled one moved", r, err)
	}
	// The due set: the schedule's pending occurrence stays, counted.
	r, _, _, err = src.MovePage(ctx, 0, shard.ListCursor{}, 100, to, shard.MoveOptions{Keep: time.Minute})
	if err != nil || r.Occurrences != 1 || len(r.Left) != 0 {
		t.Errorf("MovePage of the due set: %+v %v, want the one occurrence left to the source", r, err)
	}
	for j, m := range msgs {
		a, _ := from.Inspect(ctx, m.ID)
		b, _ := to.Inspect(ctx, m.ID)
		switch {
		case j == 0 || j == 250:
			if a.State == shard.StateScheduled || b.State == shard.StateScheduled {
				t.Errorf("%s was cancelled on the source, yet scheduled (source %s, target %s)", m.ID, a.State, b.State)
			}
		case a.State == shard.StateScheduled || b.State != shard.StateScheduled:
			t.Errorf("%s: source %s, target %s", m.ID, a.State, b.State)
		case j == 251 && !b.At.Equal(later):
			t.Errorf("%s rescheduled on the source to %s during the move, is due %s on the target", m.ID, later, b.At)
		case j != 251 && (!b.At.Equal(res[j].Due) || b.Attempts != j%3 || !b.Far || string(b.Envelope.Body) != string(m.Body)):
			t.Errorf("%s on the target: due %s far %v attempts %d body %q, want due %s far, %d attempts, %q",
				m.ID, b.At, b.Far, b.Attempts, b.Envelope.Body, res[j].Due, j%3, m.Body)
		}
	}
	if n, _ := rdb.Exists(ctx, shard.MoveJournalKey(src.Namespace(), 0)).Result(); n != 0 {
		t.Errorf("the journal is still there")
	}
}

// moveStores is a parallel test's Redis client and two stores of it, the
// source and the target of a move: two namespaces of the test.
func moveStores(t *testing.T) (*redis.Client, *shard.Store, *shard.Store) {
	t.Helper()
	shardtest.Require(t, srvErr)
	t.Parallel()
	rdb := srv.Client(t)
	ns := shardtest.Namespace(t)
	src, err := shard.NewStore(rdb, ns+"-a")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := shard.NewStore(rdb, ns+"-b")
	if err != nil {
		t.Fatal(err)
	}
	return rdb, src, dst
}
