#!/usr/bin/env bash
# Installs what delayq's tests and demo need and are missing: redis-server,
# rabbitmq-server, prometheus (for promtool and a Prometheus that the tests
# run against the dashboard and alert rules), python3-pika (a non-Go AMQP
# client) and chromium (the console's browser tests) from Debian's apt
# repositories. Idempotent: a second run
# installs nothing. No package starts a service here; the tests and the demo
# start their own servers on loopback.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || need+=(prometheus)
# A client that is not Go, for the tests of what non-Go consumers see (Debian's python3, not a pyenv shim).
/usr/bin/python3 -c 'import pika' >/dev/null 2>&1 || need+=(python3-pika)
# A real browser for the web console's tests (driven by chromedp).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || {
  echo "install.sh: Go is not installed; delayq needs Go 1.26 (https://go.dev/doc/install)" >&2
  exit 1
}
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install.sh: need root or sudo to install ${need[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install.sh: installing ${need[*]} from apt"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
