#!/bin/sh
# Installs faultline as systemd services (docs/running.md, packages).
#
#   deploy/install.sh
#     On a host with dpkg: installs the Debian packages in $DEB_DIR (default
#     target/debian; `cargo xtask deb` makes them) with dpkg -i: the
#     collector's, or those named in $FAULTLINE_PACKAGES (e.g.
#     "faultline-collector faultline-correlator"). Each unit is enabled and
#     started; the config files are conffiles, kept on upgrades.
#
#   deploy/install.sh BIN_DIR        (or no dpkg, or FAULTLINE_INSTALL=files)
#     The collector's files without a package: BIN_DIR/faultline-collector
#     (default target/release) to /usr/local/bin, the unit (ExecStart= moved
#     there) to /etc/systemd/system, the default /etc/faultline/collector.toml
#     and /etc/default/faultline-collector; then
#     systemctl enable --now faultline-collector.
#     DESTDIR=/some/root installs under a staging root (tests), always this way.
#     The config and the environment file are written only when absent, so a
#     re-run (an upgrade) keeps the site's settings.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
root="${DESTDIR:-}"

if [ -z "$root" ] && [ $# -eq 0 ] && [ "${FAULTLINE_INSTALL:-deb}" != files ] &&
  command -v dpkg >/dev/null; then
  deb_dir="${DEB_DIR:-$here/../target/debian}"
  debs=""
  for p in ${FAULTLINE_PACKAGES:-faultline-collector}; do
    # The newest version of each package in the directory.
    f="$(ls -1 "$deb_dir/${p}_"*.deb 2>/dev/null | sort -V | tail -n 1)"
    if [ -z "$f" ]; then
      echo "install.sh: no $deb_dir/${p}_*.deb: make the packages with 'cargo xtask deb'" \
        "(or install the plain files: FAULTLINE_INSTALL=files $0)" >&2
      exit 1
    fi
    debs="$debs $f"
  done
  # shellcheck disable=SC2086 # one word per package file
  dpkg -i $debs
  echo "installed:$debs (systemctl status ${FAULTLINE_PACKAGES:-faultline-collector})"
  exit 0
fi

bin_dir="${1:-$here/../target/release}"
doc="$root/usr/share/doc/faultline-collector"
install -d -m 0755 "$root/usr/local/bin" "$root/etc/faultline" "$root/etc/default" \
  "$root/etc/systemd/system" "$doc"
install -m 0755 "$bin_dir/faultline-collector" "$root/usr/local/bin/faultline-collector"
sed 's|^ExecStart=/usr/bin/|ExecStart=/usr/local/bin/|' "$here/faultline-collector.service" \
  >"$root/etc/systemd/system/faultline-collector.service"
chmod 0644 "$root/etc/systemd/system/faultline-collector.service"
[ -e "$root/etc/faultline/collector.toml" ] ||
  install -m 0644 "$here/collector.toml" "$root/etc/faultline/collector.toml"
[ -e "$root/etc/default/faultline-collector" ] ||
  install -m 0644 "$here/faultline-collector.default" "$root/etc/default/faultline-collector"
for d in README.md docs/config.md docs/metrics.md docs/slurm.md; do
  [ -e "$here/../$d" ] && install -m 0644 "$here/../$d" "$doc/"
done
if [ -z "$root" ] && command -v systemctl >/dev/null; then
  systemctl daemon-reload
  echo "installed; start with: systemctl enable --now faultline-collector"
fi
