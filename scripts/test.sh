#!/usr/bin/env bash
# Runs delayq's whole test suite against real servers:
#   1. installs redis-server, rabbitmq-server, prometheus, python3-pika and
#      chromium if missing (scripts/install.sh)
#      and builds Consul into ~/.cache/delayq once (scripts/install-consul.sh);
#   2. go vet ./... and staticcheck (a tool in go.mod: go tool staticcheck);
#   3. go test -race -count=1 ./... -- each test package starts its own Redis,
#      RabbitMQ and Consul on 127.0.0.1, free non-default ports, temporary
#      directories, and stops them when it ends; the few tests that measure
#      a consumer's seconds run after the rest, alone;
#   4. kills, by PID, any server a crashed test binary left behind.
# Under CI=true a test that finds no server fails instead of skipping.
# Extra arguments go to go test (e.g. scripts/test.sh -run TestEndToEnd).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

scripts/install.sh || exit 1
export DELAYQ_CONSUL_BIN
DELAYQ_CONSUL_BIN=$(scripts/install-consul.sh) || exit 1

export DELAYQ_TEST_PIDFILE
DELAYQ_TEST_PIDFILE=$(mktemp -t delayq-test-pids.XXXXXX)
log=$(mktemp -t delayq-test-log.XXXXXX)
cleanup() {
  while read -r pgid; do
    [ -n "$pgid" ] && kill -9 -- "-$pgid" 2>/dev/null
  done < "$DELAYQ_TEST_PIDFILE"
  rm -f "$DELAYQ_TEST_PIDFILE" "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== go vet ./..."
go vet ./... || exit 1
echo "== staticcheck ./..."
go tool staticcheck ./... || exit 1

echo "== go test -race -count=1 ./... (real Redis, RabbitMQ and Consul; full log on failure)"
start=$(date +%s)
# The tests that measure a consumer's seconds under a rate limit, or the
# shares and lateness of release classes, run alone, after the rest, so
# that other packages' tests do not crowd them; so do the kill tests of
# the far tier and of release classes, and the live move to a cluster,
# whose 200,000 and 120,000 messages would crowd the others (and, crowded,
# took over two minutes to arrive). One at a time (-p 1 -parallel 1): two
# of them side by side starve each other (the live move then ran until the
# messages written to both sides fell due, and published some twice), and
# one at a time takes no longer (cmd/delayq's four: 310 s, against about
# as much two at a time).
alone='^(TestRateLimitHoldsForTheFleet|TestLimitChangeTakesEffectWithinASecond|TestLimitedDrainSurvivesAScannerKill|TestRateLimitHoldsOnCluster|TestFarPromotionSurvivesKills|TestFairReleaseKeepsAClassOnTime|TestFairReleaseSplitsByWeight|TestFairReleaseSurvivesKillsAndResize|TestFairReleaseAtScale|TestLiveMoveToClusterAtScale)$'
if [ $# -gt 0 ]; then
  go test -race -count=1 -timeout 25m -v "$@" ./... >"$log" 2>&1
  rc=$?
else
  go test -race -count=1 -timeout 25m -v -skip "$alone" ./... >"$log" 2>&1
  rc=$?
  echo "== go test -race -count=1 -p 1 -parallel 1 -run '$alone' (alone)"
  go test -race -count=1 -timeout 15m -v -p 1 -parallel 1 -run "$alone" ./scanner ./cmd/delayq >>"$log" 2>&1 || rc=1
fi
# Package results and the lines that report lateness, kills and duplicates.
grep -E '^(ok|FAIL|panic:)|^\s+[a-z0-9_]+_test\.go:[0-9]+: .*(lateness|SIGKILL|duplicates|drained|delivered,|change seen)' "$log"
if [ $rc -ne 0 ]; then
  echo "== failures"
  grep -nE -- '--- FAIL|^panic:|DATA RACE|\[build failed\]|cannot|undefined' "$log" | head -50
  # Each failed test's own lines: -v output interleaves parallel tests,
  # each block headed by "=== RUN|CONT|NAME|PAUSE <test>".
  failed_tests=$(grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' | sort -u)
  echo "== output of the failed tests (last 600 lines of it)"
  awk -v names="$failed_tests" '
    BEGIN { n = split(names, a, "\n"); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3 }
    /^[ \t]*--- (FAIL|PASS|SKIP): / { if ($3 in want) print; next }
    cur in want { print }' "$log" | tail -n 600
  echo "== end of the log (a panic or build error shows here)"
  tail -n 60 "$log"
fi
passed=$(grep -cE -- '^\s*--- PASS' "$log")
failed=$(grep -cE -- '^\s*--- FAIL' "$log")
skipped=$(grep -cE -- '^\s*--- SKIP' "$log")
echo "== $(( $(date +%s) - start ))s"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $rc
