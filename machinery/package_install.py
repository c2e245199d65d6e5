"""Installing the project's Python packages into the venv: with uv where it can follow pip's
configuration, with pip otherwise (issue 25: the set-up's longest step on a fresh machine).

Why uv: on a fresh machine of 2 cores pip took 1 m 47 s for ``-e '.[test]'`` alone (resolving and
downloading one package at a time, then building pyspark's and python-qpid-proton's wheels one
after the other, then compiling every module to bytecode); uv installed the same set, the same
versions, in 31 s (``pip freeze`` identical, proton built with TLS). uv itself is a wheel on the
package index, installed into the venv with pip first (~3 s).

Why pip's configuration decides: the machine's package mirror, certificate and extra wheel folders
are configured for pip (``/etc/pip.conf``, ``PIP_*`` variables), and uv reads none of that. So the
effective settings are read from pip itself (``pip config list``) and handed to uv as its own
variables (`uv_environment`). A setting with no uv equivalent known here (a client certificate,
say) is never dropped silently: the install then goes through pip, saying which setting sent it
there. A failed uv install is followed by pip's, so uv can only make the set-up faster, never
break it.

Standard library only: it runs before anything is installed.

Usage: ``.venv/bin/python -m machinery.package_install -e '.[test]'`` (arguments as pip's).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import Iterable

__all__ = ["Untranslatable", "uv_environment", "parse_pip_config", "install"]

#: the uv release range asked for: ``uv pip install`` takes the options used here since 0.4
UV_REQUIREMENT = "uv>=0.4,<1"
#: quiet, unattended pip: the options every pip call here carries
PIP_QUIET = ("--disable-pip-version-check", "--no-input", "-q")

#: pip settings that change nothing uv does here (output, prompts, pip's own upgrade check)
IGNORED = frozenset({"disable-pip-version-check", "no-input", "quiet", "verbose", "progress-bar",
                     "root-user-action", "no-color", "no-cache-dir", "cache-dir", "retries", "log",
                     "no-warn-script-location", "require-virtualenv", "break-system-packages"})


class Untranslatable(Exception):
    """A pip setting uv cannot be given: the install goes through pip."""


def parse_pip_config(listing: str) -> list[tuple[str, str]]:
    """``pip config list`` output (``section.name='value'``, environment settings as
    ``:env:.name``) as (name, value) pairs, in pip's order."""
    pairs = []
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        name = key.rsplit(".", 1)[-1].strip()
        value = raw.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        pairs.append((name, value))
    return pairs


def _words(value: str) -> list[str]:
    return value.split()


def uv_environment(settings: Iterable[tuple[str, str]]) -> dict[str, str]:
    """uv's environment variables for pip's ``settings`` ((name, value) pairs; a later pair of the
    same name wins, as pip's environment overrides its files). Raises `Untranslatable` naming a
    setting uv could not follow."""
    latest: dict[str, str] = {}
    for name, value in settings:
        latest[name] = value
    env: dict[str, str] = {}
    for name, value in latest.items():
        if name in IGNORED:
            continue
        if name == "index-url":
            env["UV_DEFAULT_INDEX"] = value
        elif name == "extra-index-url":
            env["UV_INDEX"] = " ".join(_words(value))
            # pip picks the best version across all its indexes; uv stops at the first index
            # that has the package unless told otherwise
            env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
        elif name == "find-links":
            env["UV_FIND_LINKS"] = ",".join(_words(value))
        elif name == "cert":
            env["SSL_CERT_FILE"] = value
        elif name == "trusted-host":
            env["UV_INSECURE_HOST"] = " ".join(_words(value))
        elif name in ("timeout", "default-timeout"):
            env["UV_HTTP_TIMEOUT"] = value
        elif name == "proxy":
            env["HTTPS_PROXY"] = env["HTTP_PROXY"] = value
        elif name == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                env["UV_NO_INDEX"] = "1"
        else:
            raise Untranslatable(f"pip's setting {name}={value!r} has no uv equivalent here")
    return env


def _say(message: str) -> None:
    print(f"brokerconf: {message}", file=sys.stderr, flush=True)


def _pip(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", *args], text=True, capture_output=True)


def _with_uv(python: str, pip_args: list[str]) -> bool:
    """True when uv installed ``pip_args``; False (said why) when pip must."""
    listing = _pip(python, "config", "list")
    if listing.returncode != 0:
        _say(f"could not read pip's configuration ({listing.stderr.strip()[-300:]}); installing with pip")
        return False
    try:
        uv_env = uv_environment(parse_pip_config(listing.stdout))
    except Untranslatable as exc:
        _say(f"{exc}; installing with pip")
        return False
    got_uv = _pip(python, "install", *PIP_QUIET, UV_REQUIREMENT)
    uv = os.path.join(os.path.dirname(python), "uv")
    if got_uv.returncode != 0 or not os.access(uv, os.X_OK):
        _say(f"could not install uv ({got_uv.stderr.strip()[-300:]}); installing with pip")
        return False
    done = subprocess.run([uv, "pip", "install", "--quiet", "--python", python, *pip_args],
                          env={**os.environ, **uv_env})
    if done.returncode != 0:
        _say(f"uv pip install {shlex.join(pip_args)} failed (exit {done.returncode}, output above); "
             "installing with pip")
        return False
    return True


def install(pip_args: list[str], python: str = sys.executable) -> int:
    """Install ``pip_args`` (pip's own arguments) into ``python``'s environment; pip's exit code."""
    if _with_uv(python, pip_args):
        return 0
    return subprocess.run([python, "-m", "pip", "install", *PIP_QUIET, *pip_args]).returncode


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m machinery.package_install <pip install arguments>", file=sys.stderr)
        return 2
    return install(args)


if __name__ == "__main__":
    sys.exit(main())
