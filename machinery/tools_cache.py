"""Where pinned downloads live and how they are checked, for every installer of the project
(Artemis distribution, ActiveMQ's AMQP transport, toxiproxy-server).

Versions and digests are pinned in ``pins.toml`` beside this file; what is fetched goes under
``.tools/`` in the checkout (git-ignored), or wherever ``$BROKERCONF_TOOLS_DIR`` points (tests, a
cache shared between checkouts).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
PINS_FILE = Path(__file__).with_name("pins.toml")
TOOLS_DIR = Path(os.environ.get("BROKERCONF_TOOLS_DIR", ROOT / ".tools"))


class UnsafeArchiveError(ValueError):
    """An archive member would land outside the directory it is unpacked into."""


def extract_tar(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack ``tar`` into ``dest``, keeping the owner's mode bits (a distribution's scripts stay
    executable) and refusing members that would land outside it: absolute names, ``..`` out of it,
    links to outside it, special files. Python's ``filter="data"`` does the same from 3.11.4 on;
    Debian 12's python3 is 3.11.2, whose ``extractall`` has no ``filter`` (found by
    benchmarks/fresh_machine.sh), so the members are checked here first, on every Python."""
    for member in tar.getmembers():
        _refuse_escaping(member)  # on every Python: the data filter would strip a leading "/" instead
    if not hasattr(tarfile, "data_filter"):
        tar.extractall(dest)
        return
    try:
        tar.extractall(dest, filter="data")  # it also follows links already written
    except tarfile.FilterError as exc:
        raise UnsafeArchiveError(str(exc)) from None


def _refuse_escaping(member: tarfile.TarInfo) -> None:
    """What ``tarfile.data_filter`` refuses by the member alone (the archives installed are pinned by
    digest as well; this keeps a bad pin from writing outside ``.tools``)."""
    def escapes(name: str) -> bool:
        normal = posixpath.normpath(name)
        return name.startswith("/") or normal == ".." or normal.startswith("../")

    if escapes(member.name):
        raise UnsafeArchiveError(f"archive member {member.name!r} would be written outside the destination")
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeArchiveError(f"archive member {member.name!r} is a special file")
    # a symbolic link's target is relative to its own directory; a hard link's to the archive's root
    target = posixpath.join(posixpath.dirname(member.name), member.linkname) if member.issym() else member.linkname
    if (member.issym() or member.islnk()) and escapes(target):
        raise UnsafeArchiveError(f"archive member {member.name!r} links to {member.linkname!r}, outside the destination")


def sha512_of(path: Path) -> str:
    """The file's sha512, hex, read in 1 MiB blocks (archives are tens of MB)."""
    digest = hashlib.sha512()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class MavenPin:
    """One artifact pinned in pins.toml: its Maven coordinates and the sha512 of its file."""

    group: str
    artifact: str
    version: str
    classifier: str
    packaging: str
    sha512: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}:{self.packaging}:{self.classifier}"

    @property
    def file_name(self) -> str:
        """The file ``mvn dependency:copy`` writes."""
        return f"{self.artifact}-{self.version}-{self.classifier}.{self.packaging}"


def maven_pin(section: str, path: Path = PINS_FILE) -> MavenPin:
    """The `MavenPin` of pins.toml's ``[section]``."""
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))[section]
    return MavenPin(**{k: data[k] for k in ("group", "artifact", "version", "classifier", "packaging", "sha512")})


class MavenCopyError(RuntimeError):
    """``mvn dependency:copy`` could not put the artifact in place; the message has the command and
    Maven's last lines."""


def maven_copy(coordinates: str, file_name: str, dest_dir: Path, *, label: str,
               run=subprocess.run, progress: Callable[[str], None] = print) -> Path:
    """``dest_dir/file_name``, copied there by ``mvn dependency:copy -Dartifact=coordinates`` when it
    is not already. Maven resolves it through the machine's own settings (its mirrors), so no
    registry host is named here. Verifying the file against its pin is the caller's job."""
    target = Path(dest_dir) / file_name
    if target.is_file():
        return target
    if shutil.which("mvn") is None and run is subprocess.run:
        raise MavenCopyError(f"mvn not found: {label} is fetched with Maven (Debian: sudo apt-get install maven)")
    target.parent.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {label} ({coordinates}) with Maven into {target.parent} ...")
    command = ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={coordinates}", f"-DoutputDirectory={target.parent}"]
    result = run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0 or not target.is_file():
        output = (result.stdout or "").strip().splitlines()[-15:]
        raise MavenCopyError(f"`{' '.join(command)}` failed (exit {result.returncode}); Maven's last lines:\n"
                             + "\n".join(output))
    progress(f"downloaded {target} ({target.stat().st_size // (1 << 10)} KiB)")
    return target
