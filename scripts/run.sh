#!/usr/bin/env bash
# The README's main command: set up what is missing, build, and run the
# collector on this host (Ctrl-C stops it). Extra arguments go to the collector.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
bash scripts/setup.sh
exec cargo xtask run -- "$@"
