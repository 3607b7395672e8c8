package publisher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/delayq/delayq/publisher/amqpdial"
	"github.com/delayq/delayq/shard/backoff"
)

// Errors of Publish and Confirm.Wait. A *ReturnedError matches ErrReturned.
var (
	// ErrReturned: the broker could not route the message to any queue
	// (mandatory publish returned). Retrying will not help until the
	// topology changes.
	ErrReturned = errors.New("message returned by broker as unroutable")
	// ErrNacked: the broker refused the message (nack) on a channel that
	// can be believed (see ErrNackedSuspect). It may succeed later.
	ErrNacked = errors.New("message nacked by broker")
	// ErrNackedSuspect: the broker nacked the message on a channel whose
	// nacks say nothing about the message: one opened within
	// Options.Probation of a (re)connect, or one that had nacked before.
	// RabbitMQ 3.10 nacks every publish, for good, on a channel opened
	// while a quorum queue elects its leader; a pause before connecting
	// cannot rule that out (an election waits for a majority, which a
	// paused node can hold up for seconds), so the publisher replaces a
	// channel at its first nack and reports this instead of ErrNacked.
	// Not a refusal: the message may be published again at once. It does
	// not match ErrNacked.
	ErrNackedSuspect = errors.New("message nacked by a channel on probation or one that nacked before (replaced)")
	// ErrConnectionLost: the channel or connection closed before the broker
	// confirmed. The message may or may not have been delivered.
	ErrConnectionLost = errors.New("connection lost before confirm")
	// ErrClosed: the publisher was closed.
	ErrClosed = errors.New("publisher closed")
	// ErrAccessRefused: the broker refused the credentials (AMQP 403). The
	// publisher keeps retrying, but this is a configuration error.
	ErrAccessRefused = errors.New("broker refused the credentials")
	// ErrTLS: the TLS handshake failed (unknown authority, wrong host name,
	// not a TLS listener): a configuration error too.
	ErrTLS = errors.New("TLS handshake with the broker failed")
)

// ReturnedError carries the broker's reason for a returned message.
type ReturnedError struct {
	Exchange, RoutingKey string
	Code                 uint16
	Text                 string
}

func (e *ReturnedError) Error() string {
	return fmt.Sprintf("returned by broker: %d %s (exchange %q, routing key %q)", e.Code, e.Text, e.Exchange, e.RoutingKey)
}

// Is reports target == ErrReturned.
func (e *ReturnedError) Is(target error) bool { return target == ErrReturned }

// Message is one AMQP publish. It is always mandatory, and persistent
// unless DeliveryMode is amqp.Transient.
type Message struct {
	Exchange, RoutingKey string
	MessageID            string
	ContentType          string
	ContentEncoding      string
	CorrelationID        string
	ReplyTo              string
	Expiration           string
	Type                 string
	AppID                string
	Priority             uint8
	DeliveryMode         uint8 // 0 means amqp.Persistent
	Headers              amqp.Table
	Body                 []byte
	Timestamp            time.Time
}

// Options configure a Publisher. Zero fields take the documented defaults.
type Options struct {
	// URLs are amqp:// or amqps:// URLs of the nodes of one RabbitMQ
	// cluster (one for a single node); at least one. A connection attempt
	// tries them in turn, starting with the one after the node that was
	// lost, so the publisher fails over to the next reachable node.
	URLs []string
	// TLS configures amqps:// connections (CA, client certificate); nil
	// uses the system's roots.
	TLS *tls.Config
	// Channels is the number of AMQP channels publishes are spread over,
	// each filled before the next (see the package doc). Default 4. More
	// do not make the broker cheaper: its CPU a message follows the
	// publishes unconfirmed in all, not on each channel (eight channels
	// against four, saturated scanners with a window of 256: no less
	// RabbitMQ CPU a message, fewer messages a second; cmd/delayq-bench's
	// README, "Measured and left out").
	Channels int
	// DialTimeout bounds one connection attempt. Default 10s.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnect attempts,
	// which doubles after each failure. Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// ExchangeTTL is how long a positive ExchangeExists answer is cached.
	// Default 30s.
	ExchangeTTL time.Duration
	// ConnectionName is shown in the RabbitMQ management UI.
	ConnectionName string
	// Probation is how long after a connection is established the
	// channels opened on it are on probation: their nacks are reported as
	// ErrNackedSuspect, never as refusals. Default 10s: a quorum queue
	// whose node died elects a new leader within a few seconds once a
	// majority of its nodes answers (ErrNackedSuspect says why). Negative:
	// no probation.
	Probation time.Duration
	// Gather is how long a publish that follows a pause waits so that the
	// publishes of the next moment go out in the same socket write: the
	// broker then reads them together and confirms them with one multiple
	// ack, which at a steady load costs it much less CPU per message than
	// a read and a confirm each. While publishes keep coming, writes are
	// never delayed. The wait is per socket write, not per publish: the
	// connection handshake and each synchronous channel call (open,
	// confirm mode, ExchangeExists when not cached) also wait it once, so
	// a reconnect takes a few Gathers longer. Default 0 (negative is the
	// same): no timed wait; the write after a pause only lets the
	// goroutines that are ready to publish go first, which gathers the
	// publishes of one claim round without adding latency (flushConn).
	Gather time.Duration
}

func (o *Options) defaults() {
	if o.Channels <= 0 {
		o.Channels = 4
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = amqpdial.DialTimeout
	}
	o.MinBackoff, o.MaxBackoff = amqpdial.Backoff(o.MinBackoff, o.MaxBackoff)
	if o.ExchangeTTL <= 0 {
		o.ExchangeTTL = 30 * time.Second
	}
	if o.Probation == 0 {
		o.Probation = 10 * time.Second
	}
}

// confirmBuffer is the capacity of each channel's confirm listener. The
// client library drops a confirm that cannot be delivered within 5s, so the
// buffer must hold every outstanding confirm; a dropped one shows up as a
// Confirm.Wait timeout, never as a false success.
const confirmBuffer = 8192

// Publisher publishes persistent, mandatory messages in confirm mode over
// one connection and a pool of channels, reconnecting with backoff.
type Publisher struct {
	opts Options
	log  *zap.Logger

	mu      sync.Mutex
	conn    *amqp.Connection
	chans   []*channel
	ready   bool
	blocked bool
	readyCh chan struct{} // closed while ready
	closed  bool

	next int    // index in URLs of the node to try first; under mu
	node string // the redacted URL of the connected node, "" when none; under mu

	exMu   sync.Mutex
	exSeen map[string]time.Time // exchange -> when it was seen to exist

	refused chan error // first ACCESS_REFUSED of a connect attempt

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Publisher. Call Start to connect and Close to stop.
func New(opts Options, log *zap.Logger) (*Publisher, error) {
	opts.defaults()
	if len(opts.URLs) == 0 {
		return nil, errors.New("no AMQP URL")
	}
	for _, u := range opts.URLs {
		if _, err := amqp.ParseURI(u); err != nil {
			return nil, fmt.Errorf("AMQP URL %s: %w", amqpdial.Redact(u), err)
		}
	}
	return &Publisher{opts: opts, log: log.Named("publisher"), readyCh: make(chan struct{}), exSeen: map[string]time.Time{},
		refused: make(chan error, 1)}, nil
}

// Start launches the goroutine that owns the connection: it dials, keeps
// the channel pool open, and redials with backoff after a failure, until
// Stop (or Close); ctx's end does not stop it. It returns at once; use
// WaitReady or WaitConnected.
func (p *Publisher) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return errors.New("publisher already started")
	}
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.wg.Go(func() { p.superviseConnection(ctx) })
	return nil
}

// Stop is Close, for the lifecycle every long-lived part shares: Close is
// bounded by itself (closeTimeout), so ctx is not needed to bound it.
func (p *Publisher) Stop(context.Context) error { return p.Close() }

// closeTimeout bounds how long Close waits for the broker to answer
// connection.close. A broker that blocked the connection (a resource
// alarm) reads nothing, so it never answers: without a deadline Close, and
// the process shutting down, would hang until the alarm clears.
const closeTimeout = 2 * time.Second

// Close stops reconnecting, closes the connection (waiting at most
// closeTimeout for the broker) and fails the confirms still outstanding
// with ErrConnectionLost. It waits for every goroutine of the publisher. It
// is safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	p.closed = true
	conn := p.conn
	p.mu.Unlock()
	var err error
	if conn != nil {
		if cerr := conn.CloseDeadline(time.Now().Add(closeTimeout)); cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
			err = fmt.Errorf("close AMQP connection: %w", cerr)
		}
	}
	p.wg.Wait()
	return err
}

// Ready reports whether a publish can go out now: connected, channels
// open, and the broker not blocking the connection (resource alarm).
func (p *Publisher) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready && !p.blocked
}

// WaitReady blocks until Ready or ctx ends.
func (p *Publisher) WaitReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		if p.ready && !p.blocked {
			p.mu.Unlock()
			return nil
		}
		ch := p.readyCh
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitConnected waits for the first connection. It returns early with
// ErrAccessRefused when the broker refuses the credentials or ErrTLS when
// the handshake fails, and with ctx's error when none of that happens in
// time (the publisher keeps trying).
func (p *Publisher) WaitConnected(ctx context.Context) error {
	ready := make(chan error, 1)
	go func() { ready <- p.WaitReady(ctx) }()
	select {
	case err := <-ready:
		return err
	case err := <-p.refused:
		return err
	}
}

// setState updates readiness; callers hold p.mu.
func (p *Publisher) setStateLocked(ready, blocked bool) {
	was := p.ready && !p.blocked
	p.ready, p.blocked = ready, blocked
	now := p.ready && !p.blocked
	switch {
	case now && !was:
		close(p.readyCh)
	case !now && was:
		p.readyCh = make(chan struct{})
	}
}

func (p *Publisher) superviseConnection(ctx context.Context) {
	b := backoff.New(p.opts.MinBackoff, p.opts.MaxBackoff)
	for attempt := 1; ; attempt++ {
		conn, err := p.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ae *amqp.Error
			var unknownCA x509.UnknownAuthorityError
			var badHost x509.HostnameError
			var verify *tls.CertificateVerificationError
			var notTLS tls.RecordHeaderError
			refused := true
			switch {
			case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
				err = fmt.Errorf("%w: %s", ErrAccessRefused, ae.Reason)
			case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &verify), errors.As(err, &notTLS):
				err = fmt.Errorf("%w: %v", ErrTLS, err)
			default:
				refused = false
			}
			if refused {
				select {
				case p.refused <- err:
				default:
				}
			}
			wait := b.Next()
			p.log.Warn("AMQP connect failed; retrying", zap.Int("nodes", len(p.opts.URLs)),
				zap.Int("attempt", attempt), zap.Duration("backoff", wait), zap.Error(err))
			if backoff.Sleep(ctx, wait) != nil {
				return
			}
			continue
		}
		p.log.Info("AMQP connected", zap.String("node", p.Node()), zap.Int("channels", p.opts.Channels))
		attempt = 0
		b.Reset()
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	watch:
		for {
			select {
			case <-ctx.Done():
				_ = conn.Close()
				p.dropConnection(conn)
				return
			case b := <-blocked:
				p.mu.Lock()
				p.setStateLocked(p.ready, b.Active)
				p.mu.Unlock()
				if b.Active {
					p.log.Warn("RabbitMQ blocked the connection; not publishing", zap.String("reason", b.Reason))
				} else {
					p.log.Info("RabbitMQ unblocked the connection")
				}
			case e := <-closed:
				p.log.Warn("AMQP connection closed; reconnecting", zap.String("node", p.Node()), zap.Error(amqpErr(e)))
				break watch
			}
		}
		p.dropConnection(conn)
		if backoff.Sleep(ctx, backoff.Jitter(p.opts.MinBackoff)) != nil {
			return
		}
	}
}

// Node is the redacted URL of the node the publisher is connected to, or
// "" while it is not connected.
func (p *Publisher) Node() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node
}

func amqpErr(e *amqp.Error) error {
	if e == nil {
		return errors.New("closed")
	}
	return e
}

// connect dials and opens the channel pool.
func (p *Publisher) connect(ctx context.Context) (*amqp.Connection, error) {
	p.mu.Lock()
	first := p.next
	p.mu.Unlock()
	cfg := amqpdial.Config(p.opts.ConnectionName, p.opts.TLS)
	cfg.Dial = dialGathering(p.opts.DialTimeout, p.opts.Gather)
	conn, used, err := amqpdial.First(ctx, p.opts.URLs, first, cfg)
	if err != nil {
		return nil, err
	}
	connected := time.Now()
	chans := make([]*channel, p.opts.Channels)
	for i := range chans {
		c, err := p.openChannel(conn, connected)
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("open channel: %w", err)
		}
		chans[i] = c
	}
	p.mu.Lock()
	if p.closed || ctx.Err() != nil {
		p.mu.Unlock()
		_ = conn.Close()
		return nil, ErrClosed
	}
	p.conn, p.chans = conn, chans
	// After this node is lost, start with the next one.
	p.node, p.next = amqpdial.Redact(p.opts.URLs[used]), (used+1)%len(p.opts.URLs)
	p.setStateLocked(true, false)
	p.mu.Unlock()
	for _, c := range chans {
		p.wg.Go(func() { p.handleChannel(conn, connected, c) })
	}
	return conn, nil
}

// dialGathering dials like amqp.DefaultDial and wraps the connection in a
// flushConn, so that concurrent publishes share write syscalls.
func dialGathering(timeout, gather time.Duration) func(network, addr string) (net.Conn, error) {
	dial := amqp.DefaultDial(timeout)
	return func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return newFlushConn(c, gather), nil
	}
}

func (p *Publisher) dropConnection(conn *amqp.Connection) {
	p.mu.Lock()
	if p.conn == conn {
		p.conn, p.chans, p.node = nil, nil, ""
		p.setStateLocked(false, false)
	}
	p.mu.Unlock()
}

// channel is one AMQP channel of the pool with its outstanding confirms.
// The struct outlives the AMQP channels it wraps: when one closes, the next
// one opened in its place takes over the fields.
type channel struct {
	pubMu sync.Mutex // serializes sequence numbers and publishes
	ch    *amqp.Channel

	mu       sync.Mutex
	pending  map[uint64]*Confirm
	returned map[string][]amqp.Return // message id -> returns not yet matched to an ack
	dead     bool                     // takes no publishes: closed, or retired after a nack
	// probation: opened within Options.Probation of the connect, so a nack
	// may be RabbitMQ's stuck channel rather than a refusal.
	probation bool
	nacked    bool // nacked a publish: retired, replaced once its confirms are in
	acked     bool // acked a publish
	// streak counts the channels in a row that were replaced after a nack
	// without acking anything (it outlives them): while a queue has no
	// leader, every new channel nacks, so each reopen waits longer.
	streak int

	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	closed   chan *amqp.Error

	// load is what pick reads without the lock: the publishes awaiting a
	// confirm, or deadLoad while dead. Stored with mu held (setLoad).
	load atomic.Int64
}

// deadLoad is the load of a dead channel: pick never prefers one.
const deadLoad = math.MaxInt64

// setLoad publishes c's load for pick; mu must be held.
func (c *channel) setLoad() {
	if c.dead {
		c.load.Store(deadLoad)
	} else {
		c.load.Store(int64(len(c.pending)))
	}
}

// retireDrain bounds how long a channel retired after a nack waits for the
// confirms still outstanding before it is closed (which fails them with
// ErrConnectionLost). A channel stuck in RabbitMQ's election state nacks
// at once; one whose queue has no leader yet may not answer at all.
const retireDrain = 2 * time.Second

// maxReopenPause bounds the wait before reopening a channel after a streak
// of channels that nacked without acking anything.
const maxReopenPause = time.Second

// openChannel opens a channel in confirm mode on conn, which was
// established at connected.
func (p *Publisher) openChannel(conn *amqp.Connection, connected time.Time) (*channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	c := &channel{ch: ch, pending: map[uint64]*Confirm{}, returned: map[string][]amqp.Return{},
		probation: time.Since(connected) < p.opts.Probation}
	// Returns are unbuffered and confirms are read by the same goroutine:
	// the library's reader blocks until a return is taken, so a return is
	// always seen before the ack of the same publish.
	c.returns = ch.NotifyReturn(make(chan amqp.Return))
	c.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, confirmBuffer))
	c.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	return c, nil
}

// handleChannel resolves confirms of c until the channel closes, then
// fails what is left and, while the connection lives, reopens the channel
// in place: a channel error such as a missing exchange closes only it, and
// resolve closes a channel that nacked.
func (p *Publisher) handleChannel(conn *amqp.Connection, connected time.Time, c *channel) {
	for {
		c.resolve(p.log, func(ch *amqp.Channel) { p.wg.Go(func() { _ = ch.Close() }) })
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		// The library sends the reason, then closes the channel: this
		// receive does not block for long.
		if e := <-closed; e != nil && e.Code == amqp.NotFound {
			// Most likely a publish to an exchange that was deleted after
			// ExchangeExists saw it: check again before the next publish.
			p.forgetExchanges()
			p.log.Warn("AMQP channel closed by the broker", zap.Error(e))
		}
		if conn.IsClosed() {
			return
		}
		c.mu.Lock()
		streak := c.streak
		c.mu.Unlock()
		if streak > 1 {
			time.Sleep(backoff.Jitter(min(p.opts.MinBackoff<<min(streak-2, 10), maxReopenPause)))
		}
		for b := backoff.New(p.opts.MinBackoff, p.opts.MaxBackoff); ; {
			nc, err := p.openChannel(conn, connected)
			if err == nil {
				c.pubMu.Lock()
				c.mu.Lock()
				c.ch, c.confirms, c.returns, c.closed, c.dead = nc.ch, nc.confirms, nc.returns, nc.closed, false
				c.pending, c.returned, c.probation, c.nacked, c.acked = nc.pending, nc.returned, nc.probation, false, false
				c.setLoad()
				c.mu.Unlock()
				c.pubMu.Unlock()
				p.log.Debug("AMQP channel reopened", zap.Bool("probation", nc.probation))
				break
			}
			if conn.IsClosed() {
				return
			}
			p.log.Warn("reopen AMQP channel failed", zap.Error(err))
			time.Sleep(b.Next())
		}
	}
}

// resolve reads returns and confirms until the channel closes. At the
// first nack it retires the channel (no more publishes) and closes it once
// its outstanding confirms are in, or after retireDrain, so that
// handleChannel opens a fresh one: a fresh channel is the cure for
// RabbitMQ's stuck channel, and costs nothing when nacks are rare.
//
// closeAsync closes a channel on a goroutine of the publisher's: not on
// this one, since Close waits for the broker while the library's reader
// may wait for this goroutine to take a return.
func (c *channel) resolve(log *zap.Logger, closeAsync func(*amqp.Channel)) {
	c.mu.Lock()
	returns, confirms, ch := c.returns, c.confirms, c.ch
	c.mu.Unlock()
	var drain <-chan time.Time
	closing := false
	closeChannel := func() {
		if !closing {
			closing = true
			closeAsync(ch)
		}
	}
	for {
		select {
		case <-drain:
			closeChannel()
			drain = nil
			continue
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			c.mu.Lock()
			c.returned[r.MessageId] = append(c.returned[r.MessageId], r)
			c.mu.Unlock()
			continue
		case cf, ok := <-confirms:
			if !ok {
				c.failAll()
				return
			}
			c.mu.Lock()
			f := c.pending[cf.DeliveryTag]
			delete(c.pending, cf.DeliveryTag)
			var ret *amqp.Return
			if f != nil {
				if rs := c.returned[f.id]; len(rs) > 0 {
					ret = &rs[0]
					if len(rs) == 1 {
						delete(c.returned, f.id)
					} else {
						c.returned[f.id] = rs[1:]
					}
				}
			}
			believed := false // a nack that may count as a refusal
			switch {
			case cf.Ack && !c.acked:
				c.acked = true
				if c.streak > 1 {
					log.Info("AMQP channel acks again", zap.Int("channels_replaced", c.streak))
				}
				c.streak = 0
			case !cf.Ack && !c.nacked:
				believed = !c.probation
				c.nacked, c.dead = true, true
				drain = time.After(retireDrain)
				if c.acked {
					c.streak = 0
				}
				c.streak++
				// The first of a streak is worth a warning; the rest (one
				// per reopen while a queue has no leader) are not.
				lvl := zap.WarnLevel
				if c.streak > 1 {
					lvl = zap.DebugLevel
				}
				log.Log(lvl, "AMQP channel nacked a publish; replacing it", zap.Bool("probation", c.probation),
					zap.Int("outstanding", len(c.pending)), zap.Int("streak", c.streak))
			}
			idle := c.nacked && len(c.pending) == 0
			c.setLoad()
			c.mu.Unlock()
			switch {
			case f == nil:
			case !cf.Ack && believed:
				f.resolve(ErrNacked)
			case !cf.Ack:
				f.resolve(ErrNackedSuspect)
			case ret != nil:
				f.resolve(&ReturnedError{Exchange: ret.Exchange, RoutingKey: ret.RoutingKey, Code: ret.ReplyCode, Text: ret.ReplyText})
			default:
				f.resolve(nil)
			}
			if idle {
				closeChannel()
			}
		}
	}
}

func (c *channel) failAll() {
	c.mu.Lock()
	pending := c.pending
	c.pending, c.returned, c.dead = map[uint64]*Confirm{}, map[string][]amqp.Return{}, true
	c.setLoad()
	c.mu.Unlock()
	for _, f := range pending {
		f.resolve(ErrConnectionLost)
	}
}

// Confirm is the outcome of one publish, known once the broker confirms.
type Confirm struct {
	id     string
	done   chan struct{} // Publish's; nil for PublishNotify's
	notify func(error)   // PublishNotify's
	err    error
	// fired is set by the first of resolve and a failed publish's
	// withdrawal: the outcome is told once, and never for a publish whose
	// error the caller got.
	fired atomic.Bool
}

func (f *Confirm) resolve(err error) {
	if !f.fired.CompareAndSwap(false, true) {
		return // its publish failed and said so
	}
	if f.notify != nil {
		f.notify(err)
		return
	}
	f.err = err
	close(f.done)
}

// Done is closed when the outcome is known.
func (f *Confirm) Done() <-chan struct{} { return f.done }

// Err is the outcome once Done is closed (nil: confirmed), as Wait returns
// it; before that it is nil and means nothing.
func (f *Confirm) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Wait returns nil once the broker confirmed the message, ErrReturned (a
// *ReturnedError), ErrNacked or ErrConnectionLost, or ctx's error if ctx
// ends first (the outcome is then unknown).
func (f *Confirm) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Publish sends m and returns at once with a Confirm to wait on. It waits
// for a connection while there is none, until ctx ends.
func (p *Publisher) Publish(ctx context.Context, m Message) (*Confirm, error) {
	return p.publish(ctx, m, nil)
}

// PublishNotify sends m as Publish does, and calls done once with the
// outcome Confirm.Wait would return (never a context's error), on the
// goroutine that reads the channel's confirms: no goroutine waits per
// message and no hand-off follows the confirm. done must be quick and
// must not wait for anything that waits for this publisher (a publish, a
// Redis call): the confirms of its channel queue up behind it. When
// PublishNotify returns an error, done is never called.
func (p *Publisher) PublishNotify(ctx context.Context, m Message, done func(error)) error {
	if done == nil {
		return errors.New("publish: PublishNotify needs a done function")
	}
	_, err := p.publish(ctx, m, done)
	return err
}

func (p *Publisher) publish(ctx context.Context, m Message, done func(error)) (*Confirm, error) {
	for {
		if err := p.WaitReady(ctx); err != nil {
			return nil, err
		}
		p.mu.Lock()
		chans := p.chans
		p.mu.Unlock()
		if len(chans) == 0 {
			continue
		}
		c := pick(chans)
		f, err := c.publish(ctx, m, done)
		if errors.Is(err, errChannelDead) {
			// The channel is being reopened; another one, or the same one
			// shortly, will take the message.
			if err := backoff.Sleep(ctx, 10*time.Millisecond); err != nil {
				return nil, err
			}
			continue
		}
		return f, err
	}
}

var errChannelDead = errors.New("channel closed")

// fillDepth is how many unconfirmed publishes a channel takes before pick
// spills onto the next one: at a steady load, the publishes of a moment
// fit in one channel; a saturated scanner (a window of 160) fills them
// all. The package doc has the A/B against round robin.
const fillDepth = 32

// pick returns the first channel with fewer than fillDepth publishes
// awaiting a confirm, else the least loaded one (while every channel is
// dead, the first, whose publish says so).
func pick(chans []*channel) *channel {
	best, bestLoad := chans[0], chans[0].load.Load()
	for _, c := range chans {
		l := c.load.Load()
		if l < fillDepth {
			return c
		}
		if l < bestLoad {
			best, bestLoad = c, l
		}
	}
	return best
}

func (c *channel) publish(ctx context.Context, m Message, done func(error)) (*Confirm, error) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return nil, errChannelDead
	}
	ch := c.ch
	seq := ch.GetNextPublishSeqNo()
	f := &Confirm{id: m.MessageID, notify: done}
	if done == nil {
		f.done = make(chan struct{})
	}
	c.pending[seq] = f
	c.setLoad()
	c.mu.Unlock()
	mode := m.DeliveryMode
	if mode == 0 {
		mode = amqp.Persistent
	}
	err := ch.PublishWithContext(ctx, m.Exchange, m.RoutingKey, true, false, amqp.Publishing{
		Headers:         m.Headers,
		ContentType:     m.ContentType,
		ContentEncoding: m.ContentEncoding,
		CorrelationId:   m.CorrelationID,
		ReplyTo:         m.ReplyTo,
		Expiration:      m.Expiration,
		Type:            m.Type,
		AppId:           m.AppID,
		Priority:        m.Priority,
		DeliveryMode:    mode,
		MessageId:       m.MessageID,
		Timestamp:       m.Timestamp,
		Body:            m.Body,
	})
	if err != nil {
		c.mu.Lock()
		delete(c.pending, seq)
		c.setLoad()
		c.mu.Unlock()
		if !f.fired.CompareAndSwap(false, true) {
			// The connection closed under the publish and failAll told
			// its outcome (ErrConnectionLost) already: that stands.
			return f, nil
		}
		if errors.Is(err, amqp.ErrClosed) {
			return nil, errChannelDead
		}
		return nil, fmt.Errorf("publish %q: %w", m.MessageID, err)
	}
	return f, nil
}

func (p *Publisher) forgetExchanges() {
	p.exMu.Lock()
	clear(p.exSeen)
	p.exMu.Unlock()
}

// ExchangeExists reports whether exchange name exists (passive declare on a
// throwaway channel). "" (the default exchange) always exists. Positive
// answers are cached for Options.ExchangeTTL; negative ones are not.
func (p *Publisher) ExchangeExists(ctx context.Context, name string) (bool, error) {
	if name == "" {
		return true, nil
	}
	p.exMu.Lock()
	seen, ok := p.exSeen[name]
	p.exMu.Unlock()
	if ok && time.Since(seen) < p.opts.ExchangeTTL {
		return true, nil
	}
	if err := p.WaitReady(ctx); err != nil {
		return false, err
	}
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn == nil {
		return false, ErrConnectionLost
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("check exchange %q: %w", name, err)
	}
	err = ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false, nil // the server closed the probe channel
	}
	_ = ch.Close()
	if err != nil {
		return false, fmt.Errorf("check exchange %q: %w", name, err)
	}
	p.exMu.Lock()
	p.exSeen[name] = time.Now()
	p.exMu.Unlock()
	return true, nil
}
