package shardtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a Redis master, one replica and three sentinels on
// loopback (down-after 1 s, failover timeout 5 s). The replica
// authenticates to the master as the ACL user "repl", so that a test can
// cut replication off (CutReplication) while clients and sentinels go on.
type Sentinel struct {
	MasterName string
	Addrs      []string // the sentinels
	Master     *Redis
	Replica    *Redis
	sentinels  []*Proc
	dir        string
}

// StartSentinel starts the servers and waits until the replica is in sync
// and every sentinel knows it (about 2-3 s).
func StartSentinel() (*Sentinel, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server: %w", ErrNoBinary)
	}
	s := &Sentinel{MasterName: "delayq"}
	var err error
	replArgs := []string{"--repl-diskless-sync-delay", "0", "--user", "repl", "on", ">repl-pw", "+psync", "+replconf", "+ping"}
	if s.Master, err = StartRedis(RedisOptions{Args: replArgs}); err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(s.Master.Addr, ":")
	if s.Replica, err = StartRedis(RedisOptions{Args: append(append([]string{}, replArgs...),
		"--replicaof", host, port, "--masteruser", "repl", "--masterauth", "repl-pw")}); err != nil {
		s.Close()
		return nil, err
	}
	if s.dir, err = os.MkdirTemp("", "delayq-sentinel-"); err != nil {
		s.Close()
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		s.Close()
		return nil, err
	}
	for i, p := range ports {
		conf := filepath.Join(s.dir, fmt.Sprintf("sentinel%d.conf", i))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			p, s.dir, s.MasterName, host, port, s.MasterName, s.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			s.Close()
			return nil, err
		}
		proc, err := StartProc(exec.Command("redis-server", conf, "--sentinel"), filepath.Join(s.dir, fmt.Sprintf("sentinel%d.log", i)))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.sentinels = append(s.sentinels, proc)
		s.Addrs = append(s.Addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	if err := s.waitInSync(30 * time.Second); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitInSync waits until the replica's link to the master is up and every
// sentinel lists the replica.
func (s *Sentinel) waitInSync(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer rc.Close()
	for {
		ok := false
		if info, err := rc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "master_link_status:up") {
			ok = true
			for _, a := range s.Addrs {
				sc := redis.NewSentinelClient(&redis.Options{Addr: a})
				reps, err := sc.Replicas(ctx, s.MasterName).Result()
				_ = sc.Close()
				if err != nil || len(reps) == 0 {
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("sentinel: the replica never synced or the sentinels never saw it")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CutReplication stops the master from feeding the replica (the
// replication user is disabled and its link killed), as a network
// partition between them would, while clients and sentinels still reach
// both. Writes acknowledged meanwhile are on the master only.
func (s *Sentinel) CutReplication(ctx context.Context) error {
	mc := redis.NewClient(&redis.Options{Addr: s.Master.Addr})
	defer mc.Close()
	if err := mc.Do(ctx, "ACL", "SETUSER", "repl", "off").Err(); err != nil {
		return err
	}
	return mc.Do(ctx, "CLIENT", "KILL", "USER", "repl").Err()
}

// Close kills every server and removes the directories.
func (s *Sentinel) Close() {
	for _, p := range s.sentinels {
		p.Kill()
	}
	if s.Replica != nil {
		s.Replica.Close()
	}
	if s.Master != nil {
		s.Master.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
