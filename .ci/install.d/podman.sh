#!/usr/bin/env bash
# Installs podman for the container image test (scripts/image-test.sh):
# it builds the Containerfile and runs the binary from the exported image.
# Idempotent: does nothing when podman is already there.
set -euo pipefail

if command -v podman >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends podman
