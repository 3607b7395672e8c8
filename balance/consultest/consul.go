// Package consultest starts a real Consul dev agent for tests: loopback
// only, free non-default ports, a temporary directory, stopped afterwards.
//
// The binary is $DELAYQ_CONSUL_BIN, else `consul` on PATH, else the one
// scripts/install-consul.sh caches in ~/.cache/delayq. When none exists,
// shardtest.Require skips the test, except under CI=true.
package consultest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/delayq/delayq/shard/shardtest"
)

// Binary finds the consul binary.
func Binary() (string, error) {
	if b := os.Getenv("DELAYQ_CONSUL_BIN"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("consul"); err == nil {
		return b, nil
	}
	cache := os.Getenv("DELAYQ_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "delayq")
	}
	b := filepath.Join(cache, "consul-v1.16.3", "consul")
	if _, err := os.Stat(b); err == nil {
		return b, nil
	}
	return "", fmt.Errorf("consul (run scripts/install-consul.sh): %w", shardtest.ErrNoBinary)
}

// Consul is a dev agent (in-memory: a restart loses the KV store).
type Consul struct {
	Addr  string // host:port of the HTTP API
	Dir   string
	args  []string
	proc  *shardtest.Proc
	token string
	tls   *shardtest.Certs

	clientOnce sync.Once
	client     *api.Client
}

// Options configure StartConsulWith.
type Options struct {
	// ACLToken, when set, turns ACLs on with a default-deny policy and this
	// token as the management token.
	ACLToken string
	// TLS, when set, serves the HTTP API over HTTPS only (Consul.Addr is
	// then the HTTPS port).
	TLS *shardtest.Certs
	// MaxConnsPerClient, when set, is the agent's
	// limits.http_max_conns_per_client (Consul's default: 200).
	MaxConnsPerClient int
}

// StartConsul starts a dev agent and waits until it has a leader.
func StartConsul() (*Consul, error) { return StartConsulWith(Options{}) }

// StartConsulWith is StartConsul with options.
func StartConsulWith(opts Options) (*Consul, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "delayq-consul-")
	if err != nil {
		return nil, err
	}
	ports, err := shardtest.FreePorts(4)
	if err != nil {
		return nil, err
	}
	c := &Consul{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Dir: dir}
	c.args = []string{bin, "agent", "-dev", "-node", "delayq-test", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-advertise", "127.0.0.1", "-http-port", strconv.Itoa(ports[0]), "-dns-port", "-1", "-grpc-port", "-1",
		"-grpc-tls-port", "-1", "-serf-lan-port", strconv.Itoa(ports[1]), "-serf-wan-port", strconv.Itoa(ports[2]),
		"-server-port", strconv.Itoa(ports[3]), "-disable-host-node-id", "-log-level", "warn"}
	if opts.TLS != nil {
		// The HTTPS port takes the address; plain HTTP is turned off.
		c.args = append(c.args, "-https-port", strconv.Itoa(ports[0]), "-hcl", fmt.Sprintf(`tls { defaults {
ca_file = %q
cert_file = %q
key_file = %q
verify_incoming = false } }`, opts.TLS.CA, opts.TLS.Cert, opts.TLS.Key))
		for i, a := range c.args {
			if a == "-http-port" {
				c.args[i+1] = "-1"
			}
		}
		c.tls = opts.TLS
	}
	if opts.ACLToken != "" {
		c.args = append(c.args, "-hcl", fmt.Sprintf(`acl { enabled = true
default_policy = "deny"
tokens { initial_management = %q } }`, opts.ACLToken))
		c.token = opts.ACLToken
	}
	if opts.MaxConnsPerClient > 0 {
		c.args = append(c.args, "-hcl", fmt.Sprintf("limits { http_max_conns_per_client = %d }", opts.MaxConnsPerClient))
	}
	if err := c.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// Start (re)starts the agent on the same ports.
func (c *Consul) Start() error {
	logFile := filepath.Join(c.Dir, "consul.log")
	p, err := shardtest.StartProc(exec.Command(c.args[0], c.args[1:]...), logFile)
	if err != nil {
		return err
	}
	c.proc = p
	hc := &http.Client{Timeout: time.Second}
	scheme := "http://"
	if c.tls != nil {
		scheme = "https://"
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(c.tls.CA)
		if err != nil {
			return err
		}
		pool.AppendCertsFromPEM(ca)
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return p.WaitReady("consul", 30*time.Second, 20*time.Millisecond, logFile, func() error {
		resp, err := hc.Get(scheme + c.Addr + "/v1/status/leader")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var b [64]byte
		n, _ := resp.Body.Read(b[:])
		if leader := strings.Trim(string(b[:n]), "\"\n "); leader == "" {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
}

// Kill stops the agent with SIGKILL.
func (c *Consul) Kill() {
	c.proc.Kill()
	c.proc = nil
}

// Close kills the agent and removes its directory.
func (c *Consul) Close() {
	c.Kill()
	_ = os.RemoveAll(c.Dir)
}

// Client returns the API client of the agent, one for the agent's life:
// each new client has a connection pool of its own, and the idle
// connections of discarded ones would count towards the agent's limit of
// connections per client address.
func (c *Consul) Client() *api.Client {
	c.clientOnce.Do(func() { c.client = c.newClient() })
	return c.client
}

func (c *Consul) newClient() *api.Client {
	cfg := &api.Config{Address: c.Addr, Token: c.token}
	if c.tls != nil {
		cfg.Scheme = "https"
		cfg.TLSConfig = api.TLSConfig{CAFile: c.tls.CA}
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		panic(err) // only for a malformed config, which this is not
	}
	return cl
}

// Put writes a KV value.
func (c *Consul) Put(ctx context.Context, key, value string) error {
	_, err := c.Client().KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, (&api.WriteOptions{}).WithContext(ctx))
	return err
}

// Delete removes a KV key.
func (c *Consul) Delete(ctx context.Context, key string) error {
	_, err := c.Client().KV().Delete(key, (&api.WriteOptions{}).WithContext(ctx))
	return err
}
