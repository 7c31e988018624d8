#!/usr/bin/env bash
# Installs dnsmasq for the sources/dns integration test. Idempotent: does
# nothing when the binary is already there.
set -euo pipefail

if command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ]; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends dnsmasq-base
