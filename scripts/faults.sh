#!/usr/bin/env bash
# The fault suite (issue 6): runs every fault scenario against real etcd,
# Redis and resource-server processes, then prints the table of what each
# scenario injected and found (docs/SAFETY.md, "Fault suite").
#
#   scripts/faults.sh            the short form (CI)
#   scripts/faults.sh --soak     the long form: more clients, operations and rounds
#
# Environment:
#   CARGO_TARGET_DIR       where to build (cargo's default otherwise)
#   PALISADE_FAULT_TABLE   keep the table rows in this file (default: a temporary file)
#   PALISADE_FAULT_KEEP=1  keep each run's histories and logs (paths are printed)
#
# Exits non-zero if any scenario fails; the table is printed either way.
set -euo pipefail

cd "$(dirname "$0")/.."

soak=0
for arg in "$@"; do
    case "$arg" in
        --soak) soak=1 ;;
        -h | --help)
            sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "faults.sh: unknown argument \`$arg\` (try --help)" >&2
            exit 2
            ;;
    esac
done

if [[ "$soak" == 1 ]]; then
    export PALISADE_FAULT_SOAK=1
fi

table="${PALISADE_FAULT_TABLE:-}"
remove_table=0
if [[ -z "$table" ]]; then
    table="$(mktemp -t palisade-fault-table.XXXXXX)"
    remove_table=1
fi
: > "$table"
export PALISADE_FAULT_TABLE="$table"

# The fault binaries of the palisade-tests crate; one that does not
# exist yet is skipped.
tests=()
for binary in faults faults_net faults_disk faults_zookeeper; do
    if [[ -f "tests/tests/$binary/main.rs" ]]; then
        tests+=(--test "$binary")
    else
        echo "faults.sh: skipping $binary (tests/tests/$binary/main.rs does not exist)" >&2
    fi
done
if [[ ${#tests[@]} -eq 0 ]]; then
    echo "faults.sh: no fault test binary found" >&2
    exit 1
fi

started=$(date +%s)
status=0
# The disk scenarios that mount file systems need root: included when
# root, counted as ignored otherwise.
include=()
[[ $(id -u) -eq 0 ]] && include=(-- --include-ignored)
cargo test -p palisade-tests "${tests[@]}" "${include[@]}" || status=$?
elapsed=$(($(date +%s) - started))

echo
echo "## Fault suite ($([[ "$soak" == 1 ]] && echo soak || echo short form), ${elapsed} s)"
echo
scripts/fault-table.sh "$table"
echo

if [[ "$remove_table" == 1 ]]; then
    rm -f "$table"
fi
exit "$status"
