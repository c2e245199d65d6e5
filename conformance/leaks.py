"""What a test session started, and what of it is still there at the end (issue 20, "a clean
machine after the tests").

`StartedRegistry.install()` records, from then on, what this process starts, at the point where
it is started, instead of guessing later by name:

* every child process (`subprocess.Popen`, which asyncio's subprocesses and `subprocess.run`
  go through too): its PID with its start time (so a reused PID is not mistaken for it), and
  its process group when the child leads one (`start_new_session`, as the launchers on
  machinery/process.py do), which also covers what the child started in turn (a JVM
  behind a launcher script);
* network namespaces and mounts made by those children, read from the command that made them
  (`ip netns add NAME` as chaos/nemesis/netns.py runs it, `mount ... DIR`); a mount that was not
  there when the session started counts as the session's too when one of its commands named the
  mount point (a FUSE client's MOUNTPOINT argument) or it lies in the session's own temporary
  directories (pytest's basetemp, directories recorded below);
* Docker containers, networks and volumes created through the Docker SDK (testcontainers and
  the container launchers use it), by id;
* temporary directories the project's own code makes with `tempfile` (mkdtemp and
  TemporaryDirectory), not those of libraries or of pytest's tmp_path.

`leftovers()` then names everything recorded that still exists: a live (non-zombie) process
or a member of a recorded process group (not this process's tether watchdog, which lives as long
as this process does: machinery/tether.py), a namespace under /run/netns, a mount point in
/proc/self/mountinfo, a container, network or volume Docker still knows, a directory on disk.
It waits a few seconds first for things that are on their way out (a process group after
SIGTERM). Nothing is killed or removed here: the point is to fail the run and name the leak.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from machinery.tether import watchdog_pid
from machinery.waiting import poll

ROOT = Path(__file__).resolve().parent.parent
_VENDOR = ("site-packages", "dist-packages")
# testcontainers' reaper container removes the session's containers after the process exits;
# it outlives the session by design (machinery/container.py decides on it).
_REAPER_IMAGE = "testcontainers/ryuk"


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, pgid, session id, start time in clock ticks) of a process, or None if it is gone.
    proc(5): the fields after the command name, which is in parentheses and may hold spaces."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[2]), int(rest[3]), int(rest[19])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


@dataclass
class StartedProcess:
    pid: int
    start: int        # start time in clock ticks since boot (proc(5) field 22)
    group: bool       # the child leads its own process group (pgid == pid)
    command: str
    where: str        # the project's frame that started it, for the report


@dataclass
class StartedRegistry:
    processes: list[StartedProcess] = field(default_factory=list)
    netns: list[tuple[str, str]] = field(default_factory=list)     # (name, where)
    mounts: list[tuple[str, str]] = field(default_factory=list)     # (mount point, where)
    docker: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, id, description)
    tmpdirs: list[tuple[str, str]] = field(default_factory=list)    # (path, where)
    # where "the project's own code" lives: this repository, plus the rootdir of the pytest run
    roots: list[Path] = field(default_factory=lambda: [ROOT])
    # directories only this session uses (pytest's basetemp): a new mount under one is ours
    own_dirs: list[Path] = field(default_factory=list)
    _argv_paths: set[str] = field(default_factory=set)   # absolute paths named on a command line
    _mounts_before: set[str] = field(default_factory=set)
    _undo: list[Callable[[], None]] = field(default_factory=list)

    # ------------------------------------------------------------------ recording

    def install(self) -> None:
        self._mounts_before = set(_mount_points())
        self._patch(subprocess.Popen, "__init__", self._wrap_popen)
        self._patch(tempfile, "mkdtemp", self._wrap_mkdtemp)
        try:
            from docker.models.containers import ContainerCollection
            from docker.models.networks import NetworkCollection
            from docker.models.volumes import VolumeCollection
        except ImportError:  # no Docker SDK: nothing can create containers through it
            return
        for kind, cls in (("container", ContainerCollection), ("network", NetworkCollection),
                          ("volume", VolumeCollection)):
            self._patch(cls, "create", lambda original, kind=kind: self._wrap_docker(original, kind))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner: Any, name: str, wrapper: Callable[[Callable], Callable]) -> None:
        original = getattr(owner, name)
        setattr(owner, name, wrapper(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def _wrap_popen(self, original: Callable) -> Callable:
        registry = self

        def __init__(popen: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
            original(popen, args, *rest, **kwargs)
            own_group = bool(kwargs.get("start_new_session")) or kwargs.get("process_group") == 0
            registry.started_process(popen.pid, args, own_group)
        return __init__

    def started_process(self, pid: int, args: Any, own_group: bool = False) -> None:
        stat = _stat(pid)
        if isinstance(args, (list, tuple)):
            argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
        else:
            try:
                argv = shlex.split(os.fsdecode(args) if isinstance(args, (bytes, os.PathLike)) else str(args))
            except ValueError:
                argv = [str(args)]
        where = _caller(self.roots)
        command = " ".join(argv)[:200]
        if stat is not None:
            # Popen returns once the child has exec'd, so a setsid() it asked for has happened.
            self.processes.append(StartedProcess(pid, stat[3], own_group or stat[1] == pid, command, where))
        elif own_group:
            # Already gone (a launcher script that exits at once): its group may live on. Start
            # time unknown, so any process in that group counts.
            self.processes.append(StartedProcess(pid, 0, True, command, where))
        self._record_command(argv, where)
        # A mount made by a helper process (a FUSE client, sshfs) names its mount point on the
        # command line; remembered so a new mount there counts as this session's.
        self._argv_paths.update(os.path.abspath(a) for a in argv[1:] if a.startswith("/"))

    def _record_command(self, argv: list[str], where: str) -> None:
        while argv and os.path.basename(argv[0]) in ("sudo", "nsenter", "env"):
            argv = argv[1:]
        if not argv:
            return
        tool = os.path.basename(argv[0])
        if tool == "ip":
            words = argv[1:]
            for i in range(len(words) - 2):
                if words[i] == "netns" and words[i + 1] == "add":
                    self.netns.append((words[i + 2], where))
                    break
        elif tool == "mount":
            targets = [a for a in argv[1:] if not a.startswith("-")]
            if len(targets) >= 2:  # mount [options] SOURCE TARGET; `mount -a` mounts nothing of ours
                self.mounts.append((os.path.abspath(targets[-1]), where))

    def _wrap_mkdtemp(self, original: Callable) -> Callable:
        registry = self

        def mkdtemp(*args: Any, **kwargs: Any) -> str:
            path = original(*args, **kwargs)
            where = _caller(registry.roots, direct=True)
            if where:
                registry.tmpdirs.append((os.path.abspath(path), where))
            return path
        return mkdtemp

    def _wrap_docker(self, original: Callable, kind: str) -> Callable:
        registry = self

        def create(collection: Any, *args: Any, **kwargs: Any) -> Any:
            made = original(collection, *args, **kwargs)
            first = str(args[0]) if args else ""
            if kind == "container":
                what = first or str(kwargs.get("image", ""))  # create(image, command=None, **kwargs)
                if _REAPER_IMAGE in what:
                    return made
            else:
                what = first or str(kwargs.get("name", ""))   # create(name, **kwargs)
            registry.docker.append((kind, made.id, f"{what} ({_caller(registry.roots)})"))
            return made
        return create

    # ------------------------------------------------------------------ checking

    def leftovers(self, grace: float = 5.0) -> list[str]:
        """Everything recorded that still exists, one line each; waits up to `grace` seconds for
        the list to empty (processes being reaped, a group dying after SIGTERM)."""
        return poll(self._leftovers_now, lambda found: not found, timeout=grace, interval=0.2)

    def _leftovers_now(self) -> list[str]:
        found: list[str] = []
        me = os.getpid()
        # this process's tether watchdog (machinery/tether.py) lives as long as this process, by
        # design: it is what ends the rest should this process die without its cleanup
        watchdog = watchdog_pid()
        groups = {}
        for p in self.processes:
            if p.pid == watchdog:
                continue
            stat = _stat(p.pid)
            if stat is not None and stat[3] == p.start and stat[0] != "Z":
                found.append(f"process {p.pid} ({p.command}) started by {p.where}, still running")
            # A group whose leader's PID now belongs to another process is that process's group:
            # its leader is gone and the ID was reused (PIDs wrap at pid_max, 32768 here, within one
            # CI run: seen, a shell's `sleep` in a group whose ID a finished FUSE mount once had)
            if p.group and (stat is None or stat[3] == p.start or p.start == 0):
                groups[p.pid] = p
        if groups:
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit() or int(entry.name) in groups or int(entry.name) == me:
                    continue
                stat = _stat(int(entry.name))
                if stat is None or stat[0] == "Z" or stat[1] not in groups:
                    continue
                leader = groups[stat[1]]
                if stat[3] >= leader.start:  # not an older group that happens to reuse the id
                    found.append(f"process {entry.name} ({_cmdline(int(entry.name))}) in the process group "
                                 f"of {leader.pid} ({leader.command}) started by {leader.where}, still running")
        for name, where in self.netns:
            if Path("/run/netns", name).exists():
                found.append(f"network namespace {name} made by {where}, still there")
        new_mounts = set(_mount_points()) - self._mounts_before
        named = {point for point, _ in self.mounts}
        for point, where in self.mounts:
            if point in new_mounts:
                found.append(f"mount {point} made by {where}, still mounted")
        own = tuple(str(d) + os.sep for d in self.own_dirs) + tuple(p + os.sep for p, _ in self.tmpdirs)
        for point in sorted(new_mounts - named):
            if point in self._argv_paths or point.startswith(own):
                found.append(f"mount {point} (named by a command this session ran, or in its own "
                             "temporary directories), still mounted")
        if self.docker:
            found += self._docker_leftovers()
        for path, where in self.tmpdirs:
            if os.path.exists(path):
                found.append(f"temporary directory {path} made by {where}, still there")
        return found

    def _docker_leftovers(self) -> list[str]:
        import docker
        from docker.errors import DockerException, NotFound

        try:
            client = docker.from_env()
        except DockerException as exc:
            return [f"Docker objects created ({len(self.docker)}) but the engine cannot be asked: {exc}"]
        found = []
        collections = {"container": client.containers, "network": client.networks, "volume": client.volumes}
        try:
            for kind, ident, description in self.docker:
                try:
                    collections[kind].get(ident)
                except NotFound:
                    continue
                found.append(f"Docker {kind} {ident[:12]} {description}, still there")
        finally:
            client.close()
        return found


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 4:
                points.append(fields[4].replace("\\040", " "))
    return points


def _caller(roots: list[Path], direct: bool = False) -> str:
    """`file:line` of the innermost frame in the project's own code (not the standard library,
    not an installed package, not this module), or "" when the call came from none. `direct`:
    only if that is the first frame outside this module and `tempfile` (a library's own
    temporary directory, even when the project called the library, is the library's business)."""
    frame = sys._getframe(2)
    here = os.path.abspath(__file__)
    skip = (here, os.path.abspath(tempfile.__file__))
    prefixes = tuple(str(root) + os.sep for root in roots)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if name not in skip:
            if (name.startswith(prefixes) and not any(v in name for v in _VENDOR)
                    and os.sep + ".venv" + os.sep not in name):
                return f"{name}:{frame.f_lineno}"
            if direct:
                return ""
        frame = frame.f_back
    return ""
