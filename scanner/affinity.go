package scanner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/shard"
)

// Wake-up affinity. Each scanner process's due board learns every shard's
// head, so with N processes each due head was handed to a goroutine in
// each process: one claim took it, N-1 found nothing (measured: 0.12 empty
// claims per message with two processes, 0.01 with one), which took a box
// near its cores to where queueing delay grows. So the processes share the
// wake-ups: they keep a membership in Redis (Store.Heartbeat), and each
// takes the due heads of the shards rendezvous hashing gives it. The
// others still reach every shard, so nothing depends on one process:
//
//   - busy goroutines follow the shared cursor over all shards, and every
//     process patrols one shard from the cursor each PatrolInterval;
//   - lease deadlines are watched on every shard (a crashed owner's
//     messages come back at lease speed, whoever owned them);
//   - a process that is not ready to publish leaves the membership, and
//     one that died drops out after membershipTTL; the shards a process
//     takes over are claimed at once, to learn their heads.
//
// Without a membership (Redis unreachable, or the first heartbeat not yet
// answered) a process takes every wake-up, as a lone process does.
const (
	membershipEvery = time.Second
	membershipTTL   = 2 * time.Second
)

// affinity is which processes are alive, as the last heartbeat said.
type affinity struct {
	self string
	live atomic.Pointer[[]string] // sorted; nil: unknown, take every shard
}

func newAffinity() *affinity {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	// The mark says this process promotes far buckets (scanner/far.go), so
	// the far tier can be turned on (shard.Store.TurnFarOn).
	return &affinity{self: shard.FarMemberID(hex.EncodeToString(b[:]))}
}

// owns reports whether this process takes the wake-ups of shard i: the
// live process whose hash with i is highest (rendezvous hashing: a
// process that joins or leaves moves only its own share).
func (a *affinity) owns(i int) bool {
	live := a.live.Load()
	if live == nil || len(*live) < 2 {
		return true
	}
	return ownerOf(*live, i) == a.self
}

func ownerOf(live []string, i int) string {
	best, bestH := "", uint64(0)
	suffix := "/" + strconv.Itoa(i)
	for _, id := range live {
		if h := fnv64(id + suffix); best == "" || h > bestH {
			best, bestH = id, h
		}
	}
	return best
}

// fnv64 is FNV-1a, 64 bit, mixed at the end so that ids that differ in
// their last bytes still spread.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// heartbeat keeps this process's membership while it can publish (it
// leaves while it cannot, so the others take its shards) until ctx ends,
// then leaves. When the members change, the shards it took over are put
// on the board as due now: their heads are not known here yet.
func (s *Scanner) heartbeat(ctx context.Context) {
	t := time.NewTicker(membershipEvery)
	defer t.Stop()
	for {
		ttl := membershipTTL
		if !s.d.Publisher.Ready() {
			ttl = 0
		}
		if live, err := s.d.Store.Heartbeat(ctx, s.aff.self, ttl); err == nil {
			s.membersChanged(live)
		} else if ctx.Err() == nil {
			s.errLog.warn("scanner membership; taking every shard's wake-ups meanwhile", err)
			s.aff.live.Store(nil)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			s.leave()
			return
		}
	}
}

// leave ends this process's membership, so the others take its shards at
// their next heartbeat rather than when it expires.
func (s *Scanner) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := s.d.Store.Heartbeat(ctx, s.aff.self, 0); err != nil {
		s.errLog.warn("leave the scanner membership; the others take this process's shards when it expires", err)
	}
}

// membersChanged records live and puts the shards that became this
// process's on the board.
func (s *Scanner) membersChanged(live []string) {
	old := s.aff.live.Load()
	if old != nil && slices.Equal(*old, live) {
		return
	}
	hw, err := s.d.Shards.HighWater()
	var was []bool
	if err == nil {
		was = make([]bool, hw)
		for i := range was {
			was[i] = s.aff.owns(i)
		}
	}
	s.aff.live.Store(&live)
	for i := range was {
		if !was[i] && s.aff.owns(i) {
			s.board.notice(i, 0)
		}
	}
}
