package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Notice is a wake-up notice: shard Shard has a new head, due at DueMs.
type Notice struct {
	Shard int
	DueMs int64
}

// ErrBadNotice is wrapped by Notices.Next for a payload that is not a
// notice (something else published on the channel); the stream goes on.
var ErrBadNotice = errors.New("bad wake-up notice")

// ErrNoticesClosed: the stream was closed.
var ErrNoticesClosed = errors.New("wake-up notices closed")

// Notices is a subscription to the namespace's wake-up notices. go-redis
// resubscribes by itself after a reconnect; notices published meanwhile
// are lost (Pub/Sub is best effort), which the scanners' patrol covers.
type Notices struct {
	sub *redis.PubSub
	ch  <-chan *redis.Message
}

// Notices subscribes to the namespace's wake-up notices and returns once
// Redis has confirmed the subscription, so no notice published after it
// returns is missed. The caller closes the stream.
func (s *Store) Notices(ctx context.Context) (*Notices, error) {
	sub := s.rdb.Subscribe(ctx, s.wake)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("subscribe to wake-up notices: %w", err)
	}
	return &Notices{sub: sub, ch: sub.Channel()}, nil
}

// Next returns the next notice. It fails with ctx's error when ctx ends,
// ErrNoticesClosed after Close, and ErrBadNotice (go on reading) for a
// payload that does not parse.
func (n *Notices) Next(ctx context.Context) (Notice, error) {
	select {
	case <-ctx.Done():
		return Notice{}, ctx.Err()
	case m, ok := <-n.ch:
		if !ok {
			return Notice{}, ErrNoticesClosed
		}
		i, due, err := ParseNotice(m.Payload)
		if err != nil {
			return Notice{}, fmt.Errorf("%w: %w", ErrBadNotice, err)
		}
		return Notice{Shard: i, DueMs: due}, nil
	}
}

// Close ends the subscription.
func (n *Notices) Close() error { return n.sub.Close() }
