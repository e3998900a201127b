#!/usr/bin/env python3
"""One client of a fault run, in its own process so that a nemesis can pause it: it takes the lock, writes to the
fenced register while its lease is valid, releases; or spends rate tokens. Every operation goes to its history.
It stops, releasing what it holds, when its stdin closes."""
import argparse
import random
import socket
import sys
import threading
import time

import corral
from history import History, Op


class Register:
    """The fenced register's client: one line per write, answered `ok` or `stale <largest>`."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.file = self.sock.makefile("rw")

    def write(self, limit: str, token: int, process: str) -> bool:
        self.file.write(f"write {limit} {token} {process}\n")
        self.file.flush()
        return self.file.readline().startswith("ok")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--addr", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--register", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--history", required=True)
    p.add_argument("--ttl", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    history = History(args.history)
    limiter = corral.Limiter(args.addr, secret_file=args.secret, timeout=5)
    register = Register(args.register)
    while not stop.is_set():
        if rng.random() < 0.7:
            hold(limiter, register, history, args, rng, stop)
        else:
            permits = rng.randint(1, 5)
            op = Op(args.name, "rate", "tokens", time.monotonic(), permits=permits)
            try:
                limiter.acquire("tokens", permits=permits, wait=2)
                op.ok = True
            except corral.CorralError as e:
                op.error = e.code.name
            op.complete = time.monotonic()
            history.record(op)
            if not op.ok:
                time.sleep(rng.uniform(0.01, 0.05))  # the limiter is down or refusing: do not spin
    history.close()


def hold(limiter, register, history, args, rng, stop):
    op = Op(args.name, "acquire", "lock", time.monotonic())
    try:
        lease = limiter.acquire("lock", wait=3, ttl=args.ttl)
    except corral.CorralError as e:
        op.complete, op.error = time.monotonic(), e.code.name
        history.record(op)
        time.sleep(rng.uniform(0.01, 0.05))  # the limiter is down or refusing: do not spin
        return
    op.complete, op.ok, op.token, op.lease_id = time.monotonic(), True, lease.fencing_token, lease.lease_id
    for _ in range(rng.randint(1, 3)):
        if stop.is_set() or not lease.valid():
            break
        write = Op(args.name, "write", "lock", time.monotonic(), token=lease.fencing_token)
        write.ok = register.write("lock", lease.fencing_token, args.name)
        write.complete = time.monotonic()
        write.error = "" if write.ok else "stale"
        history.record(write)
        time.sleep(rng.uniform(0.02, 0.2))
    # Held until the release is invoked or the lease stopped being surely live, whichever came first.
    op.held_until = min(time.monotonic(), lease.valid_until)
    try:
        lease.release()
    except corral.CorralError as e:
        op.error = f"release: {e.code.name}"
    history.record(op)


if __name__ == "__main__":
    main()
