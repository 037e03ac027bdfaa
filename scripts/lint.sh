#!/usr/bin/env bash
# clippy and rustdoc with -D warnings on every feature of every crate.
# scripts/test.sh runs it beside the tests, at the lowest CPU priority and
# in a target directory of its own.
#
# Usage: scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
echo "cargo clippy --workspace --all-targets --all-features -- -D warnings"
mold -run cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
echo "cargo doc --workspace --no-deps --all-features (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked
echo "clippy and rustdoc clean ($((SECONDS - started)) s)"
