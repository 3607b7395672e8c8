package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/balance/consultest"
	"github.com/delayq/delayq/publisher/publishertest"
	"github.com/delayq/delayq/shard/shardtest"
)

// without returns env minus the variable key.
func without(env []string, key string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestRedisTLS: Redis speaking only TLS, with a CA made for the test.
func TestRedisTLS(t *testing.T) {
	certs, err := shardtest.WriteTestCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := shardtest.StartRedis(shardtest.RedisOptions{TLS: &certs})
	shardtest.Require(t, err)
	t.Cleanup(r.Close)
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+r.Addr)
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_TLS=true", "DELAYQ_REDIS_TLS_CA="+certs.CA), "stats"); code != 0 {
		t.Errorf("stats over TLS: %d %s", code, out)
	}
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_TLS=true"), "stats"); code == 0 || !strings.Contains(out, "certificate") {
		t.Errorf("TLS without our CA: %d %s", code, out)
	}
	if out, code := run(t, w.env, "stats"); code == 0 || !strings.Contains(out, r.Addr) {
		t.Errorf("plain text to a TLS port: %d %s", code, out)
	}
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_TLS=true", "DELAYQ_REDIS_TLS_CA="+certs.Key), "stats"); code != 2 ||
		!strings.Contains(out, "DELAYQ_REDIS_TLS_CA") {
		t.Errorf("a key file as CA: %d %s", code, out)
	}

	// Mutual TLS: the server wants a client certificate.
	m, err := shardtest.StartRedis(shardtest.RedisOptions{TLS: &certs, ClientCerts: true})
	shardtest.Require(t, err)
	t.Cleanup(m.Close)
	env := append(w.env, "DELAYQ_REDIS_ADDRS="+m.Addr, "DELAYQ_REDIS_TLS=true", "DELAYQ_REDIS_TLS_CA="+certs.CA)
	if out, code := run(t, env, "stats"); code == 0 {
		t.Errorf("mutual TLS without a client certificate succeeded: %s", out)
	}
	if out, code := run(t, append(env, "DELAYQ_REDIS_TLS_CERT="+certs.Cert, "DELAYQ_REDIS_TLS_KEY="+certs.Key), "stats"); code != 0 {
		t.Errorf("mutual TLS with a client certificate: %d %s", code, out)
	}
	if out, code := run(t, append(env, "DELAYQ_REDIS_TLS_CERT="+certs.Cert), "stats"); code != 2 || !strings.Contains(out, "go together") {
		t.Errorf("a certificate without its key: %d %s", code, out)
	}
}

// TestAMQPTLS: a scanner publishes over amqps with the test CA, and refuses
// to start, saying why, without it.
func TestAMQPTLS(t *testing.T) {
	shardtest.Require(t, serverErr)
	certs, err := shardtest.WriteTestCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	own, err := publishertest.StartRabbitWith(publishertest.Options{TLS: &certs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	w := newWorld(t, 4, "DELAYQ_AMQP_URL="+own.TLSURL)
	p := w.scan("DELAYQ_AMQP_TLS_CA=" + certs.CA)
	shardtest.WaitFor(t, 30*time.Second, func() bool { code, _ := get("http://" + p.metrics + "/readyz"); return code == 200 },
		func() string { return "not ready over amqps:\n" + p.log.String() })
	if err := p.term(30 * time.Second); err != nil {
		t.Errorf("exit: %v", err)
	}
	out, code := run(t, append(w.env, "DELAYQ_METRICS_ADDR=off"), "scan")
	if code == 0 || !strings.Contains(out, "TLS handshake") || strings.Contains(out, "guest:guest") {
		t.Errorf("amqps without the CA: %d %s", code, out)
	}
}

// TestSecretsFromFiles: *_FILE variables, as Kubernetes mounts Secrets.
func TestSecretsFromFiles(t *testing.T) {
	guarded, err := shardtest.StartRedis(shardtest.RedisOptions{Password: "from-a-file"})
	shardtest.Require(t, err)
	t.Cleanup(guarded.Close)
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+guarded.Addr)
	dir := t.TempDir()
	pass := filepath.Join(dir, "redis-password")
	must(t, os.WriteFile(pass, []byte("from-a-file\n"), 0o600))
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_PASSWORD_FILE="+pass), "stats"); code != 0 {
		t.Errorf("password from a file: %d %s", code, out)
	}
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_PASSWORD_FILE="+pass, "DELAYQ_REDIS_PASSWORD=x"), "stats"); code != 2 ||
		!strings.Contains(out, "not both") {
		t.Errorf("both set: %d %s", code, out)
	}
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_PASSWORD_FILE="+filepath.Join(dir, "missing")), "stats"); code != 2 ||
		!strings.Contains(out, "DELAYQ_REDIS_PASSWORD_FILE") {
		t.Errorf("missing file: %d %s", code, out)
	}
	url := filepath.Join(dir, "amqp-url")
	must(t, os.WriteFile(url, []byte(rabbit.URL), 0o600))
	env := append(without(w.env, "DELAYQ_AMQP_URL"), "DELAYQ_AMQP_URL_FILE="+url, "DELAYQ_REDIS_PASSWORD_FILE="+pass)
	w.env = env
	p := w.scan()
	shardtest.WaitFor(t, 30*time.Second, func() bool { code, _ := get("http://" + p.metrics + "/readyz"); return code == 200 },
		func() string { return "not ready with the URL from a file:\n" + p.log.String() })
}

// TestConsulACL: with ACLs on, the right token works and a wrong one gives
// a clear error that names the key and not the token.
func TestConsulACL(t *testing.T) {
	acl, err := consultest.StartConsulWith(consultest.Options{ACLToken: "4d2f7a10-right-token"})
	shardtest.Require(t, err)
	t.Cleanup(acl.Close)
	w := newWorld(t, 4, "DELAYQ_CONSUL_ADDR="+acl.Addr)
	shardtest.WaitFor(t, 30*time.Second, func() bool {
		_, code := run(t, append(w.env, "DELAYQ_CONSUL_TOKEN=4d2f7a10-right-token"), "shards", "set", "4")
		return code == 0 // ACL bootstrap takes a moment after the leader is elected
	}, func() string {
		out, _ := run(t, append(w.env, "DELAYQ_CONSUL_TOKEN=4d2f7a10-right-token"), "shards", "set", "4")
		return "set with the right token: " + out
	})
	out, code := run(t, append(w.env, "DELAYQ_CONSUL_TOKEN=9e1c0b22-wrong-token"), "shards", "set", "8")
	if code == 0 || !strings.Contains(out, "delayq/") || strings.Contains(out, "9e1c0b22") {
		t.Errorf("wrong token: %d %s", code, out)
	}
	if out, code := run(t, append(w.env, "DELAYQ_CONSUL_TOKEN=4d2f7a10-right-token"), "shards"); code != 0 || !strings.Contains(out, "M 4 from consul") {
		t.Errorf("shards with the right token: %d %s", code, out)
	}
}

// TestConsulTLS: Consul's API over HTTPS only, with the test CA.
func TestConsulTLS(t *testing.T) {
	certs, err := shardtest.WriteTestCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := consultest.StartConsulWith(consultest.Options{TLS: &certs})
	shardtest.Require(t, err)
	t.Cleanup(c.Close)
	w := newWorld(t, 4, "DELAYQ_CONSUL_ADDR="+c.Addr)
	if out, code := run(t, append(w.env, "DELAYQ_CONSUL_TLS_CA="+certs.CA), "shards", "set", "6"); code != 0 {
		t.Fatalf("shards set over HTTPS: %d %s", code, out)
	}
	if out, code := run(t, append(w.env, "DELAYQ_CONSUL_TLS_CA="+certs.CA), "shards"); code != 0 || !strings.Contains(out, "M 6 from consul") {
		t.Errorf("shards over HTTPS: %d %s", code, out)
	}
	if out, code := run(t, w.env, "shards", "set", "8"); code == 0 {
		t.Errorf("plain HTTP to an HTTPS-only agent succeeded: %s", out)
	}
}

// TestRedisACLUser: a Redis 6+ ACL user with its own password.
func TestRedisACLUser(t *testing.T) {
	r, err := shardtest.StartRedis(shardtest.RedisOptions{})
	shardtest.Require(t, err)
	t.Cleanup(r.Close)
	admin := r.Client(t)
	must(t, admin.Do(t.Context(), "ACL", "SETUSER", "delayq", "on", ">user-secret", "~delayq:*", "&*", "+@all").Err())
	must(t, admin.Do(t.Context(), "ACL", "SETUSER", "default", "off").Err())
	w := newWorld(t, 4, "DELAYQ_REDIS_ADDRS="+r.Addr)
	if out, code := run(t, append(w.env, "DELAYQ_REDIS_USERNAME=delayq", "DELAYQ_REDIS_PASSWORD=user-secret"), "stats"); code != 0 {
		t.Errorf("ACL user: %d %s", code, out)
	}
	out, code := run(t, append(w.env, "DELAYQ_REDIS_USERNAME=delayq", "DELAYQ_REDIS_PASSWORD=not-it"), "stats")
	if code == 0 || !strings.Contains(out, "WRONGPASS") || strings.Contains(out, "not-it") {
		t.Errorf("wrong ACL password: %d %s", code, out)
	}
}
