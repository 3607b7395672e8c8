package shard_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// farRecord is a record of the far-future tier as shard/doc.go designs it
// (id, due offset in its bucket, the envelope's 27 bytes of framing, the
// body), with an order event's JSON as body: 100 bytes, or 1 KiB with line
// items and a note; ids of 16 random hex digits.
func farRecord(r *rand.Rand, i int, big bool) []byte {
	var body []byte
	if big {
		words := []string{"order", "cancel", "unpaid", "payment", "pending", "customer", "reminder", "trial", "ends", "renewal", "invoice", "due", "shipped", "refund"}
		body = fmt.Appendf(nil, `{"order":"o%09d","user":%d,"event":"cancel_unpaid","items":[`, i, r.IntN(1e8))
		for j := range 12 {
			if j > 0 {
				body = append(body, ',')
			}
			body = fmt.Appendf(body, `{"sku":"SKU-%06d","qty":%d,"cents":%d}`, r.IntN(1e6), 1+r.IntN(8), 100+r.IntN(99900))
		}
		body = append(body, `],"note":"`...)
		for len(body) < 1022 {
			body = append(body, words[r.IntN(len(words))]...)
			body = append(body, ' ')
		}
		body = append(body[:1022], `"}`...)
	} else {
		body = fmt.Appendf(nil, `{"order":"o%09d","user":%d,"event":"cancel_unpaid","cents":%d,"cur":"EUR","ref":"`, i, r.IntN(1e8), 100+r.IntN(99900))
		for len(body) < 98 {
			body = fmt.Appendf(body, "%x", r.IntN(16))
		}
		body = append(body[:98], `"}`...)
	}
	rec := fmt.Appendf(nil, "%016x", r.Uint64())
	rec = binary.AppendUvarint(rec, uint64(r.IntN(600_000)))
	rec = append(rec, 2, 12)
	rec = append(rec, "order.cancel"...)
	rec = binary.AppendUvarint(rec, uint64(1_795_600_000_000+3*i))
	rec = append(rec, make([]byte, 7)...)
	return append(rec, body...)
}

// BenchmarkFarBlockCompression compresses blocks of 256 far-tier records
// with the candidates for the far-future tier, and reports what a record
// costs stored and the CPU to encode and decode it (go test -run '^$'
// -bench FarBlockCompression ./shard/).
func BenchmarkFarBlockCompression(b *testing.B) {
	const blocks, per = 100, 256
	zfast, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	zdef, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	zdec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	codecs := []struct {
		name     string
		enc, dec func([]byte) []byte
	}{
		{"zstd-fastest", func(p []byte) []byte { return zfast.EncodeAll(p, nil) }, func(c []byte) []byte { o, _ := zdec.DecodeAll(c, nil); return o }},
		{"zstd-default", func(p []byte) []byte { return zdef.EncodeAll(p, nil) }, func(c []byte) []byte { o, _ := zdec.DecodeAll(c, nil); return o }},
		{"s2", func(p []byte) []byte { return s2.Encode(nil, p) }, func(c []byte) []byte { o, _ := s2.Decode(nil, c); return o }},
		{"s2-better", func(p []byte) []byte { return s2.EncodeBetter(nil, p) }, func(c []byte) []byte { o, _ := s2.Decode(nil, c); return o }},
	}
	for _, big := range []bool{false, true} {
		r := rand.New(rand.NewPCG(1, 2))
		raw := make([][]byte, blocks)
		var samples [][]byte // records to train a dictionary on: those of other blocks than the measured ones
		for range 20 * per {
			samples = append(samples, farRecord(r, 0, big))
		}
		size := 0
		for k := range raw {
			var buf bytes.Buffer
			for j := range per {
				rec := farRecord(r, k*per+j, big)
				buf.Write(binary.AppendUvarint(nil, uint64(len(rec))))
				buf.Write(rec)
			}
			raw[k] = buf.Bytes()
			size += buf.Len()
		}
		bodies := "json100"
		if big {
			bodies = "json1k"
		}
		trained, err := dict.BuildZstdDict(samples, dict.Options{MaxDictSize: 16 << 10, HashBytes: 6, ZstdDictID: 1})
		if err != nil {
			b.Fatal(err)
		}
		zdict, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderDict(trained), zstd.WithEncoderConcurrency(1))
		zddec, _ := zstd.NewReader(nil, zstd.WithDecoderDicts(trained), zstd.WithDecoderConcurrency(1))
		withDict := append(codecs, struct {
			name     string
			enc, dec func([]byte) []byte
		}{"zstd-fastest-dict", func(p []byte) []byte { return zdict.EncodeAll(p, nil) }, func(c []byte) []byte { o, _ := zddec.DecodeAll(c, nil); return o }})
		for _, c := range withDict {
			b.Run(bodies+"/"+c.name, func(b *testing.B) {
				packed := make([][]byte, blocks)
				stored := 0
				for k, p := range raw {
					packed[k] = c.enc(p)
					stored += len(packed[k])
					if !bytes.Equal(c.dec(packed[k]), p) {
						b.Fatalf("%s does not give back block %d", c.name, k)
					}
				}
				b.ResetTimer()
				for n := range b.N {
					c.dec(packed[n%blocks])
					c.enc(raw[n%blocks])
				}
				b.ReportMetric(float64(stored)/float64(blocks*per), "stored-B/rec")
				b.ReportMetric(float64(size)/float64(stored), "ratio")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per)/1e3, "enc+dec-µs/rec")
			})
		}
	}
}
