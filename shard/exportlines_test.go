package shard_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/shard"
)

// TestExportWalksEveryPartAndResumes: an export has every scheduled
// message, near, far, held back by a limit and waiting in a class's
// backlog, each line one ParseLine reads back; stopped after any message
// and started again from the cursor it printed (through its string), it
// goes on with exactly the rest.
func TestExportWalksEveryPartAndResumes(t *testing.T) {
	b := setup(t, 2)
	ctx := b.ctx
	st := b.store
	if err := st.EnableFar(ctx, shard.FarSettings{Horizon: 10 * time.Minute, BucketWidth: 10 * time.Minute, IndexSlots: 16, Since: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetLimit(ctx, "limited", 1, 0, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetClass(ctx, shard.Class{Name: "urgent", Topics: []string{"urgent"}, Weight: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	var msgs []shard.Message
	add := func(id, topic string, at time.Time) {
		msgs = append(msgs, shard.Message{ID: id, Topic: topic, At: at, Body: []byte(id)})
		want[id] = true
	}
	past := time.Now().Add(-time.Minute)
	for j := range 10 {
		add(fmt.Sprintf("near-%d", j), "t", time.Now().Add(time.Hour))
		add(fmt.Sprintf("far-%d", j), "t", time.Now().Add(5*time.Hour))
		add(fmt.Sprintf("held-%d", j), "limited", past)
		add(fmt.Sprintf("late-%d", j), "urgent", past)
	}
	if _, err := b.prod.EnqueueBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	// The claims of a behind shard set the due ones apart: the limited
	// topic's in its held sets, the rest in the class's backlog.
	cs, err := st.Classes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for moved := 1; moved > 0; {
		moved = 0
		res, errs := st.ClaimFair(ctx, nil, []int{0, 1}, 8, time.Minute, []string{"limited"}, shard.NewClassPlan(cs))
		for j := range res {
			if errs[j] != nil {
				t.Fatal(errs[j])
			}
			if len(res[j].Msgs) > 0 {
				t.Fatalf("a claim of a late shard leased %d", len(res[j].Msgs))
			}
			moved += res[j].Held
		}
	}
	var all []shard.Exported
	collect := func(after shard.ExportCursor, stopAfter int) ([]shard.Exported, error) {
		var got []shard.Exported
		errStop := errors.New("stop")
		err := st.Export(ctx, 2, after, 3, func(x shard.Exported) error {
			got = append(got, x)
			if len(got) == stopAfter {
				return errStop
			}
			return nil
		})
		if errors.Is(err, errStop) {
			err = nil
		}
		return got, err
	}
	if all, err = collect(shard.ExportCursor{}, 0); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, x := range all {
		if x.Err != nil {
			t.Fatalf("%s: %v", x.ID, x.Err)
		}
		m, err := shard.ParseLine(x.Line)
		if err != nil || m.ID != x.ID || string(m.Body) != x.ID {
			t.Fatalf("line of %s does not read back: %v\n%s", x.ID, err, x.Line)
		}
		seen[x.ID] = true
	}
	if len(seen) != len(want) || len(all) != len(want) {
		t.Fatalf("exported %d messages (%d distinct), want %d", len(all), len(seen), len(want))
	}
	ids := func(xs []shard.Exported) []string {
		out := make([]string, len(xs))
		for j, x := range xs {
			out[j] = x.ID
		}
		return out
	}
	for k := 1; k < len(all); k++ {
		head, err := collect(shard.ExportCursor{}, k)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := shard.ParseExportCursor(head[k-1].Next.String())
		if err != nil || cur != head[k-1].Next {
			t.Fatalf("cursor %q: %+v, %v", head[k-1].Next, cur, err)
		}
		rest, err := collect(cur, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := append(ids(head), ids(rest)...); !slices.Equal(got, ids(all)) {
			t.Fatalf("stopped after %d (cursor %s), went on with %v", k, cur, ids(rest))
		}
	}
	if _, err := shard.ParseExportCursor("1@9:held:x:5:id"); err == nil {
		t.Error("a cursor whose part length is wrong was read")
	}
}

// TestAppendLineReadsBack: a line AppendLine writes reads back (ParseLine)
// into the message it came from, and writes the same bytes again.
func TestAppendLineReadsBack(t *testing.T) {
	m := shard.Message{ID: "x-1", Exchange: "", RoutingKey: "q", At: time.UnixMilli(1_900_000_000_000), Body: []byte{0xff, 1},
		Retry: []time.Duration{time.Second, time.Minute}, RetryStep: 2, Attempts: 3, MaxLateness: time.Minute}
	env, err := shard.EnvelopeOf(m, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	line, err := shard.AppendLine(nil, m.ID, m.At.UnixMilli(), m.Attempts, &env)
	if err != nil {
		t.Fatal(err)
	}
	back, err := shard.ParseLine(line)
	if err != nil {
		t.Fatalf("%v\n%s", err, line)
	}
	env2, err := shard.EnvelopeOf(back, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	again, err := shard.AppendLine(nil, back.ID, back.At.UnixMilli(), back.Attempts, &env2)
	if err != nil || string(again) != string(line) {
		t.Fatalf("again:\n%s\nfirst:\n%s", again, line)
	}
	env.Occurrence.Schedule = "nightly"
	if _, err := shard.AppendLine(nil, "occ", 1, 0, &env); !errors.Is(err, shard.ErrOccurrence) {
		t.Errorf("an occurrence: %v", err)
	}
}
