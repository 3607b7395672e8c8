package shard

import (
	"context"
	"fmt"
	"time"
)

// EndSession records that web console session id ended (its owner signed
// out), until the session would have expired anyway; after that the key is
// gone and the expiry alone refuses the session. Not waited for on
// replicas: a failover may forget a sign-out, which the session's expiry
// still bounds.
func (s *Store) EndSession(ctx context.Context, id string, until time.Time) error {
	left := time.Until(until)
	if left < time.Millisecond {
		return nil // expired already
	}
	if err := s.rdb.Set(ctx, SessionEndedKey(s.ns, id), 1, left).Err(); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// SessionEnded reports whether web console session id was ended by
// EndSession.
func (s *Store) SessionEnded(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.Exists(ctx, SessionEndedKey(s.ns, id)).Result()
	if err != nil {
		return false, fmt.Errorf("check session: %w", err)
	}
	return n == 1, nil
}
