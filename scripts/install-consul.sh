#!/usr/bin/env bash
# Builds Consul v1.16.3 (MPL-2.0, the last version the Go module proxy serves
# under that licence) from the Go module proxy into a cache directory
# outside the repo, and prints the binary's path. A cached binary is reused:
# about 6 minutes and 2 GB of RAM the first time, instant afterwards.
#
#   DELAYQ_CACHE  cache directory (default ~/.cache/delayq)
#
# Consul's go.mod has replace directives, so `go install` cannot build it;
# a throwaway wrapper module that requires it (repeating its excludes) can.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin"
version=v1.16.3
cache="${DELAYQ_CACHE:-$HOME/.cache/delayq}"
bin="$cache/consul-$version/consul"
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
echo "install-consul.sh: building consul $version into $bin (about 6 minutes the first time)" >&2
work=$(mktemp -d -t delayq-consul-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/consul@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "install-consul.sh: could not download consul $version" >&2; exit 1; }
cat > "$work/go.mod" <<GOMOD
module delayq.local/consulbuild

go 1.20

require github.com/hashicorp/consul $version

exclude (
	github.com/hashicorp/go-msgpack v1.1.5
	github.com/hashicorp/go-msgpack v1.1.6
)
GOMOD
cp "$src/main.go" "$work/main.go"
cp "$src/go.sum" "$work/go.sum"
chmod u+w "$work/main.go" "$work/go.sum"
mkdir -p "$(dirname "$bin")"
(cd "$work" && GONOSUMDB=github.com/hashicorp/consul/envoyextensions GOTOOLCHAIN=local \
  go build -mod=mod -trimpath -ldflags '-s -w' -o "$bin.tmp" .) >&2
mv "$bin.tmp" "$bin"
echo "$bin"
