#!/usr/bin/env bash
# Builds the Consul agent the sources/consul integration tests run against,
# pinned by tools/consul/go.mod and go.sum, into the xdsbridge cache. It does
# nothing when the binary is already there. Prints the binary's path.
#
# Tests find it via XDSBRIDGE_CONSUL_BIN, else this cache path, else `consul`
# on PATH.
set -euo pipefail

version=1.14.11
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${XDSBRIDGE_CACHE:-$HOME/.cache/xdsbridge}"
bin="$cache/bin/consul-$version"

if [[ ! -x "$bin" ]]; then
	mkdir -p "$cache/bin"
	tmp="$(mktemp "$cache/bin/.consul-$version.XXXXXX")"
	trap 'rm -f "$tmp"' EXIT
	echo "building consul $version into $bin (takes several minutes)" >&2
	(
		cd "$repo_root/tools/consul"
		# go.sum pins every module; -mod=mod lets the build proceed even if
		# the go command wants to tidy the tools module's requirements.
		GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -trimpath -o "$tmp" github.com/hashicorp/consul
	)
	"$tmp" version >/dev/null
	mv -f "$tmp" "$bin"
	trap - EXIT
fi
echo "$bin"
