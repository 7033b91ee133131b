#!/usr/bin/env bash
# Load test: N clients (default 64) send a mix of read_file, grep, ls and short
# allowed commands to a release build for a fixed time (default 10 s); prints
# throughput, p50/p99 per tool, ping p99 under load and peak RSS, checks that every
# call got exactly one correct result and its audit record, then verifies the chain.
#
#   scripts/load.sh [CLIENTS] [SECONDS]        (or CLIENTS=… DURATION=… scripts/load.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="${1:-${CLIENTS:-64}}"
DURATION="${2:-${DURATION:-10}}"

cargo build --release -p toolvisor -p toolvisor-bench
BIN="$PWD/target/release/toolvisor"
LOAD="$PWD/target/release/toolvisor-load"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/toolvisor-load.XXXXXX")"
WS="$TMP/ws"
SERVER=""
cleanup() {
    if [[ -n "$SERVER" ]] && kill -0 "$SERVER" 2>/dev/null; then
        kill -TERM "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

# A corpus of 200 small files (under the 10 KB read limit, so reads are verbatim),
# some lines with "needle N" for grep.
mkdir -p "$WS/corpus"
awk -v root="$WS/corpus" 'BEGIN {
    for (d = 0; d < 10; d++) {
        dir = sprintf("%s/d%02d", root, d)
        system("mkdir -p " dir)
        for (f = 0; f < 20; f++) {
            path = sprintf("%s/f%02d.txt", dir, f)
            lines = 20 + (d * 20 + f) % 60
            for (l = 0; l < lines; l++) {
                if ((l * 7 + f) % 23 == 0) printf "needle %d in d%02d/f%02d line %d\n", l, d, f, l > path
                else printf "line %d of d%02d/f%02d: the quick brown fox jumps over the lazy dog\n", l, d, f > path
            }
            close(path)
        }
    }
}'

cat > "$WS/toolvisor.toml" <<'TOML'
[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "echo " }]

[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "equals", value = "true" }]
TOML

"$BIN" serve --workspace "$WS" 2>"$TMP/serve.log" &
SERVER=$!

status=0
"$LOAD" --workspace "$WS" --pid "$SERVER" --clients "$CLIENTS" --duration "$DURATION" --commands || status=$?

kill -TERM "$SERVER"
if ! wait "$SERVER"; then
    echo "load.sh: the server did not exit cleanly; its log:" >&2
    tail -n 50 "$TMP/serve.log" >&2
    status=1
fi
SERVER=""
if grep -E ' (ERROR|WARN) ' "$TMP/serve.log" >/dev/null; then
    echo "load.sh: warnings or errors in the server log:" >&2
    grep -E ' (ERROR|WARN) ' "$TMP/serve.log" | head -n 20 >&2
fi
"$BIN" audit verify --workspace "$WS" || status=1
exit "$status"
