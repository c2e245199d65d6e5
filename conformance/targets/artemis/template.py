"""Artemis instances copied from a template instead of one ``bin/artemis create`` per launch.

``artemis create`` is a JVM start of its own (plus a journal write benchmark) before the broker's;
a test run launches well over a hundred Artemis instances, so each launch would pay it. What
``create`` writes depends on its arguments in only a few places (found by diffing instances made
with different arguments, Artemis 2.40.0):

================================  ===================================================================
what                              where
================================  ===================================================================
the instance directory            bin/artemis (ARTEMIS_INSTANCE_ETC), etc/artemis.profile and
                                  etc/artemis-utility.profile (ARTEMIS_INSTANCE, _DATA_DIR, _ETC_DIR,
                                  _OOME_DUMP, _INSTANCE_URI, _INSTANCE_ETC_URI), etc/bootstrap.xml
                                  (the broker.xml URL); resolved, except in file: URIs, which
                                  keep it as given
``--http-port``                   etc/bootstrap.xml (the web server's binding)
``--java-options``                etc/artemis.profile (appended to JAVA_ARGS)
``--password``                    etc/artemis-users.properties (a salted PBKDF2 hash)
``--user``                        etc/artemis-users.properties, etc/artemis-roles.properties and,
                                  with ``--allow-anonymous``, etc/login.config (the guest user)
``--allow-anonymous`` /           etc/login.config (GuestLoginModule or not)
``--require-login``
``--host``                        etc/broker.xml (acceptors, the broker's name)
``--http-host``                   etc/bootstrap.xml, etc/jolokia-access.xml (``--relax-jolokia``)
(a disk measurement)              etc/broker.xml: journal-buffer-timeout, page-sync-timeout
================================  ===================================================================

So one template is made per *shape* (`CreateOptions.shape`: user, anonymous or not, host,
http-host, the distribution and the Java it runs on) under ``.tools/artemis-templates/`` and each
launch copies it and rewrites the instance path, the http port, the java options and the
password hash (`instantiate`). broker.xml, the users and the roles files are replaced by the
launcher's own anyway (artemis/process.py, ``_write_config``). A JDBC store or a shared store
changes nothing ``create`` writes (both live in broker.xml and the instance's lib directory), so
they need no template of their own. tests/conformance/test_artemis_template.py checks that a copy
equals what ``create`` writes with the same arguments.

Several pytest-xdist workers may want the same template at once: one makes it while holding a
lock file (the others wait for it instead of each spending a JVM start), in a staging directory
renamed into place when complete, so a crashed creator never leaves a half template behind.
Where templates cannot be used (the cache not writable, a path that ``create`` would have to
quote or URI-encode, ``BROKERCONF_ARTEMIS_TEMPLATES=0``), `create_instance` runs ``create``
directly, as before, and says why in the create log.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from conformance.targets.runtime.jvm import java_identity
from machinery.tools_cache import TOOLS_DIR
from machinery.waiting import Deadline

__all__ = ["ArtemisCreateError", "CreateOptions", "create_instance", "instantiate", "run_create", "template_for",
           "TEMPLATES_DIR"]

TEMPLATES_DIR = TOOLS_DIR / "artemis-templates"
#: part of every template's key: bump it when what `instantiate` rewrites (or how) changes, so
#: templates made by an older rule are not re-used
TEMPLATE_FORMAT = 1
#: placeholders the template is created with, replaced per launch. The port is one no launch
#: uses (privileged); the java option is a system property nothing reads.
_TEMPLATE_HTTP_PORT = 1
_TEMPLATE_JAVA_OPTIONS = "-Dbrokerconf.template.java-options=placeholder"
#: characters `create` writes verbatim into shell quotes and file: URIs (Java's File.toURI would
#: percent-encode others, a ' would end the shell quoting); any other path falls back to `create`
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._+-]+")
# Artemis's default password codec (PBKDF2WithHmacSHA1, 1024 iterations, 32-byte salt, 64-byte
# key), what `create --password` writes as ENC(iterations:salt:hash), upper-case hex
_PBKDF2 = ("sha1", 1024, 32, 64)


class ArtemisCreateError(RuntimeError):
    """``artemis create`` failed (the message has the command, password masked, and its output)."""


@dataclass(frozen=True)
class CreateOptions:
    """The arguments of one ``artemis create`` (besides the instance directory)."""

    user: str
    password: str
    anonymous: bool
    host: str
    http_host: str
    http_port: int
    java_options: str

    def arguments(self, *, http_port: int | None = None, java_options: str | None = None,
                  password: str | None = None) -> list[str]:
        return ["--silent", "--force", "--user", self.user, "--password", password or self.password,
                "--allow-anonymous" if self.anonymous else "--require-login",
                "--host", self.host, "--http-host", self.http_host,
                "--http-port", str(http_port if http_port is not None else self.http_port),
                "--relax-jolokia", "--java-options", java_options if java_options is not None else self.java_options]

    def shape(self) -> dict:
        """What a template is made for: every argument `instantiate` does not rewrite."""
        return {"user": self.user, "anonymous": self.anonymous, "host": self.host, "http_host": self.http_host}


def _shown(command: list[str], password: str) -> str:
    return " ".join("***" if a == password else a for a in command)


def run_create(home: Path, instance: Path, options: CreateOptions, *, timeout: float,
               password: str | None = None, **overrides) -> str:
    """``HOME/bin/artemis create INSTANCE ...`` (the JVM start templates save); its output.
    ArtemisCreateError when it fails."""
    password = password or options.password
    command = [str(home / "bin" / "artemis"), "create", str(instance),
               *options.arguments(password=password, **overrides)]
    instance.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(command, cwd=str(instance.parent), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ArtemisCreateError(f"`{_shown(command, password)}` did not finish in {timeout:.0f} s") from exc
    output = result.stdout or ""
    if result.returncode != 0 or not (instance / "bin" / "artemis").is_file():
        raise ArtemisCreateError(f"`{_shown(command, password)}` failed (exit {result.returncode}):\n"
                                 + "\n".join(output.splitlines()[-20:]))
    return f"$ {_shown(command, password)}\n{output}"


def _template_key(home: Path, options: CreateOptions) -> str:
    home = Path(home).resolve()
    try:
        # the distribution's verification marker (its pinned sha512, artemis/dist.py)
        verified = (home / ".brokerconf-verified").read_text(encoding="utf-8").strip()
    except OSError:
        verified = str((home / "bin" / "artemis").stat().st_mtime_ns)
    material = json.dumps({"format": TEMPLATE_FORMAT, "home": str(home), "distribution": verified,
                           "java": java_identity(), **options.shape()}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


class _Lock:
    """An exclusive flock on ``path``, waited for up to ``timeout`` seconds (another worker making
    the same template holds it for one `create`)."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path, self.timeout = path, timeout

    def __enter__(self) -> "_Lock":
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = Deadline(self.timeout)
        # a loop, not a `wait_until`: each round tries the lock, and the last refusal is chained
        # to the error raised
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or deadline.expired():
                    os.close(self.fd)
                    raise ArtemisCreateError(f"could not lock {self.path} within {self.timeout:.0f} s "
                                             f"(another process making the same Artemis template?): {exc}") from exc
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # closing releases the flock


def template_for(home: Path, options: CreateOptions, *, cache: Path = TEMPLATES_DIR, timeout: float = 120) -> Path:
    """The template directory for ``options``' shape (``template.json`` and ``instance/``),
    made with one ``create`` when there is none yet. Safe when several processes ask at once."""
    name = f"{Path(home).resolve().name}-{_template_key(home, options)}"
    # canonical: `create` writes some paths resolved and some as given (`instantiate`), so the
    # template's are one string
    cache = Path(cache).resolve()
    final = cache / name
    if (final / "template.json").is_file():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with _Lock(cache / f"{name}.lock", timeout):
        if (final / "template.json").is_file():  # made by another process while this one waited
            return final
        # only a lock holder stages, so a staging directory found now is a crashed creator's
        for stale in cache.glob(f".{name}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = cache / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        staging.mkdir()
        try:
            instance = staging / "instance"
            # a throwaway password: every copy gets its own hash (`instantiate`)
            log = run_create(home, instance, options, timeout=timeout, password=secrets.token_hex(12),
                             http_port=_TEMPLATE_HTTP_PORT, java_options=_TEMPLATE_JAVA_OPTIONS)
            profile = (instance / "etc" / "artemis.profile").read_text(encoding="utf-8")
            if f"ARTEMIS_INSTANCE='{instance}'" not in profile:
                raise ArtemisCreateError(f"`create` did not write ARTEMIS_INSTANCE='{instance}' into "
                                         f"{instance}/etc/artemis.profile: update artemis/template.py's rules")
            meta = {"created_at": str(instance), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "artemis_home": str(Path(home).resolve()), "java": java_identity(), "shape": options.shape(),
                    "http_port": _TEMPLATE_HTTP_PORT, "java_options": _TEMPLATE_JAVA_OPTIONS, "create_log": log}
            (staging / "template.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            os.rename(staging, final)  # atomic: a template is either complete or absent
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return final


def _hash_password(password: str) -> str:
    algorithm, iterations, salt_bytes, key_bytes = _PBKDF2
    salt = secrets.token_bytes(salt_bytes)
    key = hashlib.pbkdf2_hmac(algorithm, password.encode("utf-8"), salt, iterations, dklen=key_bytes)
    return f"ENC({iterations}:{salt.hex().upper()}:{key.hex().upper()})"


def _replace_once(text: str, old: str, new: str, where: Path) -> str:
    if text.count(old) != 1:
        raise ArtemisCreateError(f"{where}: expected {old!r} once in the template, found it {text.count(old)} times "
                                 "(a new Artemis version writes it differently: update artemis/template.py)")
    return text.replace(old, new)


def instantiate(template: Path, instance: Path, options: CreateOptions) -> None:
    """Copy ``template``'s instance to ``instance`` and rewrite what ``create`` would have written
    differently for ``options`` there (the table in the module docstring)."""
    meta = json.loads((template / "template.json").read_text(encoding="utf-8"))
    made_at, instance = meta["created_at"], Path(instance).absolute()
    # `create` writes the instance path resolved (java's canonical path: ARTEMIS_INSTANCE, _ETC_DIR,
    # bin/artemis...) except in file: URIs, which keep the path as given (ARTEMIS_INSTANCE_URI,
    # bootstrap.xml's broker.xml URL); the template was made at a path that is both
    given, canonical = str(instance), os.path.realpath(instance)
    path_pattern = re.compile(r"(file:)?" + re.escape(made_at))
    # like `create --force`: files are overwritten, anything else already there stays
    shutil.copytree(template / "instance", instance, symlinks=True, dirs_exist_ok=True)
    rewritten: set[str] = set()
    for folder in ("bin", "etc"):
        for path in sorted((instance / folder).rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # no binary file carries the instance path
            new = path_pattern.sub(lambda m: f"file:{given}" if m.group(1) else canonical, text)
            if path.name == "bootstrap.xml":
                new = _replace_once(new, f"//{options.http_host}:{meta['http_port']}\"",
                                    f"//{options.http_host}:{options.http_port}\"", path)
                rewritten.add(path.name)
            elif path.name == "artemis.profile":
                new = _replace_once(new, f" {meta['java_options']} ", f" {options.java_options} ", path)
                rewritten.add(path.name)
            elif path.name == "artemis-users.properties":
                rewritten.add(path.name)
                new, count = re.subn(rf"(?m)^{re.escape(options.user)} = ENC\([^)]*\)",
                                     lambda _: f"{options.user} = {_hash_password(options.password)}", new)
                if count != 1:
                    raise ArtemisCreateError(f"{path}: no hashed password of {options.user!r} in the template")
            if new != text:
                path.write_text(new, encoding="utf-8")  # keeps the file's mode (bin/ scripts stay executable)
    missing = {"bootstrap.xml", "artemis.profile", "artemis-users.properties"} - rewritten
    if missing or not (instance / "bin" / "artemis").is_file():
        raise ArtemisCreateError(f"the template {template} lacks {sorted(missing) or ['bin/artemis']}")


def _unusable(instance: Path, cache: Path, options: CreateOptions) -> str | None:
    """Why templates cannot stand in for ``create`` here, or None."""
    if os.environ.get("BROKERCONF_ARTEMIS_TEMPLATES", "1") == "0":
        return "BROKERCONF_ARTEMIS_TEMPLATES=0"
    for path in (instance, Path(os.path.realpath(instance)), cache, Path(os.path.realpath(cache))):
        if not _PLAIN_PATH.fullmatch(str(path)):
            return f"{path} has characters `create` would quote or URI-encode"
    if any(c in options.java_options for c in "\"'\\$`"):
        return "the java options have characters `create` would write into shell quotes"
    return None


def create_instance(home: Path, instance: Path, options: CreateOptions, *, timeout: float,
                    cache: Path = TEMPLATES_DIR) -> str:
    """Make the Artemis instance ``instance`` as ``HOME/bin/artemis create`` would with ``options``:
    copied from the shape's template (made once), or by ``create`` itself where templates cannot be
    used. Returns the text for the launch's create log (which of the two, and ``create``'s output).
    ArtemisCreateError when ``create`` fails."""
    instance, cache = Path(instance).absolute(), Path(cache).absolute()
    reason = _unusable(instance, cache, options)
    if reason is None:
        try:
            template = template_for(home, options, cache=cache, timeout=timeout)
        except OSError as exc:  # e.g. a read-only tools directory: the launch still works, just slower
            reason = f"the template cache {cache} is not usable: {exc}"
        else:
            try:
                instantiate(template, instance, options)
                meta = json.loads((template / "template.json").read_text(encoding="utf-8"))
            except (ArtemisCreateError, OSError, ValueError, KeyError) as exc:
                # a template damaged in the cache, or one a new Artemis writes differently (the
                # equality test, tests/conformance/test_artemis_template.py, fails then): `create`
                # below overwrites the partial copy (--force), and the create log says why
                reason = f"the template {template} could not be used: {exc}"
            else:
                return (f"brokerconf: {instance} copied from the Artemis template {template} (made {meta['created']} by "
                        f"`artemis create` at {meta['created_at']}); rewritten for this instance: its path, "
                        f"--http-port {options.http_port}, --java-options {options.java_options!r}, the password "
                        f"hash of {options.user!r}. The template's create output:\n{meta['create_log']}")
    return f"brokerconf: `artemis create` run directly ({reason})\n" + run_create(home, instance, options,
                                                                                   timeout=timeout)
