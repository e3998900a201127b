"""What a fault run breaks: processes (paused with SIGSTOP past their leases' TTL, killed with -9 and restarted),
links (a relay on loopback between one client and its server that can cut the link both ways or one way,
leaving the connections open, as a partition does), a process's wall clock (libfaketime) and a small filesystem
(a tmpfs filled up)."""
from __future__ import annotations

import asyncio
import glob
import os
import socket
import subprocess
import threading
from typing import Dict, Optional


def free_port() -> str:
    """A loopback address no one listens on now, for a service restarted on the same address."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def libfaketime() -> Optional[str]:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


class SteppedClock:
    """A wall clock that can be stepped for the processes started with `env()` (Debian's libfaketime, reading an
    offset from a file; the monotonic clock untouched, as an NTP step leaves it). `available` is False without
    the `faketime` package: `env()` is then empty."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0
        self.library = libfaketime()
        self.available = self.library is not None
        self.step(0)

    def step(self, seconds: int) -> None:
        self.offset += seconds
        with open(self.path + ".tmp", "w") as f:
            f.write(f"{self.offset:+d}\n")
        os.replace(self.path + ".tmp", self.path)

    def env(self) -> Dict[str, str]:
        if not self.available:
            return {}
        return dict(LD_PRELOAD=self.library, FAKETIME_TIMESTAMP_FILE=self.path, FAKETIME_CACHE_DURATION="1",
                    FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_DONT_RESET="1")


class SmallDisk:
    """A 64 MiB tmpfs at `path` (root only; `mounted` says whether it is) that can be filled and freed."""

    def __init__(self, path: str, size: str = "64m"):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.mounted = os.geteuid() == 0 and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path]).returncode == 0
        self._filler = os.path.join(path, "filler")

    def fill(self) -> None:
        try:
            with open(self._filler, "wb") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
        except OSError:
            pass  # full (the open itself fails on a filesystem with no room left for a new file)

    def free(self) -> None:
        if os.path.exists(self._filler):
            os.unlink(self._filler)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", self.path])


class Relay:
    """A TCP relay on loopback: clients connect to `address`, the relay connects on to `target`. `cut()` stops
    forwarding (both ways, or only replies with one_way=True) without closing anything; `heal()` resumes."""

    def __init__(self, target: str):
        self.target = target
        self.loop = asyncio.new_event_loop()
        self._forward_up = asyncio.Event()    # client -> server allowed
        self._forward_down = asyncio.Event()  # server -> client allowed
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{sock.getsockname()[1]}"
        self._sock = sock
        self.state = "healed"
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self._forward_up.set()
        self._forward_down.set()
        self.loop.run_until_complete(self._serve())

    async def _serve(self):
        server = await asyncio.start_server(self._connection, sock=self._sock)
        async with server:
            await server.serve_forever()

    async def _connection(self, client_r, client_w):
        host, port = self.target.rsplit(":", 1)
        try:
            server_r, server_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pipe(client_r, server_w, self._forward_up),
                             self._pipe(server_r, client_w, self._forward_down), return_exceptions=True)

    @staticmethod
    async def _pipe(reader, writer, allowed: asyncio.Event):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await allowed.wait()  # cut: the bytes wait here, the connection stays open
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def set_target(self, target: str) -> None:
        self.target = target

    def cut(self, one_way: bool = False) -> None:
        self.state = "cut one way (replies dropped)" if one_way else "cut"
        self.loop.call_soon_threadsafe(self._forward_down.clear)
        if not one_way:
            self.loop.call_soon_threadsafe(self._forward_up.clear)

    def heal(self) -> None:
        self.state = "healed"
        self.loop.call_soon_threadsafe(self._forward_up.set)
        self.loop.call_soon_threadsafe(self._forward_down.set)
