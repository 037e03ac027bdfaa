#!/usr/bin/env bash
# Prints the fault suite's table from the rows the scenarios appended to
# FILE (PALISADE_FAULT_TABLE), in scenario order, and its legend.
# Used by scripts/test.sh and scripts/faults.sh.
#
# Usage: scripts/fault-table.sh FILE
set -euo pipefail
echo "| scenario | backend | operations | faults injected | stale writes accepted | acknowledged writes lost | recovery | notes |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
# Numbered scenarios first, then the mutation checks.
sort -t '|' -b -k2,2V "$1"
cat <<'LEGEND'

Legend: every row but the `mutation` and `regression` ones must show 0
stale writes accepted and 0 acknowledged writes lost. The `mutation` rows
run a scenario with a guard removed on purpose (fencing off, a condition
stripped, a sync skipped) and must show the anomaly: they prove the checker
sees what it exists to catch. The `regression` rows run a documented
limit (Redis without persistence forgets the marks with the data) and show
what it costs.
LEGEND
