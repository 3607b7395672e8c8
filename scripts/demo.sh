#!/usr/bin/env bash
# The delayq demo: installs what is missing (apt packages; Consul is built
# once into ~/.cache/delayq, about 6 minutes the first time), builds delayq,
# starts Redis, RabbitMQ and Consul on loopback (temporary directories, free
# ports), runs a fleet of 3 scanners with M in Consul, schedules a few
# hundred "cancel order N" messages 1-10 s ahead (some cancelled, some
# rescheduled), resizes M live (4 -> 16 -> 2), consumes the messages and
# prints a live summary of how on time they arrive. Everything it started is
# stopped when it ends or on Ctrl-C. Arguments go to delayq-demo
# (-orders, -scanners, -shards, -resize, -no-consul).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
scripts/install.sh
export DELAYQ_CONSUL_BIN
DELAYQ_CONSUL_BIN=$(scripts/install-consul.sh)
mkdir -p bin
go build -o bin/delayq ./cmd/delayq
go build -o bin/delayq-demo ./cmd/delayq-demo
exec bin/delayq-demo -delayq bin/delayq "$@"
