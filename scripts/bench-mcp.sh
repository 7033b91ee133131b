#!/usr/bin/env bash
# toolvisor through `toolvisor mcp` beside @modelcontextprotocol/server-filesystem, through
# the same MCP client (the official TypeScript SDK), in one run: read 4 KB, list 100
# entries, write 4 KB, edit 4 KB; p50/p99 per case and the RSS of each server's process
# tree (scripts/bench_mcp.mjs). Then the same four calls over toolvisor's own protocol
# (toolvisor-bench, one client) on the same fixtures, to show what MCP adds. Needs node
# and npm; the packages go into target/bench-mcp/ once, the fixtures into a temp dir.
#
#   scripts/bench-mcp.sh            N=300 calls per case and round, ROUNDS=3
#   N=100 ROUNDS=2 TV_FSYNC=always scripts/bench-mcp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "bench-mcp.sh: $tool is needed" >&2; exit 1; }
done

cargo build --release -p toolvisor --bin toolvisor
cargo build --release -p toolvisor-bench --bin toolvisor-bench
TV="$REPO/target/release/toolvisor"
DRIVER="$REPO/target/release/toolvisor-bench"

# The same versions as the shared side-by-side benchmark.
PEERS="$REPO/target/bench-mcp"
PKGS="@modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/server-filesystem@2026.8.31"
if [ "$(cat "$PEERS/.packages" 2>/dev/null)" != "$PKGS" ]; then
    mkdir -p "$PEERS"
    # shellcheck disable=SC2086 # the package list is meant to split
    npm install --prefix "$PEERS" --no-audit --no-fund --ignore-scripts $PKGS >/dev/null
    echo "$PKGS" >"$PEERS/.packages"
fi

FIX="$(mktemp -d)"
DAEMON=
cleanup() {
    if [ -n "$DAEMON" ]; then kill -TERM "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
    rm -rf "$FIX"
}
trap cleanup EXIT
head -c 4096 /dev/zero | tr '\0' 'a' | fold -w 63 >"$FIX/small.txt"
truncate -s 4096 "$FIX/small.txt"
mkdir -p "$FIX/dir100"
for i in $(seq -w 1 100); do echo "entry $i" >"$FIX/dir100/file$i.txt"; done

echo "== toolvisor mcp vs server-filesystem ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(git rev-parse --short HEAD))"
TV="$TV" NM="$PEERS/node_modules" ROOT="$FIX" N="${N:-300}" ROUNDS="${ROUNDS:-3}" \
    OUT="$REPO/target/bench-mcp/last.json" node scripts/bench_mcp.mjs

echo
echo "== the same calls over toolvisor's own protocol (1 client, 5 s each)"
mkdir -p "$FIX/scratch"
{ cat "$FIX/small.txt"; printf '\nMARKER_A\n'; } >"$FIX/scratch/native_edit.txt"
"$TV" serve --workspace "$FIX" 2>/dev/null &
DAEMON=$!
SOCK="$FIX/.toolvisor/toolvisor.sock"
for _ in $(seq 1 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
"$TV" --workspace "$FIX" status >/dev/null
for op in read ls write edit; do
    printf '%-6s ' "$op"
    "$DRIVER" lat --socket "$SOCK" --op "$op" --path small.txt --clients 1 --secs 5
done
