#!/usr/bin/env bash
# One-command benchmark: installs what is missing, builds delayq, starts its
# own Redis and RabbitMQ on loopback, measures the ceilings (claim script
# alone, bare amqp091-go with confirms) and delayq's scenarios (saturated
# dispatch, steady load at 30/50% of the shared-core limit (d) with 1-3 scanners
# and every claim batch, a burst
# all due at one millisecond, an idle fleet, memory per pending message, a
# bulk cancel by id prefix, the
# AMQP ingress against bare consume+ack and bare EnqueueBatch, flow control:
# a topic limited to half of saturated dispatch beside an unlimited one) in
# the same run, and prints a table with PASS/FAIL per target plus bench.json.
#
#   scripts/bench.sh            full run (20-40 minutes on 2 cores, as fast as the host is)
#   scripts/bench.sh -quick     every scenario with small sizes (about 3 minutes)
#   BEFORE=<git revision> scripts/bench.sh -only flow
#                               flow control's cost with no limit set, A/B against
#                               that revision's build (e.g. the commit before flow
#                               control), and a limited topic beside an unlimited one
#   BEFORE=<git revision> scripts/bench.sh -only tracing
#                               tracing's cost when off, A/B against that revision
#                               (e.g. the commit before tracing), and when on with
#                               every message sampled and exported
#   BEFORE=<git revision> scripts/bench.sh -only ab -batches 8 -rounds 5 -scanners 1,2 -limit 6000
#                               one change's own effect: saturated dispatch and
#                               steady runs, this build and that revision's in turn
# Other flags go to delayq-bench (see: go run ./cmd/delayq-bench -h).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
scripts/install.sh
mkdir -p bin
go build -o bin/delayq ./cmd/delayq
go build -o bin/delayq-bench ./cmd/delayq-bench
before=()
if [ -n "${BEFORE:-}" ]; then
  tree=$(mktemp -d -t delayq-before.XXXXXX)
  git worktree add --detach -q "$tree" "$BEFORE"
  (cd "$tree" && go build -o "$OLDPWD/bin/delayq-before" ./cmd/delayq)
  git worktree remove --force "$tree"
  before=(-before bin/delayq-before)
fi
exec bin/delayq-bench -delayq bin/delayq "${before[@]}" "$@"
