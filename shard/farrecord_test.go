package shard_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/delayq/delayq/shard"
)

const farStart = 1_795_600_200_000 // a bucket's start, unix ms

func sampleFarBlock(tb testing.TB, n int) ([]byte, []shard.FarRecord) {
	tb.Helper()
	e := sampleEnvelope()
	env := shard.AppendEnvelope(nil, &e)
	var block []byte
	var recs []shard.FarRecord
	for j := range n {
		r := shard.FarRecord{ID: fmt.Sprintf("order-%d-cancel", j), DueMs: farStart + int64(j*997), Seq: uint64(j + 1), Envelope: env}
		var err error
		if block, err = shard.AppendFarRecord(block, r, farStart); err != nil {
			tb.Fatal(err)
		}
		recs = append(recs, r)
	}
	return block, recs
}

// TestFarRecordsRoundTrip: records encode and decode to themselves, also
// through the codec's compression; bad input to the encoder names its field.
func TestFarRecordsRoundTrip(t *testing.T) {
	block, recs := sampleFarBlock(t, 300)
	c, err := shard.NewFarCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	packed := c.Compress(nil, block)
	back, err := c.Decompress(nil, packed)
	if err != nil || !bytes.Equal(back, block) {
		t.Fatalf("decompress: %v, equal %v", err, bytes.Equal(back, block))
	}
	got, bad := shard.DecodeFarRecords(back, farStart)
	if len(bad) != 0 || len(got) != len(recs) {
		t.Fatalf("decoded %d records and %v, want %d", len(got), bad, len(recs))
	}
	for j := range recs {
		if got[j].ID != recs[j].ID || got[j].DueMs != recs[j].DueMs || got[j].Seq != recs[j].Seq || !bytes.Equal(got[j].Envelope, recs[j].Envelope) {
			t.Fatalf("record %d: %+v, want %+v", j, got[j], recs[j])
		}
	}
	t.Logf("300 records: %d bytes, %d compressed", len(block), len(packed))
	for _, c := range []struct {
		r     shard.FarRecord
		field string
	}{
		{shard.FarRecord{ID: "", DueMs: farStart}, "id"},
		{shard.FarRecord{ID: "a\x00b", DueMs: farStart}, "id"},
		{shard.FarRecord{ID: "early", DueMs: farStart - 1}, "due"},
		{shard.FarRecord{ID: "late", DueMs: 8e12}, "due"},
	} {
		var ie *shard.InvalidError
		if _, err := shard.AppendFarRecord(nil, c.r, farStart); !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%+v: %v, want an invalid %s", c.r, err, c.field)
		}
	}
	if _, err := c.Decompress(nil, []byte("not zstd")); !errors.Is(err, shard.ErrCorrupt) {
		t.Errorf("decompress garbage: %v, want ErrCorrupt", err)
	}
}

// TestCorruptFarRecordCostsOnlyItself: a record whose inside is corrupt is
// reported with its offset and id, and the records after it decode; a
// length that runs past the block ends it.
func TestCorruptFarRecordCostsOnlyItself(t *testing.T) {
	block, _ := sampleFarBlock(t, 3)
	second, _ := shard.DecodeFarRecords(block, farStart)
	// Break the second record's due offset: lengths stay right.
	var good []byte
	good, _ = shard.AppendFarRecord(good, second[0], farStart)
	broken := append([]byte{}, good...)
	broken = append(broken, 5, 1, 'x', 0xff, 0xff, 0xff) // length 5, id "x", an unterminated varint
	broken, _ = shard.AppendFarRecord(broken, second[2], farStart)
	got, bad := shard.DecodeFarRecords(broken, farStart)
	if len(got) != 2 || got[1].ID != second[2].ID || len(bad) != 1 || bad[0].ID != "x" || bad[0].Offset != len(good) ||
		!errors.Is(bad[0], shard.ErrCorrupt) {
		t.Fatalf("decoded %v and %v; want the first and third, the second reported", got, bad)
	}
	got, bad = shard.DecodeFarRecords(append(good, 0x7f, 1), farStart)
	if len(got) != 1 || len(bad) != 1 || bad[0].Offset != len(good) {
		t.Fatalf("a length past the end: %v and %v", got, bad)
	}
}

// FuzzFarRecords: no input makes the decoder panic; what decodes encodes
// again to a record that decodes to the same.
func FuzzFarRecords(f *testing.F) {
	block, _ := sampleFarBlock(f, 3)
	f.Add(block)
	f.Add([]byte{5, 1, 'x', 0xff, 0xff, 0xff})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, bad := shard.DecodeFarRecords(b, farStart)
		for _, e := range bad {
			if !errors.Is(e, shard.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", e)
			}
		}
		for _, r := range got {
			again, err := shard.AppendFarRecord(nil, r, farStart)
			if err != nil {
				t.Fatalf("a decoded record does not encode: %+v: %v", r, err)
			}
			back, bad := shard.DecodeFarRecords(again, farStart)
			if len(bad) != 0 || len(back) != 1 || back[0].ID != r.ID || back[0].DueMs != r.DueMs || back[0].Seq != r.Seq ||
				!bytes.Equal(back[0].Envelope, r.Envelope) {
				t.Fatalf("%+v encodes to a record that decodes to %+v, %v", r, back, bad)
			}
		}
	})
}
