#!/usr/bin/env bash
# What the command sandbox costs: `run_command "true"` through the daemon, with the
# namespace sandbox (the default), with `workers.exec.sandbox = "off"` (Landlock and
# the reap shim only), and without limits either (no cgroup per command), beside a bare
# `sh -c true` spawned and waited for. Each row runs S seconds after a warm-up; one
# client, calls back to back. The table, the command, the date and the machine go into
# docs/PERFORMANCE.md between the `sandbox:begin` and `sandbox:end` markers.
#
#   scripts/bench-sandbox.sh [--secs S] [--no-doc]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
CMDLINE="scripts/bench-sandbox.sh${*:+ $*}"
SECS=5
DOC=1
while [ $# -gt 0 ]; do
    case "$1" in
        --secs) SECS="${2:?--secs needs a value}"; shift 2 ;;
        --no-doc) DOC=0; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "bench-sandbox.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

cargo build --release -p toolvisor -p toolvisor-bench
BIN="$ROOT/target/release/toolvisor"
DRIVER="$ROOT/target/release/toolvisor-bench"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/toolvisor-bench-sandbox.XXXXXX")"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

# name | [workers.exec] lines
CASES=(
    "ns|"
    "off|sandbox = \"off\""
    "bare|sandbox = \"off\"
[workers.exec.limits]
memory_mb = 0
pids = 0"
)
for c in "${CASES[@]}"; do
    name="${c%%|*}"
    extra="${c#*|}"
    mkdir -p "$TMP/$name"
    cat >"$TMP/$name/toolvisor.toml" <<TOML
[audit]
fsync = "never"

[[policy.rules]]
tool = "run_command"
action = "allow"

[workers.exec]
$extra
TOML
    "$BIN" serve --workspace "$TMP/$name" 2>"$TMP/$name.log" &
    PIDS+=($!)
done
for c in "${CASES[@]}"; do
    name="${c%%|*}"
    for _ in $(seq 200); do [ -S "$TMP/$name/.toolvisor/toolvisor.sock" ] && break; sleep 0.05; done
done

row() { # label, output of the driver
    echo "| $1 | $(echo "$2" | sed -E 's/^[0-9]+ (calls|spawns), //') |"
}
{
    echo "| what | latency, 1 client |"
    echo "|---|---|"
    row "\`sh -c true\` spawned and waited for (bare)" "$("$DRIVER" spawn --secs "$SECS")"
    row "\`run_command \"true\"\`, namespace sandbox + cgroup limits (default)" \
        "$("$DRIVER" lat --socket "$TMP/ns/.toolvisor/toolvisor.sock" --op true --secs "$SECS")"
    row "\`run_command \"true\"\`, \`sandbox = \"off\"\` (Landlock + shim) + cgroup limits" \
        "$("$DRIVER" lat --socket "$TMP/off/.toolvisor/toolvisor.sock" --op true --secs "$SECS")"
    row "\`run_command \"true\"\`, \`sandbox = \"off\"\`, no limits (no cgroup)" \
        "$("$DRIVER" lat --socket "$TMP/bare/.toolvisor/toolvisor.sock" --op true --secs "$SECS")"
} | tee "$TMP/table.md"
grep -h "guards\|namespaces" "$TMP"/*.log >&2 || true

if [ "$DOC" = 1 ]; then
    DOCFILE="$ROOT/docs/PERFORMANCE.md"
    COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    if [ -n "$(git status --porcelain 2>/dev/null)" ]; then COMMIT="$COMMIT (with uncommitted changes)"; fi
    {
        echo "<!-- sandbox:begin (written by scripts/bench-sandbox.sh; edit outside the markers) -->"
        echo "Command: \`$CMDLINE\` · date: $(date -u '+%Y-%m-%d %H:%M UTC') · \`nproc\`: $(nproc) ·"
        echo "kernel: $(uname -r) · commit: $COMMIT"
        echo
        cat "$TMP/table.md"
        echo "<!-- sandbox:end -->"
    } >"$TMP/section.md"
    if grep -q '<!-- sandbox:begin' "$DOCFILE"; then
        awk -v sec="$TMP/section.md" '
            /<!-- sandbox:begin/ { while ((getline l < sec) > 0) print l; skip = 1; next }
            /<!-- sandbox:end -->/ { skip = 0; next }
            !skip { print }' "$DOCFILE" >"$TMP/doc.md"
        cp "$TMP/doc.md" "$DOCFILE"
    else
        { echo; echo "## The command sandbox's cost"; echo; cat "$TMP/section.md"; } >>"$DOCFILE"
    fi
    echo "bench-sandbox.sh: table written to docs/PERFORMANCE.md" >&2
fi
