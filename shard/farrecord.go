package shard

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// The records of the far-future tier (doc.go, "The far-future tier"): how
// a message waits in its bucket until promotion. This file is the codec
// only; the scripts and promotion that use it come with the tier.
//
// A record is: varint length of the rest, varint id length, the id, varint
// due offset from the bucket's start (ms), varint sequence (which write of
// the id this is: the id index names the live one), then the envelope
// (AppendEnvelope) to the end. A block is records back to back; a sealed
// block is one zstd frame of a block (FarCodec).

// FarRecord is one message of a far bucket.
type FarRecord struct {
	ID       string
	DueMs    int64  // unix ms, at or after the bucket's start
	Seq      uint64 // the write of the id this record is
	Envelope []byte // AppendEnvelope's bytes; aliases the block when decoded
}

// AppendFarRecord appends r, a record of the bucket that starts at
// startMs, to dst. An id that a producer would refuse, or a due time
// outside the bucket's start to the year 2200, is an *InvalidError.
func AppendFarRecord(dst []byte, r FarRecord, startMs int64) ([]byte, error) {
	if err := validateID(r.ID); err != nil {
		return dst, err
	}
	if r.DueMs > maxAt.UnixMilli() {
		return dst, invalid("due", "%d is after the year 2200", r.DueMs)
	}
	if r.DueMs < startMs {
		return dst, invalid("due", "%d is before its bucket's start %d", r.DueMs, startMs)
	}
	var head [3 * binary.MaxVarintLen64]byte
	h := binary.AppendUvarint(head[:0], uint64(len(r.ID)))
	n := len(h) + len(r.ID)
	h2 := binary.AppendUvarint(h[len(h):], uint64(r.DueMs-startMs))
	h2 = binary.AppendUvarint(h2, r.Seq)
	n += len(h2) + len(r.Envelope)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, h...)
	dst = append(dst, r.ID...)
	dst = append(dst, h2...)
	return append(dst, r.Envelope...), nil
}

// FarRecordError is a record of a block that does not decode: where it
// starts, its id when that much could be read, and why. The records after
// it decode as usual, unless its length could not be read (then it is the
// block's last error, and what follows is not read).
type FarRecordError struct {
	Offset int
	ID     string
	Err    error
}

func (e *FarRecordError) Error() string {
	if e.ID != "" {
		return fmt.Sprintf("far record %q at byte %d: %v", e.ID, e.Offset, e.Err)
	}
	return fmt.Sprintf("far record at byte %d: %v", e.Offset, e.Err)
}

func (e *FarRecordError) Unwrap() error { return e.Err }

// DecodeFarRecords decodes the records of block, a block of the bucket
// that starts at startMs. A record that does not decode is skipped and
// reported (each error wraps ErrCorrupt), so one bad record never costs
// the others of its block. The envelopes alias block.
func DecodeFarRecords(block []byte, startMs int64) ([]FarRecord, []*FarRecordError) {
	var recs []FarRecord
	var bad []*FarRecordError
	for off := 0; off < len(block); {
		n, w := binary.Uvarint(block[off:])
		if w <= 0 || n > uint64(len(block)-off-w) {
			return recs, append(bad, &FarRecordError{Offset: off, Err: fmt.Errorf("%w: record length unreadable or past the block's end", ErrCorrupt)})
		}
		rec := block[off+w : off+w+int(n)]
		r, err := decodeFarRecord(rec, startMs)
		if err != nil {
			bad = append(bad, &FarRecordError{Offset: off, ID: r.ID, Err: err})
		} else {
			recs = append(recs, r)
		}
		off += w + int(n)
	}
	return recs, bad
}

func decodeFarRecord(b []byte, startMs int64) (FarRecord, error) {
	var r FarRecord
	idLen, w := binary.Uvarint(b)
	if w <= 0 || idLen < 1 || idLen > MaxIDLen || idLen > uint64(len(b)-w) {
		return r, fmt.Errorf("%w: id length", ErrCorrupt)
	}
	r.ID = string(b[w : w+int(idLen)])
	if err := validateID(r.ID); err != nil {
		id := r.ID
		r.ID = ""
		return r, fmt.Errorf("%w: id %q: %w", ErrCorrupt, id, err)
	}
	b = b[w+int(idLen):]
	off, w := binary.Uvarint(b)
	if limit := maxAt.UnixMilli() - startMs; w <= 0 || limit < 0 || off > uint64(limit) {
		return r, fmt.Errorf("%w: due offset", ErrCorrupt)
	}
	r.DueMs = startMs + int64(off)
	b = b[w:]
	if r.Seq, w = binary.Uvarint(b); w <= 0 {
		return r, fmt.Errorf("%w: sequence", ErrCorrupt)
	}
	r.Envelope = b[w:]
	if len(r.Envelope) == 0 {
		return r, fmt.Errorf("%w: no envelope", ErrCorrupt)
	}
	return r, nil
}

// FarCodec compresses and decompresses sealed far blocks: zstd at its
// fastest level (doc.go says why). Safe for concurrent use; Close frees
// its buffers.
type FarCodec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// maxFarBlock bounds a decompressed block: 256 records of the largest
// envelopes a message may have, well within it.
const maxFarBlock = 64 << 20

// NewFarCodec returns a codec.
func NewFarCodec() (*FarCodec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("far codec: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxFarBlock))
	if err != nil {
		return nil, fmt.Errorf("far codec: %w", err)
	}
	return &FarCodec{enc: enc, dec: dec}, nil
}

// Compress appends the compressed form of block to dst.
func (c *FarCodec) Compress(dst, block []byte) []byte { return c.enc.EncodeAll(block, dst) }

// Decompress appends the block that packed holds to dst. What is not a
// zstd frame of at most 64 MiB is an error wrapping ErrCorrupt.
func (c *FarCodec) Decompress(dst, packed []byte) ([]byte, error) {
	out, err := c.dec.DecodeAll(packed, dst)
	if err != nil {
		return dst, fmt.Errorf("%w: far block: %w", ErrCorrupt, err)
	}
	return out, nil
}

// Close frees the codec's buffers; it must not be used after.
func (c *FarCodec) Close() {
	_ = c.enc.Close()
	c.dec.Close()
}
