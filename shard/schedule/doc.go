// Package schedule computes when a recurring schedule's occurrences
// happen: pure calendar arithmetic, no I/O. The shard package stores
// schedules and turns each occurrence into an ordinary delayq message; the
// scanners call Next when they fire one.
//
// # Specs
//
// A spec is 5-field cron (minute hour day-of-month month day-of-week), the
// same with a leading seconds field, a descriptor (@yearly, @monthly,
// @weekly, @daily, @hourly; @annually and @midnight are aliases), or
// @every <duration> (at least a second). Cron fields are parsed by
// github.com/robfig/cron/v3's parser, the common choice in Go; its runner
// is not used, because it computes next times in the zone itself and has
// had daylight-saving bugs. Here the rule runs on a clock without
// daylight saving (the wall-clock reading, as if it were UTC), and each
// matching reading is then mapped to an instant of the zone (Next):
//
//   - a reading that exists once is that instant;
//   - a reading a fall-back repeats is its first instant (the earlier
//     offset), so it happens once;
//   - a reading a spring-forward gap skips is the first instant after the
//     gap, and all the readings of one gap, with the reading at the gap's
//     end, are one occurrence: a daily 02:30 in New York happens at 03:00
//     EDT on the day of the change, */15 * * * * once at 03:00.
//
// The mapping never goes backwards, so the occurrences of a rule are the
// distinct mapped instants in order. @every intervals are absolute
// durations from an anchor (the schedule's start) and ignore daylight
// saving. Tests pin New York, Berlin, Lord Howe (a 30-minute shift) and
// Santiago (no midnight on its spring-forward day) to instants written
// by hand and checked with zdump.
//
// # Guarantees and non-guarantees
//
// Next is exact to the second (cron) or the nanosecond (@every), and looks
// five years ahead: a rule with nothing in that time (February 30) is
// ErrNoOccurrence. Zones come from the IANA database the binary carries
// (cmd/delayq embeds time/tzdata), so a zone's rules are those of the
// build: a government's late change of its rules needs a new build.
// "Local" is refused, since it names a different zone on each machine.
// The L, W and # extensions of Quartz are not supported (robfig/cron does
// not read them).
package schedule
