#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, revision
# 2025-11-25): its server scenarios against `toolvisor mcp --http`, on a copy of the
# workspace examples/mcp-conformance/; then the client scenarios that fit toolvisor as
# an MCP client (its downstream connections over Streamable HTTP), each run through
# examples/mcp-conformance/client/ (a daemon whose MCP server is the suite's test
# server). Prints one line per scenario and exits non-zero when a scenario fails that
# examples/mcp-conformance/expected-failures.yml does not list (or one listed there
# passes).
#
# Needs npm (the suite needs node >= 22: the npm registry's `node` package provides
# it, installed next to the suite under target/conformance/). Environment:
#   CONFORMANCE_DIR  where the suite and node are installed (default target/conformance)
#   CONFORMANCE_OUT  where the suite's results go (default: a temporary directory)
set -euo pipefail

SUITE_VERSION=0.1.16
NODE_VERSION=22.23.3
SPEC_VERSION=2025-11-25
# The client scenarios toolvisor's downstream connections can take part in; the
# `auth/*` ones need OAuth, which toolvisor's MCP client does not do.
CLIENT_SCENARIOS="initialize tools_call elicitation-sep1034-client-defaults sse-retry"

root=$(cd "$(dirname "$0")/.." && pwd)
tools=${CONFORMANCE_DIR:-$root/target/conformance}
work=$(mktemp -d)
out=${CONFORMANCE_OUT:-$work/results}
mcp_pid=

cleanup() {
    if [ -n "$mcp_pid" ]; then
        kill "$mcp_pid" 2>/dev/null || true
        wait "$mcp_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

install_suite() {
    local stamp="$tools/.installed"
    local want="conformance@$SUITE_VERSION node@$NODE_VERSION"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    mkdir -p "$tools"
    npm install --prefix "$tools" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/conformance@$SUITE_VERSION" "node@$NODE_VERSION" >&2
    echo "$want" > "$stamp"
}

build() {
    (cd "$root" && cargo build --locked -q -p toolvisor --bin toolvisor \
        --example toolvisor-conformance-fixtures --example toolvisor-conformance-client) >&2
}

# Start `toolvisor mcp --http` on a copy of the workspace; sets $url.
start_bridge() {
    local ws="$work/ws" log="$work/mcp.out"
    mkdir -p "$ws"
    cp "$root/examples/mcp-conformance/toolvisor.toml" "$ws/"
    local target="${CARGO_TARGET_DIR:-$root/target}/debug"
    PATH="$target/examples:$target:$PATH" "$target/toolvisor" mcp --workspace "$ws" \
        --http 127.0.0.1:0 > "$log" 2> "$work/mcp.err" &
    mcp_pid=$!
    local deadline=$((SECONDS + 60))
    until grep -q "serving MCP at" "$log" 2>/dev/null; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "$mcp_pid" 2>/dev/null; then
            echo "toolvisor mcp --http did not start:" >&2
            cat "$work/mcp.err" >&2
            exit 1
        fi
        sleep 0.2
    done
    url=$(grep -o "http://[^ ]*" "$log" | head -n1)
}

# toolvisor as the client of each of $CLIENT_SCENARIOS; appends to the suite's log.
run_client_scenarios() {
    local target="${CARGO_TARGET_DIR:-$root/target}/debug" scenario
    for scenario in $CLIENT_SCENARIOS; do
        echo "client scenario $scenario" >> "$work/suite.log"
        TOOLVISOR="$target/toolvisor" PATH="$tools/node_modules/.bin:$PATH" \
            conformance client --command "$target/examples/toolvisor-conformance-client" \
            --scenario "$scenario" --timeout 60000 \
            --expected-failures "$root/examples/mcp-conformance/expected-failures.yml" \
            -o "$out" >> "$work/suite.log" 2>&1 || rc=$?
    done
}

install_suite
build
start_bridge
echo "conformance $SUITE_VERSION, revision $SPEC_VERSION, against $url" >&2
rc=0
PATH="$tools/node_modules/.bin:$PATH" conformance server --url "$url" \
    --spec-version "$SPEC_VERSION" --suite all \
    --expected-failures "$root/examples/mcp-conformance/expected-failures.yml" \
    -o "$out" > "$work/suite.log" 2>&1 || rc=$?
run_client_scenarios
# One line per scenario: its name and whether each of its checks passed.
for dir in "$out"/*/; do
    [ -f "$dir/checks.json" ] || continue
    PATH="$tools/node_modules/.bin:$PATH" node -e '
        const fs = require("fs");
        const [dir] = process.argv.slice(1);
        const checks = JSON.parse(fs.readFileSync(dir + "/checks.json", "utf8"));
        const failed = checks.filter(c => c.status === "FAILURE");
        const name = dir.replace(/\/$/, "").split("/").pop().replace(/-\d{4}-\d{2}-\d{2}T.*$/, "");
        const side = name.startsWith("server-") ? "server" : "client";
        console.log(`${failed.length ? "FAIL" : "pass"} ${side} ${name.replace(/^server-/, "")}` +
            (failed.length ? `: ${failed.map(c => c.errorMessage || c.id).join("; ")}` : ""));
    ' "$dir"
done
tail -n 30 "$work/suite.log"
exit "$rc"
