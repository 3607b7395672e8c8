package shardtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a server started as a child process in its own process group, so
// that Kill reaches the whole server (scripts such as rabbitmq-server start
// further processes) and scripts/test.sh can clean up after a crashed test
// binary (see TrackProcessGroup).
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProc starts cmd in a new process group and records the group.
// With logFile set, the command's output is appended to that file.
func StartProc(cmd *exec.Cmd, logFile string) (*Proc, error) {
	if logFile != "" {
		out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		defer out.Close() // the child keeps its own descriptor
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	TrackProcessGroup(cmd.Process.Pid)
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process's PID, which is also its process group ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL to the process group and waits for the process to exit.
// It is safe on a nil or already killed Proc.
func (p *Proc) Kill() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// WaitReady calls ready every interval until it returns nil. It fails when
// the process exits first (with the tail of logFile, if given) or when
// timeout passes (then it kills the process).
func (p *Proc) WaitReady(name string, timeout, interval time.Duration, logFile string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(logFile)
			return fmt.Errorf("%s exited before it was ready: %s", name, Tail(string(log), 15))
		case <-time.After(interval):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("%s not ready within %s: %w", name, timeout, err)
		}
	}
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitFor polls cond every 5 ms until it holds, and fails tb if it does not
// within the given time, with why() (when not nil) saying what was missing.
// Tests wait on conditions this way, never on fixed sleeps.
func WaitFor(tb testing.TB, within time.Duration, cond func() bool, why func() string) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			msg := "condition not met"
			if why != nil {
				msg = why()
			}
			tb.Fatalf("not within %s: %s", within, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
