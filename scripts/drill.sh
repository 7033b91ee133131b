#!/usr/bin/env bash
# Fault drill: N rounds (default 20) of `serve` on a temp workspace under load from 4
# clients (read_file, grep, write_file, a short allowed run_command), the supervisor
# killed with SIGKILL at a seeded random moment, then started again. After every
# restart `toolvisor audit verify` must pass and every call a client got a result for
# must have its `requested`/`completed` (or `rejected`) records. At the end the server
# is stopped with SIGTERM and no process it started may be left.
#
#   scripts/drill.sh [ROUNDS] [--seed N]
#
# The seed (default: the time) is printed first; pass it back with --seed to replay
# the same kill moments. The drill itself is the ignored e2e test `drill_long`.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=20
seed=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
        --seed=*) seed="${1#--seed=}"; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) rounds="$1"; shift ;;
    esac
done
case "$rounds" in ''|*[!0-9]*) echo "drill.sh: ROUNDS must be a number, not '$rounds'" >&2; exit 2 ;; esac
if [ -z "$seed" ]; then
    seed=$(date +%s%N)
fi
case "$seed" in ''|*[!0-9]*) echo "drill.sh: the seed must be a number, not '$seed'" >&2; exit 2 ;; esac

echo "drill: rounds=$rounds seed=$seed (replay: scripts/drill.sh $rounds --seed $seed)"
DRILL_ROUNDS="$rounds" DRILL_SEED="$seed" \
    exec cargo test --release --test e2e drill_long -- --ignored --nocapture
