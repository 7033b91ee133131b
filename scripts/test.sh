#!/usr/bin/env bash
# The test command of the README: every unit, property and end-to-end test (cargo test),
# then the Python client's tests (pytest, in a venv under target/) against the daemon
# binary cargo just built, then the MCP conformance suite against `toolvisor mcp --http`
# (scripts/conformance.sh; node and the suite from npm, under target/). Every suite runs even when one fails; the last lines are the
# totals, and the exit status is non-zero when anything failed or did not run.
#
#   scripts/test.sh                  everything
#   scripts/test.sh ARGS...          `cargo test --workspace --locked ARGS...` only (a filter
#                                    selects Rust tests, so pytest is skipped)
#   TOOLVISOR_PYTEST=1|0             run the Python tests, or not, whatever the arguments
#   TOOLVISOR_CONFORMANCE=1|0        run the MCP conformance suite, or not (the default:
#                                    as for the Python tests)
set -uo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
logs=$(mktemp -d "${TMPDIR:-/tmp}/toolvisor-test.XXXXXX")
trap 'rm -rf "$logs"' EXIT
problems=()

# --- Layout --------------------------------------------------------------------------
# Top-level modules of each crate import one way (docs/ARCHITECTURE.md).
if ! python3 scripts/import-cycles.py -q; then
    problems+=("import circles between top-level modules (scripts/import-cycles.py)")
fi

# --- Rust ----------------------------------------------------------------------------
# --no-fail-fast: a failing test binary does not keep the others from running.
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$logs/cargo.log"
cargo_rc=${PIPESTATUS[0]}
# "test result: ok. 40 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; ..."
read -r rs_pass rs_fail rs_skip rs_suites < <(awk '
    /^test result: / { s++
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed;/) p += $i
            if ($(i+1) ~ /^failed;/) f += $i
            if ($(i+1) ~ /^ignored;/) g += $i
        } }
    END { printf "%d %d %d %d\n", p, f, g, s }' "$logs/cargo.log")
if [ "$cargo_rc" -ne 0 ]; then
    if [ "$rs_fail" -eq 0 ]; then
        problems+=("cargo test exited $cargo_rc with no failed test counted: a build error, or a test binary that crashed (see above)")
    fi
    # Which binaries failed, as cargo names them at the end.
    grep -E '^\s+(`|error: test failed)' "$logs/cargo.log" | sed 's/^/    /' >"$logs/cargo.failed" || true
fi

# --- Python --------------------------------------------------------------------------
py_pass=0 py_fail=0 py_skip=0 py_state=ran
run_pytest() {
    local want=${TOOLVISOR_PYTEST:-auto}
    if [ "$want" = auto ]; then
        if [ $# -eq 0 ]; then want=1; else want=0; fi
    fi
    if [ "$want" = 0 ]; then
        echo "python client: skipped (cargo test arguments were given; TOOLVISOR_PYTEST=1 runs it too)"
        py_state=skipped
        return 0
    fi
    if ! command -v python3 >/dev/null 2>&1; then
        echo "python client: SKIPPED: python3 is not installed (clients/python needs Python >= 3.9)"
        py_state=skipped
        return 0
    fi
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
        echo "python client: $(python3 --version) is too old: clients/python needs Python >= 3.9" >&2
        return 1
    fi
    cargo build --locked --quiet --bin toolvisor || return 1
    local bin venv reqs
    bin=$(cd "$target/debug" && pwd)/toolvisor
    # One venv, kept between runs: pytest and setuptools come from PyPI when the venv is
    # made (or its requirements change); the package is rebuilt from clients/python every
    # run, without build isolation, so that needs no network.
    venv=$target/pyenv
    reqs="pytest>=7 setuptools>=70.1"
    if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$reqs" ] || ! "$venv/bin/python" -c 'import pytest' >/dev/null 2>&1; then
        rm -rf "$venv"
        python3 -m venv "$venv" || {
            echo "python client: python3 cannot make a venv (on Debian: apt-get install python3-venv)" >&2
            return 1
        }
        # shellcheck disable=SC2086 # word splitting of the requirement list is intended
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input $reqs || return 1
        echo "$reqs" >"$venv/.requirements"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --no-deps --no-build-isolation --force-reinstall ./clients/python || return 1
    rm -rf clients/python/build clients/python/src/toolvisor.egg-info
    echo "== python client (clients/python, $("$venv/bin/python" --version))"
    TOOLVISOR_BIN=$bin PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests 2>&1 | tee "$logs/pytest.log"
    local rc=${PIPESTATUS[0]}
    # The summary: "3 failed, 110 passed, 2 skipped in 9.81s"
    local summary
    summary=$(grep -E '^[=[:space:]]*[0-9]+ (passed|failed|error)' "$logs/pytest.log" | tail -n 1)
    py_pass=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
    py_fail=$(( $(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0) \
        + $(grep -oE '[0-9]+ errors?' <<<"$summary" | grep -oE '[0-9]+' || echo 0) ))
    py_skip=$(grep -oE '[0-9]+ skipped' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
    if [ "$rc" -ne 0 ] && [ "$py_fail" -eq 0 ]; then
        echo "pytest exited $rc with no failed test counted" >&2
        return 1
    fi
    return 0
}
if ! run_pytest "$@"; then
    py_state=broken
    problems+=("the Python client's tests could not run to the end (see above)")
fi

# --- MCP conformance -----------------------------------------------------------------
mcp_state=skipped mcp_pass=0 mcp_fail=0
want_conformance=${TOOLVISOR_CONFORMANCE:-auto}
if [ "$want_conformance" = auto ]; then
    if [ $# -eq 0 ]; then want_conformance=1; else want_conformance=0; fi
fi
if [ "$want_conformance" = 1 ]; then
    if ! command -v npm >/dev/null 2>&1; then
        mcp_state=broken
        problems+=("the MCP conformance suite needs npm (it installs node 22 and the suite with it)")
    else
        echo "== MCP conformance (scripts/conformance.sh)"
        scripts/conformance.sh 2>&1 | tee "$logs/conformance.log"
        mcp_rc=${PIPESTATUS[0]}
        mcp_state=ran
        mcp_pass=$(grep -c '^pass ' "$logs/conformance.log")
        mcp_fail=$(grep -c '^FAIL ' "$logs/conformance.log")
        if [ "$mcp_rc" -ne 0 ]; then
            problems+=("the MCP conformance suite failed a scenario it should pass, or passed an expected failure (see above)")
        fi
    fi
fi

# --- Totals --------------------------------------------------------------------------
echo
echo "== totals"
echo "rust ($rs_suites test binaries): $rs_pass passed, $rs_fail failed, $rs_skip ignored"
case $py_state in
    skipped) echo "python client: skipped" ;;
    *) echo "python client: $py_pass passed, $py_fail failed, $py_skip skipped" ;;
esac
if [ -s "$logs/cargo.failed" ]; then
    echo "failed in:"
    cat "$logs/cargo.failed"
fi
case $mcp_state in
    ran) echo "MCP conformance: $mcp_pass scenarios passed, $mcp_fail failed (expected failures: docs/MCP.md)" ;;
    *) echo "MCP conformance: $mcp_state" ;;
esac
for p in "${problems[@]}"; do echo "PROBLEM: $p"; done
echo "total: $((rs_pass + py_pass)) passed, $((rs_fail + py_fail)) failed, $((rs_skip + py_skip)) skipped"
if [ "$cargo_rc" -ne 0 ] || [ "$py_fail" -ne 0 ] || [ ${#problems[@]} -ne 0 ]; then
    exit 1
fi
