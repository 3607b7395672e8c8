#!/usr/bin/env bash
# Builds delayq's container image from configs/Dockerfile with the first
# container builder that works here: docker (with a running daemon), podman
# or buildah. Without one it says so and exits 0: the Dockerfile's build
# line is tested by the Go tests (TestDockerfileBuildsWhatTheManifestRuns)
# either way.
#   scripts/image.sh [TAG]      (default: the git revision)
# IMAGE overrides the repository name (the Kubernetes manifest uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-ghcr.io/delayq/delayq}"
TAG="${1:-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}"

builder=""
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  builder="docker build"
elif command -v podman >/dev/null 2>&1; then
  builder="podman build"
elif command -v buildah >/dev/null 2>&1; then
  builder="buildah bud"
fi
if [ -z "$builder" ]; then
  echo "image.sh: no container builder here (docker with a running daemon, podman or buildah); not building $IMAGE:$TAG" >&2
  exit 0
fi
echo "image.sh: $builder -f configs/Dockerfile -t $IMAGE:$TAG ."
$builder -f configs/Dockerfile -t "$IMAGE:$TAG" .
