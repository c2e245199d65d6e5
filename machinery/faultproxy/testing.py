"""Small loopback servers and a raw-request helper (over `machinery.faultproxy.client`) for the proxy's tests and benchmark.

Each server runs on its own thread with its own event loop and is stopped through its handle.
"""
from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Awaitable, Callable

from .client import ToxiproxyClient
from .server import new_event_loop


class LoopbackServer:
    """An asyncio server on 127.0.0.1 (port 0) on a background thread."""

    def __init__(self, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]):
        self._handler = handler
        self._loop = new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="loopback-server", daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "LoopbackServer":
        self._thread.start()

        async def handle(reader, writer):
            self._writers.add(writer)
            try:
                await self._handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                self._writers.discard(writer)
                writer.close()

        async def boot():
            self._server = await asyncio.start_server(handle, "127.0.0.1", 0)
            return self._server.sockets[0].getsockname()[1]

        self.port = asyncio.run_coroutine_threadsafe(boot(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def shutdown():
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> "LoopbackServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


async def echo_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


def echo_server() -> LoopbackServer:
    return LoopbackServer(echo_handler).start()


def greet_and_close_server(greeting: bytes = b"bye") -> LoopbackServer:
    """Sends ``greeting`` to each client and closes the connection."""

    async def handler(reader, writer):
        writer.write(greeting)
        await writer.drain()

    return LoopbackServer(handler).start()


def api_request(api_url: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """One HTTP request to the proxy API, whatever it answers: (status, body bytes). For the tests
    of the API itself (status codes, error bodies); everything else uses the client's operations."""
    return ToxiproxyClient(api_url, timeout=timeout).exchange(method, path, body, data=raw, headers=headers)


def api_json(api_url: str, method: str, path: str, body: Any = None, **kwargs) -> tuple[int, Any]:
    status, data = api_request(api_url, method, path, body, **kwargs)
    return status, (json.loads(data) if data.strip() else None)
