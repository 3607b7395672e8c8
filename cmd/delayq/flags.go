package main

import (
	"flag"
	"fmt"
	"time"
)

// durationValue is a flag.Value for a duration whose error shows the forms
// it accepts (flag.Duration's says only "parse error").
type durationValue time.Duration

func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: want a number and a unit, e.g. 90s, 30m, 36h or 1h30m (units ns, us, ms, s, m, h; there is no d: write 24h)", s)
	}
	*d = durationValue(v)
	return nil
}

// parseAt reads a time flag (--at, --expires-at): an RFC 3339 time with its zone.
func parseAt(flag, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time with its zone, e.g. 2030-01-01T09:00:00Z or 2030-01-01T09:00:00+02:00", flag, s)
	}
	return t, nil
}
