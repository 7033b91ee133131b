#!/usr/bin/env bash
# The test command of the README: every unit, property and end-to-end test.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --workspace --locked "$@"
