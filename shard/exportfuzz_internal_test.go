package shard

import (
	"bytes"
	"testing"
	"time"
)

// FuzzExportLine: a line enqueue -f accepts, stored and exported, reads
// back into the same message: its export, parsed and exported again, is
// the same bytes (export -> import -> export), for scheduled and dead
// messages alike.
func FuzzExportLine(f *testing.F) {
	f.Add([]byte(`{"id":"a","topic":"t","delay_ms":1000,"body":"hi","headers":{"k":"v","n":{"$int16":7}}}`))
	f.Add([]byte(`{"id":"b","exchange":"x","routing_key":"rk","at_ms":1800000000000,"body_base64":"/w==","retry":["15s","3m"],"retry_step":1,"attempts":2}`))
	f.Add([]byte(`{"id":"c","topic":"t","dead":{"since_ms":1700000000000,"reason":"NO_ROUTE"},"attempts":3,"priority":5,"timestamp":1700000000}`))
	f.Add([]byte(`{"id":"d","exchange":"","routing_key":"q","at_ms":1800000000000,"expires_at_ms":1800000060000,"max_lateness_ms":600000,"content_type":"application/json","body":"<&>"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := ParseLine(raw)
		if err != nil {
			return
		}
		export := func(m Message) ([]byte, bool) {
			dead := m.Dead
			m.Dead = nil
			env, err := m.envelope(1<<20, time.UnixMilli(1_700_000_000_000))
			if err != nil {
				return nil, false // the producer would refuse it: never stored
			}
			if dead != nil {
				line, err := appendDeadLine(nil, Dead{ID: m.ID, Since: dead.Since, Reason: dead.Reason}, m.Attempts, &env)
				if err != nil {
					t.Fatalf("export of dead %q: %v", raw, err)
				}
				return line, true
			}
			due := m.At.UnixMilli()
			if m.At.IsZero() {
				due = 1_700_000_000_000 + m.Delay.Milliseconds()
			}
			line, err := AppendLine(nil, m.ID, due, m.Attempts, &env)
			if err != nil {
				t.Fatalf("export of %q: %v", raw, err)
			}
			return line, true
		}
		first, ok := export(m)
		if !ok {
			return
		}
		back, err := ParseLine(bytes.TrimSuffix(first, []byte("\n")))
		if err != nil {
			t.Fatalf("the export of %q does not read back: %v\n%s", raw, err, first)
		}
		again, ok := export(back)
		if !ok || !bytes.Equal(first, again) {
			t.Fatalf("export -> import -> export of %q differs:\n%s\n%s", raw, first, again)
		}
	})
}
