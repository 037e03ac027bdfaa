#!/usr/bin/env bash
# Runs Palisade's fuzz targets (fuzz/, cargo-fuzz and libFuzzer), each for a
# bounded time, seeded with the checked-in corpora:
#
#   sequencer_parse    arbitrary bytes parsed as a sequencer; what parses is
#                      canonical and round-trips            seeds: fuzz/seeds/sequencer
#   signature_verify   parsed, then verified against a key ring; what
#                      verifies re-signs to itself          seeds: fuzz/seeds/sequencer
#   http_request       a request through palisade_server::app; never a 5xx
#                      other than 503, every refusal typed  seeds: tests/corpus/hostile,
#                                                                  fuzz/seeds/http_request
#
# Installs the nightly toolchain and cargo-fuzz if they are missing. New
# inputs go to fuzz/corpus/<target>/ (not checked in); a crash leaves its
# input in fuzz/artifacts/<target>/ and makes this script exit non-zero.
#
# Usage: scripts/fuzz.sh [seconds] [target...]    default: 60 s, every target
# Environment: FUZZ_TARGET_DIR   build directory (default fuzz/target)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-60}
[[ $# -gt 0 ]] && shift
targets=("$@")
((${#targets[@]})) || targets=(sequencer_parse signature_verify http_request)
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [seconds] [target...]" >&2; exit 2; }

step() { printf '\n==> %s\n' "$*"; }

if ! rustup toolchain list | grep -q '^nightly'; then
  step "installing the nightly toolchain (cargo-fuzz needs it for the sanitizers)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  step "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

target_dir=${FUZZ_TARGET_DIR:-$root/fuzz/target}
# The http_request target keeps its sled store in a temporary directory
# for as long as the fuzzer runs; this one is removed afterwards.
scratch=$(mktemp -d -t palisade-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch

summary=()
failed=0
for target in "${targets[@]}"; do
  case $target in
    sequencer_parse | signature_verify) seeds=("$root/fuzz/seeds/sequencer") ;;
    http_request) seeds=("$root/tests/corpus/hostile" "$root/fuzz/seeds/http_request") ;;
    *) echo "unknown fuzz target $target" >&2; exit 2 ;;
  esac
  corpus=$root/fuzz/corpus/$target
  mkdir -p "$corpus" "$root/fuzz/artifacts/$target"
  log=$scratch/$target.log
  step "fuzzing $target for $seconds s (building it first if needed)"
  # The whole output goes to the log; the progress lines and any crash
  # report are shown.
  set +e
  cargo +nightly fuzz run --fuzz-dir "$root/fuzz" --target-dir "$target_dir" -O "$target" \
    "$corpus" "${seeds[@]}" -- \
    -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$root/fuzz/artifacts/$target/" 2>&1 |
    tee "$log" |
    grep --line-buffered -E '^#[0-9]+.*(INITED|pulse|DONE)|^Done|ERROR|panicked|SUMMARY|^error'
  status=${PIPESTATUS[0]}
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  coverage=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 || true)
  if ((status == 0)); then
    verdict=ok
  else
    verdict="FAILED (exit $status; input in fuzz/artifacts/$target/)"
    failed=1
  fi
  summary+=("$(printf '%-18s %12s runs %8s exec/s  %-10s %s' "$target" "${runs:-?}" "${speed:-?}" "${coverage:-}" "$verdict")")
done

step "summary ($seconds s per target)"
printf '%s\n' "${summary[@]}"
exit $failed
