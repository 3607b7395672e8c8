package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Notice is a wake-up notice: shard Shard has a new head, due at DueMs.
// Or, when Resubscribed is set (and Shard and DueMs are not), word that
// the subscription was lost and made again: the notices published between
// the two are lost, so every shard's head may be earlier than the notices
// said.
type Notice struct {
	Shard        int
	DueMs        int64
	Resubscribed bool
}

// ErrBadNotice is wrapped by Notices.Next for a payload that is not a
// notice (something else published on the channel); the stream goes on.
var ErrBadNotice = errors.New("bad wake-up notice")

// ErrNoticesClosed: the stream was closed.
var ErrNoticesClosed = errors.New("wake-up notices closed")

// Notices is a subscription to the namespace's wake-up notices. go-redis
// resubscribes by itself after a reconnect (Redis restarted, failed over,
// or the connection broke); notices published meanwhile are lost (Pub/Sub
// is best effort), and Next says when that happened (Notice.Resubscribed).
type Notices struct {
	sub *redis.PubSub
	ch  <-chan any // *redis.Message, or *redis.Subscription after a reconnect
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
	return &Notices{sub: sub, ch: sub.ChannelWithSubscriptions()}, nil
}

// Next returns the next notice, or one with Resubscribed set after the
// subscription was made again. It fails with ctx's error when ctx ends,
// ErrNoticesClosed after Close, and ErrBadNotice (go on reading) for a
// payload that does not parse.
func (n *Notices) Next(ctx context.Context) (Notice, error) {
	select {
	case <-ctx.Done():
		return Notice{}, ctx.Err()
	case v, ok := <-n.ch:
		if !ok {
			return Notice{}, ErrNoticesClosed
		}
		m, ok := v.(*redis.Message)
		if !ok { // a *redis.Subscription: subscribed again
			return Notice{Resubscribed: true}, nil
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
