"""Permits from corral-ratelimiter for code outside Corral's services: a lease with its fencing token, kept alive
in the background, that knows when it may be gone.

    limiter = corral.Limiter()                         # the local `corral up` cluster, or Limiter("host:port", ...)
    with limiter.acquire("db_writer", ttl=10) as lease:
        ...                                            # long work; the lease is renewed meanwhile
        lease.check()                                  # raises LeaseLost if it may be gone: do not act
        db.write(row, fence=lease.fencing_token)       # the resource refuses tokens smaller than it has seen

A lease is surely live until its TTL has passed since the last renewal the limiter confirmed, counted on this
machine's monotonic clock from when that request was sent (never later than the limiter's own expiry). A process
that was paused past its TTL (SIGSTOP, a frozen VM, a long GC) therefore sees `valid()` False the moment it
resumes, before it has heard from the limiter. Leases from here are not bound to a session: they live by their
TTL, which the background renewal extends every third of it.
"""
from __future__ import annotations

import threading
import time
from typing import Optional, Union

import grpc

from corral import auth
from corral._rpc import CorralError, raise_rpc_error
from corral.v1 import ratelimit_pb2, ratelimit_pb2_grpc


class LeaseLost(Exception):
    """The lease may be gone: its holder must not act on what it guards (someone else may hold it now)."""


class Lease:
    """A held concurrency lease. Renewed in the background until released; a context manager that releases."""

    def __init__(self, limiter: "Limiter", lease: ratelimit_pb2.Lease, sent: float, waited: float, renew: bool):
        self._limiter = limiter
        self.lease_id = lease.lease_id
        self.limit = lease.limit
        self.key = lease.key
        self.permits = lease.permits
        self.fencing_token = lease.fencing_token
        self.ttl = lease.ttl.ToTimedelta().total_seconds()
        self._lock = threading.Lock()
        self._safe_until = sent + waited + self.ttl
        self._lost: Optional[str] = None
        self._released = threading.Event()
        self._thread = None
        if renew:
            self._thread = threading.Thread(target=self._renew_loop, name=f"corral-lease-{self.limit}", daemon=True)
            self._thread.start()

    @property
    def valid_until(self) -> float:
        """The time.monotonic() reading until which the lease is surely live (later renewals move it on)."""
        with self._lock:
            return self._safe_until

    def valid(self) -> bool:
        """True while the lease is surely live: not released, not reported lost, and within its TTL of the last
        renewal the limiter confirmed."""
        with self._lock:
            return self._lost is None and not self._released.is_set() and time.monotonic() < self._safe_until

    def check(self) -> None:
        """Raises LeaseLost (saying why) unless `valid()`. Call it right before acting on what the lease guards."""
        with self._lock:
            lost, safe_until = self._lost, self._safe_until
        if self._released.is_set():
            raise LeaseLost(f"lease of {self.limit!r} was released")
        if lost is not None:
            raise LeaseLost(f"lease of {self.limit!r} was lost: {lost}")
        late = time.monotonic() - safe_until
        if late >= 0:
            raise LeaseLost(f"lease of {self.limit!r} is {late:.3f}s past its TTL ({self.ttl:g}s) since its last "
                            "confirmed renewal (was this process paused?); it may be held by someone else now")

    def keep_alive(self) -> None:
        """Renews the lease now (the background renewal does this every third of its TTL). Raises LeaseLost when
        the limiter no longer has it, CorralError for other failures."""
        sent = time.monotonic()
        try:
            reply = self._limiter._call("KeepAlive", ratelimit_pb2.KeepAliveRequest(lease_ids=[self.lease_id]))
        except CorralError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                with self._lock:
                    self._lost = e.message
                raise LeaseLost(f"lease of {self.limit!r} was lost: {e.message}") from None
            raise
        with self._lock:
            for lease in reply.leases:
                if lease.lease_id == self.lease_id:
                    self._safe_until = max(self._safe_until, sent + lease.ttl.ToTimedelta().total_seconds())

    def release(self) -> None:
        """Gives the permits back (once; a lease already lost or released is left as it is)."""
        if self._released.is_set():
            return
        self._released.set()
        with self._lock:
            lost = self._lost
        if lost is None:
            try:
                self._limiter._call("Release", ratelimit_pb2.ReleaseRequest(lease_id=self.lease_id))
            except CorralError as e:
                if e.code != grpc.StatusCode.NOT_FOUND:
                    raise

    def _renew_loop(self) -> None:
        while not self._released.wait(max(self.ttl / 3, 0.05)):
            try:
                self.keep_alive()
            except LeaseLost:
                return
            except CorralError:
                continue  # unreachable for now: valid() turns False by itself once the TTL has passed
            except ValueError:
                return  # the Limiter was closed

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Limiter:
    """A connection to corral-ratelimiter (unary calls; the C++ services use its session stream instead).

    `address` is HOST:PORT; None means the local `corral up` cluster's limiter. Authentication and TLS as for
    corral.Client."""

    def __init__(self, address: Optional[str] = None, *, secret_file: Optional[str] = None,
                 token: Optional[str] = None, tls: Union[None, bool, auth.Tls] = None,
                 cluster_dir: str = ".corral", timeout: float = 30.0):
        connection = auth.connect("ratelimiter", address, secret_file=secret_file, token=token, tls=tls,
                                  cluster_dir=cluster_dir)
        self.address, self._channel, self._metadata = connection.address, connection.channel, connection.metadata
        self.timeout = timeout
        self._stub = ratelimit_pb2_grpc.RateLimiterStub(self._channel)

    def _call(self, method: str, request, timeout: Optional[float] = None):
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise_rpc_error(e)

    def acquire(self, limit: str, *, key: str = "", permits: int = 1, wait: Optional[float] = None,
                ttl: Optional[float] = None, renew: bool = True) -> Optional[Lease]:
        """Waits in the limit's FIFO queue (at most `wait` seconds; None: as long as it takes) for `permits` of a
        concurrency limit, and returns the lease. `ttl` in seconds (None: the limiter's default). A rate limit's
        tokens are spent and None is returned: nothing is held. Raises CorralError: DEADLINE_EXCEEDED when the
        wait ran out, NOT_FOUND for an unknown limit, INVALID_ARGUMENT, …"""
        return self._acquire("Acquire", limit, key, permits, wait, ttl, renew)

    def try_acquire(self, limit: str, *, key: str = "", permits: int = 1, ttl: Optional[float] = None,
                    renew: bool = True) -> Optional[Lease]:
        """Never waits: CorralError RESOURCE_EXHAUSTED when the permits are not free now (or others queue)."""
        return self._acquire("TryAcquire", limit, key, permits, None, ttl, renew)

    def _acquire(self, method, limit, key, permits, wait, ttl, renew) -> Optional[Lease]:
        request = ratelimit_pb2.AcquireRequest(limit=limit, key=key, permits=permits)
        if wait is not None:
            request.wait_timeout.FromMilliseconds(int(wait * 1000))
        if ttl is not None:
            request.lease_ttl.FromMilliseconds(int(ttl * 1000))
        sent = time.monotonic()
        try:  # no deadline of our own while it may wait as long as it takes: the limiter ends the wait
            reply = getattr(self._stub, method)(request, timeout=None if wait is None else wait + self.timeout,
                                                metadata=self._metadata)
        except grpc.RpcError as e:
            raise_rpc_error(e)
        if not reply.HasField("lease"):
            return None
        waited = reply.waited.ToTimedelta().total_seconds()
        return Lease(self, reply.lease, sent, waited, renew)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Limiter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
