#!/usr/bin/env bash
# Runs Palisade's whole test suite on a fresh Debian machine.
#
# 1. Installs what the tests need, only if missing: redis-server and
#    redis-cli, etcd and etcdctl, protoc and its well-known types
#    (etcd-client builds its protobufs), PostgreSQL and MariaDB,
#    and the fault suite's tools: libfaketime (client clock jumps), libfiu
#    (fsync failures), xfs_io (a disk that dies), mkfs.ext4 and losetup
#    (loop-mounted data directories), and Chromium with its WebDriver
#    (the dashboard's browser test).
# 2. Checks formatting, lints, docs and dependencies (cargo fmt, clippy and
#    rustdoc with -D warnings on every feature, the last two beside the
#    tests at the lowest CPU priority; unused and disallowed dependencies
#    are checked by the `tidy` test in step 3).
# 3. Runs every test (three test binaries at a time, PALISADE_TEST_JOBS):
#    unit tests, doctests, and the integration tests, which
#    start real etcd, Redis, PostgreSQL and MariaDB processes on free loopback ports in temporary
#    directories and kill them by PID when done, including the fault suite
#    (scripts/faults.sh runs only that, and --soak its long form); prints the
#    fault suite's table with its legend, and one line of totals.
#    Then a property-based run of the HTTP API against its OpenAPI document
#    (scripts/api-fuzz.sh: schemathesis in a venv under target/, installing
#    python3-venv if missing), which must find no failure.
# 4. Runs the demos as checks (they exit non-zero if fencing ever fails).
#
# Usage: scripts/test.sh            everything
#        scripts/test.sh --quick    skip fmt/clippy/rustdoc and the demo runs
#
# Root (or sudo without a password) installs missing packages; without
# either, the script goes on when they are all present and otherwise stops
# at once with one line naming them. Each phase prints its time, so the
# slow one shows.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

phase_started=$SECONDS
phase=""
# Ends the previous phase with its time, starts the next.
step() {
  [[ -n $phase ]] && printf '    (%s: %d s)\n' "$phase" $((SECONDS - phase_started))
  phase=$1 phase_started=$SECONDS
  printf '\n==> %s\n' "$*"
}
started=$SECONDS

# --- 1. System packages -------------------------------------------------------
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli    >/dev/null || missing+=(redis-tools)
command -v etcd         >/dev/null || missing+=(etcd-server)
command -v etcdctl      >/dev/null || missing+=(etcd-client)
command -v protoc       >/dev/null || missing+=(protobuf-compiler)
# protoc's well-known types (google/protobuf/*.proto), which etcd-client's
# protobufs import; a Recommends of protobuf-compiler, so name it.
[[ -f /usr/include/google/protobuf/descriptor.proto ]] || missing+=(libprotobuf-dev)
command -v faketime     >/dev/null || missing+=(faketime)
command -v fiu-run      >/dev/null || missing+=(fiu-utils)
command -v xfs_io       >/dev/null || missing+=(xfsprogs)
command -v mkfs.ext4    >/dev/null || missing+=(e2fsprogs)
command -v losetup      >/dev/null || missing+=(mount)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
command -v mariadbd     >/dev/null || missing+=(mariadb-server)
# The dashboard's browser test (/ui in headless Chromium via chromedriver).
command -v chromium     >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# ZooKeeper 3.8 and a headless JRE for the ZooKeeper lock backend, and kazoo
# (for /usr/bin/python3) for its interoperability tests.
[[ -x /usr/share/zookeeper/bin/zkServer.sh ]] || missing+=(zookeeper)
command -v java         >/dev/null || missing+=(default-jre-headless)
/usr/bin/python3 -c 'import kazoo' 2>/dev/null || missing+=(python3-kazoo)
# libclang for bindgen, which generates the Redis module API's bindings
# when palisade-fence-redis-module builds (redis-module's build script).
compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null || missing+=(libclang-dev)
# The linker: links the test binaries several times faster than ld.
command -v mold         >/dev/null || missing+=(mold)
# moto's S3 for the object-store tests: the testkit pip-installs it into a venv under target/ on first use, once per run.
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3 python3-venv)
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    sudo=""
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo"
  else
    echo "scripts/test.sh: missing Debian packages: ${missing[*]}; install them as root (apt-get install -y --no-install-recommends ${missing[*]}) and run it again" >&2
    exit 1
  fi
  step "installing ${missing[*]}"
  # Another install may hold the dpkg lock for a while: wait and retry.
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    if $sudo apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
      break
    fi
    ((attempt == 10)) && { echo "scripts/test.sh: apt-get install ${missing[*]} failed 10 times; see its messages above" >&2; exit 1; }
    echo "apt-get busy or failed (attempt $attempt); retrying in 10 s" >&2
    sleep 10
  done
  # Debian starts the packaged services; the tests start their own on free
  # ports, so the packaged ones are not needed (and are left alone).
fi
step "tools: $(redis-server --version | cut -d' ' -f1-3), $(etcd --version | head -1), $(protoc --version)"
# A full run takes about 5 GB of disk (the build, its lints, the servers'
# data directories): say what there is, so a disk that fills up mid-run is
# recognised as such in the failures that follow.
step "disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free for the build, $(df -h --output=avail "${TMPDIR:-/tmp}" | tail -1 | tr -d ' ') for the servers' data (a full run needs about 5 GB)"

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# mold links in place of ld for everything cargo runs (its `-run` mode
# intercepts the linker), without touching RUSTFLAGS and so without
# invalidating what is already built.
link="mold -run"
# Incremental compilation pays off when one edits and rebuilds; a whole run
# builds each crate once, and its incremental caches would take gigabytes
# of a CI machine's disk for nothing (a full run had 3.4 GB of them).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# --- 2. Formatting and lints --------------------------------------------------
lint_pid=""
if ((quick == 0)); then
  step "cargo fmt --check"
  cargo fmt --all -- --check
  # clippy and rustdoc run beside the tests, at the lowest CPU and disk
  # priority and in a target directory of their own (so neither waits on
  # the other's build lock): the tests spend most of their time waiting on
  # real servers, and the lints take that idle CPU instead of a phase of
  # their own. Their output and verdict come after the tests.
  lint_log="$(mktemp -t palisade-lint-log.XXXXXX)"
  # setsid: a process group of its own, so an early exit stops all of it.
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/lint" setsid nice -n 19 ionice -c 3 scripts/lint.sh >"$lint_log" 2>&1 &
  lint_pid=$!
  trap '[[ -n $lint_pid ]] && kill -- -"$lint_pid" 2>/dev/null; true' EXIT
fi

# --- 3. Tests -----------------------------------------------------------------
step "cargo test (unit, doc, integration and fault-suite tests against real etcd, Redis and resource servers)"
# The fault scenarios append one row each to this table (docs/SAFETY.md).
fault_table="$(mktemp -t palisade-fault-table.XXXXXX)"
export PALISADE_FAULT_TABLE="$fault_table"
tests_status=0
# --all-features: the CLI's demos, the backends' test hooks, TLS to etcd and
# Redis's `#insecure` URLs, all compiled and tested together.
# The output is kept whole in a log, and summed up at the end.
test_log="$(mktemp -t palisade-test-log.XXXXXX)"
# Built first, then run several binaries at once (run-test-binaries.py
# says why), then the doctests. (pipefail: the status is the runner's,
# not tee's.)
built="$(mktemp -t palisade-test-binaries.XXXXXX)"
$link cargo test --workspace --all-features --locked --no-run --message-format=json-render-diagnostics >"$built"
scripts/run-test-binaries.py <"$built" 2>&1 | tee "$test_log" || tests_status=$?
rm -f "$built"
$link cargo test --workspace --all-features --locked --doc 2>&1 | tee -a "$test_log" || tests_status=$?
step "fault suite table"
scripts/fault-table.sh "$fault_table"
rm -f "$fault_table"
# One line of totals over every test binary and doctest run.
totals=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i - 1); if ($(i) ~ /^failed/) f += $(i - 1); if ($(i) ~ /^ignored/) s += $(i - 1) } } END { printf "%d passed, %d failed, %d skipped", p, f, s }' "$test_log")
rm -f "$test_log"
((tests_status == 0)) || { echo "cargo test failed (exit $tests_status)" >&2; echo "$totals"; exit "$tests_status"; }

if [[ -n $lint_pid ]]; then
  step "cargo clippy and rustdoc -D warnings (every feature of every crate)"
  lint_status=0
  wait "$lint_pid" || lint_status=$?
  lint_pid=""
  if ((lint_status != 0)); then
    cat "$lint_log"
    echo "clippy or rustdoc failed (exit $lint_status)" >&2
    exit "$lint_status"
  fi
  tail -n 1 "$lint_log"
  rm -f "$lint_log"
fi

step "API fuzz: schemathesis against the OpenAPI document, on a live server"
# The server the test build made (every feature), not a second build.
PALISADE_SERVER_BIN="${CARGO_TARGET_DIR:-target}/debug/palisade-server" scripts/api-fuzz.sh

# --- 4. Demos as checks -------------------------------------------------------
if ((quick == 0)); then
  step "GC-pause demo (embedded backend)"
  $link cargo run --locked -q -p example-gc-pause
  step "flash-sale demo (embedded backend)"
  $link cargo run --locked -q -p example-flash-sale
fi

step "all green in $((SECONDS - started)) s"
echo "$totals"
