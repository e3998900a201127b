"""Corral's own gRPC path for the same work as the E2B SDK's create -> first command: LeaseSandbox from the
scheduler, then Exec on its host with the lease's capability token (the lease released after, not counted).
Prints one RESULT line.  python grpc_path.py SCHEDULER_ADDR COUNT"""
import sys
import time

import grpc
from google.protobuf import duration_pb2

from corral.v1 import common_pb2, sandbox_pb2, sandbox_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

scheduler_addr, count = sys.argv[1], int(sys.argv[2])
scheduler = scheduler_pb2_grpc.SchedulerStub(grpc.insecure_channel(scheduler_addr))
hosts = {}


def create_to_first_command():
    t = time.perf_counter()
    # The same sandbox the E2B API leases: /home/user as a task path and the working directory, no network.
    env = scheduler_pb2.EnvironmentSpec(task_paths=["/home/user"], workdir="/home/user",
                                        network_policy=common_pb2.NETWORK_POLICY_NONE)
    lease = scheduler.LeaseSandbox(scheduler_pb2.LeaseSandboxRequest(
        environment=env, ttl=duration_pb2.Duration(seconds=300), owner="bench"))
    host = hosts.setdefault(lease.host_address,
                            sandbox_pb2_grpc.SandboxHostStub(grpc.insecure_channel(lease.host_address)))
    request = sandbox_pb2.ExecRequest(sandbox_id=lease.sandbox_id,
                                      command=common_pb2.Command(argv=["bash", "-l", "-c", "echo 1"]))
    out = b"".join(e.stdout for e in host.Exec(request, metadata=[("authorization", "Bearer " + lease.capability_token)]))
    ms = 1000 * (time.perf_counter() - t)
    assert out == b"1\n", out
    scheduler.ReleaseLease(scheduler_pb2.ReleaseLeaseRequest(lease_id=lease.lease_id, owner="bench"))
    return ms


create_to_first_command()  # warm the channels: not counted
xs = sorted(create_to_first_command() for _ in range(count))
pct = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
print("RESULT grpc mode=one_at_a_time n=%d p50_ms=%.1f p95_ms=%.1f p99_ms=%.1f" % (len(xs), pct(0.5), pct(0.95), pct(0.99)))
