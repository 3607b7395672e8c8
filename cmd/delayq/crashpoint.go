package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/delayq/delayq/shard/ingress"
)

// crashEnv names a test-only variable: DELAYQ_TEST_KILL_AT=step:n makes
// `delayq scan` SIGKILL itself the n-th time its ingress reaches step
// (received, stored, acked) or its scanner does (fired: an occurrence of a
// schedule fired, not yet published; confirmed: the broker confirmed a
// message, its ack not yet on its way to Redis), and `delayq clear` the n-th time a page of
// its bulk cancel is done (step "page"), and a producer (delayq enqueue,
// serve) the n-th time a quota'd enqueue has reserved room (step
// "reserved") or stored its messages (step "stored", the reservation not
// yet settled), and `delayq move` the n-th time a batch is copied to the
// target and not yet removed from the source (step "copied"), a
// schedule is copied and not yet handed over (step "schedule-copied") or
// a page of dead messages is copied and not yet removed (step
// "dead-copied"), so that the
// crash tests can kill
// the process at each line between a write and the next. It is not in the
// Config table: nothing but the tests should set it.
const crashEnv = "DELAYQ_TEST_KILL_AT"

// crashPoint returns the ingress AtStep hook crashEnv asks for, or nil.
// Other commands pass their own steps, as ingress.Step values.
func crashPoint() (func(ingress.Step), error) {
	v := os.Getenv(crashEnv)
	if v == "" {
		return nil, nil
	}
	step, n, ok := strings.Cut(v, ":")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count < 1 {
		return nil, fmt.Errorf("%s=%q: want step:n, e.g. stored:3", crashEnv, v)
	}
	var seen atomic.Int64
	return func(s ingress.Step) {
		if string(s) == step && seen.Add(1) == int64(count) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}, nil
}
