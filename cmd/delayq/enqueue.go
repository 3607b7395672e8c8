package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/delayq/delayq/shard"
	"github.com/delayq/delayq/shard/tracing"
	amqp "github.com/rabbitmq/amqp091-go"
)

func enqueueCommand() command {
	return command{name: "enqueue", args: "--id ID (--topic T | --exchange X [--routing-key K]) (--delay D | --at T) | -f FILE [--upsert]",
		summary: "schedule messages", run: runEnqueue, flags: func() *flag.FlagSet { fs, _ := enqueueFlags(); return fs }}
}

// headerFlag collects repeated --header k=v.
type headerFlag amqp.Table

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	h[k] = val
	return nil
}

type enqueueOpts struct {
	id, topic, exchange, routingKey, contentType, body, bodyFile, at, file string
	expiresAt                                                              string
	delay, maxLateness                                                     time.Duration
	headers                                                                headerFlag
	upsert                                                                 bool
	batch                                                                  int
}

func enqueueFlags() (*flag.FlagSet, *enqueueOpts) {
	o := &enqueueOpts{headers: headerFlag{}}
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.StringVar(&o.id, "id", "", "message id (business key), 1-256 bytes")
	fs.StringVar(&o.topic, "topic", "", "topic, resolved by the scanners' route table")
	fs.StringVar(&o.exchange, "exchange", "", "explicit exchange (\"\" = default exchange)")
	fs.StringVar(&o.routingKey, "routing-key", "", "routing key for --exchange")
	durationVar(fs, &o.delay, "delay", 0, "publish after this delay (Redis clock), e.g. 90s, 30m or 36h")
	fs.StringVar(&o.at, "at", "", "publish at this RFC 3339 time")
	fs.StringVar(&o.expiresAt, "expires-at", "", "never publish after this RFC 3339 time: claimed later, the message is dead-lettered as expired")
	durationVar(fs, &o.maxLateness, "max-lateness", 0, "never publish more than this late: claimed later, the message is dead-lettered as expired")
	fs.Var(o.headers, "header", "AMQP header key=value (repeatable)")
	fs.StringVar(&o.contentType, "content-type", "", "AMQP content type")
	fs.StringVar(&o.body, "body", "", "message body text")
	fs.StringVar(&o.bodyFile, "body-file", "", "read the body from this file")
	fs.BoolVar(&o.upsert, "upsert", false, "replace a scheduled or dead message with the same id")
	fs.StringVar(&o.file, "f", "", "JSON Lines file of messages ('-' = stdin)")
	fs.IntVar(&o.batch, "batch", 500, "with -f: messages per pipelined batch")
	return fs, o
}

func runEnqueue(ctx context.Context, e *env, args []string) int {
	ctx = tracing.FromEnv(ctx) // TRACEPARENT, TRACESTATE: the caller's trace
	fs, o := enqueueFlags()
	pos, err := parse(fs, args, e.stderr)
	if err != nil || len(pos) > 0 {
		if err == nil {
			fmt.Fprintf(e.stderr, "delayq enqueue: unexpected arguments %q\n", pos)
		}
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.file != "" {
		// The messages, and every field of them, come from the file.
		for _, f := range []string{"id", "topic", "exchange", "routing-key", "delay", "at", "expires-at", "max-lateness", "header", "content-type", "body", "body-file"} {
			if set[f] {
				fmt.Fprintf(e.stderr, "delayq enqueue: --%s does not go with -f: each line of the file gives its own fields\n", f)
				return exitUsage
			}
		}
		if o.batch < 1 || o.batch > 10000 {
			fmt.Fprintf(e.stderr, "delayq enqueue: --batch %d: want 1 to 10000\n", o.batch)
			return exitUsage
		}
		return enqueueFile(ctx, e, o)
	}
	if set["batch"] {
		fmt.Fprintln(e.stderr, "delayq enqueue: --batch goes with -f only")
		return exitUsage
	}
	m := shard.Message{ID: o.id, Topic: o.topic, Exchange: o.exchange, RoutingKey: o.routingKey,
		Headers: amqp.Table(o.headers), ContentType: o.contentType, Body: []byte(o.body), Delay: o.delay,
		MaxLateness: o.maxLateness}
	switch {
	case set["delay"] && set["at"]:
		fmt.Fprintln(e.stderr, "delayq enqueue: give --delay or --at, not both")
		return exitUsage
	case !set["delay"] && !set["at"]:
		fmt.Fprintln(e.stderr, "delayq enqueue: give --delay or --at")
		return exitUsage
	case set["body"] && set["body-file"]:
		fmt.Fprintln(e.stderr, "delayq enqueue: give --body or --body-file, not both")
		return exitUsage
	}
	if set["at"] {
		if m.At, err = parseAt("at", o.at); err != nil {
			fmt.Fprintf(e.stderr, "delayq enqueue: %v\n", err)
			return exitUsage
		}
	}
	if set["expires-at"] {
		if m.ExpiresAt, err = parseAt("expires-at", o.expiresAt); err != nil {
			fmt.Fprintf(e.stderr, "delayq enqueue: %v\n", err)
			return exitUsage
		}
	}
	if set["body-file"] {
		if m.Body, err = os.ReadFile(o.bodyFile); err != nil {
			return e.fail("enqueue", err)
		}
	}
	p, done, err := e.producer(ctx, readOnce)
	if err != nil {
		return e.fail("enqueue", err)
	}
	defer done()
	enq := p.Enqueue
	if o.upsert {
		enq = p.Upsert
	}
	s, err := enq(ctx, m)
	if err != nil {
		return e.fail("enqueue", err)
	}
	fmt.Fprintf(e.stdout, "enqueued %s to shard %d, due %s\n", s.ID, s.Shard, s.Due.UTC().Format(time.RFC3339Nano))
	return exitOK
}

// enqueueFile streams a JSON Lines file in pipelined batches. Bad lines are
// reported with their number and skipped; the rest are enqueued.
func enqueueFile(ctx context.Context, e *env, o *enqueueOpts) int {
	if os.Getenv("GOGC") == "" {
		// A bulk read allocates for every line and keeps little: collecting
		// at 4x the live heap rather than 2x reads lines with typed headers
		// 1.3x as fast for about 30 MB more (100,000 of them, 2 cores).
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	var r io.Reader = e.stdin
	var size int64
	if o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return e.fail("enqueue", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		r = f
	}
	counted := &countingReader{r: r}
	r = counted
	var prog *progress // only on a terminal: quiet when piped
	if isTerminal(e.stderr) {
		prog = &progress{w: e.stderr, start: time.Now(), total: size}
		defer prog.done()
	}
	// What went wrong with a batch's lines is reported when the batch is
	// settled, in line order (a line refused by the parser and one
	// refused by Redis are known at different times), after the progress
	// line is cleared, so no report lands on the progress line.
	type report struct {
		line int
		err  error
	}
	var reports []report
	tell := func() {
		if len(reports) == 0 {
			return
		}
		if prog != nil {
			prog.done()
		}
		slices.SortFunc(reports, func(a, b report) int { return a.line - b.line })
		for _, r := range reports {
			fmt.Fprintf(e.stderr, "line %d: %v\n", r.line, r.err)
		}
		reports = reports[:0]
	}
	p, done, err := e.producer(ctx, watch)
	if err != nil {
		return e.fail("enqueue", err)
	}
	defer done()
	var enqueued, duplicates, rejected, full, overQuota, failed, inFlight int
	var msgs []shard.Message
	var lines []int
	enqueueBatch := p.EnqueueBatch
	if o.upsert {
		enqueueBatch = p.UpsertBatch
	}
	flush := func() error {
		if len(msgs) == 0 {
			return nil
		}
		res, err := enqueueBatch(ctx, msgs)
		for i, r := range res {
			switch {
			case r.Err == nil:
				enqueued++
				continue
			case errors.Is(r.Err, shard.ErrInFlight):
				inFlight++
			case errors.Is(r.Err, shard.ErrDuplicate), errors.Is(r.Err, shard.ErrCancelled):
				duplicates++
			case errors.Is(r.Err, shard.ErrInvalid):
				rejected++
			case errors.Is(r.Err, shard.ErrCapacity):
				full++
			case errors.Is(r.Err, shard.ErrQuota): // the error names the quota and its figures
				overQuota++
			default: // Redis failed: not the line's fault; err says why
				failed++
				continue
			}
			reports = append(reports, report{lines[i], r.Err})
		}
		tell()
		msgs, lines = msgs[:0], lines[:0]
		if prog != nil {
			prog.update(enqueued, counted.n.Load())
		}
		return err
	}
	summary := func() {
		tell()
		if prog != nil {
			prog.done()
		}
		fmt.Fprintf(e.stdout, "enqueued %d, duplicates %d, rejected %d", enqueued, duplicates, rejected)
		if full > 0 {
			fmt.Fprintf(e.stdout, ", refused at capacity %d", full)
		}
		if overQuota > 0 {
			fmt.Fprintf(e.stdout, ", refused by a quota %d", overQuota)
		}
		if inFlight > 0 {
			fmt.Fprintf(e.stdout, ", not replaced because in flight %d", inFlight)
		}
		if failed > 0 {
			fmt.Fprintf(e.stdout, ", not enqueued because Redis failed %d", failed)
		}
		fmt.Fprintln(e.stdout)
	}
	// The next batch is parsed while the last one is in Redis (parse is
	// most of the CPU of a line with typed headers); one batch is in
	// flight at a time, as before. Returning ends the parser (cancel) at
	// its next batch; one blocked reading its input ends with the process.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for b := range parseBatches(ctx, shard.NewLineReader(r, e.cfg.MaxBody), o.batch) {
		for _, le := range b.bad {
			rejected++
			reports = append(reports, report{le.Line, le.Err})
		}
		msgs, lines = append(msgs, b.msgs...), append(lines, b.lines...)
		if b.err != nil {
			ferr := flush()
			summary()
			return e.fail("enqueue", errors.Join(fmt.Errorf("reading %s after line %d: %w", o.file, b.at, b.err), ferr))
		}
		if err := flush(); err != nil {
			summary()
			return e.fail("enqueue", err)
		}
	}
	summary()
	if rejected > 0 || full > 0 || overQuota > 0 || inFlight > 0 {
		return exitFail
	}
	return exitOK
}

// parsedBatch is up to a batch of messages read from a JSON Lines input,
// with the bad lines among them; err ends the input (not io.EOF), after
// line at.
type parsedBatch struct {
	msgs  []shard.Message
	lines []int
	bad   []*shard.LineError
	err   error
	at    int
}

// parseBatches reads lr in a goroutine of its own, batch messages at a
// time, one batch ahead of its reader; the channel closes at the end of
// the input, after a batch with err, or when ctx ends. The reader must
// drain it.
func parseBatches(ctx context.Context, lr *shard.LineReader, batch int) <-chan parsedBatch {
	out := make(chan parsedBatch, 1)
	go func() {
		defer close(out)
		var b parsedBatch
		send := func() bool {
			select {
			case out <- b:
				b = parsedBatch{}
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			m, line, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			var le *shard.LineError
			switch {
			case errors.As(err, &le):
				b.bad = append(b.bad, le)
				continue
			case err != nil:
				b.err, b.at = err, line
				send()
				return
			}
			b.msgs, b.lines = append(b.msgs, m), append(b.lines, line)
			if len(b.msgs) >= batch && !send() {
				return
			}
		}
		if len(b.msgs) > 0 || len(b.bad) > 0 {
			send()
		}
	}()
	return out
}
