#!/usr/bin/env bash
# The licences of what the xdsbridge binary is built from.
#
#   scripts/licenses.sh check        THIRD_PARTY_LICENSES.md lists exactly the
#                                    modules linked into the release binaries
#                                    (every release platform), at their
#                                    versions, each with the licence its files
#                                    carry, and every licence is one that
#                                    Apache-2.0 distribution allows.
#   scripts/licenses.sh table        print the table's rows as they should be
#   scripts/licenses.sh collect DIR  copy every module's LICENSE/NOTICE/PATENTS
#                                    files (and Go's) into DIR/<module>/, for
#                                    the release tarballs and the image
#
# Reads the module cache: run after `go mod download` (any build does it).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

PLATFORMS="linux/amd64 linux/arm64 darwin/arm64"
# Licences whose terms allow distributing the binary under Apache-2.0
# (MPL-2.0 is file-level: those files are used unmodified, their source is
# the upstream module's).
ALLOWED="Apache-2.0 MIT BSD-2-Clause BSD-3-Clause MPL-2.0"
MODCACHE=$(go env GOMODCACHE)

# modules prints "path version" of every module linked into the binary on
# any release platform, the main module left out.
modules() {
	for p in $PLATFORMS; do
		GOOS=${p%/*} GOARCH=${p#*/} go list -deps \
			-f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}' ./cmd/xdsbridge
	done | sort -u
}

# moddir is a module's directory in the module cache (upper-case letters
# are escaped as !lower there).
moddir() {
	echo "$MODCACHE/$(sed -E 's/([A-Z])/!\L\1/g' <<<"$1")@$2"
}

# licence_files lists a module's licence files.
licence_files() {
	find "$1" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'LICENCE*' -o -iname 'COPYING*' \) | sort
}

# detect names the licences a module's licence files carry, " AND "-joined.
detect() {
	local dir=$1 files found=()
	files=$(licence_files "$dir")
	[ -n "$files" ] || { echo "NONE"; return; }
	# shellcheck disable=SC2086
	if grep -qE 'Apache License|Licensed under the Apache License' $files; then found+=(Apache-2.0); fi
	if grep -qE 'Permission is hereby granted, free of charge' $files; then found+=(MIT); fi
	if grep -q 'Redistribution and use in source and binary forms' $files; then
		if grep -qiE 'Neither the name|names of its contributors' $files; then found+=(BSD-3-Clause); else found+=(BSD-2-Clause); fi
	fi
	if grep -q 'Mozilla Public License' $files; then found+=(MPL-2.0); fi
	[ ${#found[@]} -gt 0 ] || { echo "UNKNOWN"; return; }
	local IFS=$'\n'
	sort <<<"${found[*]}" | paste -sd' ' | sed 's/ / AND /g'
}

table() {
	echo "| Go standard library | $(go env GOVERSION) | BSD-3-Clause |"
	modules | while read -r path version; do
		echo "| \`$path\` | $version | $(detect "$(moddir "$path" "$version")") |"
	done
}

case "${1:-check}" in
table)
	table
	;;
check)
	go mod download
	want=$(table)
	got=$(grep -E '^\| (`|Go standard library)' THIRD_PARTY_LICENSES.md)
	if [ "$want" != "$got" ]; then
		echo "THIRD_PARTY_LICENSES.md does not match the modules linked into xdsbridge (- listed, + linked):"
		diff <(echo "$got") <(echo "$want") || true
		echo "update its table with the rows of: scripts/licenses.sh table"
		exit 1
	fi
	bad=0
	while read -r lic; do
		for l in ${lic// AND / }; do
			if ! grep -qw -- "$l" <<<"$ALLOWED"; then
				echo "licence $l (in: $lic) is not one of: $ALLOWED"; bad=1
			fi
		done
	done < <(awk -F' \\| ' '{print $3}' <<<"$want" | sed 's/ |$//' | sort -u)
	[ "$bad" = 0 ] || exit 1
	echo "licences ok: $(wc -l <<<"$want") components, all of: $ALLOWED"
	;;
collect)
	dest=${2:?usage: scripts/licenses.sh collect DIR}
	mkdir -p "$dest/go"
	cp "$(go env GOROOT)/LICENSE" "$dest/go/"
	[ -f "$(go env GOROOT)/PATENTS" ] && cp "$(go env GOROOT)/PATENTS" "$dest/go/"
	modules | while read -r path version; do
		dir=$(moddir "$path" "$version")
		mkdir -p "$dest/$path"
		find "$dir" -maxdepth 1 -type f \( -iname 'LICEN[CS]E*' -o -iname 'COPYING*' -o -iname 'NOTICE*' -o -iname 'PATENTS*' \) \
			-exec cp {} "$dest/$path/" \;
		chmod -R u+w "$dest/$path"
	done
	;;
*)
	echo "usage: scripts/licenses.sh check|table|collect DIR" >&2
	exit 2
	;;
esac
