"""The real Toxiproxy server: built from its Go module into ``.tools/bin/toxiproxy-server``.

``brokerconf targets install toxiproxy`` and ``scripts/bootstrap.sh`` call `install_toxiproxy()`:
``go install <module>@<version>`` (module and version pinned in machinery/pins.toml,
[toxiproxy]) with GOBIN set to a temporary directory, then the binary Go names ``server`` is
moved into place. Go reads the machine's own GOPROXY/GOFLAGS; nothing here names a registry.

Toxiproxy's ``Version`` variable is ``"git"`` unless the build sets it (its Makefile and release
builds pass ``-ldflags -X``); the install sets it to the pinned version, so ``-version`` says
which release the binary is and a present binary is re-used only when it names the pin.

`find_toxiproxy_server()` is the one place that decides which binary the harness runs
(`machinery.faultproxy.start_fault_proxy`, the tests' ``fault_proxy`` fixture, ``brokerconf bench proxy``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from machinery.tools_cache import PINS_FILE, TOOLS_DIR

PINS = PINS_FILE
TOOLS_BIN = TOOLS_DIR / "bin"
BINARY_NAME = "toxiproxy-server"
#: the package whose ``Version`` variable ``-version`` prints (toxiproxy v2.12.0, version.go)
VERSION_VARIABLE = "github.com/Shopify/toxiproxy/v2.Version"


class ToxiproxyInstallError(RuntimeError):
    pass


@dataclass(frozen=True)
class ToxiproxyPin:
    module: str
    version: str


def pin(pins_file: Path = PINS) -> ToxiproxyPin:
    with pins_file.open("rb") as f:
        section = tomllib.load(f).get("toxiproxy")
    if not section or "module" not in section or "version" not in section:
        raise ToxiproxyInstallError(f"{pins_file}: no [toxiproxy] section with module and version")
    return ToxiproxyPin(section["module"], section["version"])


def binary_version(binary: Path | str) -> str | None:
    """What ``binary -version`` names (``toxiproxy-server version v2.12.0`` -> ``v2.12.0``)."""
    try:
        out = subprocess.run([str(binary), "-version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 3 or words[:2] != ["toxiproxy-server", "version"]:
        return None
    return words[2]


def find_toxiproxy_server(tools_bin: Path = TOOLS_BIN) -> str | None:
    """The toxiproxy-server to run: the project's own build in .tools/bin first, then PATH."""
    own = tools_bin / BINARY_NAME
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which(BINARY_NAME)


def install_toxiproxy(tools_bin: Path = TOOLS_BIN, pins_file: Path = PINS, progress=print,
                      run=subprocess.run) -> Path:
    """Build the pinned toxiproxy-server into ``tools_bin`` unless the one there names the pin."""
    wanted = pin(pins_file)
    target = tools_bin / BINARY_NAME
    if target.is_file():
        have = binary_version(target)
        if have == wanted.version:
            progress(f"{target} is {have}, the pinned version: re-used")
            return target
        progress(f"{target} names version {have!r}, not the pinned {wanted.version}: rebuilding")
    go = shutil.which("go")
    if go is None:
        raise ToxiproxyInstallError(
            f"`go` not found on PATH: the real Toxiproxy server is built with `go install "
            f"{wanted.module}@{wanted.version}` (its go.mod needs Go 1.23 or newer); install Go "
            "(https://go.dev/doc/install, or Debian's golang-go when new enough) and run "
            "`brokerconf targets install toxiproxy` again")
    tools_bin.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="toxiproxy-gobin-", dir=tools_bin.parent) as gobin:
        command = [go, "install", f"-ldflags=-X {VERSION_VARIABLE}={wanted.version}",
                   f"{wanted.module}@{wanted.version}"]
        progress(f"GOBIN={gobin} {' '.join(command[1:])}")
        code = run(command, env={**os.environ, "GOBIN": gobin}).returncode
        built = Path(gobin) / Path(wanted.module).name  # Go names the binary after the package dir
        if code != 0 or not built.is_file():
            raise ToxiproxyInstallError(f"go install {wanted.module}@{wanted.version} failed (exit {code}, "
                                        "its output is above)")
        os.replace(built, target)  # same file system: the temp dir is a sibling of tools_bin
    have = binary_version(target)
    if have != wanted.version:
        raise ToxiproxyInstallError(f"{target} was built but `-version` names {have!r}, not {wanted.version}")
    progress(f"installed {target} ({have})")
    return target


def main(argv: list[str] | None = None) -> int:
    """What scripts/bootstrap.sh runs on every use: silent when the pinned binary is there."""
    try:
        if binary_version(TOOLS_BIN / BINARY_NAME) == pin().version:
            return 0
        install_toxiproxy(progress=lambda m: print(f"brokerconf: {m}", flush=True))
    except ToxiproxyInstallError as exc:
        print(f"brokerconf: toxiproxy: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
