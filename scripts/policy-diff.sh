#!/usr/bin/env bash
# The policy's reading of quotes against the real bash, every variant (docs/POLICY.md,
# "Quoting"): the ignored test policy_reads_quotes_as_bash_does_full generates every
# combination of payload × quoting × `${…}` operator × wrapper × program × statement,
# asks the policy with rules allowing `echo `, `cat `, `grep ` and `ls`, and runs each
# allowed command with `bash --noprofile --norc -c` in an empty directory. It fails if
# bash ran a substitution in a command the policy allowed. Takes minutes (unit tests
# run a slice of a few hundred variants on every `cargo test`).
#
#   scripts/policy-diff.sh            the full run; prints the counts
set -euo pipefail
cd "$(dirname "$0")/.."

command -v bash >/dev/null && command -v timeout >/dev/null || {
    echo "policy-diff: bash and timeout (coreutils) are needed" >&2
    exit 1
}
echo "policy-diff: $(bash --version | head -n 1)"
cargo test -p toolvisor-policy --locked --lib -- --ignored --nocapture \
    differential::policy_reads_quotes_as_bash_does_full
