package shardtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters without replicas, on loopback.
type Cluster struct {
	Nodes []*Redis
	Addrs []string
}

// clusterPort returns a port p such that p and its cluster bus port
// p+10000 were both free a moment ago, both below the ephemeral range
// (see FreePort).
func clusterPort() (int, error) {
	span := ephemeralLow() - 10000 - 10000
	if span < 1000 {
		span = 1000
	}
	for range 100 {
		p := 10000 + rand.IntN(span)
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

// StartCluster starts n masters (opts apply to each), joins them with
// redis-cli --cluster create and waits until the cluster state is ok.
func StartCluster(n int, opts RedisOptions) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli: %w", ErrNoBinary)
	}
	c := &Cluster{}
	for range n {
		port, err := clusterPort()
		if err != nil {
			c.Close()
			return nil, err
		}
		o := opts
		o.port, o.cluster = port, true
		r, err := StartRedis(o)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, r)
		c.Addrs = append(c.Addrs, r.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, Tail(string(out), 5))
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// WaitOK waits until every node reports cluster_state:ok.
func (c *Cluster) WaitOK(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				return fmt.Errorf("cluster node %s not ok within %s: %v %s", n.Addr, within, err, Tail(info, 3))
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return nil
}

// Client returns a cluster client; the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
}

// Close stops every node and removes their directories.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}
