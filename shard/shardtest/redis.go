// Package shardtest starts real Redis servers for tests: loopback only, a
// free non-default port, a temporary directory, stopped afterwards.
//
// When redis-server is not installed, Require skips the test, except under
// CI=true, where a missing server is a failure.
package shardtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoBinary means the server's binary is not installed.
var ErrNoBinary = errors.New("server binary not installed (run scripts/install.sh)")

// Require fails tb if err is set, or skips it when the only problem is a
// missing binary outside CI.
func Require(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrNoBinary) && os.Getenv("CI") != "true" {
		tb.Skipf("skipping: %v", err)
	}
	tb.Fatalf("test server: %v", err)
}

// TrackProcessGroup records a server's process group id in the file named
// by $DELAYQ_TEST_PIDFILE, when set, so that scripts/test.sh can kill what
// a crashed test binary left running (by PID, never by name).
func TrackProcessGroup(pgid int) {
	path := os.Getenv("DELAYQ_TEST_PIDFILE")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return // best effort: the normal cleanup path does not need it
	}
	defer f.Close()
	fmt.Fprintln(f, pgid)
}

// Redis is a redis-server child process.
type Redis struct {
	Addr     string
	Dir      string
	args     []string
	proc     *Proc
	password string
	tls      *Certs
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	// AOF turns on the append-only file with appendfsync always, so that a
	// restart (Stop then Start) keeps every acknowledged write.
	AOF bool

	// Password, when set, is required of clients (requirepass).
	Password string
	// TLS, when set, makes the server speak only TLS with these files.
	TLS *Certs
	// ClientCerts makes a TLS server require client certificates signed by
	// the CA (mutual TLS).
	ClientCerts bool
	// Args are more redis-server arguments, e.g. "--replicaof", "127.0.0.1", "6380".
	Args []string

	port    int  // set by StartCluster
	cluster bool // cluster-enabled node
}

// StartRedis starts a server in a new temporary directory and waits until
// it answers PING. Call Stop (or Close) when done.
func StartRedis(opts RedisOptions) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", ErrNoBinary)
	}
	dir, err := os.MkdirTemp("", "delayq-redis-")
	if err != nil {
		return nil, err
	}
	port := opts.port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir}
	portArgs := []string{"--port", strconv.Itoa(port)}
	if opts.TLS != nil {
		portArgs = []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", opts.TLS.Cert,
			"--tls-key-file", opts.TLS.Key, "--tls-ca-cert-file", opts.TLS.CA, "--tls-auth-clients", "no"}
		if opts.ClientCerts {
			portArgs[len(portArgs)-1] = "yes"
		}
		r.tls = opts.TLS
	}
	r.args = append([]string{bin}, portArgs...)
	r.args = append(r.args, "--bind", "127.0.0.1", "--save", "",
		"--dir", dir, "--logfile", filepath.Join(dir, "log"), "--daemonize", "no")
	if opts.Password != "" {
		r.args = append(r.args, "--requirepass", opts.Password)
		r.password = opts.Password
	}
	if opts.cluster {
		r.args = append(r.args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
	}
	if opts.AOF {
		r.args = append(r.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		r.args = append(r.args, "--appendonly", "no")
	}
	r.args = append(r.args, opts.Args...)
	if err := r.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

// Start (re)starts the server process on the same port and directory.
func (r *Redis) Start() error {
	p, err := StartProc(exec.Command(r.args[0], r.args[1:]...), "")
	if err != nil {
		return err
	}
	r.proc = p
	opts := &redis.Options{Addr: r.Addr, MaxRetries: -1, Password: r.password}
	if r.tls != nil {
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(r.tls.CA)
		if err != nil {
			return err
		}
		pool.AppendCertsFromPEM(ca)
		opts.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if pair, err := tls.LoadX509KeyPair(r.tls.Cert, r.tls.Key); err == nil {
			opts.TLSConfig.Certificates = []tls.Certificate{pair} // for servers that require one
		}
	}
	c := redis.NewClient(opts)
	defer c.Close()
	return p.WaitReady("redis-server on "+r.Addr, 10*time.Second, 20*time.Millisecond, filepath.Join(r.Dir, "log"), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
}

// Pid is the running server's PID (for CPU accounting).
func (r *Redis) Pid() int { return r.proc.Pid() }

// Kill stops the server with SIGKILL and waits until the process is gone.
// Its directory (and AOF) stays for a later Start.
func (r *Redis) Kill() {
	r.proc.Kill()
	r.proc = nil
}

// Close kills the server and removes its directory.
func (r *Redis) Close() {
	r.Kill()
	_ = os.RemoveAll(r.Dir)
}

// Client returns a new client of the server; the test closes it on cleanup.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Namespace returns a namespace unique to this test, so tests can share a
// server and run in parallel.
func Namespace(tb testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, tb.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return name + "-" + hex.EncodeToString(b[:])
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
//
// It picks at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where the port of an outgoing connection
// never comes from: a port taken from that range (":0") is free when it is
// picked, but the suite opens thousands of client connections, and one of
// them may take it before the server binds it, or while a killed server is
// down before its restart on the same port. Another test may still pick the
// same port at the same moment (1 in about 23,000 per pair of picks here); a
// RabbitMQ node, the slowest server to start, starts again on new ports
// when it sees EADDRINUSE.
func FreePort() (int, error) {
	if lo, hi := 10000, ephemeralLow(); hi-lo >= 1000 { // else no room below it: take one from it
		for range 200 {
			p := lo + mrand.IntN(hi-lo)
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				continue
			}
			_ = l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 if
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// FreePorts returns n distinct free loopback ports (see FreePort): random
// picks may repeat, and a server given one port twice refuses to start
// (a Consul agent: "already configured for HTTP").
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}
