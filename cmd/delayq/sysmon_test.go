package main_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// TestScanRunsWithSysmonBackoff: `delayq scan` re-executes itself, same
// PID, with GODEBUG's schedtrace added to what GODEBUG already held, and
// leaves a schedtrace the environment sets alone (scanSchedtrace in
// scan.go says why).
// No server is needed: the scanner is only started, and stopped.
func TestScanRunsWithSysmonBackoff(t *testing.T) {
	const scanSchedtrace = "schedtrace=2147483647"
	for _, tc := range []struct{ given, want string }{
		{"", scanSchedtrace},
		{"madvdontneed=1", "madvdontneed=1," + scanSchedtrace},
		{"schedtrace=0", "schedtrace=0"},
	} {
		cmd := exec.Command(bin, "scan")
		cmd.Env = append(os.Environ(), "DELAYQ_REDIS_ADDRS=127.0.0.1:1", "DELAYQ_METRICS_ADDR=off", "GODEBUG="+tc.given)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		var got string
		shardtest.WaitFor(t, 10*time.Second, func() bool {
			env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if err != nil {
				return false
			}
			got = ""
			for kv := range strings.SplitSeq(string(env), "\x00") {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					got = v
				}
			}
			return got == tc.want
		}, func() string { return "GODEBUG=" + got + ", want " + tc.want })
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
