#!/usr/bin/env bash
# The delayq demo: installs what is missing, builds delayq, starts Redis and
# RabbitMQ on loopback (temporary directories, free ports), runs a fleet of
# 2 scanners, schedules a few hundred "cancel order N" messages 1-10 s ahead
# (some cancelled, some rescheduled), consumes them and prints a live
# summary of how on time they arrive. Everything it started is stopped when
# it ends or on Ctrl-C. Arguments go to delayq-demo (-orders, -scanners, -shards).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
scripts/install.sh
mkdir -p bin
go build -o bin/delayq ./cmd/delayq
go build -o bin/delayq-demo ./cmd/delayq-demo
exec bin/delayq-demo -delayq bin/delayq "$@"
