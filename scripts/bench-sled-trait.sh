#!/usr/bin/env bash
# Durable fenced writes to the sled store before and after the engine trait,
# in one run: the same workload (scripts/bench-sled-trait/main.rs) is built
# against the tree before the trait (BEFORE, default 8b45a8c^, the parent of
# "Store over the engine trait: sled becomes the first engine") and against
# this working tree, then the two binaries run alternately in interleaved
# rounds, so load from elsewhere on the machine hits both alike. Prints the
# after / before ratio per path (Store::apply in-process; the HTTP server)
# and client count, with CPU time and context switches per write (the
# whole process, from getrusage), which are steadier than the rates.
#
# Usage: scripts/bench-sled-trait.sh
# Environment: PALISADE_BENCH_ROUNDS (default 5), PALISADE_BENCH_SECS per
# cell (default 3), PALISADE_BENCH_CLIENTS (default "1 8"),
# PALISADE_BENCH_PATHS (default "store http"), BEFORE (a git revision),
# AFTER (a git revision instead of this working tree, e.g. 8b45a8c for the
# trait's own commit), CARGO_TARGET_DIR (default this tree's target/, shared by both builds so
# dependencies are compiled once).
#
# The old tree is a temporary `git worktree` under a temp dir, removed on
# exit. Each tree's workload is its own one-crate workspace next to it,
# with path dependencies on that tree's crates and its Cargo.lock, so both
# resolve the same dependency versions their tree does, and the two trees'
# crates never share build artifacts (their paths differ).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
before_rev="${BEFORE:-8b45a8c^}"
after_rev="${AFTER:-}"
rounds="${PALISADE_BENCH_ROUNDS:-5}"
secs="${PALISADE_BENCH_SECS:-3}"
clients_list="${PALISADE_BENCH_CLIENTS:-1 8}"
paths="${PALISADE_BENCH_PATHS:-store http}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"

work="$(mktemp -d "${TMPDIR:-/tmp}/bench-sled-trait.XXXXXX")"
cleanup() {
    for side in before after; do
        if [ -d "$work/$side-tree" ]; then
            git -C "$repo" worktree remove --force "$work/$side-tree" || true
        fi
    done
    rm -rf "$work"
}
trap cleanup EXIT

git -C "$repo" worktree add --detach --quiet "$work/before-tree" "$before_rev"
after_tree="$repo"
if [ -n "$after_rev" ]; then
    git -C "$repo" worktree add --detach --quiet "$work/after-tree" "$after_rev"
    after_tree="$work/after-tree"
fi

# A one-crate workspace building the workload against `tree`'s crates.
make_crate() {
    local tree="$1" dir="$2"
    mkdir -p "$dir"
    cp "$repo/scripts/bench-sled-trait/main.rs" "$dir/main.rs"
    cp "$tree/Cargo.lock" "$dir/Cargo.lock"
    cat >"$dir/Cargo.toml" <<EOF
[package]
name = "sled-trait-bench"
version = "0.0.0"
edition = "2024"
publish = false

[[bin]]
name = "sled-trait-bench"
path = "main.rs"

[dependencies]
palisade-core = { path = "$tree/crates/palisade-core" }
palisade-store = { path = "$tree/crates/palisade-store" }
palisade-server = { path = "$tree/crates/palisade-server" }
tokio = { version = "1", features = ["rt-multi-thread", "net", "io-util", "sync", "time"] }
libc = "0.2"

# The trees' own release profile.
[profile.release]
debug = "line-tables-only"

[workspace]
EOF
}

for side in before after; do
    tree="$after_tree"
    [ "$side" = before ] && tree="$work/before-tree"
    make_crate "$tree" "$work/$side"
    echo "building the workload against the $side tree ($tree)" >&2
    cargo build --release --quiet --manifest-path "$work/$side/Cargo.toml"
    # Both builds write the same binary name: keep each one's own.
    cp "$CARGO_TARGET_DIR/release/sled-trait-bench" "$work/$side.bin"
done

echo "before: $(git -C "$repo" log -1 --format='%h %s' "$before_rev")"
if [ -n "$after_rev" ]; then
    echo "after:  $(git -C "$repo" log -1 --format='%h %s' "$after_rev")"
else
    echo "after:  this working tree ($(git -C "$repo" log -1 --format='%h %s'))"
fi
echo "$rounds rounds of ${secs} s per cell; load at start: $(uptime | sed 's/.*load average: //')"

results="$work/results"
: >"$results"
for round in $(seq 1 "$rounds"); do
    # Alternate which side goes first, so a drift in load favours neither.
    order="before after"
    [ $((round % 2)) -eq 0 ] && order="after before"
    for path in $paths; do
        for clients in $clients_list; do
            for side in $order; do
                read -r rate p50 cpu switches < <("$work/$side.bin" "$path" "$clients" "$secs")
                echo "$path $clients $side $round $rate $p50 $cpu $switches" >>"$results"
            done
        done
    done
done
echo "load at end: $(uptime | sed 's/.*load average: //')"
echo
echo "| path | clients | before writes/s | after writes/s | **after / before** | per round | p50 before / after | CPU per write before / after | context switches per write before / after |"
echo "|---|---|---|---|---|---|---|---|---|"
for path in $paths; do
    for clients in $clients_list; do
        awk -v path="$path" -v clients="$clients" '
            $1 == path && $2 == clients {
                rate[$3] += $5; n[$3]++
                cpu[$3] += $5 * $7; switches[$3] += $5 * $8
                p50[$3, n[$3]] = $6
                round_rate[$3, $4] = $5; if ($4 > rounds) rounds = $4
            }
            function median(side,    i, j, t, a) {
                for (i = 1; i <= n[side]; i++) a[i] = p50[side, i]
                for (i = 1; i <= n[side]; i++)
                    for (j = i + 1; j <= n[side]; j++)
                        if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                return a[int((n[side] + 1) / 2)]
            }
            END {
                per = ""
                for (r = 1; r <= rounds; r++) per = per sprintf(" %.2f", round_rate["after", r] / round_rate["before", r])
                printf "| %s | %s | %.0f | %.0f | **%.2f ×** |%s | %d / %d µs | %.0f / %.0f µs | %.1f / %.1f |\n",
                    path == "store" ? "Store::apply" : "HTTP PUT", clients,
                    rate["before"] / n["before"], rate["after"] / n["after"],
                    rate["after"] / rate["before"], per,
                    median("before"), median("after"),
                    cpu["before"] / rate["before"], cpu["after"] / rate["after"],
                    switches["before"] / rate["before"], switches["after"] / rate["after"]
            }' "$results"
    done
done
