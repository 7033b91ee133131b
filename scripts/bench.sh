#!/usr/bin/env bash
# Benchmarks: toolvisor against bare baselines and against other MCP servers, measured
# side by side in one run, as ONE table (ratio against the target and PASS/MISS per
# row). The native baselines are a bare MessagePack echo server over a Unix socket
# (1 hop), the same behind a relay (2 hops), `rg`/`fd` for grep/glob over a pinned
# corpus, and a bare `sh -c true`. Through MCP (the official TypeScript SDK as the one
# client, scripts/bench_mcp.mjs), `toolvisor mcp` with audit fsync never and always
# beside @modelcontextprotocol/server-filesystem and Desktop Commander. The table, the
# command, the date, the machine and the commit go into docs/PERFORMANCE.md between the
# `bench:begin` and `bench:end` markers (the analysis around them is kept).
#
#   scripts/bench.sh [--secs S] [--no-doc] [--no-mcp]
#
# Each native latency/throughput measurement runs S seconds (default 3) after a 0.3 s
# warm-up. MCP_N (default 200) calls per case, server and round, MCP_ROUNDS (default 3)
# rounds. The whole run takes about 6 minutes plus the build. rg and fd are installed
# with apt-get when missing (where that is possible), else their rows say n/a; the MCP
# peers are installed with npm into target/bench-mcp/ when npm is present, else (or
# with --no-mcp) the MCP rows say n/a and why.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
CMDLINE="scripts/bench.sh${*:+ $*}"

SECS=3
DOC=1
MCP=1
while [ $# -gt 0 ]; do
    case "$1" in
        --secs) SECS="${2:?--secs needs a value}"; shift 2 ;;
        --no-doc) DOC=0; shift ;;
        --no-mcp) MCP=0; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
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

# Three workspaces: audit fsync never and always, and a small one (fsync never, a few
# files) where the undo journal has little to walk and a real crate is built. The
# `never` one gets the corpus.
NEVER="$TMP/never"
ALWAYS="$TMP/always"
SMALL="$TMP/small"
mkdir -p "$NEVER/corpus" "$ALWAYS" "$SMALL"
# The crate built through toolvisor and bare: regex-syntax (no dependency of its own)
# behind a one-line wrapper, so an offline build needs only what Cargo.lock pins.
BUILD_CRATE="$TMP/build-crate"
mkdir -p "$BUILD_CRATE/src"
printf '[package]\nname = "bench-build"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nregex-syntax = "=0.8.12"\n' >"$BUILD_CRATE/Cargo.toml"
echo 'pub use regex_syntax;' >"$BUILD_CRATE/src/lib.rs"
echo '/target' >"$BUILD_CRATE/.gitignore"   # as `cargo new` writes it

# The grep/glob corpus: a fixed set of crates at pinned versions from the cargo registry,
# so every run searches the same files and `unsafe fn` matches fewer lines than any cap
# (toolvisor and rg must print the same lines, or the row says COUNTS DIFFER).
# CORPUS_SRC=DIR copies DIR instead.
CORPUS_CRATES="tokio-1.54.1 libc-0.2.191 linux-raw-sys-0.12.1 rustix-1.1.6 nix-0.31.3
regex-automata-0.4.19 regex-syntax-0.8.12 syn-2.0.119 web-sys-0.3.107 windows-sys-0.61.2
tracing-0.1.44 rustls-0.23.46 encoding_rs-0.8.44 bstr-1.14.0 zerocopy-0.8.63"
REGISTRY="$HOME/.cargo/registry/src"
# The crate directory in any registry index under ~/.cargo/registry/src (empty if none).
crate_dir() {
    local d
    for d in "$REGISTRY"/*/"$1"; do
        [ -d "$d" ] && { echo "$d"; return 0; }
    done
    return 0
}
# Fetch the pinned crates that are not in the registry yet (a throwaway project that
# depends on each at its exact version); whatever still misses is named, and the run
# goes on with a smaller corpus.
fetch_pinned() {
    local missing=() c name ver proj="$TMP/fetch"
    for c in $CORPUS_CRATES; do
        [ -n "$(crate_dir "$c")" ] || missing+=("$c")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    echo "bench.sh: fetching ${missing[*]} into the cargo registry" >&2
    mkdir -p "$proj/src"
    : >"$proj/src/lib.rs"
    { printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n'
      for c in "${missing[@]}"; do
          name="${c%-*}"; ver="${c##*-}"
          printf '%s = "=%s"\n' "$name" "$ver"
      done; } >"$proj/Cargo.toml"
    (cd "$proj" && timeout 600 cargo fetch -q >/dev/null 2>&1) ||
        echo "bench.sh: WARNING: cargo fetch failed (no network?): going on without what is missing" >&2
}
[ -n "${CORPUS_SRC:-}" ] || fetch_pinned
if [ -n "${CORPUS_SRC:-}" ]; then
    cp -r "$CORPUS_SRC/." "$NEVER/corpus/"
    CORPUS_DESC="a copy of $CORPUS_SRC (CORPUS_SRC)"
else
    have=()
    for c in $CORPUS_CRATES; do
        d="$(crate_dir "$c")"
        if [ -n "$d" ]; then
            cp -r "$d" "$NEVER/corpus/"
            have+=("$c")
        else
            echo "bench.sh: WARNING: $c is not in $REGISTRY: the corpus is smaller than the pinned one (\`cargo fetch\` a project that depends on it)" >&2
        fi
    done
    [ "${#have[@]}" -gt 0 ] || echo "bench.sh: WARNING: none of the pinned crates is in $REGISTRY: the grep/glob rows run on an empty corpus" >&2
    CORPUS_DESC="the crates ${have[*]:-(none)} from the cargo registry"
fi
# Ignore files would hide different files from each tool (rg and fd honour .gitignore
# only inside a git repository, toolvisor everywhere): drop them.
find "$NEVER/corpus" \( -name .gitignore -o -name .ignore -o -name .rgignore -o -name .fdignore \) -delete
echo "bench.sh: corpus $(du -sh "$NEVER/corpus" | cut -f1), $(find "$NEVER/corpus" -type f | wc -l) files" >&2

for ws in "$NEVER" "$ALWAYS" "$SMALL"; do
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

# The MCP side by side (before the native servers start, so they do not compete): two
# fixture workspaces with the same configuration as the native ones, the peers on the
# `never` one. Every failure here is a reason in the table, never a failed bench.
MCP_ARG=(--mcp-skip "skipped with --no-mcp")
if [ "$MCP" = 1 ]; then
    MCP_ARG=(--mcp-skip "node or npm not found")
    if command -v node >/dev/null && command -v npm >/dev/null; then
        MCP_ARG=(--mcp "$TMP/mcp.json")
        PEERS="$ROOT/target/bench-mcp"
        SDK="@modelcontextprotocol/sdk@1.32.2"
        FSPKG="@modelcontextprotocol/server-filesystem@2026.8.31"
        DCPKG="@wonderwhy-er/desktop-commander@0.2.52"
        if [ "$(cat "$PEERS/.packages" 2>/dev/null)" != "$SDK $FSPKG $DCPKG" ]; then
            mkdir -p "$PEERS"
            echo "bench.sh: installing $SDK $FSPKG $DCPKG into $PEERS" >&2
            npm_install() {
                PUPPETEER_SKIP_DOWNLOAD=1 timeout 600 npm install --prefix "$PEERS" --no-audit \
                    --no-fund --ignore-scripts "$@" >"$TMP/npm.log" 2>&1
            }
            if npm_install "$SDK" "$FSPKG" "$DCPKG"; then
                echo "$SDK $FSPKG $DCPKG" >"$PEERS/.packages"
            else
                # Without Desktop Commander its rows say it is not installed.
                echo "bench.sh: npm install failed ($(tail -n1 "$TMP/npm.log")); trying without Desktop Commander" >&2
                npm_install "$SDK" "$FSPKG" ||
                    MCP_ARG=(--mcp-skip "npm install failed: $(grep -m1 -i 'err' "$TMP/npm.log" || tail -n1 "$TMP/npm.log")")
            fi
        fi
    fi
fi
if [ "${MCP_ARG[0]}" = --mcp ]; then
    MN="$TMP/mcp-never"
    MA="$TMP/mcp-always"
    TOKIO="$(crate_dir tokio-1.54.1)"
    if [ -z "$TOKIO" ]; then
        TOKIO="$(ls -d "$REGISTRY"/*/tokio-1.* 2>/dev/null | tail -n1 || true)"
        echo "bench.sh: WARNING: tokio-1.54.1 is not in $REGISTRY: the MCP glob/grep tree is ${TOKIO:-empty}" >&2
    fi
    for ws in "$MN" "$MA"; do
        mkdir -p "$ws/dir100" "$ws/medium"
        head -c 4096 /dev/zero | tr '\0' 'a' | fold -w 63 >"$ws/small.txt"
        truncate -s 4096 "$ws/small.txt"
        for i in $(seq -w 1 100); do echo "entry $i" >"$ws/dir100/file$i.txt"; done
        [ -z "$TOKIO" ] || cp -r "$TOKIO/." "$ws/medium/"
        find "$ws/medium" \( -name .gitignore -o -name .ignore \) -delete
    done
    cp "$NEVER/toolvisor.toml" "$MN/toolvisor.toml"
    cp "$ALWAYS/toolvisor.toml" "$MA/toolvisor.toml"
    echo "bench.sh: MCP side by side (toolvisor mcp, server-filesystem, Desktop Commander)" >&2
    if ! TV="$BIN" NM="$PEERS/node_modules" NEVER="$MN" ALWAYS="$MA" HOME_DC="$TMP/dc-home" \
        N="${MCP_N:-200}" ROUNDS="${MCP_ROUNDS:-3}" OUT="$TMP/mcp.json" \
        timeout 1800 node scripts/bench_mcp.mjs 2>"$TMP/mcp.log"; then
        MCP_ARG=(--mcp-skip "scripts/bench_mcp.mjs failed: $(tail -n1 "$TMP/mcp.log")")
    fi
fi

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
"$BIN" serve --workspace "$SMALL" 2>"$TMP/small.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/echo.sock" ] && [ -S "$TMP/relay.sock" ] && break; sleep 0.05; done

# Which guarantees the served workspaces run with, for the table's note.
for _ in $(seq 200); do [ -S "$NEVER/.toolvisor/toolvisor.sock" ] && break; sleep 0.05; done
GUARDS="$("$BIN" --workspace "$NEVER" status 2>/dev/null | grep -E '^(guards|sandbox):' |
    sed -E 's/,? protected .*//' | paste -sd';' - | sed 's/;/; /g' || true)"
GUARDS="policy mode auto with allow rules for run_command, write_file and edit_file; audit on (a record before and after every call), fsync as each row says; ${GUARDS:-toolvisor status: n/a}"

"$DRIVER" table --never "$NEVER" --always "$ALWAYS" --echo "$TMP/echo.sock" \
    --relay "$TMP/relay.sock" --rg "$RG" --fd "$FD" --secs "$SECS" --pattern "unsafe fn" \
    --corpus "$CORPUS_DESC" --guards "$GUARDS" --small "$SMALL" --build-crate "$BUILD_CRATE" \
    "${MCP_ARG[@]}" | tee "$TMP/table.md"

# Issue 24's session: how often a coding session asks under the init config, and whether
# anything got out (scripts/agent-session.py, against the same binary).
echo "bench.sh: the agent session (scripts/agent-session.py)" >&2
SESSION="$(TOOLVISOR_BIN="$BIN" timeout 1200 python3 scripts/agent-session.py 2>&1 ||
    echo "scripts/agent-session.py failed")"
echo "$SESSION"

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
        echo
        echo "Agent session (\`scripts/agent-session.py\`, same binary, same run):"
        echo
        echo "$SESSION"
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
