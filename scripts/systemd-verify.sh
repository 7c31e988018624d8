#!/usr/bin/env bash
# Checks deploy/systemd/xdsbridge.service with systemd-analyze verify:
#
#   scripts/systemd-verify.sh [BINARY]
#
# verify wants ExecStart's binary to exist: the unit is checked as a copy
# whose ExecStart names BINARY (default: a build of ./cmd/xdsbridge).
# Any warning systemd-analyze prints about the unit fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${1:-}
if [ -z "$bin" ]; then
	bin=$work/xdsbridge
	go build -o "$bin" ./cmd/xdsbridge
fi
bin=$(realpath "$bin")
sed "s#^ExecStart=/usr/local/bin/xdsbridge #ExecStart=$bin #" deploy/systemd/xdsbridge.service >"$work/xdsbridge.service"
grep -q "^ExecStart=$bin " "$work/xdsbridge.service" || { echo "systemd: no ExecStart=/usr/local/bin/xdsbridge in the unit" >&2; exit 1; }
out=$(systemd-analyze verify "$work/xdsbridge.service" 2>&1) || { echo "$out"; echo "systemd: systemd-analyze verify failed" >&2; exit 1; }
# Lines about the unit itself (not other units on this machine).
if grep -F "xdsbridge.service" <<<"$out"; then
	echo "systemd: systemd-analyze verify warns about the unit (above)" >&2
	exit 1
fi
echo "systemd: deploy/systemd/xdsbridge.service verified ($(systemd-analyze --version | head -1))"
