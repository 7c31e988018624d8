#!/usr/bin/env bash
# Builds the container image (deploy/container/Containerfile) with podman,
# and tests it:
#
#   scripts/image.sh [VERSION]
#
# Builds the linux binary of this machine's architecture with
# scripts/release.sh, stages the build context, builds the
# image xdsbridge:VERSION, then checks it without running a container
# (podman run is refused in some sandboxes): the image's config (numeric
# non-root user, entrypoint, health check), and, from its exported
# filesystem, `xdsbridge version` and `xdsbridge validate` of the bundled
# config.
#
# Without a podman that can build (not installed, or no storage), it skips
# with a message; under CI=true it fails instead. KEEP_IMAGE=1 keeps the
# image (default: removed after the test).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

VERSION=${1:-$(git describe --tags --always --dirty)}
arch=$(go env GOARCH)
image=localhost/xdsbridge:$VERSION
work=$(mktemp -d)
ctr=""
cleanup() {
	[ -z "$ctr" ] || podman rm -f "$ctr" >/dev/null 2>&1 || true
	[ "${KEEP_IMAGE:-}" = 1 ] || podman rmi -f "$image" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

cannot() {
	if [ "${CI:-}" = true ]; then
		echo "image: $1 (CI=true: failing instead of skipping)" >&2
		exit 1
	fi
	echo "image: SKIPPED: $1"
	exit 0
}
command -v podman >/dev/null 2>&1 || cannot "podman is not installed (.ci/install.d/release-tools.sh installs it)"
# Can this podman build at all? A one-file image from scratch.
mkdir -p "$work/probe"
echo probe >"$work/probe/f"
printf 'FROM scratch\nCOPY f /f\n' >"$work/probe/Containerfile"
if ! probe_out=$(podman build -q --no-cache -t "localhost/xdsbridge-probe:$$" "$work/probe" 2>&1); then
	cannot "podman cannot build an image here: $probe_out"
fi
podman rmi -f "localhost/xdsbridge-probe:$$" >/dev/null 2>&1 || true

# The binary, as released.
dist=$work/dist
PLATFORMS=linux/$arch DIST=$dist scripts/release.sh "$VERSION" >/dev/null
bin=$dist/xdsbridge_${VERSION}_linux_${arch}/xdsbridge

# The build context.
ctx=$work/context
mkdir -p "$ctx/etc/xdsbridge" "$ctx/licenses"
cp "$bin" "$ctx/xdsbridge"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
cp deploy/container/xdsbridge.yaml examples/services.yaml "$ctx/etc/xdsbridge/"
cp -R "$dist/xdsbridge_${VERSION}_linux_${arch}/licenses/." "$ctx/licenses/"
cp LICENSE THIRD_PARTY_LICENSES.md "$ctx/licenses/"
find "$ctx" -type d -exec chmod 755 {} +
find "$ctx" -type f -exec chmod 644 {} +
chmod 755 "$ctx/xdsbridge"

# docker format: the OCI image format has no HEALTHCHECK.
podman build -q --layers=false --format docker --build-arg "VERSION=$VERSION" --build-arg "REVISION=$(git rev-parse HEAD)" \
	-t "$image" -f deploy/container/Containerfile "$ctx" >/dev/null
echo "image: built $image"

fail() { echo "image: FAIL: $*" >&2; exit 1; }
user=$(podman image inspect --format '{{.Config.User}}' "$image")
[[ "$user" =~ ^[1-9][0-9]*:[1-9][0-9]*$ ]] || fail "user $user: want a numeric non-root uid:gid"
entry=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$image")
[ "$entry" = '["/xdsbridge"]' ] || fail "entrypoint $entry: want [\"/xdsbridge\"]"
hc=$(podman image inspect --format '{{json .Config.Healthcheck}}' "$image")
grep -q '"/xdsbridge","healthcheck"' <<<"$hc" || fail "health check $hc: want /xdsbridge healthcheck"

# The image's filesystem, exported.
ctr=$(podman create "$image")
root=$work/root
mkdir -p "$root"
podman export "$ctr" | tar -x -C "$root"
for f in xdsbridge etc/ssl/certs/ca-certificates.crt etc/xdsbridge/xdsbridge.yaml etc/xdsbridge/services.yaml \
	licenses/LICENSE licenses/THIRD_PARTY_LICENSES.md licenses/go/LICENSE; do
	[ -s "$root/$f" ] || fail "/$f missing or empty in the image"
done
out=$(cd "$root" && ./xdsbridge version)
grep -qx "xdsbridge $VERSION" <<<"$out" || fail "version printed:\n$out"
out=$(cd "$root" && ./xdsbridge validate -config etc/xdsbridge/xdsbridge.yaml 2>&1) || fail "validate of the bundled config: $out"
[ "$out" = "config ok" ] || fail "validate printed: $out"
echo "image: ok: $image runs as $user; its binary prints version $VERSION and validates its bundled config"
