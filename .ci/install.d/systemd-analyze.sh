#!/usr/bin/env bash
# Installs systemd-analyze to verify the unit under deploy/systemd/.
# Idempotent.
set -euo pipefail

if command -v systemd-analyze >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends systemd
