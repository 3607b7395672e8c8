package publisher

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// maxUnflushed is how many bytes Write gathers before it waits for the
// flusher: the same backpressure a full socket buffer gives, a little later.
const maxUnflushed = 256 << 10

// closeDrain bounds how long Close waits for gathered bytes to go out.
const closeDrain = time.Second

// flushConn is a net.Conn whose writes one flusher goroutine sends in as
// few syscalls as the socket allows. amqp091-go flushes its buffer after
// every publish, one write(2) each; with many goroutines publishing at once,
// the publishes that arrive while the flusher is in a write(2) go out
// together in the next one. That cuts the publisher's syscalls and lets
// the broker read many publishes (and confirm them with one multiple ack)
// per read.
//
// When the flusher had nothing to write and a write arrives, it first lets
// the goroutines that are ready to run go ahead of it (runtime.Gosched,
// again while they keep adding to the buffer, until two yields in a row
// add nothing or yieldRounds is reached), so that the publishes of the
// same moment share that write: a scanner's claim round trip wakes
// several workers at once, and each publishes its batch. Under a steady
// load, where publishes come a few at a time rather than while a write is
// under way, this is what lets the broker read and confirm them together.
// With gather > 0 the flusher waits that long instead, which also catches
// publishes of the next moment at the price of that much latency.
//
// Against a 1 ms timed gather, at steady loads of half the benchmark
// box's limit with a scanner process on one P (k = 1 and 8, one and two
// scanners, interleaved runs), the yield lowered lateness p50 by
// 0.9-2.1 ms and p99 by 1.1-10.3 ms in all eight pairs, with -2 to +9 %
// broker CPU per message and no timer wake-up per claim round. With no
// gathering at all RabbitMQ spent about 57 instead of 44 µs a message at
// 10,000 msg/s (cmd/delayq-bench/README.md). While writes keep coming, the flusher never waits: a
// busy publisher's writes go out as fast as the socket takes them.
//
// Write reports success once the bytes are gathered, before they reach the
// socket. That is safe for AMQP publishes, whose success is only ever the
// broker's confirm: a write that fails later closes the connection, and
// every publish not yet confirmed fails with ErrConnectionLost. After the
// first failure every Write returns that error.
//
// The flusher is owned by the conn: it starts with newFlushConn and ends
// with the first write error or with Close, which waits for it.
type flushConn struct {
	net.Conn
	gather time.Duration // how long a write after a pause waits for company

	mu      sync.Mutex
	work    sync.Cond // the flusher waits here while there is nothing to write
	room    sync.Cond // Write waits here while maxUnflushed bytes are gathered
	buf     []byte
	err     error // first write error, or net.ErrClosed after Close
	closing bool
	closed  chan struct{} // closed by Close: cuts a gather wait short
	done    chan struct{}
}

func newFlushConn(c net.Conn, gather time.Duration) *flushConn {
	f := &flushConn{Conn: c, gather: gather, closed: make(chan struct{}), done: make(chan struct{})}
	f.work.L, f.room.L = &f.mu, &f.mu
	go f.flush()
	return f
}

// Write gathers p for the flusher.
func (f *flushConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.err == nil && !f.closing && len(f.buf) >= maxUnflushed {
		f.room.Wait()
	}
	switch {
	case f.err != nil:
		return 0, f.err
	case f.closing:
		return 0, net.ErrClosed
	}
	if len(f.buf) == 0 {
		f.work.Signal()
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// flush writes whatever has been gathered, as one write, until an error or
// until Close has been called and nothing is left. A write that comes
// after a pause waits for gather first (see flushConn).
func (f *flushConn) flush() {
	defer close(f.done)
	var out []byte
	paused := true // nothing written yet
	for {
		f.mu.Lock()
		for len(f.buf) == 0 && f.err == nil && !f.closing {
			f.work.Wait()
			paused = true
		}
		switch {
		case !paused || f.err != nil || f.closing:
		case f.gather > 0:
			f.mu.Unlock()
			t := time.NewTimer(f.gather)
			select {
			case <-t.C:
			case <-f.closed: // Close sends what is gathered now
				t.Stop()
			}
			f.mu.Lock()
		default:
			f.yieldToWriters()
		}
		paused = false
		if f.err != nil || len(f.buf) == 0 { // failed, or closing and drained
			if f.err == nil {
				f.err = net.ErrClosed
			}
			f.room.Broadcast()
			f.mu.Unlock()
			return
		}
		out, f.buf = f.buf, out[:0]
		f.room.Broadcast()
		f.mu.Unlock()
		if _, err := f.Conn.Write(out); err != nil {
			f.mu.Lock()
			f.err = err
			f.room.Broadcast()
			f.mu.Unlock()
			return
		}
		if cap(out) > 4*maxUnflushed {
			out = nil // do not keep a buffer grown by a burst
		}
	}
}

// yieldRounds bounds the yields of one gather (see flushConn).
const yieldRounds = 16

// yieldToWriters lets the goroutines that are ready to run write before
// the flusher sends: it yields the processor until two yields in a row
// add nothing to the buffer, or yieldRounds times. Called and returns
// with mu held.
func (f *flushConn) yieldToWriters() {
	quiet := 0
	for range yieldRounds {
		n := len(f.buf)
		f.mu.Unlock()
		runtime.Gosched()
		f.mu.Lock()
		if f.err != nil || f.closing {
			return
		}
		if len(f.buf) == n {
			if quiet++; quiet == 2 {
				return
			}
		} else {
			quiet = 0
		}
	}
}

// Close sends what is gathered (for at most closeDrain; a gather wait under
// way ends at once), stops the flusher and closes the connection. Only the
// first call does that; later ones return net.ErrClosed.
func (f *flushConn) Close() error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return net.ErrClosed
	}
	_ = f.Conn.SetWriteDeadline(time.Now().Add(closeDrain))
	f.closing = true
	close(f.closed)
	f.work.Signal()
	f.room.Broadcast()
	f.mu.Unlock()
	<-f.done
	return f.Conn.Close()
}
