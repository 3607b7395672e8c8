package shard_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/schedule"
	"github.com/delayq/delayq/shard/shardtest"
)

// claimOccurrence waits until an occurrence of schedule name is due and
// claims it.
func (b *bundle) claimOccurrence(t *testing.T, name string) (shard.Claimed, shard.Envelope, int64) {
	t.Helper()
	var got shard.Claimed
	var nowMs int64
	shardtest.WaitFor(t, 5*time.Second, func() bool {
		for i := range b.m {
			r, err := b.store.Claim(b.ctx, i, 1, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Msgs) == 1 && strings.HasPrefix(r.Msgs[0].ID, name+"@") {
				got, nowMs = r.Msgs[0], r.NowMs
				return true
			}
		}
		return false
	}, func() string { return "no occurrence of " + name + " fell due" })
	env, err := shard.DecodeEnvelope(got.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	return got, env, nowMs
}

func TestScheduleFiresAndGoesOn(t *testing.T) {
	b := setup(t, 4)
	info, err := b.prod.UpsertSchedule(b.ctx, shard.Schedule{Name: "tick", Spec: "@every 1s",
		Message: shard.Message{Topic: "t", Body: []byte("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != 1 || info.Next.IsZero() || info.Pending != shard.OccurrenceID("tick", info.Next) {
		t.Fatalf("after create: %+v", info)
	}
	c, env, nowMs := b.claimOccurrence(t, "tick")
	if c.ID != info.Pending || env.Occurrence.NominalMs != info.Next.UnixMilli() || string(env.Body) != "hello" {
		t.Fatalf("claimed %s (%+v), want %s", c.ID, env.Occurrence, info.Pending)
	}
	f, err := b.store.FireOccurrence(b.ctx, info.Shard, &c, &env, nowMs)
	if err != nil || !f.Publish {
		t.Fatalf("fire: %+v %v", f, err)
	}
	after, err := b.store.ScheduleInfo(b.ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	if !after.Next.Equal(info.Next.Add(time.Second)) || after.Fired != 1 || !after.Last.Equal(info.Next) {
		t.Fatalf("after firing: next %s fired %d last %s; want next %s", after.Next, after.Fired, after.Last, info.Next.Add(time.Second))
	}
	// Fired again (a scanner that lost its lease, or a redelivery): nothing
	// changes, and it is published again only as the same id.
	f, err = b.store.FireOccurrence(b.ctx, info.Shard, &c, &env, nowMs)
	if err != nil || !f.Publish {
		t.Fatalf("fire again: %+v %v", f, err)
	}
	if again, _ := b.store.ScheduleInfo(b.ctx, "tick"); again.Fired != 1 || !again.Next.Equal(after.Next) {
		t.Fatalf("fired twice: %+v", again)
	}
	other := c
	other.Token++ // another scanner's lease
	if f, err = b.store.FireOccurrence(b.ctx, info.Shard, &other, &env, nowMs); err != nil || f.Publish {
		t.Fatalf("a lost lease: %+v %v", f, err)
	}
}

// A spec changed while the occurrence is scheduled replaces it; paused,
// the pending one goes; resumed, the policy publishes the missed ones.
func TestScheduleChangePauseResume(t *testing.T) {
	b := setup(t, 4)
	sc := shard.Schedule{Name: "report", Spec: "0 9 * * *", Zone: "Europe/Berlin", Missed: schedule.MissedLatest,
		Message: shard.Message{Exchange: "reports", RoutingKey: "daily"}}
	first, err := b.prod.UpsertSchedule(b.ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if h := first.Next.In(mustZone(t, "Europe/Berlin")); h.Hour() != 9 || h.Minute() != 0 {
		t.Fatalf("next %s is not 09:00 in Berlin", h)
	}
	sc.Spec = "30 17 * * *"
	changed, err := b.prod.UpsertSchedule(b.ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Version != 2 || changed.Pending == first.Pending {
		t.Fatalf("after the change: %+v", changed)
	}
	b.gone(t, changed.Shard, first.Pending, "the old pending occurrence")
	paused, err := b.store.PauseSchedule(b.ctx, "report")
	if err != nil || !paused.Paused || paused.Pending != "" {
		t.Fatalf("paused: %+v %v", paused, err)
	}
	b.gone(t, changed.Shard, changed.Pending, "the pending occurrence of a paused schedule")
	resumed, err := b.store.ResumeSchedule(b.ctx, "report")
	if err != nil || resumed.Paused || resumed.Pending == "" {
		t.Fatalf("resumed: %+v %v", resumed, err)
	}
	list, err := b.store.Schedules(b.ctx)
	if err != nil || len(list) != 1 || list[0].Name != "report" || list[0].Message.Exchange != "reports" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := b.store.DeleteSchedule(b.ctx, "report"); err != nil {
		t.Fatal(err)
	}
	b.gone(t, resumed.Shard, resumed.Pending, "the pending occurrence of a deleted schedule")
	if err := b.store.DeleteSchedule(b.ctx, "report"); !errors.Is(err, shard.ErrScheduleNotFound) {
		t.Fatalf("delete again: %v", err)
	}
}

// Resumed after ten missed occurrences: skip publishes none, latest one,
// all ten (each a message due at once, at its own time).
func TestScheduleResumePolicies(t *testing.T) {
	b := setup(t, 2)
	for _, c := range []struct {
		missed string
		want   int
	}{{schedule.MissedSkip, 0}, {schedule.MissedLatest, 1}, {schedule.MissedAll, 10}} {
		name := "every-" + c.missed
		// Ten occurrences past, the next 500 ms ahead: room for the
		// create, pause and resume below on a loaded machine (with 100 ms,
		// the pause could come after the next one and miss nothing).
		start := time.Now().Add(-9500 * time.Millisecond).Truncate(time.Millisecond)
		info, err := b.prod.UpsertSchedule(b.ctx, shard.Schedule{Name: name, Spec: "@every 1s", Start: start, Missed: c.missed,
			Grace: 200 * time.Millisecond, Message: shard.Message{Topic: "t"}})
		if err != nil {
			t.Fatal(err)
		}
		// Created with a start in the past: it begins with its next
		// occurrence, as a resume does; pause and resume to miss ten.
		if _, err := b.store.PauseSchedule(b.ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, err := b.rdb.HSet(b.ctx, shard.ScheduleKey(b.store.Namespace(), info.Shard, name), "last_ms",
			start.Add(-time.Second).UnixMilli()).Result(); err != nil {
			t.Fatal(err)
		}
		res, err := b.store.ResumeSchedule(b.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		due := 0
		ids, err := b.rdb.ZRangeArgs(b.ctx, redis.ZRangeArgs{Key: shard.ShardKeys(b.store.Namespace(), info.Shard).Due,
			ByScore: true, Start: "-inf", Stop: strconv.FormatInt(time.Now().UnixMilli(), 10)}).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if strings.HasPrefix(id, name+"@") {
				due++
			}
		}
		// The occurrences in the last 200 ms are not missed: the next one
		// may be among the due ones.
		if due < c.want || due > c.want+1 || int(res.Skipped) < 10-c.want || res.Pending == "" {
			t.Errorf("%s: %d due, skipped %d (%+v); want %d published", c.missed, due, res.Skipped, res, c.want)
		}
	}
}

func TestScheduleBadInput(t *testing.T) {
	b := setup(t, 2)
	msg := shard.Message{Topic: "t"}
	for _, c := range []struct {
		sc    shard.Schedule
		field string
	}{
		{shard.Schedule{Name: "z", Spec: "0 9 * * *", Zone: "Mars/Olympus", Message: msg}, "zone"},
		{shard.Schedule{Name: "m", Spec: "61 * * * *", Message: msg}, "spec"},
		{shard.Schedule{Name: "feb30", Spec: "0 0 30 2 *", Message: msg}, "spec"},
		{shard.Schedule{Name: "e", Spec: "@daily", Start: time.Now().Add(48 * time.Hour), End: time.Now().Add(24 * time.Hour), Message: msg}, "end"},
		{shard.Schedule{Name: "bad name", Spec: "@daily", Message: msg}, "name"},
		{shard.Schedule{Name: "a@b", Spec: "@daily", Message: msg}, "name"},
		{shard.Schedule{Name: "id", Spec: "@daily", Message: shard.Message{ID: "x", Topic: "t"}}, "message.id"},
		{shard.Schedule{Name: "dest", Spec: "@daily"}, "message.destination"},
		{shard.Schedule{Name: "p", Spec: "@daily", Missed: "sometimes", Message: msg}, "missed"},
		{shard.Schedule{Name: "c", Spec: "@daily", Count: -1, Message: msg}, "count"},
	} {
		_, err := b.prod.UpsertSchedule(b.ctx, c.sc)
		var ie *shard.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%+v: %v, want an invalid %s", c.sc, err, c.field)
		}
	}
	if n, err := b.store.ScheduleCount(b.ctx); err != nil || n != 0 {
		t.Fatalf("%d schedules registered after bad input (%v)", n, err)
	}
}

// gone fails unless message id is gone from shard i.
func (b *bundle) gone(t *testing.T, i int, id, what string) {
	t.Helper()
	if info, err := b.store.Inspect(b.ctx, i, id); err != nil || info.State != shard.StateUnknown {
		t.Fatalf("%s (%s): %s %v, want it removed", what, id, info.State, err)
	}
}

func mustZone(t *testing.T, z string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(z)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestDueProfile: messages at known times land in their buckets; the
// overdue and in-flight ones are apart; bad arguments name the field.
func TestDueProfile(t *testing.T) {
	b := setup(t, 4)
	now := time.Now()
	next := now.Truncate(time.Minute).Add(time.Minute) // the start of bucket 1
	var msgs []shard.Message
	add := func(prefix string, n int, at time.Time) {
		for j := range n {
			msgs = append(msgs, shard.Message{ID: fmt.Sprintf("%s-%d", prefix, j), Topic: "t", At: at})
		}
	}
	spike, later := next.Add(29*time.Minute+10*time.Second), next.Add(5*time.Minute) // a bucket's middle, its first instant
	add("spike", 50, spike)
	add("later", 7, later)
	add("past", 3, now.Add(-time.Hour))
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if got := b.claimAll(t, 1, time.Minute); len(got) == 0 { // one of the past ones in flight per shard holding one
		t.Fatal("nothing claimed")
	}
	p, err := b.store.DueProfile(b.ctx, 4, time.Minute, 60)
	if err != nil {
		t.Fatal(err)
	}
	at := func(t time.Time) int { return int(t.Sub(p.Start) / time.Minute) } // by the profile's own start
	if p.Counts[at(spike)] != 50 || p.Counts[at(later)] != 7 || p.Overdue+p.InFlight != 3 || p.InFlight == 0 {
		t.Fatalf("profile: spike's bucket %d, later's %d, overdue %d, in flight %d", p.Counts[at(spike)], p.Counts[at(later)], p.Overdue, p.InFlight)
	}
	var total int64
	for _, c := range p.Counts {
		total += c
	}
	if total != 57 || !p.Start.Equal(p.Now.Truncate(time.Minute)) {
		t.Fatalf("profile: %d in the hour, start %s now %s", total, p.Start, p.Now)
	}
	for _, c := range []struct {
		width time.Duration
		n     int
		field string
	}{{time.Millisecond, 10, "resolution"}, {time.Minute, 0, "buckets"}, {time.Minute, 10000, "buckets"}} {
		var ie *shard.InvalidError
		if _, err := b.store.DueProfile(b.ctx, 4, c.width, c.n); !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s x %d: %v, want an invalid %s", c.width, c.n, err, c.field)
		}
	}
}

// TestTopicProfile: a topic's profile counts its small buckets exactly
// and estimates a large one from a sample, saying so; the other topic's
// messages in the same buckets are not counted.
func TestTopicProfile(t *testing.T) {
	b := setup(t, 4)
	next := time.Now().Truncate(time.Minute).Add(time.Minute)
	small, big := next.Add(10*time.Minute+time.Second), next.Add(40*time.Minute+time.Second)
	var msgs []shard.Message
	for j := range 8000 {
		topic := []string{"a", "b"}[j%2]
		at := big.Add(time.Duration(j%997) * time.Millisecond)
		if j < 60 {
			at = small
		}
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("m-%d", j), Topic: topic, At: at})
	}
	for j := range 3 {
		msgs = append(msgs, shard.Message{ID: fmt.Sprintf("past-%d", j), Topic: "a", At: time.Now().Add(-time.Hour)})
	}
	if _, err := b.prod.EnqueueBatch(b.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	// Held back by a limit on a: in its held set (as the claim puts them).
	held := shard.HeldKey(b.store.Namespace(), 1, "a")
	for j := range 5 {
		if err := b.rdb.ZAdd(b.ctx, held, redis.Z{Score: float64(small.UnixMilli()), Member: fmt.Sprintf("held-%d", j)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.rdb.ZAdd(b.ctx, held, redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMilli()), Member: "held-past"}).Err(); err != nil {
		t.Fatal(err)
	}
	p, err := b.store.TopicProfile(b.ctx, 4, "a", time.Minute, 60)
	if err != nil {
		t.Fatal(err)
	}
	at := func(x time.Time) int { return int(x.Sub(p.Start) / time.Minute) }
	if p.Counts[at(small)] != 35 || p.Sampled[at(small)] != 0 {
		t.Errorf("small bucket: %d (sampled %d), want exactly 30 and 5 held", p.Counts[at(small)], p.Sampled[at(small)])
	}
	if got, s := p.Counts[at(big)], p.Sampled[at(big)]; got < 3000 || got > 5000 || s == 0 || s > 4*64 {
		t.Errorf("big bucket: %d from %d sampled, want about 3970 from at most 256", got, s)
	}
	if p.Overdue != 4 || p.OverdueSampled != 0 || p.InFlight != 0 {
		t.Errorf("overdue %d (sampled %d), in flight %d; want 3 and 1 held exactly, and 0", p.Overdue, p.OverdueSampled, p.InFlight)
	}
	if q, _ := b.store.TopicProfile(b.ctx, 4, "none", time.Minute, 60); q.Counts[at(big)] != 0 || q.Counts[at(small)] != 0 {
		t.Errorf("a topic without messages: %v", q.Counts)
	}
	if ts, err := b.store.Topics(b.ctx, 100); err != nil || !slices.Equal(ts, []string{"a", "b"}) {
		t.Errorf("topics %v, %v; want [a b]", ts, err)
	}
	if ok, err := b.store.KnownTopic(b.ctx, "a"); !ok || err != nil {
		t.Errorf("a is not known: %v", err)
	}
	if ok, err := b.store.KnownTopic(b.ctx, "none"); ok || err != nil {
		t.Errorf("none is known: %v", err)
	}
	var ie *shard.InvalidError
	if _, err := b.store.TopicProfile(b.ctx, 4, " a", time.Minute, 60); !errors.As(err, &ie) || ie.Field != "topic" {
		t.Errorf("topic with spaces: %v", err)
	}
}
