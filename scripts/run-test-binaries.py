#!/usr/bin/env python3
"""Runs the test binaries cargo built, several at once.

Reads cargo's JSON messages (`cargo test --no-run --message-format=json`)
on stdin and runs every test executable in its package's directory, as
`cargo test` does, but up to JOBS at a time instead of one after another:
most of the suite's time is spent waiting on real servers (elections,
lease expiries, fsyncs), not on the CPU, so binaries overlap well. Each
binary's output is printed whole when it ends, under cargo's own
`Running` line, so the log reads as cargo's does and nothing interleaves.

Why not cargo-nextest: it runs every test in a process of its own, so a
binary's shared servers (one etcd or MariaDB for many tests) would start
once per test, and installing it costs minutes on a fresh machine.

Usage: run-test-binaries.py [--jobs N] [-- ARGS for every binary] < messages
Exit status: 0 when every binary passed, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# The slowest binaries start first, so the run ends with short ones
# (measured: the fault suite and the cross-crate `it` take minutes, most
# unit tests seconds). Anything not named keeps cargo's order after them.
SLOW_FIRST = [
    ("palisade-tests", "it"),
    ("palisade-tests", "faults_net"),
    ("palisade-cli", "cli"),
    ("palisade-lock-sql", "it"),
    ("palisade-tests", "faults"),
    ("palisade-lock-etcd", "it"),
    ("palisade-lock-zookeeper", "it"),
    ("palisade-tests", "faults_zookeeper"),
    ("palisade-server", "it"),
    ("palisade-lock-redis", "it"),
    ("palisade-redlock-model", "palisade_redlock_model"),
]


def binaries(messages):
    """The test executables in cargo's JSON messages, with their packages."""
    found = []
    for line in messages:
        line = line.strip()
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        if not message.get("profile", {}).get("test") or not message.get("executable"):
            continue
        package = os.path.dirname(message["manifest_path"])
        found.append(
            {
                "executable": message["executable"],
                "target": message["target"]["name"],
                "kind": message["target"]["kind"][0],
                "src_path": message["target"]["src_path"],
                "package_dir": package,
                "package": package_name(message),
            }
        )
    return found


def package_name(message):
    """The package's name from cargo's package id (either of its formats)."""
    package_id = message["package_id"]
    if "#" in package_id:
        # path+file:///…/crates/palisade-core#0.1.0 or …#name@0.1.0
        tail = package_id.rsplit("#", 1)[1]
        if "@" in tail:
            return tail.split("@", 1)[0]
        return os.path.basename(package_id.rsplit("#", 1)[0])
    return package_id.split(" ", 1)[0]


def rank(binary):
    key = (binary["package"], binary["target"])
    return SLOW_FIRST.index(key) if key in SLOW_FIRST else len(SLOW_FIRST)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("PALISADE_TEST_JOBS", "3")))
    parser.add_argument("args", nargs="*")
    options = parser.parse_args()

    args = list(options.args)
    if os.geteuid() == 0:
        # The scenarios that mount file systems are ignored "needs root".
        args.append("--include-ignored")
    else:
        print(
            "run-test-binaries: not root, so the disk fault scenarios that mount file systems "
            "are skipped (ignored: needs root); run as root, as CI does, to include them",
            file=sys.stderr,
        )
    todo = sorted(binaries(sys.stdin), key=rank)
    if not todo:
        print("run-test-binaries: cargo built no test binary", file=sys.stderr)
        return 1
    printing = threading.Lock()
    failed = []

    def run(binary):
        started = time.monotonic()
        env = dict(os.environ, CARGO_MANIFEST_DIR=binary["package_dir"], CARGO_PKG_NAME=binary["package"])
        result = subprocess.run(
            [binary["executable"], *args],
            cwd=binary["package_dir"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        source = os.path.relpath(binary["src_path"], binary["package_dir"])
        executable = os.path.relpath(binary["executable"], os.getcwd())
        with printing:
            print(f"     Running {source} ({executable}) [{binary['package']}, {time.monotonic() - started:.0f} s]")
            sys.stdout.write(result.stdout.decode("utf-8", "replace"))
            sys.stdout.flush()
            if result.returncode != 0:
                which = f"--test {binary['target']}" if binary["kind"] == "test" else f"--{binary['kind']}"
                failed.append(f"-p {binary['package']} {which} (exit {result.returncode})")

    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        list(pool.map(run, todo))
    if failed:
        print("failed test binaries:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
