#!/usr/bin/env python3
"""The sandbox API under faults, judged by its recorded history and by what is left afterwards.

Starts a whole cluster on loopback (corral-ratelimiter with its lease snapshot, corral-sandbox-host as root,
corral-scheduler with its journal and a warm pool, corral-proxy before a scripted model, two corral-sandbox-api
replicas), then its clients:

  E2B programs     e2b_worker.mjs, the real e2b SDK: create, commands, files, /tmp, background processes, fork,
                   renewals, the same sandbox through the other replica, listings, kill or abandon to expiry;
                   two keys (owners)
  /run_code        verl's SandboxFusion calls, each checked against the answer it must print
  a trainer        batches of questions through the scheduler and the proxy, each result consumed and
                   acknowledged one by one (the Python SDK), its reward checked against its answer

Meanwhile a nemesis, chosen at random each round:

  kill             kill -9 one service (a sandbox-api replica, the scheduler, the sandbox host, the ratelimiter,
                   the proxy)
                   and start it again on the same address and state
  pause            SIGSTOP one of them for 0.5-3 s
  partition        cut a replica's link to the scheduler both ways, or only the replies, for 1-3 s
  clock-step       step every service's wall clock but the proxy's 10-120 s forward or back (libfaketime;
                   skipped without it)
  disk-full        fill the filesystem under the scheduler's journal (a 64 MiB tmpfs; root) for 1-3 s, and
                   kill -9 the scheduler while it is full half of the time
  homes-full       fill the filesystem under the sandbox host's root, the sandboxes' homes (a 1 GiB ext4 image
                   on a loop device; root) for 1-3 s
  slow-disk        delay every service's fsync and fdatasync by 0.1-1 s for 1-3 s (slow_fsync.c, preloaded;
                   skipped without a C compiler)

Afterwards the clients stop (abandoning what they hold), and the run waits for the leases to expire. Nothing
may be left: no lease in the scheduler, no leased sandbox on the host, no process of the host's uids, no home or
cgroup without a sandbox, no held permit. The checker (history.py) judges the history per property. Prints the
history's size, the faults injected and a verdict per property; exits 1 on any violation.

    BUILD/sdk-venv/bin/python tests/faults/sandbox_faults.py --bin BUILD/bin            (smoke: 30 s)
    BUILD/sdk-venv/bin/python tests/faults/sandbox_faults.py --bin BUILD/bin --duration 1800 --e2b-workers 6
"""
import argparse
import collections
import glob
import itertools
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "images"))
import history  # noqa: E402
from history import History, Op, Outage  # noqa: E402
from nemesis import LoopDisk, Relay, SlowDisk, SmallDisk, SteppedClock, free_port  # noqa: E402
from services import Services, scratch  # noqa: E402

import corral  # noqa: E402
from corral.v1 import ratelimit_pb2, ratelimit_pb2_grpc, sandbox_pb2, sandbox_pb2_grpc  # noqa: E402
from corral.v1 import scheduler_pb2, scheduler_pb2_grpc  # noqa: E402

WARM_POOL = 2
CODE_PERMITS = 4
API_WAIT = 10  # the replicas' --wait: a /run_code call answers 504 once it has waited this long
RUN_TIMEOUT = 5



class Cluster:
    """The services, each restartable on its address and state."""

    def __init__(self, bin_dir, run_dir, secret):
        self.services = Services(bin_dir, run_dir, secret)
        self.dir, self.bin = run_dir, bin_dir
        self.host_id = f"faults-{os.getpid()}"  # its cgroups: corral-<host id> under each controller
        self.crashes = []
        self.clock = SteppedClock(os.path.join(run_dir, "faketime"), kernel_waits=True)
        self.journal = SmallDisk(os.path.join(run_dir, "journal"))
        self.homes = LoopDisk(os.path.join(run_dir, "sandboxes"))  # the host's root
        self.disk = SlowDisk(run_dir)
        try:
            self._start_all(run_dir)
        except BaseException:  # nothing of a cluster that did not start outlives it
            self.stop()
            raise

    def _start_all(self, run_dir):
        self.addr = {"ratelimiter": free_port(), "sandbox-host": free_port(), "scheduler": free_port(),
                     "proxy": free_port(), "sandbox-api-0": free_port(), "sandbox-api-1": free_port()}
        self.http = {"sandbox-api-0": free_port(), "sandbox-api-1": free_port()}
        self.relays = {name: Relay(self.addr["scheduler"]) for name in self.http}  # each replica's link
        llm = self.services.start("fake-llm", ["corral-fake-llm", "--listen=127.0.0.1:0", "--arithmetic"],
                                  secret=False)["http"]  # the inference backend: no nemesis
        with open(os.path.join(run_dir, "limiter.yaml"), "w") as f:
            f.write(f"limits:\n  - name: code_exec/{{language}}\n    kind: concurrency\n"
                    f"    permits: {CODE_PERMITS}\nstate_path: {run_dir}/limiter.db\n")
        self.argv = {
            "ratelimiter": ["corral-ratelimiter", f"--config={run_dir}/limiter.yaml"],
            "sandbox-host": ["corral-sandbox-host", f"--root={run_dir}/sandboxes", "--capacity=64",
                             f"--host-id={self.host_id}"],
            "proxy": ["corral-proxy", f"--http-listen={free_port()}", f"--journal={run_dir}/proxy.db",
                      f"--upstream=http://{llm}"],
            "scheduler": ["corral-scheduler", f"--journal={self.journal.path}/scheduler.db",
                          f"--proxy={self.addr['proxy']}", "--default-model=fake-model", "--http-listen=127.0.0.1:0",
                          f"--host={self.addr['sandbox-host']}", "--host-poll-interval=200ms",
                          f"--warm-pool-size={WARM_POOL}"],
        }
        for name in self.http:
            self.argv[name] = ["corral-sandbox-api", f"--http-listen={self.http[name]}",
                               f"--scheduler={self.relays[name].address}", f"--ratelimiter={self.addr['ratelimiter']}",
                               f"--wait={API_WAIT}s"]
        for name in self.argv:
            self.start(name)

    def start(self, name):
        # Every service's wall clock can be stepped but the proxy's: it links jemalloc, which calls clock_gettime
        # while libfaketime sets itself up, and the process never starts.
        clock = self.clock.env() if name != "proxy" else {}
        env = dict(os.environ, **dict(clock, **self.disk.env(clock.get("LD_PRELOAD", ""))))
        self.services.start(name, self.argv[name] + [f"--grpc-listen={self.addr[name]}",
                                                     "--metrics-listen=127.0.0.1:0"], env=env)

    def kill_and_restart(self, name):
        self.reap()
        self.services.kill(name)
        self.start(name)

    def reap(self):
        """Services that exited by themselves (a crash: no nemesis stops one) are recorded and started again, as
        an orchestrator would."""
        for name, proc in list(self.services.procs.items()):
            if proc.poll() is None:
                continue
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            self.crashes.append(f"{name} exited by itself ({how}) before {time.monotonic():.3f}; see {name}.log")
            self.services.kill(name)
            if name in self.argv:  # the scripted model (no nemesis touches it) is not started again
                self.start(name)

    def signal(self, name, sig):
        self.services.procs[name].send_signal(sig)

    def stop(self):
        for proc in self.services.procs.values():
            proc.send_signal(signal.SIGCONT)
        self.services.stop_all()
        self.journal.unmount()
        self.homes.unmount()


def run_code_caller(name, urls, path, stop, seed):
    """verl's SandboxFusionTool in a loop: print(a * b) must print the product, or fail in SandboxFusion's way."""
    rng, log = random.Random(seed), History(path)
    # The replica's own bounds: the permit and the sandbox within its wait, 30 s more for a scheduler that does not
    # answer at all, then the run and 30 s more for a host that does not.
    bound = API_WAIT + 30 + RUN_TIMEOUT + 30
    while not stop.is_set():
        a, b = rng.randint(1, 10**6), rng.randint(1, 10**6)
        url = rng.choice(urls)
        op = Op(name, "run_code", "run_code", time.monotonic(), bound=bound, target=url)
        body = json.dumps({"code": f"print({a} * {b})", "language": "python", "run_timeout": RUN_TIMEOUT}).encode()
        try:
            with urllib.request.urlopen(urllib.request.Request(url + "/run_code", body), timeout=bound + 30) as r:
                answer = json.loads(r.read())
            status, run = answer["status"], answer.get("run_result") or {}
            if status == "Success" and run.get("stdout") == f"{a * b}\n":
                op.ok = True
            elif status == "Success":
                op.error = f"wrong: stdout {run.get('stdout')!r} for {a} * {b}"
            else:
                op.error = f"answer {status}: {answer.get('message', '')[:200]}"
        except urllib.error.HTTPError as e:
            op.error = f"http {e.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            op.error = f"network: {e}"
        except (ValueError, KeyError) as e:
            op.error = f"foreign: not SandboxFusion's answer: {e}"
        op.complete = time.monotonic()
        log.record(op)
        if not op.ok:
            time.sleep(rng.uniform(0.05, 0.3))  # down or refusing: do not spin
    log.close()


def episode_caller(name, scheduler, secret, path, stop, seed):
    """A trainer: batches of single-turn questions (the scripted model answers through the proxy), each result
    consumed and acknowledged one by one, the stream resumed across the scheduler's restarts. A failed submit is
    sent again with the same batch id (idempotent) until it is taken."""
    rng, log = random.Random(seed), History(path)
    client = corral.Client(scheduler, secret_file=secret, timeout=10)
    for n in itertools.count():
        if stop.is_set():
            break
        batch_id = f"{name}-{n}"
        tasks = [corral.SingleTurnTask(id=f"q{i}", prompt=f"What is {i} + {n}?", answer=i + n, reward="gsm8k",
                                       seed_sampling=True) for i in range(rng.randint(2, 6))]
        expected = 2 * len(tasks)
        batch = None
        while batch is None and not stop.is_set():
            try:
                batch = client.submit(tasks, group_size=2, batch_id=batch_id, max_attempts=5)
            except corral.CorralError:
                time.sleep(rng.uniform(0.1, 0.5))
        if batch is None:
            break
        seen = []
        start = time.monotonic()
        while len(seen) < expected and not stop.is_set():
            try:
                for r in batch.results(ack_every=1, reconnect_for_s=60):
                    op = Op(name, "result", "episode", start, time.monotonic(), lease_id=r.ids.episode_id,
                            owner=batch_id, token=r.ids.attempt, value=r.reward, ok=True)
                    seen.append(r.ids.episode_id)
                    if r.status == scheduler_pb2.EPISODE_STATUS_FINISHED:
                        answer = r.trajectory.branches[-1].messages[-1].message.content
                        right = answer.endswith(f"#### {int(r.ids.task_id[1:]) + n}")
                        if r.reward != (1.0 if right else 0.0):  # the reward is the run's whose trajectory came
                            op.ok, op.error = False, f"wrong: reward {r.reward} for the answer {answer[-40:]!r}"
                    else:
                        op.ok, op.error = False, f"status {scheduler_pb2.EpisodeStatus.Name(r.status)}: {r.failure_message[:120]}"
                    log.record(op)
            except corral.CorralError as e:
                log.record(Op(name, "stream", "episode", time.monotonic(), time.monotonic(), error=f"answer {e}"))
                time.sleep(0.5)
        done = len(set(seen)) >= expected
        log.record(Op(name, "batch", "episode", start, time.monotonic(), ok=done, owner=batch_id, permits=expected,
                      seen=seen, error="" if done else "stopped before the batch ended"))
    client.close()
    log.close()


def leftovers(cluster, metadata, uids):
    """What the cluster still holds that no client does: leases, leased sandboxes, processes, homes, permits."""
    found = []
    scheduler = scheduler_pb2_grpc.SchedulerStub(grpc.insecure_channel(cluster.addr["scheduler"]))
    leases = scheduler.ListLeases(scheduler_pb2.ListLeasesRequest(page_size=1000), timeout=10, metadata=metadata)
    found += [f"lease {l.lease_id} of {l.owner}" for l in leases.leases]
    host = sandbox_pb2_grpc.SandboxHostStub(grpc.insecure_channel(cluster.addr["sandbox-host"]))
    sandboxes = host.ListSandboxes(sandbox_pb2.ListSandboxesRequest(page_size=1000), timeout=10,
                                   metadata=metadata).sandboxes
    live = {s.sandbox_id for s in sandboxes}
    found += [f"sandbox {s.sandbox_id} (lease {s.spec.labels['corral.lease']})" for s in sandboxes
              if "corral.lease" in s.spec.labels]
    if len(sandboxes) > WARM_POOL:
        found.append(f"{len(sandboxes)} sandboxes on the host (the warm pool is {WARM_POOL})")
    for pid in os.listdir("/proc"):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            if uids.first <= uid <= uids.last and pid.isdigit():
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace")[:80]
                found.append(f"process {pid} of uid {uid}: {command}")
        except OSError:
            continue
    homes = glob.glob(os.path.join(cluster.dir, "sandboxes", "homes", "*"))
    found += [f"home {h}" for h in homes if os.path.basename(h) not in live]
    cgroups = glob.glob(f"/sys/fs/cgroup/*/corral-{cluster.host_id}/sb-*") + \
        glob.glob(f"/sys/fs/cgroup/corral-{cluster.host_id}/sb-*")
    found += [f"cgroup {c}" for c in cgroups if os.path.basename(c) not in live]
    limiter = ratelimit_pb2_grpc.RateLimiterStub(grpc.insecure_channel(cluster.addr["ratelimiter"]))
    held = sum(l.in_use for l in limiter.GetStatus(ratelimit_pb2.GetStatusRequest(), timeout=10,
                                                   metadata=metadata).limits)
    if held:
        found.append(f"{held} permits of the ratelimiter")
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the build's bin directory")
    p.add_argument("--duration", type=float, default=30, help="seconds of faults (default 30: the smoke run)")
    p.add_argument("--e2b-workers", type=int, default=3)
    p.add_argument("--run-code-callers", type=int, default=2)
    p.add_argument("--trainers", type=int, default=1)
    p.add_argument("--without", default="", help="nemeses left out, comma-separated (e.g. clock-step)")
    p.add_argument("--targets", default="",
                   help="the services kill and pause pick from, comma-separated (default: all)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the run's directory (histories, logs)")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("skipped: the sandbox host needs root")
        return 77
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    run_dir, secret = scratch("corral-sandbox-faults-")
    metadata = (("authorization", "Bearer " + corral.cluster_token(secret)),)
    print(f"sandbox fault run: seed {seed}, {args.e2b_workers} E2B workers, {args.run_code_callers} /run_code "
          f"callers, {args.duration:g}s, dir {run_dir}", flush=True)
    if args.keep:  # a crash leaves its core beside its log (core_pattern permitting)
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    cluster = Cluster(args.bin, run_dir, secret)
    workers, code = [], 1
    try:
        code = run(args, seed, rng, run_dir, secret, metadata, cluster, workers)
        return code
    finally:  # however the run ended: no client or service outlives it
        for w in workers:
            if w.poll() is None:
                w.kill()
        cluster.stop()
        if code == 0 and not args.keep:  # the mount points too, now unmounted
            shutil.rmtree(run_dir, ignore_errors=True)


def run(args, seed, rng, run_dir, secret, metadata, cluster, workers):
    keys = {owner: subprocess.run([os.path.join(args.bin, "corral"), "sandbox-api", "key", owner,
                                   f"--secret-file={secret}"], capture_output=True, text=True,
                                  check=True).stdout.strip() for owner in ("alice", "bob")}
    urls = [f"http://{cluster.http[name]}" for name in sorted(cluster.http)]
    for i in range(args.e2b_workers):
        owner = sorted(keys)[i % 2]
        workers.append(subprocess.Popen(
            ["node", os.path.join(HERE, "e2b_worker.mjs"), f"--name=e{i}", f"--apis={','.join(urls)}",
             f"--key={keys[owner]}", f"--owner={owner}", f"--history={run_dir}/history-e{i}.jsonl",
             f"--seed={seed + i}"], stdin=subprocess.PIPE,
            stdout=open(os.path.join(run_dir, f"e{i}.log"), "w"), stderr=subprocess.STDOUT))
    stop_callers = threading.Event()
    callers = [threading.Thread(target=run_code_caller, args=(f"r{i}", urls, f"{run_dir}/history-r{i}.jsonl",
                                                              stop_callers, seed + 100 + i), daemon=True)
               for i in range(args.run_code_callers)]
    callers += [threading.Thread(target=episode_caller, args=(f"t{i}", cluster.addr["scheduler"], secret,
                                                              f"{run_dir}/history-t{i}.jsonl", stop_callers,
                                                              seed + 200 + i), daemon=True)
                for i in range(args.trainers)]
    for c in callers:
        c.start()

    outages, faults = [], collections.Counter()
    end = time.monotonic() + args.duration
    kinds = ["kill", "pause", "partition", "partition-oneway"]
    kinds += ["clock-step"] if cluster.clock.available else []
    kinds += ["disk-full"] if cluster.journal.mounted else []
    kinds += ["homes-full"] if cluster.homes.mounted else []
    kinds += ["slow-disk"] if cluster.disk.available else []
    without = args.without.split(",")
    kinds = [k for k in kinds if k not in without and k.split("-")[0] not in without]  # "partition": both kinds
    targets = [t for t in sorted(cluster.argv) if not args.targets or t in args.targets.split(",")]
    while time.monotonic() < end:
        time.sleep(rng.uniform(1, 3))
        cluster.reap()
        kind = rng.choice(kinds)
        target = rng.choice(targets) if kind in ("kill", "pause") else \
            rng.choice(sorted(cluster.relays)) if kind.startswith("partition") else "scheduler"
        start = time.monotonic()
        if kind == "kill":
            cluster.kill_and_restart(target)
        elif kind == "pause":
            cluster.signal(target, signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 3))
            cluster.signal(target, signal.SIGCONT)
        elif kind.startswith("partition"):
            cluster.relays[target].cut(one_way=kind == "partition-oneway")
            time.sleep(rng.uniform(1, 3))
            cluster.relays[target].heal()
        elif kind == "clock-step":
            step = rng.choice([-1, 1]) * rng.randint(10, 120)
            cluster.clock.step(step)
            target = f"every service {step:+d}s"
        elif kind == "homes-full":
            target = "sandbox-host"
            cluster.homes.fill()
            time.sleep(rng.uniform(1, 3))
            cluster.homes.free()
        elif kind == "slow-disk":
            delay = rng.randint(100, 1000)
            cluster.disk.slow(delay)
            time.sleep(rng.uniform(1, 3))
            cluster.disk.fast()
            target = f"fsync +{delay} ms"
        else:  # disk-full
            cluster.journal.fill()
            time.sleep(rng.uniform(1, 3))
            if rng.random() < 0.5:
                cluster.reap()
                cluster.services.kill("scheduler")
                cluster.journal.free()
                cluster.start("scheduler")
                kind += " + kill"
            else:
                cluster.journal.free()
        outages.append(Outage(kind, target, start, time.monotonic()))
        faults[f"{kind} {target}" if kind in ("kill", "pause") else kind] += 1
        print(f"  {start - end + args.duration:6.1f}s {kind} {target}", flush=True)
    print("nemeses skipped: " + (", ".join(n for n, on in (("clock-step (no faketime)", cluster.clock.available),
                                                          ("disk-full (not root)", cluster.journal.mounted),
                                                          ("homes-full (not root)", cluster.homes.mounted),
                                                          ("slow-disk (no C compiler)", cluster.disk.available))
                                           if not on)
                                 or "none") + (f"; left out: {args.without}" if args.without else ""), flush=True)

    for w in workers:  # stop: each ends its current call and exits, abandoning what it holds
        w.stdin.close()
    stop_callers.set()
    for w in workers:
        try:
            w.wait(timeout=90)
        except subprocess.TimeoutExpired:
            w.kill()
    for c in callers:
        c.join(timeout=90)
    stopped = time.monotonic()
    left = ["not checked"]
    # An E2B lease expires within 20 s of its client's last call; a /run_code lease whose replica was killed
    # mid-run, within the run's time and a minute (the dead-man's switch /run_code sets).
    while time.monotonic() < stopped + RUN_TIMEOUT + 60 + 30:
        left = leftovers(cluster, metadata, cluster.services.uids)
        if not left:
            break
        time.sleep(1)
    settled = time.monotonic() - stopped

    with open(os.path.join(run_dir, "outages.jsonl"), "w") as f:
        for o in outages:
            f.write(json.dumps(asdict(o)) + "\n")
    ops = history.read(sorted(glob.glob(os.path.join(run_dir, "history-*.jsonl"))))
    verdicts = history.sandbox_verdicts(ops, outages)
    verdicts.append(history.Verdict("nothing-left", 1, left))
    cluster.reap()
    verdicts.append(history.Verdict("no-crash", len(cluster.argv), cluster.crashes))
    print(f"after the clients stopped: {'nothing left' if not left else 'still held'} at {settled:.1f}s")
    return history.report(ops, faults, verdicts, {"seed": seed, "settled_s": round(settled, 1)}, run_dir, args.keep)


if __name__ == "__main__":
    sys.exit(main())
