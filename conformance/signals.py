"""pytest side of "an interrupted run leaves nothing behind": SIGTERM (a CI job's timeout, a parent
passing its signal on, brokerconf/children.py) and SIGHUP (a closed terminal) end the session the
way Ctrl-C does, by an exception in the main thread, so pytest tears down the fixtures and they
stop the brokers. Python's default for both ends the process at once, without finalizers; the
brokers, in sessions of their own, outlived it.

Registered by conformance/plugin.py's pytest_configure (so plain ``pytest`` on the suites, the
project's tests and ``brokerconf suite`` all get it). What it does with SIGTERM, SIGINT, SIGHUP:

* The first one raises `Terminated` (a KeyboardInterrupt, for SIGINT a plain KeyboardInterrupt) in
  the main thread: pytest reports the session interrupted (exit status 2) and its
  ``pytest_sessionfinish`` tears down every fixture still set up.
* During a test's setup or teardown it is held until that phase ends: an exception in the middle
  of a broker's start (a launcher that has spawned but not yet returned a handle the fixture can
  stop) or of a fixture's teardown would leave that broker behind. From ``pytest_sessionfinish``
  on it is not raised at all: everything is being torn down already.
* The session stops after the current test even when the exception never reaches pytest: the
  signal also sets ``session.shouldstop``. A cleanup that fails while the interrupt passes
  through it (``except BaseException: stop(); raise``, where ``stop()`` raises because the
  signal ended a helper too) replaces the KeyboardInterrupt with its own error; seen in CI, an
  xdist worker reported that error as the test's and went on running its queue for minutes.
* Repeats are ignored (said once on stderr): a signal can arrive twice for one event (the
  terminal's Ctrl-C reaches every process of the foreground group, and a parent or the xdist
  controller passes it on as well), and a second KeyboardInterrupt would cut the teardown short.
  SIGKILL remains the way to abandon the cleanup.
* Under pytest-xdist the controller runs no tests: it passes the signal on to its workers (its
  child processes, the execnet gateways) and keeps taking their reports; each worker tears down
  and reports itself interrupted, and xdist then ends the session as interrupted. Left to itself,
  the controller would end at once and xdist's ``teardown_nodes`` would have execnet SIGINT each
  busy worker after 5 s and SIGKILL it after 10 s (execnet ``WorkerGateway._terminate_execution``,
  ``Group.terminate``), in the middle of stopping its brokers.
* Before pytest renders an exception the signal raised (or one raised while it passed), every
  traceback entry gets a line number: conformance/tracebacks.py says why pytest needs that.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

import pytest

from conformance import xdist_groups
from conformance.tracebacks import give_line_numbers

#: the signals handled here
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PLUGIN_NAME = "brokerconf-signals"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: pytest treats it as Ctrl-C (interrupted, fixtures torn down)."""


class SignalPlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.signum: int | None = None   # the first signal, once it arrived
        self.raised = False
        self.hold = 0                    # > 0 while a setup, a teardown or the session's finish runs
        self.finishing = False
        self.session: pytest.Session | None = None
        self._repeat_noted = False
        self._previous: dict[int, object] = {}

    # ------------------------------------------------------------------ handlers

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # handlers can only be set from the main thread (pytest.main called from a thread)
        self._previous = {number: signal.signal(number, self._on_signal) for number in HANDLED}

    def uninstall(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame) -> None:  # noqa: ARG002 - the signal module's signature
        name = signal.Signals(signum).name
        if self.signum is not None:
            if not self._repeat_noted:
                self._repeat_noted = True
                _say(f"pytest: {name} received; already stopping after {signal.Signals(self.signum).name}, "
                     "tearing down (SIGKILL abandons the cleanup and leaves the brokers running)")
            return
        self.signum = signum
        if self._controller():
            workers = _worker_pids()
            if workers:
                _say(f"pytest: {name} received; passing it on to the pytest-xdist workers "
                     f"({', '.join(map(str, workers))}) and waiting for them to tear down")
                for pid in workers:
                    _signal(pid, signum)
                # A worker that ends interrupted counts as crashed, and xdist would start a
                # replacement (DSession.worker_errordown): a new interpreter collecting the suites
                # while the run is stopping. No restarts from here on (a private attribute of
                # pytest-xdist 3.x; without it xdist's own behaviour stays).
                dsession = self.config.pluginmanager.getplugin("dsession")
                if hasattr(dsession, "_max_worker_restart"):
                    dsession._max_worker_restart = 0
                return
        if self.session is not None:
            # the backstop for an interrupt some cleanup's error replaces (module doc)
            self.session.shouldstop = f"{name} received"
        if self.hold or self.finishing:
            _say(f"pytest: {name} received; stopping once this setup or teardown has finished")
            return
        self._raise()

    def _raise(self) -> None:
        if self.signum is None or self.raised or self.finishing:
            return
        self.raised = True
        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(f"{signal.Signals(self.signum).name} received: stopping, fixtures are torn down")

    def _controller(self) -> bool:
        return not xdist_groups.in_worker(self.config) and bool(getattr(self.config.option, "numprocesses", None))

    # ------------------------------------------------------------------ held phases

    @contextmanager
    def _held(self):
        """A signal arriving inside is raised when the block ends (the outermost, if nested)."""
        self.hold += 1
        try:
            yield
        finally:
            self.hold -= 1
            if not self.hold:
                self._raise()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):  # noqa: ARG002
        with self._held():
            return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):  # noqa: ARG002
        with self._held():
            return (yield)

    # ------------------------------------------------------------------ rendering

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        give_line_numbers(excinfo.value)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):  # noqa: ARG002
        if call.excinfo is not None:
            give_line_numbers(call.excinfo.value)
        return (yield)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.finishing = True

    def pytest_unconfigure(self) -> None:
        self.uninstall()


def register(config: pytest.Config) -> None:
    """Called from conformance/plugin.py's pytest_configure."""
    if config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    plugin = SignalPlugin(config)
    plugin.install()
    config.pluginmanager.register(plugin, PLUGIN_NAME)


def _worker_pids() -> list[int]:
    """The xdist controller's child processes: its workers (execnet popen gateways; the controller
    itself runs no tests and starts nothing else)."""
    import psutil

    try:
        return [child.pid for child in psutil.Process().children()]
    except psutil.Error:
        return []


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)  # our own unreaped child: the PID still names it
    except (ProcessLookupError, PermissionError):
        pass


def _say(message: str) -> None:
    # os.write, not print: the handler may run while the main thread is inside a write to stderr
    try:
        os.write(sys.stderr.fileno(), (message + "\n").encode())
    except (OSError, ValueError, AttributeError):
        pass
