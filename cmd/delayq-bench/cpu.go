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
}

// cpuSample is the CPU seconds of each process at one moment.
type cpuSample struct {
	at       time.Time
	sec      map[string]float64
	syscalls map[string]float64
}

// sampleCPU reads the CPU time of Redis, the RabbitMQ node (its whole
// process group), the scanner processes of f (nil: none) and this process
// (the benchmark's own producer, consumer and ceiling clients).
func (b *bench) sampleCPU(f *fleet) cpuSample {
	rabbitCPU, rabbitSys := groupCPUSeconds(b.rabbit.Pgid())
	s := cpuSample{at: time.Now(), sec: map[string]float64{
		"redis":    cpuSeconds(b.rs.Pid()),
		"rabbitmq": rabbitCPU,
		"bench":    cpuSeconds(os.Getpid()),
	}, syscalls: map[string]float64{
		"redis":    syscalls(b.rs.Pid()),
		"rabbitmq": rabbitSys,
		"bench":    syscalls(os.Getpid()),
	}}
	if f != nil {
		for _, p := range f.procs {
			s.sec["scanners"] += cpuSeconds(p.Process.Pid)
			s.syscalls["scanners"] += syscalls(p.Process.Pid)
		}
	}
	return s
}

// since is the CPU use between s0 and s for n messages.
func (s cpuSample) since(s0 cpuSample, n int) *cpuUse {
	el := s.at.Sub(s0.at).Seconds()
	u := &cpuUse{Cores: map[string]float64{}, UsPerMsg: map[string]float64{}, SyscallsPerMsg: map[string]float64{}}
	for k, v := range s.sec {
		d := v - s0.sec[k]
		u.Cores[k] = d / el
		u.TotalBusy += d / el
		if n > 0 {
			u.UsPerMsg[k] = 1e6 * d / float64(n)
			u.SyscallsPerMsg[k] = (s.syscalls[k] - s0.syscalls[k]) / float64(n)
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
			parts = append(parts, fmt.Sprintf("%s %.2f (%.1f µs, %.2f syscalls /msg)", k, c, u.UsPerMsg[k], u.SyscallsPerMsg[k]))
		}
	}
	return fmt.Sprintf("%.2f cores: %s", u.TotalBusy, strings.Join(parts, ", "))
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

// groupCPUSeconds sums the CPU time and the read and write syscalls of
// every process in process group pgid.
func groupCPUSeconds(pgid int) (cpu, calls float64) {
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
	}
	return cpu, calls
}
