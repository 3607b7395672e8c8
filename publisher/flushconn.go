package publisher

import (
	"net"
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
// per read. Latency does not grow: the flusher writes as soon as there is
// something to write, it never waits for more.
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

	mu      sync.Mutex
	work    sync.Cond // the flusher waits here while there is nothing to write
	room    sync.Cond // Write waits here while maxUnflushed bytes are gathered
	buf     []byte
	err     error // first write error, or net.ErrClosed after Close
	closing bool
	done    chan struct{}
}

func newFlushConn(c net.Conn) *flushConn {
	f := &flushConn{Conn: c, done: make(chan struct{})}
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
// until Close has been called and nothing is left.
func (f *flushConn) flush() {
	defer close(f.done)
	var out []byte
	for {
		f.mu.Lock()
		for len(f.buf) == 0 && f.err == nil && !f.closing {
			f.work.Wait()
		}
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

// Close sends what is gathered (for at most closeDrain), stops the flusher
// and closes the connection.
func (f *flushConn) Close() error {
	_ = f.Conn.SetWriteDeadline(time.Now().Add(closeDrain))
	f.mu.Lock()
	f.closing = true
	f.work.Signal()
	f.room.Broadcast()
	f.mu.Unlock()
	<-f.done
	return f.Conn.Close()
}
