package amqpdial

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestRedactHidesThePassword(t *testing.T) {
	for _, raw := range []string{"amqp://guest:secret@h:5672/", "amqps://u:secret@h/vhost", "%zz://secret"} {
		if r := Redact(raw); strings.Contains(r, "secret") {
			t.Errorf("Redact(%q) = %q", raw, r)
		}
	}
}

func TestBackoffDefaults(t *testing.T) {
	for _, c := range []struct{ floor, ceiling, wantFloor, wantCeiling time.Duration }{
		{0, 0, MinBackoff, MaxBackoff},
		{-time.Second, 0, MinBackoff, MaxBackoff},
		{time.Second, 2 * time.Second, time.Second, 2 * time.Second},
		{10 * time.Second, time.Second, 10 * time.Second, 10 * time.Second},
	} {
		f, c2 := Backoff(c.floor, c.ceiling)
		if f != c.wantFloor || c2 != c.wantCeiling {
			t.Errorf("Backoff(%v, %v) = %v, %v; want %v, %v", c.floor, c.ceiling, f, c2, c.wantFloor, c.wantCeiling)
		}
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestFirstNamesEveryNodeThatFailed: with several nodes and none up, the
// error names each by its redacted URL, and no password.
func TestFirstNamesEveryNodeThatFailed(t *testing.T) {
	urls := []string{"amqp://u:secret@" + closedPort(t) + "/", "amqp://u:secret@" + closedPort(t) + "/"}
	_, _, err := First(context.Background(), urls, 1, Config("test", nil))
	if err == nil {
		t.Fatal("connected to closed ports")
	}
	msg := err.Error()
	if strings.Contains(msg, "secret") {
		t.Errorf("error leaks the password: %s", msg)
	}
	for _, u := range urls {
		if !strings.Contains(msg, Redact(u)) {
			t.Errorf("error does not name %s: %s", Redact(u), msg)
		}
	}
}
