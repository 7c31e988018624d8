#!/usr/bin/env bash
# Installs Debian's chromium for the status page's browser test
# (internal/e2e/statuspage_test.go). Idempotent: does nothing when the
# binary is already there.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then
	SUDO=sudo
fi
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium
