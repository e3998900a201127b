"""What a fault run breaks: processes (paused with SIGSTOP past their leases' TTL, killed with -9 and restarted)
and links (a relay on loopback between one client and its server that can cut the link both ways or one way,
leaving the connections open, as a partition does)."""
from __future__ import annotations

import asyncio
import socket
import threading


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
