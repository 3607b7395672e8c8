package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuUse is where the CPU went during one measured run: the cores each
// process used on average, and its CPU time per message moved. On a small
// machine every process shares the same cores, so these figures say which
// one a faster pipeline would have to slim down.
type cpuUse struct {
	Cores     map[string]float64 `json:"cores"`       // process -> cores used on average
	UsPerMsg  map[string]float64 `json:"us_per_msg"`  // process -> CPU microseconds per message
	TotalBusy float64            `json:"total_cores"` // sum of Cores
	// SyscallsPerMsg: read and write syscalls (/proc/PID/io) per message.
	SyscallsPerMsg map[string]float64 `json:"syscalls_per_msg"`
	// WaitUsPerMsg: how long the process's threads were runnable but not
	// running (waiting in the kernel's run queue for a CPU, the second
	// field of /proc/PID/task/TID/schedstat) per message. Next to
	// UsPerMsg it says how oversubscribed the shared cores were: a
	// process that waits as long as it runs takes twice its CPU time to
	// do its part of each message.
	WaitUsPerMsg map[string]float64 `json:"wait_us_per_msg,omitempty"`
	// RunsPerMsg: how many times the process's threads were put on a CPU
	// (the third field of schedstat) per message: its wake-ups, each of
	// which costs a context switch and, on shared cores, a wait.
	RunsPerMsg map[string]float64 `json:"runs_per_msg,omitempty"`
	// Waiting is the threads of all processes waiting for a CPU, on
	// average (the sum of their run-queue waits over the elapsed time).
	Waiting float64 `json:"threads_waiting"`
}

// cpuSample is the CPU seconds of each process at one moment.
type cpuSample struct {
	at       time.Time
	sec      map[string]float64
	syscalls map[string]float64
	wait     map[string]float64 // seconds runnable but not running
	runs     map[string]float64 // times put on a CPU
}

// sampleCPU reads the CPU time of Redis, the RabbitMQ node (its whole
// process group), the scanner processes of f (nil: none) and this process
// (the benchmark's own producer, consumer and ceiling clients).
func (b *bench) sampleCPU(f *fleet) cpuSample {
	rabbitCPU, rabbitSys, rabbitWait, rabbitRuns := groupCPUSeconds(b.rabbit.Pgid())
	redisWait, redisRuns := runQueue(b.rs.Pid())
	benchWait, benchRuns := runQueue(os.Getpid())
	s := cpuSample{at: time.Now(), sec: map[string]float64{
		"redis":    cpuSeconds(b.rs.Pid()),
		"rabbitmq": rabbitCPU,
		"bench":    cpuSeconds(os.Getpid()),
	}, syscalls: map[string]float64{
		"redis":    syscalls(b.rs.Pid()),
		"rabbitmq": rabbitSys,
		"bench":    syscalls(os.Getpid()),
	}, wait: map[string]float64{
		"redis":    redisWait,
		"rabbitmq": rabbitWait,
		"bench":    benchWait,
	}, runs: map[string]float64{
		"redis":    redisRuns,
		"rabbitmq": rabbitRuns,
		"bench":    benchRuns,
	}}
	if f != nil {
		for _, p := range f.procs {
			s.sec["scanners"] += cpuSeconds(p.Process.Pid)
			s.syscalls["scanners"] += syscalls(p.Process.Pid)
			w, r := runQueue(p.Process.Pid)
			s.wait["scanners"] += w
			s.runs["scanners"] += r
		}
	}
	return s
}

// since is the CPU use between s0 and s for n messages.
func (s cpuSample) since(s0 cpuSample, n int) *cpuUse {
	el := s.at.Sub(s0.at).Seconds()
	u := &cpuUse{Cores: map[string]float64{}, UsPerMsg: map[string]float64{}, SyscallsPerMsg: map[string]float64{},
		WaitUsPerMsg: map[string]float64{}, RunsPerMsg: map[string]float64{}}
	for k, v := range s.sec {
		d := v - s0.sec[k]
		w := s.wait[k] - s0.wait[k]
		u.Cores[k] = d / el
		u.TotalBusy += d / el
		u.Waiting += w / el
		if n > 0 {
			u.UsPerMsg[k] = 1e6 * d / float64(n)
			u.SyscallsPerMsg[k] = (s.syscalls[k] - s0.syscalls[k]) / float64(n)
			u.WaitUsPerMsg[k] = 1e6 * w / float64(n)
			u.RunsPerMsg[k] = (s.runs[k] - s0.runs[k]) / float64(n)
		}
	}
	return u
}

// usTotal is the CPU time per message of all processes together.
func (u *cpuUse) usTotal() float64 {
	t := 0.0
	for _, v := range u.UsPerMsg {
		t += v
	}
	return t
}

func (u *cpuUse) String() string {
	if u == nil {
		return "-"
	}
	var parts []string
	for _, k := range []string{"redis", "rabbitmq", "scanners", "bench"} {
		if c, ok := u.Cores[k]; ok && (k != "scanners" || c > 0) {
			parts = append(parts, fmt.Sprintf("%s %.2f (%.1f µs, %.2f syscalls, %.2f runs, waited %.1f µs /msg)", k, c, u.UsPerMsg[k], u.SyscallsPerMsg[k], u.RunsPerMsg[k], u.WaitUsPerMsg[k]))
		}
	}
	return fmt.Sprintf("%.2f cores, %.2f threads waiting for one: %s", u.TotalBusy, u.Waiting, strings.Join(parts, ", "))
}

// syscalls reads a process's read and write syscall counts from /proc.
func syscalls(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			total += n
		} else if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			total += n
		}
	}
	return total
}

// runQueue is how long, in seconds, the threads of process pid have been
// runnable but waiting for a CPU, and how many times they were put on
// one: the sums over its threads of the second and third fields of
// /proc/PID/task/TID/schedstat. Threads that exited are not counted; the
// Go runtime, Redis and the Erlang VM keep theirs.
func runQueue(pid int) (wait, runs float64) {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*/schedstat", pid))
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 3 {
			ns, _ := strconv.ParseFloat(f[1], 64)
			n, _ := strconv.ParseFloat(f[2], 64)
			wait += ns / 1e9
			runs += n
		}
	}
	return wait, runs
}

// groupCPUSeconds sums the CPU time, the read and write syscalls and the
// run-queue wait and runs (runQueue) of every process in process group pgid.
func groupCPUSeconds(pgid int) (cpu, calls, wait, runs float64) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g != pgid {
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		cpu += (u + st) / 100
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		calls += syscalls(pid)
		w, r := runQueue(pid)
		wait += w
		runs += r
	}
	return cpu, calls, wait, runs
}
