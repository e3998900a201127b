"""What a fault run breaks: processes (paused with SIGSTOP past their leases' TTL, killed with -9 and restarted),
links (a relay on loopback between one client and its server that can cut the link both ways or one way,
leaving the connections open, as a partition does), a process's wall clock (libfaketime, and kernel_clock.c), a
small filesystem filled up (a tmpfs, or an ext4 image on a loop device) and a slow disk (fsync delayed,
slow_fsync.c)."""
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


def preload(source: str, dir: str) -> Optional[str]:
    """One of this directory's C files built into `dir` as a library to preload; None without a C compiler."""
    library = os.path.join(dir, os.path.splitext(source)[0] + ".so")
    built = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", library,
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), source), "-ldl"],
                           stderr=subprocess.DEVNULL).returncode == 0
    return library if built else None


class SteppedClock:
    """A wall clock that can be stepped for the processes started with `env()` (Debian's libfaketime, reading an
    offset from a file; the monotonic clock untouched, as an NTP step leaves it). `available` is False without
    the `faketime` package: `env()` is then empty.

    With `kernel_waits`, kernel_clock.c is preloaded too, so that the waits a process hands the kernel as
    wall-clock times are stepped with it, as a real step does; it does so when the wait starts, where a real
    step also moves a wait already under way (a test of that keeps it off)."""

    def __init__(self, path: str, kernel_waits: bool = False):
        self.path, self.offset = path, 0
        self.library = libfaketime()
        self.available = self.library is not None
        if self.available and kernel_waits:
            corrector = preload("kernel_clock.c", os.path.dirname(path))
            self.library = ":".join(p for p in (self.library, corrector) if p)
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


class SlowDisk:
    """Slow fsync and fdatasync for the processes started with `env()`: slow_fsync.c, built into `dir`, preloaded;
    `slow(ms)` delays each call by `ms` until `fast()`. `available` is False without a C compiler."""

    def __init__(self, dir: str):
        self.library = preload("slow_fsync.c", dir)
        self.control = os.path.join(dir, "slow_fsync")
        self.available = self.library is not None

    def env(self, preload: str = "") -> Dict[str, str]:
        """The environment of a process to slow, `preload` (another library to preload, or "") kept."""
        if not self.available:
            return dict(LD_PRELOAD=preload) if preload else {}
        return dict(LD_PRELOAD=":".join(p for p in (preload, self.library) if p), CORRAL_SLOW_FSYNC_FILE=self.control)

    def slow(self, ms: int) -> None:
        with open(self.control + ".tmp", "w") as f:
            f.write(f"{ms}\n")
        os.replace(self.control + ".tmp", self.control)

    def fast(self) -> None:
        if os.path.exists(self.control):
            os.unlink(self.control)


class LoopDisk(SmallDisk):
    """An ext4 filesystem of `size` in an image file on a loop device, mounted at `path` (root only; `mounted`
    says whether it is): a disk that can be filled and freed under what needs a real filesystem (the sandbox
    host's root: its forks mount its homes idmapped)."""

    def __init__(self, path: str, size: str = "1G"):
        self.path, self.image = path, path.rstrip("/") + ".img"
        self._filler = os.path.join(path, "filler")
        os.makedirs(path, exist_ok=True)
        steps = (["truncate", "-s", size, self.image], ["mkfs.ext4", "-q", "-F", "-m", "0", self.image],
                 ["mount", "-o", "loop", self.image, path])
        self.mounted = os.geteuid() == 0 and all(
            subprocess.run(argv, stdout=subprocess.DEVNULL).returncode == 0 for argv in steps)

    def fill(self) -> None:
        try:
            with open(self._filler, "wb") as f:
                st = os.statvfs(self.path)
                os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize)  # at once, whatever the size
                f.seek(0, os.SEEK_END)
                while True:  # what was freed meanwhile
                    f.write(b"\0" * (1 << 20))
                    f.flush()
        except OSError:
            pass

    def unmount(self) -> None:
        super().unmount()
        if os.path.exists(self.image):
            os.unlink(self.image)


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
