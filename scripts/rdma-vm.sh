#!/usr/bin/env bash
# Real RDMA end to end in a soft-RoCE QEMU guest (see README "Real RDMA").
# Installs what it needs (the toolchain through setup.sh, the guest's Debian
# packages through the xtask), builds the release binaries, boots the guest,
# runs the scenario and prints a pass/fail table. Arguments go to
# `cargo xtask rdma-vm` (e.g. --accel tcg, --timeout 1200, --check-log FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
bash scripts/setup.sh
exec cargo xtask rdma-vm "$@"
