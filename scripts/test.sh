#!/usr/bin/env bash
# The README's test command: set up what is missing, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
bash scripts/setup.sh
exec cargo xtask test
