#!/usr/bin/env bash
# Builds the release artifacts into dist/:
#
#   scripts/release.sh [VERSION]
#
#   dist/xdsbridge_VERSION_OS_ARCH.tar.gz  per platform: the static binary,
#       LICENSE, THIRD_PARTY_LICENSES.md, licenses/ (every linked module's
#       licence files), README.md, CHANGELOG.md and an example config
#       (examples/xdsbridge.yaml with its services.yaml)
#   dist/SHA256SUMS                        sha256sum of every tarball
#
# VERSION defaults to `git describe --tags --always --dirty`. PLATFORMS
# (default "linux/amd64 linux/arm64 darwin/arm64") chooses the platforms.
#
# The build is reproducible: the same commit gives the same bytes (static,
# CGO_ENABLED=0, -trimpath, no build id, the commit's time as every file's
# mtime in the tarballs, sorted entries, numeric owner 0, gzip -n). The
# binary carries VERSION (-ldflags -X) and the commit, its time and whether
# the tree was modified (-buildvcs): `xdsbridge version` prints them.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

VERSION=${1:-$(git describe --tags --always --dirty)}
PLATFORMS=${PLATFORMS:-"linux/amd64 linux/arm64 darwin/arm64"}
DIST=${DIST:-dist}
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export SOURCE_DATE_EPOCH
REVISION=$(git rev-parse HEAD)
COMMIT_TIME=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)
MODIFIED=false
if [ -n "$(git status --porcelain)" ]; then MODIFIED=true; fi

case "$VERSION" in
*[!A-Za-z0-9._+-]* | "") echo "release: VERSION $VERSION: want letters, digits and ._+-" >&2; exit 2 ;;
esac

rm -rf "$DIST"
mkdir -p "$DIST"
licences=$(mktemp -d)
trap 'rm -rf "$licences"' EXIT
go mod download
scripts/licenses.sh collect "$licences"

# The toolchain stamps the commit itself (-buildvcs) in a clone; from a git
# worktree it cannot, so it is stamped at link time too.
pkg=github.com/xdsbridge/xdsbridge/internal/buildinfo
for platform in $PLATFORMS; do
	os=${platform%/*} arch=${platform#*/}
	name=xdsbridge_${VERSION}_${os}_${arch}
	stage=$DIST/$name
	mkdir -p "$stage/examples"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=true \
		-ldflags "-s -w -buildid= -X $pkg.Version=$VERSION -X $pkg.Revision=$REVISION -X $pkg.CommitTime=$COMMIT_TIME -X $pkg.Modified=$MODIFIED" \
		-o "$stage/xdsbridge" ./cmd/xdsbridge
	cp LICENSE THIRD_PARTY_LICENSES.md README.md CHANGELOG.md "$stage/"
	cp examples/xdsbridge.yaml examples/services.yaml "$stage/examples/"
	cp -R "$licences" "$stage/licenses"
	# Modes independent of the umask and the checkout.
	find "$stage" -type d -exec chmod 755 {} +
	find "$stage" -type f -exec chmod 644 {} +
	chmod 755 "$stage/xdsbridge"
	tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=gnu -C "$DIST" -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"
	echo "built $DIST/$name.tar.gz"
done
(cd "$DIST" && sha256sum ./*.tar.gz | sed 's# \./# #' >SHA256SUMS)
cat "$DIST/SHA256SUMS"

# The binary of this machine's platform, if built, names its version and
# commit.
host=$DIST/xdsbridge_${VERSION}_$(go env GOOS)_$(go env GOARCH)/xdsbridge
if [ -x "$host" ]; then
	out=$("$host" version)
	echo "$out"
	if ! grep -qx "xdsbridge $VERSION" <<<"$out" || ! grep -q "^commit: *$REVISION" <<<"$out"; then
		echo "release: $host version does not name $VERSION and commit $REVISION" >&2
		exit 1
	fi
fi
