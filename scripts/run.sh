#!/usr/bin/env bash
# The README's main command: set up what is missing, build, and run the
# embedded default: a simulated cluster with an injected degrading link,
# with the web UI on http://127.0.0.1:8080/ serving the run's incidents
# until Ctrl-C (the address is printed first).
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
