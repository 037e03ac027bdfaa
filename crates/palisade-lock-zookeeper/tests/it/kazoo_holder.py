"""A kazoo lock holder for the interoperability tests, steered by lines.

Usage: kazoo_holder.py HOSTS PATH KIND  (KIND: lock, write or read)
Standard input: `ACQUIRE <timeout s>` takes the lock and answers `HELD` or
`TIMEOUT`; `RELEASE` releases it and answers `RELEASED`. Every answer is
one line on standard output.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout

hosts, path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
client = KazooClient(hosts=hosts)
client.start(timeout=30)
make = {"lock": client.Lock, "write": client.WriteLock, "read": client.ReadLock}[kind]
lock = make(path, "kazoo-holder")
print("READY", flush=True)
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "ACQUIRE":
        try:
            held = lock.acquire(blocking=True, timeout=float(words[1]))
        except LockTimeout:
            held = False
        print("HELD" if held else "TIMEOUT", flush=True)
    elif words[0] == "RELEASE":
        lock.release()
        print("RELEASED", flush=True)
client.stop()
