#!/usr/bin/env bash
# The README's main command: set up what is missing, build, and run the
# embedded default: a simulated cluster with an injected degrading link.
# Extra arguments go to `faultline-sim`; `--host ARGS` runs the
# collector on this host instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
bash scripts/setup.sh
if [[ "${1:-}" == "--host" ]]; then
  shift
  exec cargo xtask run --host -- "$@"
fi
exec cargo xtask run -- "$@"
