// Package publishertest starts real RabbitMQ nodes for tests: loopback
// only, free non-default ports (AMQP, distribution and a private epmd), a
// temporary directory, stopped afterwards.
//
// When rabbitmq-server is not installed, shardtest.Require skips the test,
// except under CI=true, where a missing server is a failure.
package publishertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/shard/shardtest"
)

const rabbitBin = "/usr/lib/rabbitmq/bin/"

// Rabbit is a RabbitMQ node run as a child process group.
type Rabbit struct {
	URL    string // amqp://guest:guest@127.0.0.1:PORT/
	TLSURL string // amqps://guest:guest@127.0.0.1:PORT/ when started with TLS
	Dir    string
	env    []string
	epmd   *shardtest.Proc // our own epmd on a private port, owned and killed by PID
	node   *shardtest.Proc
}

// Options configure StartRabbitWith.
type Options struct {
	// TLS, when set, adds a TLS listener (Rabbit.TLSURL) with these files.
	TLS *shardtest.Certs
	// Definitions, when set, is a definitions file (users, vhosts,
	// exchanges, ...) the node loads at boot (load_definitions). Such a
	// node creates no guest user, so give Credentials too.
	Definitions string
	// Credentials are the "user:password" of Rabbit.URL. Default
	// guest:guest.
	Credentials string
}

// StartRabbit starts a node in a new temporary directory and waits until it
// accepts AMQP connections (about 5-10 s).
func StartRabbit() (*Rabbit, error) { return StartRabbitWith(Options{}) }

// StartRabbitWith is StartRabbit with options. The ports are picked free
// before the node binds them, so another process may take one meanwhile
// (tests start servers in parallel): then it starts again on new ports, up
// to three times.
func StartRabbitWith(opts Options) (*Rabbit, error) {
	for attempt := 1; ; attempt++ {
		r, err := startRabbitOnce(opts)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "eaddrinuse") {
			return r, err
		}
	}
}

func startRabbitOnce(opts Options) (*Rabbit, error) {
	if _, err := os.Stat(rabbitBin + "rabbitmq-server"); err != nil {
		return nil, fmt.Errorf("rabbitmq-server: %w", shardtest.ErrNoBinary)
	}
	dir, err := os.MkdirTemp("", "delayq-rabbit-")
	if err != nil {
		return nil, err
	}
	ports, err := shardtest.FreePorts(4)
	if err != nil {
		return nil, err
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", amqpPort)
	if opts.Definitions != "" {
		abs, err := filepath.Abs(opts.Definitions)
		if err != nil {
			return nil, err
		}
		conf += "load_definitions = " + abs + "\n"
	}
	creds := opts.Credentials
	if creds == "" {
		creds = "guest:guest"
	}
	if opts.TLS != nil {
		conf += fmt.Sprintf("listeners.ssl.default = 127.0.0.1:%d\nssl_options.cacertfile = %s\nssl_options.certfile = %s\n"+
			"ssl_options.keyfile = %s\nssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n",
			ports[3], opts.TLS.CA, opts.TLS.Cert, opts.TLS.Key)
	}
	if err := writeNodeFiles(dir, conf); err != nil {
		return nil, err
	}
	r := &Rabbit{
		URL: fmt.Sprintf("amqp://%s@127.0.0.1:%d/", creds, amqpPort),
		Dir: dir,
	}
	if opts.TLS != nil {
		r.TLSURL = fmt.Sprintf("amqps://%s@127.0.0.1:%d/", creds, ports[3])
	}
	r.env = nodeEnv(dir, dir, "delayq"+strconv.Itoa(amqpPort)+"@localhost", amqpPort, distPort, epmdPort)
	// Start epmd ourselves (in the foreground, as a child) so that Close can
	// stop it by PID; the node registers with it instead of spawning a
	// daemon that would outlive the test.
	if r.epmd, err = shardtest.StartProc(exec.Command("epmd", "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1"), ""); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := r.Start(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// writeNodeFiles writes a node's configuration files into dir: conf as
// rabbit.conf, no advanced config, no plugins, an empty env file (so
// /etc/rabbitmq/rabbitmq-env.conf is not read).
func writeNodeFiles(dir, conf string) error {
	for name, content := range map[string]string{"rabbit.conf": conf, "advanced.config": "[].\n", "plugins": "[].\n", "env.conf": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// nodeEnv configures an isolated node entirely by environment: its files
// under dir, its Erlang cookie under home, loopback only, a private epmd.
func nodeEnv(home, dir, name string, amqpPort, distPort, epmdPort int) []string {
	erlArgs := "-kernel inet_dist_use_interface {127,0,0,1}"
	return append(os.Environ(),
		"HOME="+home,
		"RABBITMQ_NODENAME="+name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbit.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "env.conf"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+erlArgs,
		"RABBITMQ_CTL_ERL_ARGS="+erlArgs,
	)
}

// Start (re)starts the node with the same ports and data directory, so
// durable queues and persistent messages survive a Kill.
func (r *Rabbit) Start() error {
	logFile := filepath.Join(r.Dir, "console.log")
	cmd := exec.Command(rabbitBin + "rabbitmq-server")
	cmd.Env = r.env
	p, err := shardtest.StartProc(cmd, logFile)
	if err != nil {
		return err
	}
	r.node = p
	return p.WaitReady("rabbitmq-server", 120*time.Second, 100*time.Millisecond, logFile, func() error {
		conn, err := amqp.DialConfig(r.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err == nil {
			_ = conn.Close()
		}
		return err
	})
}

// Pgid is the process group of the running node: the Erlang VM and its
// helpers (for CPU accounting).
func (r *Rabbit) Pgid() int { return r.node.Pid() }

// Kill stops the node with SIGKILL (its whole process group) and waits for
// it to exit. The data directory stays for a later Start.
func (r *Rabbit) Kill() {
	r.node.Kill()
	r.node = nil
}

// Pause stops the node with SIGSTOP (its whole process group), as a long
// GC or VM pause would: its sockets stay open and nothing answers. Resume
// lets it go on.
func (r *Rabbit) Pause() error { return syscall.Kill(-r.Pgid(), syscall.SIGSTOP) }

// Resume ends a Pause.
func (r *Rabbit) Resume() error { return syscall.Kill(-r.Pgid(), syscall.SIGCONT) }

// Ctl runs rabbitmqctl against the node, e.g. Ctl("set_vm_memory_high_watermark", "0.0001").
func (r *Rabbit) Ctl(args ...string) (string, error) {
	cmd := exec.Command(rabbitBin+"rabbitmqctl", args...)
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, shardtest.Tail(string(out), 5))
	}
	return string(out), nil
}

// Close kills the node, stops its private epmd and removes the directory.
func (r *Rabbit) Close() {
	r.Kill()
	r.epmd.Kill()
	_ = os.RemoveAll(r.Dir)
}
