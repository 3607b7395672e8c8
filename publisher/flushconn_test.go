package publisher

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/shard/shardtest"
)

// pipePair returns a flushConn that writes at once over a loopback TCP
// connection, and the other end of it.
func pipePair(t *testing.T) (*flushConn, net.Conn) {
	t.Helper()
	return gatheringPair(t, 0)
}

// gatheringPair is pipePair with a gather time.
func gatheringPair(t *testing.T, gather time.Duration) (*flushConn, net.Conn) {
	t.Helper()
	c, peer := tcpPair(t)
	return newFlushConn(c, gather), peer
}

// tcpPair returns both ends of a loopback TCP connection; the test closes
// the second.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = peer.Close() })
	return c, peer
}

// nothingFor fails the test if peer receives anything within d (the
// flusher should still be gathering), then clears the read deadline.
func nothingFor(t *testing.T, peer net.Conn, d time.Duration) {
	t.Helper()
	buf := make([]byte, 64)
	_ = peer.SetReadDeadline(time.Now().Add(d))
	if n, err := peer.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v right after the write: want nothing until the gather time is over", buf[:n], err)
	}
	_ = peer.SetReadDeadline(time.Time{})
}

// Concurrent writes each arrive whole and, per writer, in order: frames
// from different publishes never interleave.
func TestFlushConnKeepsWritesWhole(t *testing.T) {
	f, peer := pipePair(t)
	const writers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rec := make([]byte, 16+w*37) // writer-specific sizes
			for i := range each {
				binary.BigEndian.PutUint32(rec[0:], uint32(len(rec)))
				binary.BigEndian.PutUint32(rec[4:], uint32(w))
				binary.BigEndian.PutUint64(rec[8:], uint64(i))
				if _, err := f.Write(rec); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		})
	}
	got := make(chan error, 1)
	go func() {
		r := bufio.NewReader(peer)
		next := make([]uint64, writers)
		head := make([]byte, 16)
		for n := 0; n < writers*each; n++ {
			if _, err := io.ReadFull(r, head); err != nil {
				got <- err
				return
			}
			size, w, i := binary.BigEndian.Uint32(head), binary.BigEndian.Uint32(head[4:]), binary.BigEndian.Uint64(head[8:])
			if int(w) >= writers || int(size) != 16+int(w)*37 || i != next[w] {
				got <- errors.New("interleaved or reordered write")
				return
			}
			next[w]++
			if _, err := io.CopyN(io.Discard, r, int64(size-16)); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	wg.Wait()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("reader did not get every write")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A write after a pause waits for the gather time, and what is written
// meanwhile goes out with it, in one socket write; Close during the gather
// time loses nothing.
func TestFlushConnGathersAfterAPause(t *testing.T) {
	const gather = time.Second
	f, peer := gatheringPair(t, gather)
	start := time.Now()
	if _, err := f.Write([]byte("first,")); err != nil {
		t.Fatal(err)
	}
	nothingFor(t, peer, 100*time.Millisecond)
	if _, err := f.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := peer.Read(buf)
	if err != nil || string(buf[:n]) != "first,second" {
		t.Fatalf("first read: %q, %v; want both writes in one", buf[:n], err)
	}
	if waited := time.Since(start); waited < gather {
		t.Errorf("sent after %s, before the gather time %s", waited, gather)
	}
	// A pause again, then Close while the flusher gathers.
	if _, err := f.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Time{})
	if b, _ := io.ReadAll(peer); string(b) != "last" {
		t.Fatalf("after Close the peer read %q, want %q", b, "last")
	}
}

// Close sends what was gathered before it closes; later writes fail.
func TestFlushConnCloseDrains(t *testing.T) {
	f, peer := pipePair(t)
	want := make([]byte, 3*maxUnflushed) // more than one gathering's worth
	for i := range want {
		want[i] = byte(i)
	}
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		read <- b
	}()
	for off := 0; off < len(want); off += 1000 {
		if _, err := f.Write(want[off:min(off+1000, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-read; len(b) != len(want) {
		t.Fatalf("peer read %d bytes, want %d", len(b), len(want))
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := f.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
}

// Close ends a gather wait at once and sends what was gathered, even when
// the gather time is longer than Close's drain bound (the write deadline
// Close sets once ran out while the flusher slept, and the bytes were lost).
func TestFlushConnCloseEndsTheGather(t *testing.T) {
	f, peer := gatheringPair(t, 5*closeDrain)
	if _, err := f.Write([]byte("gathered")); err != nil {
		t.Fatal(err)
	}
	// Nothing comes before the gather time: the flusher is waiting it out.
	nothingFor(t, peer, 200*time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(peer); string(b) != "gathered" {
		t.Fatalf("after Close the peer read %q, want %q", b, "gathered")
	}
}

// A failed socket write fails every later Write: the AMQP client then
// tears the connection down and its unconfirmed publishes fail.
func TestFlushConnReportsWriteErrors(t *testing.T) {
	f, peer := pipePair(t)
	defer f.Close()
	_ = f.Conn.(*net.TCPConn).CloseWrite() // our own side can no longer send
	_ = peer
	shardtest.WaitFor(t, 10*time.Second, func() bool {
		_, err := f.Write([]byte("publish"))
		return err != nil
	}, func() string { return "writes kept succeeding on a connection that cannot send" })
}

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// With no gather time, a write after a pause lets the goroutines that are
// ready to write go first, so the writes of one moment (the workers a
// claim reply wakes) share one socket write, without a timed wait. With
// one P, as `delayq scan` runs, every goroutine woken at once writes
// before the flusher sends.
func TestFlushConnYieldsToReadyWriters(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	raw, peer := tcpPair(t)
	counted := &countingConn{Conn: raw}
	f := newFlushConn(counted, 0)
	defer f.Close()

	const writers = 32
	for round := range 3 {
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for i := range writers {
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-start
				if _, err := f.Write([]byte{byte(i)}); err != nil {
					t.Error(err)
				}
			})
		}
		ready.Wait()
		before := counted.writes.Load()
		close(start) // every writer is ready at once
		done.Wait()
		buf := make([]byte, writers)
		_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := counted.writes.Load() - before; n != 1 {
			t.Errorf("round %d: %d writers ready at once went out in %d socket writes, want 1", round, writers, n)
		}
	}
}
