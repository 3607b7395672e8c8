package balance_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/delayq/delayq/balance"
	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/shardtest"
)

// knob is a Counter whose M the test turns.
type knob struct{ m atomic.Int64 }

func (k *knob) ShardCount() (int, error) { return int(k.m.Load()), nil }

// idIn returns an id that hashes to shard s of m.
func idIn(s, m int) string {
	for i := 0; ; i++ {
		if id := "id-" + itoa(i); shard.Of(id, m) == s {
			return id
		}
	}
}

// TestLayoutDrainsRetiredShards: the mark follows M up at once, stays up
// while retired shards hold messages, comes down once they are empty, and
// goes up again if a late producer writes above it.
func TestLayoutDrainsRetiredShards(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	rdb := srv.Client(t)
	st, _ := shard.NewStore(rdb, shardtest.Namespace(t))
	var k knob
	k.m.Store(8)
	l := balance.NewLayout(&k, st, balance.LayoutOptions{Drain: true, Refresh: 10 * time.Millisecond,
		DrainCheck: time.Millisecond, Grace: 50 * time.Millisecond, Log: zaptest.NewLogger(t)})
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	hw := func() int { h, _ := l.HighWater(); return h }
	if hw() != 8 {
		t.Fatalf("high-water %d, want 8", hw())
	}
	// A message written under M=8 into shard 6, by a producer whose pin
	// of M=8 expires soon after it stops writing.
	prod8 := shard.NewProducer(st, balance.Static(8), shard.ProducerOptions{Pin: 20 * time.Millisecond})
	old := idIn(6, 8)
	if _, err := prod8.Enqueue(t.Context(), shard.Message{ID: old, Topic: "t", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	k.m.Store(2)
	// Long past the grace period, shard 6 still holds a message: covered.
	time.Sleep(200 * time.Millisecond) // the grace period itself is what is tested
	if hw() != 7 {
		t.Fatalf("with shard 6 occupied the mark is %d, want 7", hw())
	}
	// The message is found and cancelled under the new M, then the mark comes down.
	prod2 := shard.NewProducer(st, l, shard.ProducerOptions{})
	if err := prod2.Cancel(t.Context(), old); err != nil {
		t.Fatalf("cancel after shrink: %v", err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool { return hw() == 2 }, func() string { return "mark stays at " + itoa(hw()) })
	// A late producer still on M=8 writes into shard 5: its pin raises the
	// mark to 8 at once, and once the pin expires the sweep keeps shard 5
	// covered.
	late := idIn(5, 8)
	if _, err := prod8.Enqueue(t.Context(), shard.Message{ID: late, Topic: "t", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	shardtest.WaitFor(t, 5*time.Second, func() bool { return hw() == 6 }, func() string { return "mark stays at " + itoa(hw()) })
	// A producer that uses a Layout raises the mark itself, at once.
	k2 := &knob{}
	k2.m.Store(12)
	pl := balance.NewLayout(k2, st, balance.LayoutOptions{})
	if err := pl.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if lay, _ := st.ReadLayout(t.Context()); lay.HighWater < 12 {
		t.Errorf("producer layout did not raise the mark: %+v", lay)
	}
}

// TestLayoutFallbacks: a producer never guesses M; a scanner falls back.
func TestLayoutFallbacks(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	st, _ := shard.NewStore(srv.Client(t), shardtest.Namespace(t))
	unknown := balance.CounterFunc(func() (int, error) { return 0, balance.ErrShardCountUnknown })
	prodLayout := balance.NewLayout(unknown, st, balance.LayoutOptions{})
	if err := prodLayout.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := prodLayout.ShardCount(); err == nil {
		t.Fatal("producer guessed M with nothing to go on")
	}
	scanLayout := balance.NewLayout(unknown, st, balance.LayoutOptions{Fallback: 16})
	if m, src, err := scanLayout.Current(); err != nil || m != 16 || src != "fallback (consul unreachable)" {
		t.Errorf("scanner fallback: %d %q %v", m, src, err)
	}
	// Once someone recorded M from Consul, both use that mirror.
	if _, err := st.RaiseLayout(t.Context(), 6, 42); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*balance.Layout{prodLayout, scanLayout} {
		if err := l.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		if m, src, err := l.Current(); err != nil || m != 6 || src != "redis mirror (consul unreachable)" {
			t.Errorf("mirror: %d %q %v", m, src, err)
		}
	}
}

// TestLayoutSettlesOnceOldMessagesLeave: after M goes 4 -> 8, the layout
// records both Ms (producers look for ids in both layouts' shards); a
// draining Layout's sweep forgets M=4 only once no message written under
// it is left where M=8 would not put it, and once no producer pins it.
func TestLayoutSettlesOnceOldMessagesLeave(t *testing.T) {
	shardtest.Require(t, srvErr)
	t.Parallel()
	rdb := srv.Client(t)
	st, _ := shard.NewStore(rdb, shardtest.Namespace(t))
	prod4 := shard.NewProducer(st, balance.Static(4), shard.ProducerOptions{Pin: 50 * time.Millisecond})
	var misplaced []string
	for i := 0; len(misplaced) < 3; i++ {
		id := "s-" + itoa(i)
		if _, err := prod4.Enqueue(t.Context(), shard.Message{ID: id, Topic: "t", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if shard.Of(id, 4) != shard.Of(id, 8) {
			misplaced = append(misplaced, id)
		}
	}
	var k knob
	k.m.Store(8)
	l := balance.NewLayout(&k, st, balance.LayoutOptions{Drain: true, Refresh: 10 * time.Millisecond,
		SettleEvery: 10 * time.Millisecond, Log: zaptest.NewLogger(t)})
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	used := func() []int { lay, _ := st.ReadLayout(t.Context()); return lay.Used }
	if u := used(); len(u) != 2 {
		t.Fatalf("used Ms %v, want [4 8]", u)
	}
	// While messages of M=4 sit where M=8 would not put them, it stays.
	prod8 := shard.NewProducer(st, l, shard.ProducerOptions{})
	shardtest.WaitFor(t, 5*time.Second, func() bool { ok, err := l.Settle(t.Context()); return err == nil && !ok }, nil)
	if u := used(); len(u) != 2 {
		t.Fatalf("settled with messages of M=4 left: used %v", u)
	}
	if _, err := prod8.Enqueue(t.Context(), shard.Message{ID: misplaced[0], Topic: "t"}); err == nil {
		t.Fatalf("enqueue of %s, scheduled under M=4, succeeded under M=8", misplaced[0])
	}
	for _, id := range misplaced {
		if err := prod8.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	shardtest.WaitFor(t, 10*time.Second, func() bool { u := used(); return len(u) == 1 && u[0] == 8 },
		func() string { return "used Ms stay " + itoa(len(used())) })
}
