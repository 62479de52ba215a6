#!/bin/sh
# Installs the collector as a systemd service (docs/install in README):
#   deploy/install.sh [BIN_DIR]      (default: target/release)
# DESTDIR=/some/root installs under a staging root (packaging, tests).
# The config and the environment file are written only when absent, so a
# re-run (an upgrade) keeps the site's settings.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
bin_dir="${1:-$here/../target/release}"
root="${DESTDIR:-}"

install -d -m 0755 "$root/usr/local/bin" "$root/etc/faultline" "$root/etc/default" \
  "$root/etc/systemd/system" "$root/usr/share/doc/faultline"
install -m 0755 "$bin_dir/faultline-collector" "$root/usr/local/bin/faultline-collector"
install -m 0644 "$here/faultline-collector.service" "$root/etc/systemd/system/faultline-collector.service"
[ -e "$root/etc/faultline/collector.toml" ] ||
  install -m 0644 "$here/collector.toml" "$root/etc/faultline/collector.toml"
[ -e "$root/etc/default/faultline-collector" ] ||
  printf '%s\n' '# Extra flags for faultline-collector (docs/config.md), e.g.' \
    '# ARGS="--correlator https://correlator.example:50051"' 'ARGS=""' \
    >"$root/etc/default/faultline-collector"
for d in README.md docs/config.md docs/metrics.md docs/slurm.md; do
  [ -e "$here/../$d" ] && install -m 0644 "$here/../$d" "$root/usr/share/doc/faultline/"
done
if [ -z "$root" ] && command -v systemctl >/dev/null; then
  systemctl daemon-reload
  echo "installed; start with: systemctl enable --now faultline-collector"
fi
