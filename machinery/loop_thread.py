"""An asyncio event loop running in a daemon thread of this process: how an in-process reference
broker is served (the engine is single-threaded: everything that touches it runs on its loop).
Used by the reference target, the reference network nodes, and the tests that start an in-process
broker of their own."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Awaitable, Callable


class LoopThread:
    """``LoopThread(name)`` starts the loop; `call` runs a function on it, `run` awaits a coroutine
    on it, `pause` / `resume` freeze it, `stop` ends it (idempotent)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._paused: threading.Event | None = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn()`` on the loop thread and return its result (its exception is raised here)."""
        future: Future = Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def run(self, coroutine: Awaitable, timeout: float = 10.0) -> Any:
        """Await ``coroutine`` on the loop; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def paused(self) -> bool:
        return self._paused is not None

    def pause(self) -> None:
        """Freeze the loop: it runs a call that blocks until `resume` (as SIGSTOP freezes a
        process: connections stay open, nothing is read or answered)."""
        if self._paused is None:
            self._paused = threading.Event()
            self.loop.call_soon_threadsafe(self._paused.wait)

    def resume(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None:
            paused.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop and join its thread; the loop is closed once the thread has ended."""
        self.resume()
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
