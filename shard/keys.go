package shard

import (
	"fmt"
	"strconv"
)

// Keys names every Redis key of one shard. All of them share the hash tag
// {ns:i}, so a script that touches them stays in one Redis Cluster slot.
type Keys struct {
	Due      string // ZSET id -> due time (unix ms, Redis clock)
	Msg      string // HASH id -> envelope
	Inflight string // ZSET id -> lease deadline (unix ms); the score is the lease token
	Attempts string // HASH id -> number of redeliveries so far (absent = 0)
	Dead     string // ZSET id -> time it was dead-lettered (unix ms)
	Reason   string // HASH id -> why it is dead
	Counters string // HASH: enqueued, published, dead, late:<ms> (the fleet's rates)
	// Cancelled: ZSET id -> until when (unix ms) an enqueue of that id is
	// refused: the tombstone of a cancel that came before its message
	// (Producer.CancelAhead). The key expires with its last tombstone.
	Cancelled string
}

// ShardKeys returns the keys of shard i of namespace ns.
func ShardKeys(ns string, i int) Keys {
	p := "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:"
	return Keys{
		Due:       p + "due",
		Msg:       p + "msg",
		Inflight:  p + "inflight",
		Attempts:  p + "attempts",
		Dead:      p + "dead",
		Reason:    p + "reason",
		Counters:  p + "counters",
		Cancelled: p + "cancelled",
	}
}

// ScheduleKey is the HASH of recurring schedule name, in shard i
// (schedulescripts.go lists its fields).
func ScheduleKey(ns string, i int, name string) string {
	return "delayq:{" + ns + ":" + strconv.Itoa(i) + "}:schedule:" + name
}

// ScheduleRegistryKey is the namespace's HASH of schedule name -> the
// shard that holds it.
func ScheduleRegistryKey(ns string) string { return "delayq:{" + ns + "}:schedules" }

// TopicsKey is the namespace's SET of the topics producers have written
// messages under (Producer records each the first time it uses it): what
// the due-time profile of a topic accepts (Store.KnownTopic).
func TopicsKey(ns string) string { return "delayq:{" + ns + "}:topics" }

// CursorKey is the namespace-wide INCR counter scanners use to pick their
// next shard.
func CursorKey(ns string) string { return "delayq:{" + ns + "}:cursor" }

// LayoutKey is the namespace's shard layout HASH: hwm (shards scanners must
// cover), maxever (the largest M ever recorded), m and m_index (the last M
// read from Consul and its Consul ModifyIndex, for producers that cannot
// reach Consul).
func LayoutKey(ns string) string { return "delayq:{" + ns + "}:layout" }

// WakeChannel is the Pub/Sub channel on which the enqueue and reschedule
// scripts announce a new, earlier head of a shard. A notice's payload is
// "<shard>:<due unix ms>" (see ParseNotice).
func WakeChannel(ns string) string { return "delayq:{" + ns + "}:wake" }

// ParseNotice decodes a wake-up notice payload.
func ParseNotice(payload string) (shard int, dueMs int64, err error) {
	for i := 0; i < len(payload); i++ {
		if payload[i] != ':' {
			continue
		}
		s, err1 := strconv.Atoi(payload[:i])
		d, err2 := strconv.ParseInt(payload[i+1:], 10, 64)
		if err1 != nil || err2 != nil || s < 0 {
			break
		}
		return s, d, nil
	}
	return 0, 0, fmt.Errorf("wake notice %q: want <shard>:<due ms>", payload)
}

// Of returns the shard of message id when there are m shards: the 64-bit
// FNV-1a hash of the id's bytes, modulo m. The function is part of the data
// format: every producer and scanner must agree on it, so it never changes
// (TestOfIsStable pins known ids to known shards).
func Of(id string, m int) int {
	if m <= 1 {
		return 0
	}
	// FNV-1a, 64 bit (same as hash/fnv's New64a, without its allocation).
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return int(h % uint64(m))
}

// SessionEndedKey marks web console session id as ended (signed out)
// until it would have expired: console sessions are signed cookies, so
// that any serve instance accepts them, and this key is how a sign-out
// reaches every instance.
func SessionEndedKey(ns, id string) string { return "delayq:{" + ns + "}:session-ended:" + id }

// ScannersKey is the namespace's ZSET of live scanner processes: process
// id -> until when it counts as alive (unix ms, Redis clock). Each takes
// the wake-ups of its own share of the shards (Store.Heartbeat).
func ScannersKey(ns string) string { return "delayq:{" + ns + "}:scanners" }
