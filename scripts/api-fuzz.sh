#!/usr/bin/env bash
# Property-based run of the HTTP API against its own OpenAPI document:
# schemathesis (from PyPI, in a venv under target/) generates requests from
# /openapi.json and checks every answer against it (status documented,
# content type, body schema, headers, no 5xx, unsupported methods 405,
# stateful sequences), against a live palisade-server on a free loopback
# port with a fresh data directory.
#
# Excluded check: positive_data_acceptance. It expects every schema-valid
# request to succeed, but a valid write needs a sequencer whose grammar
# (`v1;lock=NAME;mode=...;gen=N`) and whose tie to the path's lock no
# schema can express; a refusal (400 malformed_sequencer, 422
# lock_mismatch) is the documented answer, and the other checks verify it.
# Also left out: GET /v1/events, an endless stream (tests/it/events.rs covers it).
#
# Prints the requests sent and the failures; exits non-zero on any failure.
#
# Usage: scripts/api-fuzz.sh [max-examples per operation, default 50]
#        PALISADE_SERVER_BIN=path scripts/api-fuzz.sh   fuzz that binary
set -euo pipefail
cd "$(dirname "$0")/.."

max_examples="${1:-50}"
schemathesis_version="4.32.5"
venv="${CARGO_TARGET_DIR:-target}/api-fuzz-venv"

step() { printf '\n==> %s\n' "$*"; }

# --- Python with venv (Debian splits it into python3-venv) -------------------
if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  step "installing python3 and python3-venv"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3 python3-venv
fi
if ! "$venv/bin/st" --version 2>/dev/null | grep -q "$schemathesis_version"; then
  step "installing schemathesis $schemathesis_version into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$schemathesis_version"
fi

# --- A live server ------------------------------------------------------------
# PALISADE_SERVER_BIN: a server binary built already (scripts/test.sh
# passes the one its test build made, with every feature), else built here.
server_bin="${PALISADE_SERVER_BIN:-}"
if [[ -z "$server_bin" ]]; then
  step "building palisade-server"
  cargo build --locked -q -p palisade-server --features cli --bin palisade-server
  server_bin="${CARGO_TARGET_DIR:-target}/debug/palisade-server"
fi

data_dir="$(mktemp -d -t palisade-api-fuzz.XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$data_dir"
}
trap cleanup EXIT

port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
"$server_bin" --data-dir "$data_dir/store" --listen "127.0.0.1:$port" >"$data_dir/server.log" 2>&1 &
server_pid=$!

# Ready when /healthz answers; 60 s is generous on a loaded machine.
"$venv/bin/python" - "$base" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 60
while True:
    try:
        urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=5).read()
        break
    except Exception as error:
        if time.monotonic() > deadline:
            sys.exit(f"palisade-server did not answer /healthz within 60 s: {error}")
        time.sleep(0.1)
PY

# The server's own count of API requests answered, before and after.
api_requests() {
  "$venv/bin/python" - "$base" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode()
print(int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(("palisade_requests_accepted_total{", "palisade_requests_rejected_total{")))))
PY
}
before="$(api_requests)"

# --- The run ------------------------------------------------------------------
step "schemathesis $schemathesis_version against $base/openapi.json ($max_examples examples per operation)"
report="$data_dir/schemathesis.txt"
status=0
"$venv/bin/st" run "$base/openapi.json" \
  --checks all \
  --exclude-checks positive_data_acceptance \
  --exclude-path /v1/events \
  --max-examples "$max_examples" \
  --request-timeout 30 \
  --no-color >"$report" 2>&1 || status=$?
after="$(api_requests)"

# The summary: schemathesis's own, then the counts.
sed -n '/= SUMMARY =/,$p' "$report"
if ((status != 0)); then
  echo "--- failures in detail ---"
  sed -n '/= FAILURES =/,/= SUMMARY =/p' "$report"
  echo "--- server log (last 20 lines) ---"
  tail -n 20 "$data_dir/server.log"
fi
generated="$(grep -Eo '[0-9]+ generated' "$report" | head -1 | cut -d' ' -f1)"
failures="$(grep -Eo '[0-9]+ found [0-9]+ unique failures' "$report" | grep -Eo '[0-9]+ unique' | cut -d' ' -f1 || true)"
step "API fuzz: ${generated:-?} test cases, $((after - before)) requests to /v1/locks answered by the server, ${failures:-0} failures"
exit "$status"
