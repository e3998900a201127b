"""What the scheduler-facing modules (client, envs) share: the error an RPC raises and the names of the
trajectory forms. Private to the package: client.py and envs.py both import it and not each other."""
from __future__ import annotations

import grpc

from corral.v1 import common_pb2

TRAJECTORY_FORMATS = {"trajectory": common_pb2.TRAJECTORY_FORMAT_TRAJECTORY,
                      "calls": common_pb2.TRAJECTORY_FORMAT_CALLS}


class CorralError(Exception):
    """An RPC the scheduler refused: `code` (grpc.StatusCode) and the scheduler's message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def raise_rpc_error(e: grpc.RpcError) -> None:
    """Raises CorralError for a failed call (its code and the scheduler's message)."""
    raise CorralError(e.code(), e.details() or "") from None
