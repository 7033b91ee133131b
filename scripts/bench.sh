#!/usr/bin/env bash
# Benchmarks: toolvisor against bare baselines, measured side by side in one run, as
# ONE table (ratio against the target and PASS/MISS per row). The baselines are a
# bare MessagePack echo server over a Unix socket (1 hop), the same behind a relay
# (2 hops), `rg`/`fd` for grep/glob, and a bare `sh -c true`. The table, the command,
# the date, the machine and the commit go into docs/PERFORMANCE.md between the
# `bench:begin` and `bench:end` markers (the analysis around them is kept).
#
#   scripts/bench.sh [--secs S] [--no-doc]
#
# Each latency/throughput measurement runs S seconds (default 3) after a 0.3 s
# warm-up. The whole run takes about 3 minutes plus the build. rg and fd are
# installed with apt-get when missing (where that is possible); else their rows say n/a.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
CMDLINE="scripts/bench.sh${*:+ $*}"

SECS=3
DOC=1
while [ $# -gt 0 ]; do
    case "$1" in
        --secs) SECS="${2:?--secs needs a value}"; shift 2 ;;
        --no-doc) DOC=0; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

cargo build --release -p toolvisor -p toolvisor-bench
BIN="$ROOT/target/release/toolvisor"
ECHO="$ROOT/target/release/toolvisor-echo"
DRIVER="$ROOT/target/release/toolvisor-bench"

# rg and fd (Debian calls fd `fdfind`).
find_tools() {
    RG="$(command -v rg || true)"
    FD="$(command -v fd || command -v fdfind || true)"
}
find_tools
if { [ -z "$RG" ] || [ -z "$FD" ]; } && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "bench.sh: installing ripgrep and fd-find" >&2
    apt-get install -y -q ripgrep fd-find >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q ripgrep fd-find >/dev/null 2>&1; } || true
    find_tools
fi
[ -n "$RG" ] || echo "bench.sh: rg not available: its row says n/a" >&2
[ -n "$FD" ] || echo "bench.sh: fd not available: its row says n/a" >&2

TMP="$(mktemp -d "${TMPDIR:-/tmp}/toolvisor-bench.XXXXXX")"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

# Two workspaces: audit fsync never and always. The `never` one gets the corpus.
NEVER="$TMP/never"
ALWAYS="$TMP/always"
mkdir -p "$NEVER" "$ALWAYS"
SRC="${CORPUS_SRC:-$HOME/.cargo/registry/src}"
if [ -d "$SRC" ]; then
    cp -r "$SRC" "$NEVER/corpus"
else
    echo "bench.sh: $SRC not found: the grep/glob rows run on an empty corpus" >&2
    mkdir -p "$NEVER/corpus"
fi
# Ignore files would hide different files from each tool (rg and fd honour .gitignore
# only inside a git repository, toolvisor everywhere): drop them.
find "$NEVER/corpus" \( -name .gitignore -o -name .ignore -o -name .rgignore -o -name .fdignore \) -delete
echo "bench.sh: corpus $(du -sh "$NEVER/corpus" | cut -f1), $(find "$NEVER/corpus" -type f | wc -l) files" >&2

for ws in "$NEVER" "$ALWAYS"; do
    fsync=never
    [ "$ws" = "$ALWAYS" ] && fsync=always
    cat >"$ws/toolvisor.toml" <<TOML
[audit]
fsync = "$fsync"

# High enough that grep and glob counts compare with rg and fd untruncated.
[limits]
search_max = 10000000
search_keep = 10000000
list_max = 10000000
list_keep = 10000000

# 20 kill -9 samples in a row: no intensity limit, and every restart waits the
# first backoff (100 ms) instead of a doubling one.
[supervisor]
restart_max = 1000
backoff_max_ms = 100

[[policy.rules]]
tool = "run_command"
action = "allow"

[[policy.rules]]
tool = "write_file"
action = "allow"

[[policy.rules]]
tool = "edit_file"
action = "allow"
TOML
done

"$ECHO" serve --socket "$TMP/echo.sock" 2>"$TMP/echo.log" &
PIDS+=($!)
"$ECHO" serve --socket "$TMP/echo4k.sock" --reply-bytes 4096 2>"$TMP/echo4k.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/echo4k.sock" ] && break; sleep 0.05; done
"$ECHO" relay --socket "$TMP/relay.sock" --upstream "$TMP/echo4k.sock" 2>"$TMP/relay.log" &
PIDS+=($!)
"$BIN" serve --workspace "$NEVER" 2>"$TMP/never.log" &
PIDS+=($!)
"$BIN" serve --workspace "$ALWAYS" 2>"$TMP/always.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/echo.sock" ] && [ -S "$TMP/relay.sock" ] && break; sleep 0.05; done

"$DRIVER" table --never "$NEVER" --always "$ALWAYS" --echo "$TMP/echo.sock" \
    --relay "$TMP/relay.sock" --rg "$RG" --fd "$FD" --secs "$SECS" | tee "$TMP/table.md"

if [ "$DOC" = 1 ]; then
    DOCFILE="$ROOT/docs/PERFORMANCE.md"
    COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    if [ -n "$(git status --porcelain 2>/dev/null)" ]; then COMMIT="$COMMIT (with uncommitted changes)"; fi
    CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
    {
        echo "<!-- bench:begin (written by scripts/bench.sh; edit outside the markers) -->"
        echo "Command: \`$CMDLINE\` · date: $(date -u '+%Y-%m-%d %H:%M UTC') · \`nproc\`: $(nproc) ·"
        echo "kernel: $(uname -r) · CPU: ${CPU:-unknown} · commit: $COMMIT ·"
        echo "rg: $([ -n "$RG" ] && "$RG" --version | head -n1 || echo n/a) · fd: $([ -n "$FD" ] && "$FD" --version || echo n/a)"
        echo
        cat "$TMP/table.md"
        echo "<!-- bench:end -->"
    } >"$TMP/section.md"
    if [ -f "$DOCFILE" ] && grep -q '<!-- bench:begin' "$DOCFILE"; then
        awk -v sec="$TMP/section.md" '
            /<!-- bench:begin/ { while ((getline l < sec) > 0) print l; skip = 1; next }
            /<!-- bench:end -->/ { skip = 0; next }
            !skip { print }' "$DOCFILE" >"$TMP/doc.md"
        cp "$TMP/doc.md" "$DOCFILE"
    else
        { echo "# Performance"; echo; cat "$TMP/section.md"; } >"$DOCFILE"
    fi
    echo "bench.sh: table written to docs/PERFORMANCE.md" >&2
fi
