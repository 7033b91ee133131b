#!/usr/bin/env bash
# toolvisor through `toolvisor mcp` beside @modelcontextprotocol/server-filesystem, through
# the same MCP client (the official TypeScript SDK), in one run: read 4 KB, list 100
# entries, write 4 KB, edit 4 KB; p50/p99 per case and the RSS of each server's process
# tree (scripts/bench_mcp.mjs). Needs node and npm; the packages go into
# target/bench-mcp/ once, the fixtures into a temp directory.
#
#   scripts/bench-mcp.sh            N=300 calls per case and round, ROUNDS=3
#   N=100 ROUNDS=2 TV_FSYNC=always scripts/bench-mcp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "bench-mcp.sh: $tool is needed" >&2; exit 1; }
done

cargo build --release --bin toolvisor
TV="$ROOT/target/release/toolvisor"

# The same versions as the shared side-by-side benchmark.
PEERS="$ROOT/target/bench-mcp"
PKGS="@modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/server-filesystem@2026.8.31"
if [ "$(cat "$PEERS/.packages" 2>/dev/null)" != "$PKGS" ]; then
    mkdir -p "$PEERS"
    # shellcheck disable=SC2086 # the package list is meant to split
    npm install --prefix "$PEERS" --no-audit --no-fund --ignore-scripts $PKGS >/dev/null
    echo "$PKGS" >"$PEERS/.packages"
fi

FIX="$(mktemp -d)"
trap 'rm -rf "$FIX"' EXIT
head -c 4096 /dev/zero | tr '\0' 'a' | fold -w 63 >"$FIX/small.txt"
truncate -s 4096 "$FIX/small.txt"
mkdir -p "$FIX/dir100"
for i in $(seq -w 1 100); do echo "entry $i" >"$FIX/dir100/file$i.txt"; done

echo "== toolvisor mcp vs server-filesystem ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(git rev-parse --short HEAD))"
TV="$TV" NM="$PEERS/node_modules" ROOT="$FIX" N="${N:-300}" ROUNDS="${ROUNDS:-3}" \
    OUT="$ROOT/target/bench-mcp/last.json" node scripts/bench_mcp.mjs
