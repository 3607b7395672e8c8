package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/delayq/delayq/shard"
)

// isTerminal reports whether f (stdin, stdout or stderr) is a terminal:
// one that answers the terminal ioctl, not just any character device
// (/dev/null is one too).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// countingReader counts the bytes read through it, for progress.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// progress draws "N enqueued, R/s, P%, ETA" on one terminal line.
type progress struct {
	w     io.Writer
	start time.Time
	total int64 // input size in bytes; 0 when unknown (stdin)
	last  time.Time
	noun  string // what was done to the N: "enqueued" when empty
}

// line renders the progress line for n messages and read bytes at now.
func (p *progress) line(n int, read int64, now time.Time) string {
	el := now.Sub(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(n) / el
	}
	noun := p.noun
	if noun == "" {
		noun = "enqueued"
	}
	s := fmt.Sprintf("%d %s, %.0f/s", n, noun, rate)
	if p.total > 0 && read > 0 {
		frac := min(1, float64(read)/float64(p.total))
		s += fmt.Sprintf(", %.0f%%", 100*frac)
		if frac > 0 && frac < 1 {
			eta := time.Duration(el * (1 - frac) / frac * float64(time.Second))
			s += ", ETA " + eta.Round(time.Second).String()
		}
	}
	return s
}

// update redraws at most every 250 ms.
func (p *progress) update(n int, read int64) {
	now := time.Now()
	if now.Sub(p.last) < 250*time.Millisecond {
		return
	}
	p.last = now
	fmt.Fprintf(p.w, "\r\033[K%s", p.line(n, read, now))
}

// done clears the line.
func (p *progress) done() { fmt.Fprint(p.w, "\r\033[K") }

// bulkBar draws a bulk job's progress on one terminal line:
// "[#########-----------]  45%  45000 of 100000 cancelled, 12000/s, ETA 5s".
type bulkBar struct {
	w     io.Writer
	start time.Time
	total int    // the dry run's count
	done  string // what the job does to a message: "cancelled"
	last  time.Time
}

// line renders the bar for p at now.
func (b *bulkBar) line(p shard.BulkProgress, now time.Time) string {
	frac := 1.0
	if b.total > 0 {
		frac = min(1, float64(p.Done)/float64(b.total))
	}
	const width = 20
	filled := int(frac * width)
	s := fmt.Sprintf("[%s%s] %3.0f%%  %d of %d %s", strings.Repeat("#", filled), strings.Repeat("-", width-filled),
		100*frac, p.Done, b.total, b.done)
	if el := now.Sub(b.start).Seconds(); el > 0 && p.Done > p.Before {
		rate := float64(p.Done-p.Before) / el
		s += fmt.Sprintf(", %.0f/s", rate)
		if left := b.total - p.Done; left > 0 && rate > 0 {
			s += ", ETA " + (time.Duration(float64(left)/rate) * time.Second).Round(time.Second).String()
		}
	}
	return s
}

// update redraws at most every 250 ms.
func (b *bulkBar) update(p shard.BulkProgress) {
	now := time.Now()
	if now.Sub(b.last) < 250*time.Millisecond {
		return
	}
	b.last = now
	fmt.Fprintf(b.w, "\r\033[K%s", b.line(p, now))
}

// clear clears the line.
func (b *bulkBar) clear() { fmt.Fprint(b.w, "\r\033[K") }
