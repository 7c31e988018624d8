#!/usr/bin/env bash
# Installs promtool (Debian's prometheus package) to check and unit-test the
# alert rules under deploy/prometheus/. Idempotent.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends prometheus
