package publishertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/delayq/delayq/shard/shardtest"
)

// Cluster is a RabbitMQ cluster of nodes on loopback, formed by classic
// peer discovery, sharing one private epmd and one Erlang cookie.
type Cluster struct {
	Nodes []*Rabbit
	URLs  []string // each node's amqp://guest:guest@127.0.0.1:PORT/
	home  string
	epmd  *shardtest.Proc
}

// StartCluster starts n nodes in new temporary directories and waits until
// each accepts AMQP connections and they have formed one cluster (about
// 20-30 s on 2 cores). Kill and Start restart one node with its data, which
// rejoins the cluster. A node that finds one of its ports taken (they are
// picked free before the nodes bind them) makes the whole cluster start
// again on new ports, up to three times.
func StartCluster(n int) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startClusterOnce(n)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "eaddrinuse") {
			return c, err
		}
	}
}

func startClusterOnce(n int) (*Cluster, error) {
	if _, err := os.Stat(rabbitBin + "rabbitmq-server"); err != nil {
		return nil, fmt.Errorf("rabbitmq-server: %w", shardtest.ErrNoBinary)
	}
	home, err := os.MkdirTemp("", "delayq-rabbit-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{home: home}
	// One cookie, written before any node starts, so that none races to
	// create its own.
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte("DELAYQTESTCOOKIE"+strconv.Itoa(os.Getpid())), 0o400); err != nil {
		c.Close()
		return nil, err
	}
	ports, err := shardtest.FreePorts(1 + 2*n)
	if err != nil {
		c.Close()
		return nil, err
	}
	epmdPort := ports[0]
	if c.epmd, err = shardtest.StartProc(exec.Command("epmd", "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1"), ""); err != nil {
		c.Close()
		return nil, err
	}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("dq%dn%d@localhost", ports[1], i+1)
	}
	var discovery strings.Builder
	discovery.WriteString("cluster_formation.peer_discovery_backend = classic_config\n")
	for i, name := range names {
		fmt.Fprintf(&discovery, "cluster_formation.classic_config.nodes.%d = %s\n", i+1, name)
	}
	for i := range n {
		amqpPort, distPort := ports[1+2*i], ports[2+2*i]
		dir := filepath.Join(home, fmt.Sprintf("n%d", i+1))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			c.Close()
			return nil, err
		}
		conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", amqpPort) + discovery.String()
		if err := writeNodeFiles(dir, conf); err != nil {
			c.Close()
			return nil, err
		}
		r := &Rabbit{URL: fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort), Dir: dir,
			env: nodeEnv(home, dir, names[i], amqpPort, distPort, epmdPort)}
		c.Nodes = append(c.Nodes, r)
		c.URLs = append(c.URLs, r.URL)
	}
	// Start them together: classic discovery waits for its peers.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, r := range c.Nodes {
		wg.Go(func() { errs[i] = r.Start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	out, err := c.Nodes[0].Ctl("cluster_status")
	if err != nil {
		c.Close()
		return nil, err
	}
	for _, name := range names {
		if !strings.Contains(out, name) {
			c.Close()
			return nil, fmt.Errorf("node %s is not in the cluster:\n%s", name, out)
		}
	}
	return c, nil
}

// Restart starts node i again after a Kill, with its data; it rejoins.
func (c *Cluster) Restart(i int) error {
	_ = os.Remove(filepath.Join(c.Nodes[i].Dir, "pid")) // stale after a SIGKILL
	return c.Nodes[i].Start()
}

// Close kills every node and the epmd and removes the directories.
func (c *Cluster) Close() {
	for _, r := range c.Nodes {
		if r.node != nil {
			r.Kill()
		}
	}
	if c.epmd != nil {
		c.epmd.Kill()
	}
	_ = os.RemoveAll(c.home)
}
