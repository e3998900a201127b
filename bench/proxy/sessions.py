"""Opens N sessions on an --insecure corral-proxy over gRPC (the benchmark's sessions); prints their tokens,
one per line.

Usage: build/sdk-venv/bin/python sessions.py GRPC_ADDRESS COUNT ENV_ID_PREFIX  (the SDK's venv has the stubs)
"""
import sys

import grpc
from corral.v1 import proxy_pb2, proxy_pb2_grpc

address, count, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
stub = proxy_pb2_grpc.ProxyStub(grpc.insecure_channel(address))
futures = []
for i in range(count):
    req = proxy_pb2.OpenSessionRequest(env_id=f"{prefix}-{i}")
    req.policy.capture_token_ids = True
    futures.append(stub.OpenSession.future(req, timeout=60))
    if len(futures) >= 256:
        for f in futures:
            print(f.result().env_token)
        futures = []
for f in futures:
    print(f.result().env_token)
