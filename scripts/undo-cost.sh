#!/usr/bin/env bash
# What the undo journal costs a command, measured on the real daemon (release build):
#   1. `run_command "true"` in an empty workspace and in one of 10 000 files (the
#      capture walks the tree twice);
#   2. `rm -rf` of those 10 000 files (the capture records 10 000 removals), then the
#      undo that brings them back;
#   3. `cargo build` of a small real crate (its target/ is ignored, so not journaled).
# Prints a Markdown table; times are the server's `duration_ms` (median of the runs).
#
#   scripts/undo-cost.sh [RUNS]     (default 15)
set -euo pipefail
runs=${1:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TOOLVISOR_BIN:-$root/target/release/toolvisor}
[ -x "$bin" ] || cargo build --release --locked --manifest-path "$root/Cargo.toml" >&2
base=$(mktemp -d "${BENCH_DIR:-/var/tmp}/undo-cost.XXXXXX")
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done; rm -rf "$base"' EXIT

allow='[[policy.rules]]
tool = "run_command"
action = "allow"'

serve() { # workspace
  printf '%s\n' "$allow" > "$1/toolvisor.toml"
  "$bin" --workspace "$1" serve 2>"$1.log" &
  for _ in $(seq 600); do
    "$bin" --workspace "$1" doctor >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "serve did not start: $(tail -5 "$1.log")" >&2; exit 1
}

ms() { # workspace command → duration_ms of one call
  "$bin" --workspace "$1" call run_command "$(printf '{"command": %s}' "$(printf '%s' "$2" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')")" --json \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["status"]=="ok", r; print(r["duration_ms"])'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

many_files() { # dir
  mkdir -p "$1/src"
  for d in $(seq 100); do
    mkdir -p "$1/src/d$d"
    for f in $(seq 100); do printf 'file %s %s\n' "$d" "$f" > "$1/src/d$d/f$f.txt"; done
  done
}

empty="$base/empty"; mkdir -p "$empty"; serve "$empty"
big="$base/big"; mkdir -p "$big"; many_files "$big"; serve "$big"

t_empty=$(for _ in $(seq "$runs"); do ms "$empty" true; done | median)
t_big=$(for _ in $(seq "$runs"); do ms "$big" true; done | median)
t_rm=$(ms "$big" "rm -rf src")
t0=$(date +%s%N)
"$bin" --workspace "$big" undo --last 1 >/dev/null
t_undo=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$(find "$big/src" -type f | wc -l)" = 10000 ] || { echo "the undo did not bring back 10 000 files" >&2; exit 1; }

crate="$base/crate"; mkdir -p "$crate/src"
printf '[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n' > "$crate/Cargo.toml"
printf 'fn main() { println!("hi"); }\n' > "$crate/src/main.rs"
printf '/target\n' > "$crate/.gitignore"
serve "$crate"
t_cargo=$(ms "$crate" "cargo build --offline -q 2>&1 || true")
t_cargo2=$(ms "$crate" "touch src/main.rs && cargo build --offline -q")
blobs=$(du -sk "$big/.toolvisor/undo/blobs" | cut -f1)

cat <<EOF
| what | server time |
|---|---|
| \`run_command "true"\`, empty workspace (median of $runs) | ${t_empty} ms |
| \`run_command "true"\`, 10 000 files in 100 directories (median of $runs) | ${t_big} ms |
| \`rm -rf src\` of those 10 000 files (one call, journaled) | ${t_rm} ms |
| \`toolvisor undo --last 1\` bringing the 10 000 files back (client wall time) | ${t_undo} ms |
| \`cargo build\` of a one-file crate, first build (target/ ignored) | ${t_cargo} ms |
| \`cargo build\` again after a touch | ${t_cargo2} ms |
| journal contents for the 10 000-file workspace | ${blobs} KiB |
EOF
