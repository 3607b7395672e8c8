package shard

import (
	"context"
	"time"
)

// Test hooks of the far tier: its keys, and one promote call on raw
// records, as a promoter that crashes after it would have made it.

func FarBucketKey(ns string, i int, b int64) string { return farKeysOf(ns, i).bucket(b) }
func FarDirKey(ns string, i int) string             { return farKeysOf(ns, i).dir() }

func (s *Store) PromoteRecords(ctx context.Context, i int, b int64, raw []string) (Promotion, error) {
	var p Promotion
	fs, _, err := s.farSettings(ctx)
	if err != nil {
		return p, err
	}
	if _, err := s.run1(ctx, farSealScript, []string{farKeysOf(s.ns, i).dir(), farKeysOf(s.ns, i).meta()}, b).Int(); err != nil {
		return p, err
	}
	err = s.promoteRecords(ctx, i, fs, b, b*fs.BucketWidth.Milliseconds(), raw, &p)
	return p, err
}

func FarIndexKey(ns string, i int, id string, slots int) string {
	return farKeysOf(ns, i).index(id, slots)
}

func FarBlocksKey(ns string, i int, b int64) string { return farKeysOf(ns, i).blocks(b) }

// EnvelopeOf is the envelope m is stored as.
func EnvelopeOf(m Message, now time.Time) (Envelope, error) { return m.envelope(DefaultMaxBody, now) }
