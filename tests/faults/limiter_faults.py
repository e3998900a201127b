#!/usr/bin/env python3
"""The limiter under faults, judged by its recorded history.

Starts corral-ratelimiter (with its lease snapshot) on loopback, a fenced register (a resource that refuses
fencing tokens smaller than the largest it accepted), and worker processes (worker.py) that take the lock, write
to the register while their lease is valid, and spend rate tokens, each recording every operation. Each worker
reaches the limiter through its own relay (nemesis.py). Meanwhile a nemesis, chosen at random each round:

  pause-client     SIGSTOP one worker for 1-3 lease TTLs, then SIGCONT
  pause-limiter    SIGSTOP the limiter for 0.5-2 TTLs
  kill-limiter     kill -9 the limiter and start it again on the same port and snapshot
  partition        cut one worker's link both ways for 1-3 TTLs
  partition-oneway cut only the replies to one worker (its requests still arrive)
  clock-step       step the limiter's wall clock 10-120 s forward or back (libfaketime, the monotonic clock
                   untouched, as an NTP step does; skipped without Debian's `faketime`)
  disk-full        fill the filesystem under the limiter's lease snapshot (a 64 MiB tmpfs) for 1-3 TTLs, and
                   kill -9 the limiter while it is full half of the time (skipped when not root)
  slow-disk        delay the limiter's fsync and fdatasync by 0.1-1 s for 1-3 TTLs (slow_fsync.c, preloaded;
                   skipped without a C compiler)

Afterwards every worker stops and releases, and the checker (history.py) judges the history. Prints the
history's size, the faults injected and a verdict per property; exits 1 on any violation.

    BUILD/sdk-venv/bin/python tests/faults/limiter_faults.py --bin BUILD/bin            (smoke: 20 s)
    BUILD/sdk-venv/bin/python tests/faults/limiter_faults.py --bin BUILD/bin --duration 1800 --workers 8
"""
import argparse
import collections
import glob
import os
import random
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import history  # noqa: E402
from nemesis import Relay, SlowDisk, SmallDisk, SteppedClock, free_port  # noqa: E402

import corral  # noqa: E402
from corral.v1 import ratelimit_pb2, ratelimit_pb2_grpc  # noqa: E402

TTL = 1.0
RATE, BURST = 40.0, 10
CONFIG = f"""limits:
  - {{name: lock, kind: concurrency, permits: 1}}
  - {{name: tokens, kind: rate, rate_per_s: {RATE}, burst: {BURST}}}
"""


class FencedRegister(socketserver.ThreadingTCPServer):
    """Accepts `write <limit> <token> <who>` when the token is at least the largest it accepted for that limit."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.largest = collections.defaultdict(int)
        self.lock = threading.Lock()
        self.accepted = self.refused = 0
        super().__init__(("127.0.0.1", 0), RegisterHandler)
        self.address = f"127.0.0.1:{self.server_address[1]}"


class RegisterHandler(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            parts = line.decode().split()
            if len(parts) != 4 or parts[0] != "write" or not parts[2].isdigit():
                self.wfile.write(b"error\n")
                continue
            limit, token = parts[1], int(parts[2])
            with self.server.lock:
                ok = token >= self.server.largest[limit]
                if ok:
                    self.server.largest[limit] = token
                    self.server.accepted += 1
                else:
                    self.server.refused += 1
                largest = self.server.largest[limit]
            self.wfile.write(b"ok\n" if ok else f"stale {largest}\n".encode())
            self.wfile.flush()


class Limiter:
    """corral-ratelimiter as a process that can be paused and killed, restarted on the same port and snapshot, its
    wall clock stepped by `clock` (libfaketime), its snapshot on `state_dir` (a small tmpfs as root)."""

    def __init__(self, binary, dir, secret):
        self.binary, self.dir, self.secret = binary, dir, secret
        self.clock = SteppedClock(os.path.join(dir, "faketime"), kernel_waits=True)
        self.disk = SmallDisk(os.path.join(dir, "state"))
        self.slow = SlowDisk(dir)
        self.state_dir = self.disk.path
        with open(os.path.join(dir, "limiter.yaml"), "w") as f:
            f.write(CONFIG)
        self.address = free_port()
        self.log = open(os.path.join(dir, "limiter.log"), "a")
        self.proc = None
        self.start()

    def start(self):
        ready = os.path.join(self.dir, "ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        clock = self.clock.env()
        env = dict(os.environ, **dict(clock, **self.slow.env(clock.get("LD_PRELOAD", ""))))
        self.proc = subprocess.Popen(
            [self.binary, f"--config={self.dir}/limiter.yaml", f"--secret-file={self.secret}",
             f"--grpc-listen={self.address}", "--metrics-listen=127.0.0.1:0",
             f"--state-path={self.state_dir}/leases.db", f"--ready-file={ready}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while not (os.path.exists(ready) and os.path.getsize(ready) > 0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"corral-ratelimiter did not start (see {self.dir}/limiter.log)")
            time.sleep(0.02)

    def kill_and_restart(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.start()

    def in_use(self, metadata):
        stub = ratelimit_pb2_grpc.RateLimiterStub(grpc.insecure_channel(self.address))
        status = stub.GetStatus(ratelimit_pb2.GetStatusRequest(), timeout=5, metadata=metadata)
        return sum(l.in_use for l in status.limits if l.kind == ratelimit_pb2.LIMIT_KIND_CONCURRENCY)

    def stop(self):
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()
        self.disk.unmount()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the build's bin directory")
    p.add_argument("--duration", type=float, default=20, help="seconds of faults (default 20: the smoke run)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the run's directory (histories, logs)")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    run_dir = tempfile.mkdtemp(prefix="corral-faults-")
    secret = os.path.join(run_dir, "secret")
    with open(secret, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(secret, 0o600)
    metadata = (("authorization", "Bearer " + corral.cluster_token(secret)),)
    print(f"fault run: seed {seed}, {args.workers} workers, {args.duration:g}s, lease TTL {TTL:g}s, dir {run_dir}",
          flush=True)

    limiter = Limiter(os.path.join(args.bin, "corral-ratelimiter"), run_dir, secret)
    register = FencedRegister()
    threading.Thread(target=register.serve_forever, daemon=True).start()
    workers, relays = [], []
    for i in range(args.workers):
        relay = Relay(limiter.address)
        relays.append(relay)
        workers.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), f"--addr={relay.address}", f"--secret={secret}",
             f"--register={register.address}", f"--name=w{i}", f"--history={run_dir}/history-w{i}.jsonl",
             f"--ttl={TTL}", f"--seed={seed + i}"], stdin=subprocess.PIPE,
            stdout=open(os.path.join(run_dir, f"w{i}.log"), "w"), stderr=subprocess.STDOUT))

    faults, outages = collections.Counter(), []
    end = time.monotonic() + args.duration
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.5, 1.5) * TTL)
        kinds = ["pause-client", "pause-limiter", "kill-limiter", "partition", "partition-oneway"]
        kinds += ["clock-step"] if limiter.clock.available else []
        kinds += ["disk-full"] if limiter.disk.mounted else []
        kinds += ["slow-disk"] if limiter.slow.available else []
        kind, target, start = rng.choice(kinds), "limiter", time.monotonic()
        faults[kind.split()[0]] += 1
        if kind == "pause-client":
            w = rng.choice(workers)
            target = f"w{workers.index(w)}"
            w.send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(1, 3) * TTL)
            w.send_signal(signal.SIGCONT)
        elif kind == "pause-limiter":
            limiter.proc.send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 2) * TTL)
            limiter.proc.send_signal(signal.SIGCONT)
        elif kind == "kill-limiter":
            limiter.kill_and_restart()
        elif kind == "clock-step":
            step = rng.choice([-1, 1]) * rng.randint(10, 120)
            limiter.clock.step(step)
            kind += f" {step:+d}s"
        elif kind == "disk-full":
            limiter.disk.fill()
            time.sleep(rng.uniform(1, 3) * TTL)
            if rng.random() < 0.5:
                limiter.proc.send_signal(signal.SIGKILL)
                limiter.proc.wait()
                limiter.disk.free()
                limiter.start()
                kind += " + kill-limiter"
            else:
                limiter.disk.free()
        elif kind == "slow-disk":
            delay = rng.randint(100, 1000)
            limiter.slow.slow(delay)
            time.sleep(rng.uniform(1, 3) * TTL)
            limiter.slow.fast()
            kind += f" +{delay} ms"
        else:
            relay = rng.choice(relays)
            target = f"w{relays.index(relay)}"
            relay.cut(one_way=kind == "partition-oneway")
            time.sleep(rng.uniform(1, 3) * TTL)
            relay.heal()
        outages.append(history.Outage(kind, target, start, time.monotonic()))
        print(f"  {time.monotonic() - end + args.duration:6.1f}s {kind}", flush=True)
    print("nemeses skipped: " + (", ".join(n for n, on in (("clock-step (no faketime)", limiter.clock.available),
                                                          ("disk-full (not root)", limiter.disk.mounted),
                                                          ("slow-disk (no C compiler)", limiter.slow.available))
                                 if not on)
                                 or "none"), flush=True)

    for w in workers:  # stop: each releases what it holds and exits
        w.stdin.close()
    for w in workers:
        try:
            w.wait(timeout=30)
        except subprocess.TimeoutExpired:
            w.kill()
    deadline = time.monotonic() + TTL * 5 + 10
    leaked = -1
    while time.monotonic() < deadline:
        leaked = limiter.in_use(metadata)
        if leaked == 0:
            break
        time.sleep(0.1)
    limiter.stop()
    register.shutdown()

    ops = history.read(sorted(glob.glob(os.path.join(run_dir, "history-*.jsonl"))))
    verdicts = [history.mutual_exclusion(ops, {"lock": 1}), history.fencing_order(ops), history.fenced_writes(ops),
                history.bucket(ops, {"tokens": (RATE, BURST)}), history.fifo(ops, outages),
                history.Verdict("no-leaks", 1, [] if leaked == 0 else [f"{leaked} permits still held after the run"])]
    print(f"register: {register.accepted} writes accepted, {register.refused} refused as stale")
    return history.report(ops, faults, verdicts, {"seed": seed}, run_dir, args.keep)


if __name__ == "__main__":
    sys.exit(main())
