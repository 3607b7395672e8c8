package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A scheduled message is a key in Redis and nothing else: a Redis that
// evicts keys when its memory fills, or forgets them when it restarts,
// loses messages without a word. This file reads the settings that decide
// it from every master, judges them (CheckRedis) and turns Redis's refusal
// of a write at its memory limit into ErrRedisFull.
//
// What is read, and from where: maxmemory-policy, maxmemory and
// used_memory from INFO memory, whether the append-only file is on from
// INFO persistence (INFO is allowed on most managed Redis services), and
// appendfsync and save from CONFIG GET, which managed services and ACLs
// often refuse: then the persistence is "unknown", said once, and nothing
// is refused for it.
//
// The verdicts:
//
//	allkeys-*              evicts any key, scheduled messages among them: refused (ErrUnsafeRedis)
//	volatile-*             evicts only keys with a TTL; delayq's messages have none, but the
//	                       tombstones of cancels that came before their message do: a warning
//	noeviction             refuses writes at maxmemory instead (ErrRedisFull): nothing is lost
//	used_memory > 80 % of maxmemory: a warning (headroom)
//	no AOF and no RDB snapshots: a warning (a restart empties every shard)
//	RDB snapshots only, or appendfsync no: a warning (a crash loses the writes since)

// ErrUnsafeRedis is wrapped by CheckRedis's error: a master's
// maxmemory-policy can evict scheduled messages. The error names the
// master, the setting and the fix.
var ErrUnsafeRedis = errors.New("redis can evict scheduled messages")

// ErrRedisFull is wrapped by the error of a write that Redis refused
// because its memory reached maxmemory and its policy evicts nothing
// (noeviction). Nothing of the refused call was written: Redis refuses a
// script at its first write, never in the middle. Deliveries go on (acks
// only delete) and free memory; writes succeed again once they have.
var ErrRedisFull = errors.New("redis is full")

// MemoryHeadroom is the share of maxmemory above which CheckRedis warns.
const MemoryHeadroom = 0.8

// RedisServer is what delayq reads of one Redis master's settings.
type RedisServer struct {
	// Addr is the master's address (host:port), as its clients reach it.
	Addr string
	// Known is false when INFO was refused (an ACL): nothing else is set.
	Known bool
	// Policy is maxmemory-policy, MaxMemory maxmemory in bytes (0: no
	// limit) and UsedMemory used_memory.
	Policy                string
	MaxMemory, UsedMemory int64
	// AOF says whether appendonly is on.
	AOF bool
	// ConfigKnown is false when CONFIG GET was refused: then AppendFsync
	// and Save are unknown.
	ConfigKnown bool
	// AppendFsync is appendfsync (always, everysec, no); Save is save ("":
	// no RDB snapshots).
	AppendFsync, Save string
}

// EvictsMessages reports whether the maxmemory policy may evict any key,
// scheduled messages among them.
func (r RedisServer) EvictsMessages() bool { return strings.HasPrefix(r.Policy, "allkeys-") }

// Persistence names how the master keeps its data across a restart:
// "aof-always", "aof-everysec", "aof-no" (the AOF, fsynced as said),
// "rdb" (snapshots only), "none", or "unknown" (CONFIG GET refused and no
// AOF).
func (r RedisServer) Persistence() string {
	switch {
	case !r.Known:
		return "unknown"
	case r.AOF && r.ConfigKnown:
		return "aof-" + r.AppendFsync
	case r.AOF:
		return "aof"
	case !r.ConfigKnown:
		return "unknown"
	case strings.TrimSpace(r.Save) != "":
		return "rdb"
	}
	return "none"
}

// MemoryUsed is used_memory as a share of maxmemory; 0 without a limit.
func (r RedisServer) MemoryUsed() float64 {
	if r.MaxMemory <= 0 {
		return 0
	}
	return float64(r.UsedMemory) / float64(r.MaxMemory)
}

// CheckRedis judges the masters' settings. Its error wraps ErrUnsafeRedis
// when a policy can evict scheduled messages, naming each master, the
// setting and the fix, unless allowEviction says the operator accepts
// that (then it is the first warning). Warnings name what else can lose
// data or fill up, and what could not be read; they do not stop anything.
func CheckRedis(servers []RedisServer, allowEviction bool) (warnings []string, err error) {
	var unsafe []string
	for _, r := range servers {
		switch {
		case !r.Known:
			warnings = append(warnings, fmt.Sprintf("redis %s: INFO is not allowed, so delayq cannot tell whether it may evict or lose messages; make sure maxmemory-policy is noeviction and persistence is on", r.Addr))
			continue
		case r.EvictsMessages():
			unsafe = append(unsafe, fmt.Sprintf("redis %s: maxmemory-policy %s evicts scheduled messages when memory fills; set maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy noeviction)", r.Addr, r.Policy))
		case strings.HasPrefix(r.Policy, "volatile-"):
			warnings = append(warnings, fmt.Sprintf("redis %s: maxmemory-policy %s may evict the tombstones of cancels that came before their message (keys with a TTL), never a message; noeviction keeps them", r.Addr, r.Policy))
		}
		if u := r.MemoryUsed(); u > MemoryHeadroom {
			warnings = append(warnings, fmt.Sprintf("redis %s: used_memory %s is %.0f %% of maxmemory %s: enqueues fail once it is reached", r.Addr, bytesText(r.UsedMemory), 100*u, bytesText(r.MaxMemory)))
		}
		switch p := r.Persistence(); p {
		case "none":
			warnings = append(warnings, fmt.Sprintf("redis %s: no persistence (appendonly no, save \"\"): a restart empties every shard; set appendonly yes and appendfsync always", r.Addr))
		case "rdb":
			warnings = append(warnings, fmt.Sprintf("redis %s: RDB snapshots only (save %q): a crash loses every message since the last snapshot; set appendonly yes and appendfsync always", r.Addr, r.Save))
		case "aof-no":
			warnings = append(warnings, fmt.Sprintf("redis %s: appendfsync no: a crash of the machine loses the writes the OS had not flushed (about 30 s); appendfsync always loses none", r.Addr))
		case "unknown", "aof":
			warnings = append(warnings, fmt.Sprintf("redis %s: CONFIG GET is not allowed, so delayq cannot read appendfsync and save; appendonly yes with appendfsync always loses no acknowledged write", r.Addr))
		}
	}
	if len(unsafe) == 0 {
		return warnings, nil
	}
	if allowEviction {
		return append([]string{strings.Join(unsafe, "; ") + " (accepted by configuration)"}, warnings...), nil
	}
	return warnings, fmt.Errorf("%w: %s", ErrUnsafeRedis, strings.Join(unsafe, "; "))
}

// RedisServers reads the settings of every master: the server of a plain
// or Sentinel client (the master it is connected to now), each master of a
// Cluster. A refused INFO or CONFIG GET gives a server with Known or
// ConfigKnown false, not an error; an error is Redis unreachable.
func (s *Store) RedisServers(ctx context.Context) ([]RedisServer, error) {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		var out []RedisServer
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			r, err := readRedisServer(ctx, m, m.Options().Addr)
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read redis settings: %w", err)
		}
		return out, nil
	case *redis.Client:
		addr := c.Options().Addr
		if addr == "FailoverClient" { // Sentinel: the master it reaches now
			addr = serverAddr(ctx, c, "the sentinels' master")
		}
		r, err := readRedisServer(ctx, c, addr)
		if err != nil {
			return nil, fmt.Errorf("read redis settings: %w", err)
		}
		return []RedisServer{r}, nil
	}
	return nil, fmt.Errorf("read redis settings: a %T is not a client delayq knows", s.rdb)
}

// serverAddr asks the server its own address (CLIENT INFO's laddr), or
// gives fallback.
func serverAddr(ctx context.Context, c *redis.Client, fallback string) string {
	info, err := c.Do(ctx, "CLIENT", "INFO").Text()
	if err != nil {
		return fallback
	}
	for _, f := range strings.Fields(info) {
		if a, ok := strings.CutPrefix(f, "laddr="); ok && a != "" {
			return a
		}
	}
	return fallback
}

// readRedisServer reads one server's settings in one round trip (a
// pipeline of INFO and two CONFIG GETs, each allowed to be refused).
func readRedisServer(ctx context.Context, c *redis.Client, addr string) (RedisServer, error) {
	r := RedisServer{Addr: addr}
	var info *redis.StringCmd
	var fsync, save *redis.MapStringStringCmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
		info = p.Info(ctx, "memory", "persistence")
		fsync = p.ConfigGet(ctx, "appendfsync")
		save = p.ConfigGet(ctx, "save")
		return nil
	})
	refused := func(err error) bool { return isNoPerm(err) || isUnknownCommand(err) }
	for _, cmd := range []redis.Cmder{info, fsync, save} {
		if err := cmd.Err(); err != nil && !refused(err) {
			return r, err // Redis unreachable, not a refusal
		}
	}
	if info.Err() != nil {
		return r, nil // INFO refused: nothing known
	}
	fields := infoFields(info.Val())
	r.Known = true
	r.Policy = fields["maxmemory_policy"]
	r.MaxMemory, _ = strconv.ParseInt(fields["maxmemory"], 10, 64)
	r.UsedMemory, _ = strconv.ParseInt(fields["used_memory"], 10, 64)
	r.AOF = fields["aof_enabled"] == "1"
	if fsync.Err() == nil && save.Err() == nil {
		r.ConfigKnown, r.AppendFsync, r.Save = true, fsync.Val()["appendfsync"], save.Val()["save"]
	}
	return r, nil
}

// infoFields parses INFO's "key:value" lines.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// isNoPerm reports an ACL refusal (NOPERM) of a command.
func isNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}

// isUnknownCommand reports a command a managed service renamed away.
func isUnknownCommand(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unknown command")
}

// IsRedisFull reports whether err is Redis's refusal of a write at its
// memory limit: ErrRedisFull, or Redis's own OOM error from a command
// that did not go through a Store (the cursor's INCR, say).
func IsRedisFull(err error) bool {
	return errors.Is(err, ErrRedisFull) || isOutOfMemory(err)
}

// isOutOfMemory reports Redis's refusal of a write at maxmemory, as a
// command or inside a script ("-OOM command not allowed ...").
func isOutOfMemory(err error) bool {
	return err != nil && strings.Contains(err.Error(), "OOM command not allowed")
}

// redisFull turns an OOM refusal into an error wrapping ErrRedisFull that
// names the limit, read from the server when it can be (one INFO, only on
// this rare path).
func (s *Store) redisFull(ctx context.Context, err error) error {
	limit := ""
	if c, ok := s.rdb.(*redis.Client); ok {
		if info, ierr := c.Info(ctx, "memory").Result(); ierr == nil {
			f := infoFields(info)
			used, _ := strconv.ParseInt(f["used_memory"], 10, 64)
			max, _ := strconv.ParseInt(f["maxmemory"], 10, 64)
			if max > 0 {
				limit = fmt.Sprintf(" (used_memory %s of maxmemory %s, policy %s)", bytesText(used), bytesText(max), f["maxmemory_policy"])
			}
		}
	}
	return fmt.Errorf("%w: its memory reached maxmemory%s and it evicts nothing, so it refuses new messages until deliveries free memory: %v",
		ErrRedisFull, limit, err)
}

// bytesText writes a size for people: 5.0 MB, 512 B.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
