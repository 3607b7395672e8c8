package shard_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

func TestFairClaimSetsABacklogApart(t *testing.T) {
	b := setup(t, 1)
	exerciseFairClaim(t, b.store)
}

func TestFairClaimOnCluster(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	c, err := shardtest.StartCluster(3, shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := shard.NewStore(rdb, "fair")
	if err != nil {
		t.Fatal(err)
	}
	exerciseFairClaim(t, st)
}

// exerciseFairClaim: a shard whose earliest due message is late sets its
// due messages apart by class, what fell due last first, leasing nothing;
// while its backlog sets hold anything it stays behind; the backlogs
// release in due order; a message in a backlog is inspected, cancelled
// and rescheduled as anywhere else; once they are empty the claims lease
// in due order again.
func exerciseFairClaim(t *testing.T, st *shard.Store) {
	ctx := t.Context()
	prod := shard.NewProducer(st, fixed(1), shard.ProducerOptions{})
	for _, c := range []shard.Class{
		{Name: "urgent", Topics: []string{"auth.*"}, Weight: 3},
		{Name: "bulk", Topics: []string{"campaign"}, Weight: 1},
	} {
		if _, err := st.SetClass(ctx, c, "test"); err != nil {
			t.Fatal(err)
		}
	}
	classes, err := st.Classes(ctx)
	if err != nil || len(classes) != 2 {
		t.Fatalf("classes: %+v, %v", classes, err)
	}
	plan := shard.NewClassPlan(classes)
	if got := plan.Of("auth.code") + " " + plan.Of("campaign") + " " + plan.Of("other"); got != "urgent bulk default" {
		t.Errorf("classes of topics: %s", got)
	}
	past := time.Now().Add(-time.Minute)
	var msgs []shard.Message
	for j := range 300 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("c%03d", j), Topic: "campaign", At: past.Add(time.Duration(j) * time.Millisecond)})
	}
	for j := range 2 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("o%d", j), Topic: "other", At: past})
	}
	for j := range 5 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("a%d", j), Topic: "auth.code", At: time.Now().Add(-10 * time.Millisecond)})
	}
	if _, err := prod.EnqueueBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	claim := func() shard.ClaimResult {
		t.Helper()
		res, errs := st.ClaimFair(ctx, nil, []int{0}, 8, time.Minute, nil, plan)
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		return res[0]
	}
	// The first claim sets the latest apart first: the urgent messages
	// reach their class at once, however long the backlog before them.
	r := claim()
	if len(r.Msgs) != 0 || r.Held != 128 {
		t.Fatalf("first claim behind: leased %d, set %d apart; want 0 and 128", len(r.Msgs), r.Held)
	}
	info, err := st.Inspect(ctx, 0, "a3")
	if err != nil || info.State != shard.StateBacklog || info.Class != "urgent" {
		t.Errorf("inspect a message set apart: %+v, %v; want in the backlog of urgent", info, err)
	}
	held := r.Held
	for r.Held > 0 {
		r = claim()
		if len(r.Msgs) != 0 {
			t.Fatalf("a claim behind leased %d", len(r.Msgs))
		}
		held += r.Held
	}
	if held != 307 {
		t.Errorf("set apart %d, want 307", held)
	}
	sts, err := st.ClassStatuses(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, s := range sts {
		got[s.Name] = s.Backlog
	}
	if fmt.Sprint(got) != "map[bulk:300 default:2 urgent:5]" {
		t.Errorf("backlogs: %v", got)
	}
	// Cancel and reschedule find a message where it waits.
	if err := prod.Cancel(ctx, "c007"); err != nil {
		t.Errorf("cancel in a backlog: %v", err)
	}
	if _, err := prod.RescheduleAfter(ctx, "c008", time.Hour); err != nil {
		t.Errorf("reschedule in a backlog: %v", err)
	}
	if info, err := st.Inspect(ctx, 0, "c008"); err != nil || info.State != shard.StateScheduled {
		t.Errorf("rescheduled out of a backlog: %+v, %v", info, err)
	}
	// A bulk cancel by topic and prefix reaches what waits in a backlog
	// (its walk reads the topics of a backlog of many).
	f := shard.BulkFilter{Topic: "campaign", Prefix: "c1"}
	if n, err := st.CountMatching(ctx, 1, f); err != nil || n != 100 {
		t.Errorf("count c1.. of campaign: %d, %v; want 100", n, err)
	}
	if p, err := st.BulkCancel(ctx, 1, f, 100, nil); err != nil || p.Done != 100 {
		t.Errorf("bulk cancel c1.. of campaign: %+v, %v; want 100 done", p, err)
	}
	if n, err := st.CountMatching(ctx, 1, shard.BulkFilter{Topic: "other"}); err != nil || n != 2 {
		t.Errorf("count of topic other: %d, %v; want 2", n, err)
	}
	// Still behind while the backlogs hold anything: a message due now is
	// set apart too.
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "fresh", Topic: "auth.code"}); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool { return claim().Held == 1 },
		func() string { return "the message due now was not set apart" })
	hc, err := st.ClaimBacklog(ctx, 0, "urgent", 10, time.Minute)
	if err != nil || len(hc.Msgs) != 6 || hc.Msgs[0].ID != "a0" || hc.Msgs[5].ID != "fresh" || hc.Left != 0 {
		t.Errorf("release urgent: %+v, %v; want a0..a4 then fresh", hc, err)
	}
	var order []string
	for {
		hc, err := st.ClaimBacklog(ctx, 0, "bulk", 64, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range hc.Msgs {
			order = append(order, m.ID)
		}
		if hc.Left == 0 {
			break
		}
	}
	if len(order) != 198 || !slices.IsSorted(order) {
		t.Errorf("bulk released %d (want 198), in due order: %v", len(order), slices.IsSorted(order))
	}
	if hc, err := st.ClaimBacklog(ctx, 0, "default", 64, time.Minute); err != nil || len(hc.Msgs) != 2 {
		t.Errorf("release default: %+v, %v", hc, err)
	}
	// Nothing set apart and nothing late: claims lease in due order.
	if _, err := prod.Enqueue(ctx, shard.Message{ID: "on-time", Topic: "campaign"}); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		r := claim()
		return len(r.Msgs) == 1 && r.Msgs[0].ID == "on-time" && r.Held == 0
	}, func() string { return "the claim did not lease on time once the backlogs were empty" })
}

func TestClassesBadInput(t *testing.T) {
	b := setup(t, 1)
	ctx := b.ctx
	if _, err := b.store.SetClass(ctx, shard.Class{Name: "urgent", Topics: []string{"auth.*", "pay.timeout"}, Weight: 3}, "cli a person"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		class shard.Class
		field string
	}{
		{shard.Class{Name: "Bad Name", Topics: []string{"x"}, Weight: 1}, "name"},
		{shard.Class{Name: "neg", Topics: []string{"x"}, Weight: -1}, "weight"},
		{shard.Class{Name: "big", Topics: []string{"x"}, Weight: 1001}, "weight"},
		{shard.Class{Name: "none", Weight: 1}, "topics"},
		{shard.Class{Name: "star", Topics: []string{"a*b"}, Weight: 1}, "topics[0]"},
		{shard.Class{Name: "self", Topics: []string{"a.*", "a.b"}, Weight: 1}, "topics[1]"},
		{shard.Class{Name: shard.DefaultClass, Topics: []string{"x"}, Weight: 1}, "topics"},
		{shard.Class{Name: "twice", Topics: []string{"auth.code"}, Weight: 1}, "topics"},
		{shard.Class{Name: "wider", Topics: []string{"pay*"}, Weight: 1}, "topics"},
	} {
		_, err := b.store.SetClass(ctx, c.class, "api a person")
		var ie *shard.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%+v: %v; want invalid %s", c.class, err, c.field)
		}
	}
	_, err := b.store.SetClass(ctx, shard.Class{Name: "twice", Topics: []string{"auth.code"}, Weight: 1}, "test")
	if !errors.Is(err, shard.ErrOverlap) || !errors.Is(err, shard.ErrInvalid) {
		t.Errorf("overlap: %v; want ErrOverlap", err)
	} else if want := `"auth.code" overlaps "auth.*" of class "urgent"`; !strings.Contains(err.Error(), want) {
		t.Errorf("overlap: %v; want it to say %s", err, want)
	}
	// A routes file does not undo a change made at runtime.
	if _, changed, err := b.store.SetRoutesClass(ctx, shard.Class{Name: "urgent", Topics: []string{"auth.*"}, Weight: 1}); err != nil || changed {
		t.Errorf("routes over a runtime change: changed %v, %v", changed, err)
	}
	// Deleted, a class names no topic (its patterns are free again) but is
	// kept while its backlog may hold anything.
	if err := b.store.DeleteClass(ctx, "urgent", "test"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.DeleteClass(ctx, "urgent", "test"); !errors.Is(err, shard.ErrNotFound) {
		t.Errorf("delete twice: %v; want ErrNotFound", err)
	}
	cs, err := b.store.Classes(ctx)
	if err != nil || len(cs) != 1 || cs[0].DeletedMs == 0 || shard.NewClassPlan(cs) != nil {
		t.Errorf("after delete: %+v, %v; want urgent deleted and no plan", cs, err)
	}
	if _, err := b.store.SetClass(ctx, shard.Class{Name: "auth", Topics: []string{"auth.code"}, Weight: 2}, "test"); err != nil {
		t.Errorf("a deleted class's pattern in another class: %v", err)
	}
	if ok, err := b.store.ForgetClass(ctx, cs[0]); err != nil || !ok {
		t.Errorf("forget a deleted class: %v, %v", ok, err)
	}
	// A value no one could have stored is named and left out.
	if err := b.rdb.HSet(ctx, shard.ClassesKey(b.store.Namespace()), "junk", "12 {not json").Err(); err != nil {
		t.Fatal(err)
	}
	cs, err = b.store.Classes(ctx)
	if err == nil || !strings.Contains(err.Error(), `class "junk"`) || len(cs) != 1 || cs[0].Name != "auth" {
		t.Errorf("corrupt class: %+v, %v; want auth, and junk named", cs, err)
	}
}
