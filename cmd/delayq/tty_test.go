package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	start := time.Unix(0, 0)
	p := &progress{start: start, total: 1000}
	if got := p.line(500, 250, start.Add(2*time.Second)); got != "500 enqueued, 250/s, 25%, ETA 6s" {
		t.Errorf("line = %q", got)
	}
	p.total = 0 // stdin: size unknown, no ETA
	if got := p.line(500, 250, start.Add(2*time.Second)); got != "500 enqueued, 250/s" {
		t.Errorf("line without size = %q", got)
	}
	var buf bytes.Buffer
	if isTerminal(&buf) {
		t.Error("a buffer is not a terminal")
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if isTerminal(devNull) {
		t.Error("/dev/null, a character device, is not a terminal")
	}
}

func TestWatchFlags(t *testing.T) {
	// The watch loop itself runs end to end in TestStatsWatchAndQuietProgress.
	fs, _, watch, every := watchFlags()
	if err := fs.Parse([]string{"--watch", "--interval", "500ms"}); err != nil || !*watch || *every != 500*time.Millisecond {
		t.Fatalf("flags: %v %v %v", err, *watch, *every)
	}
	if !strings.Contains(fs.Lookup("interval").Usage, "--watch") {
		t.Error("interval flag does not say it goes with --watch")
	}
}
