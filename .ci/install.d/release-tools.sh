#!/usr/bin/env bash
# Installs what the release and deployment checks of .ci/run need, in one
# apt-get run: podman (scripts/image.sh builds the container image), promtool
# from the prometheus package (the alert rules' tests) and systemd-analyze
# (scripts/systemd-verify.sh). Idempotent: installs only what is missing.
set -euo pipefail

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
