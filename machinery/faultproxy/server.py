"""Run the fault proxy: in the background from Python, or in the foreground for the CLI.

    server = FaultProxyServer(host="127.0.0.1", port=0)
    server.start()            # API on server.api_url, proxies on a background event loop
    ...
    server.stop()             # drops every proxied connection, stops the loop and the thread

``serve(host, port)`` runs the API until cancelled; ``main(argv)`` is what
``brokerconf proxy --host H --port P`` calls (default port 8474, like toxiproxy-server).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Sequence

from .api import ToxiproxyApi
from .httpd import serve_connection
from .proxy import ProxyCollection

DEFAULT_PORT = 8474  # toxiproxy-server's default API port (README "HTTP API")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when available: it roughly halves the proxy's per-hop cost."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def start_api(host: str, port: int, collection: ProxyCollection) -> asyncio.AbstractServer:
    api = ToxiproxyApi(collection)
    try:
        return await asyncio.start_server(
            lambda r, w: serve_connection(r, w, api), host, port, reuse_address=True
        )
    except OSError as exc:
        raise RuntimeError(
            f"cannot listen for the fault proxy API on {host}:{port}: {exc.strerror or exc}; "
            "choose another --port (0 picks a free one) or stop whatever holds it"
        ) from None


async def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, ready=None) -> None:
    """Serve the API until cancelled, then take every proxy down."""
    collection = ProxyCollection()
    server = await start_api(host, port, collection)
    bound = server.sockets[0].getsockname()
    if ready is not None:
        ready(bound[0], bound[1])
    try:
        async with server:
            await server.serve_forever()
    finally:
        collection.clear()


class FaultProxyServer:
    """The fault proxy on a background thread with its own event loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.collection: ProxyCollection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> "FaultProxyServer":
        if self._thread is not None:
            raise RuntimeError("FaultProxyServer already started; call stop() first")
        started = threading.Event()
        failure: list[BaseException] = []
        loop = new_event_loop()
        self._loop = loop

        async def boot() -> None:
            self.collection = ProxyCollection()
            self._server = await start_api(self.host, self.port, self.collection)
            self.port = self._server.sockets[0].getsockname()[1]

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(boot())
            except BaseException as exc:  # report to the starting thread
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise RuntimeError(f"fault proxy did not start within {timeout} s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def call(self, coro_or_fn, timeout: float = 10.0):
        """Run a coroutine (or a plain function) on the proxy's loop and return its result."""
        if self._loop is None:
            raise RuntimeError("FaultProxyServer is not running; call start() first")

        async def wrapper():
            result = coro_or_fn() if callable(coro_or_fn) else coro_or_fn
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None or self._loop is None:
            return
        loop = self._loop

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            if self.collection is not None:
                self.collection.clear()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout)
            self._thread = None
            self._loop = None

    def __enter__(self) -> "FaultProxyServer":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="brokerconf proxy",
        description="Serve the Toxiproxy HTTP API: a fault-injecting TCP proxy.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="API listen host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="API port (default 8474)")
    args = parser.parse_args(argv)

    def ready(host: str, port: int) -> None:
        print(f"fault proxy (Toxiproxy API) listening on http://{host}:{port}", flush=True)

    loop = new_event_loop()
    try:
        loop.run_until_complete(serve(args.host, args.port, ready))
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        loop.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
