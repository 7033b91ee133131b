#!/usr/bin/env bash
# The test command of the README: every unit, property and end-to-end test (cargo test),
# then the Python client's tests (pytest, in a venv under target/) against the daemon
# binary cargo just built.
#
#   scripts/test.sh                  everything
#   scripts/test.sh ARGS...          `cargo test --workspace --locked ARGS...` only (a filter
#                                    selects Rust tests, so pytest is skipped)
#   TOOLVISOR_PYTEST=1|0             run the Python tests, or not, whatever the arguments
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --locked "$@"

want=${TOOLVISOR_PYTEST:-auto}
if [ "$want" = auto ]; then
    if [ $# -eq 0 ]; then want=1; else want=0; fi
fi
if [ "$want" = 0 ]; then
    echo "python client: skipped (cargo test arguments were given; TOOLVISOR_PYTEST=1 runs it too)"
    exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "python client: SKIPPED: python3 is not installed (clients/python needs Python >= 3.9)"
    exit 0
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    echo "python client: $(python3 --version) is too old: clients/python needs Python >= 3.9" >&2
    exit 1
fi

target=${CARGO_TARGET_DIR:-target}
cargo build --locked --quiet --bin toolvisor
bin=$(cd "$target/debug" && pwd)/toolvisor

# One venv, kept between runs: pytest and setuptools come from PyPI when the venv is made
# (or its requirements change); the package is rebuilt from clients/python every run,
# without build isolation, so that needs no network.
venv=$target/pyenv
reqs="pytest>=7 setuptools>=70.1"
if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$reqs" ] || ! "$venv/bin/python" -c 'import pytest' >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv" || {
        echo "python client: python3 cannot make a venv (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
    # shellcheck disable=SC2086 # word splitting of the requirement list is intended
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input $reqs
    echo "$reqs" >"$venv/.requirements"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --no-deps --no-build-isolation --force-reinstall ./clients/python
rm -rf clients/python/build clients/python/src/toolvisor.egg-info

echo "== python client (clients/python, $("$venv/bin/python" --version))"
TOOLVISOR_BIN=$bin PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests
