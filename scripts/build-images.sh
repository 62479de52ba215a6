#!/usr/bin/env bash
# Builds the collector and correlator images from this repository using
# only Debian's archive: the runtime stage of deploy/images/*.Dockerfile as
# a Debian bookworm root filesystem made by mmdebstrap from Debian packages,
# the binaries cargo built copied in. Writes, under OUT (default
# target/images):
#
#   OUT/collector/rootfs, OUT/correlator/rootfs   the images' filesystems
#   OUT/collector.tar, OUT/correlator.tar         the same as tar archives
#
# and, where podman is installed, imports them as
# localhost/faultline/{collector,correlator}:latest (a local cluster takes
# them through an overlay's images:, docs/kubernetes.md "Site settings").
# The Debian base is cached (OUT/base-*.tar, keyed
# by its package list): ~50 s the first time, ~5 s after.
#
#   scripts/build-images.sh [--profile debug|release] [OUT]
#
# FAULTLINE_IMAGES_NO_BUILD=1: use the binaries already built;
# FAULTLINE_IMAGES_NO_PODMAN=1: do not import into podman.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile=release
if [[ "${1:-}" == "--profile" ]]; then
  profile="$2"
  shift 2
fi
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
OUT="${1:-$TARGET/images}"
log() { printf 'build-images: %s\n' "$*" >&2; }

# The runtime packages of both images (deploy/images/*.Dockerfile): verbs and
# its providers for the collector, SQLite for the correlator, capsh for the
# capability-bounded test run.
PACKAGES="libibverbs1,ibverbs-providers,libsqlite3-0,ca-certificates,libcap2-bin"
SUITE=bookworm
key="$(printf '%s %s' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-12)"
base="$OUT/base-$key.tar"
mkdir -p "$OUT"
if [[ ! -s "$base" ]]; then
  command -v mmdebstrap >/dev/null || { log "mmdebstrap missing: scripts/setup.sh installs it"; exit 1; }
  log "making the Debian $SUITE base with mmdebstrap (~1 min, cached as $base)"
  mmdebstrap --quiet --format=tar --variant=minbase --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$base.part"
  mv "$base.part" "$base"
fi

flag=()
[[ "$profile" == release ]] && flag=(--release)
if [[ -z "${FAULTLINE_IMAGES_NO_BUILD:-}" ]]; then
  log "cargo build ($profile) of both binaries"
  (cd "$REPO_ROOT" && cargo build "${flag[@]}" -p collector --bin faultline-collector -p correlator --bin faultline-correlator)
fi
bindir="$TARGET/$profile"

make_image() {
  local name="$1" bin="$2"
  local root="$OUT/$name/rootfs"
  rm -rf "$OUT/$name"
  mkdir -p "$root"
  tar -C "$root" -xf "$base"
  # Stripped: debug symbols stay in the build tree.
  install -s -m 0755 "$bindir/$bin" "$root/usr/local/bin/$bin"
  install -d -m 0755 "$root/etc/faultline" "$root/host" "$root/run/nvidia"
  install -d -m 0700 "$root/var/lib/faultline"
  if [[ "$name" == collector ]]; then
    install -m 0644 "$REPO_ROOT/deploy/collector.toml" "$root/etc/faultline/collector.toml"
  else
    chroot "$root" /usr/sbin/groupadd -g 65532 faultline
    chroot "$root" /usr/sbin/useradd -u 65532 -g 65532 -M -d /var/lib/faultline faultline
    chown 65532:65532 "$root/var/lib/faultline"
  fi
  tar -C "$root" -cf "$OUT/$name.tar.part" .
  mv "$OUT/$name.tar.part" "$OUT/$name.tar"
  if [[ -z "${FAULTLINE_IMAGES_NO_PODMAN:-}" ]] && command -v podman >/dev/null; then
    local entry cmd
    if [[ "$name" == collector ]]; then
      entry='ENTRYPOINT ["/usr/local/bin/faultline-collector"]'
    else
      entry='ENTRYPOINT ["/usr/local/bin/faultline-correlator"]'
    fi
    # The default command is the Dockerfile's (one source for both builds).
    cmd="$(grep -m1 '^CMD ' "$REPO_ROOT/deploy/images/$name.Dockerfile")"
    # The previous build's image goes (no dangling copy per rebuild).
    podman rmi -f "localhost/faultline/$name:latest" >/dev/null 2>&1 || true
    # The Dockerfile's OCI labels, with this tree's version and commit; the
    # base is this script's mmdebstrap root, not the Dockerfile's pinned one.
    local version revision changes=(--change "$entry" --change "$cmd")
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO_ROOT/Cargo.toml" | head -n1)"
    revision="$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
    while IFS= read -r l; do
      l="${l//\$\{VERSION\}/$version}"
      changes+=(--change "${l//\$\{REVISION\}/$revision}")
    done < <(grep '^LABEL ' "$REPO_ROOT/deploy/images/$name.Dockerfile" | grep -v 'image\.base\.')
    changes+=(--change "LABEL org.opencontainers.image.base.name=\"debian:$SUITE (mmdebstrap, Debian archive)\"")
    podman import --quiet "${changes[@]}" "$OUT/$name.tar" "localhost/faultline/$name:latest" >/dev/null &&
      log "imported localhost/faultline/$name:latest" ||
      log "podman import of $name failed (the rootfs and tar are still usable)"
  fi
}
make_image collector faultline-collector
make_image correlator faultline-correlator
log "ok: $OUT/collector.tar, $OUT/correlator.tar"
