"""The Debian mirror this machine's apt uses, read from its own sources, so nothing in the project
names a mirror host (docker/bootstrap-base-image.sh debootstraps the base image from it).

apt reads ``/etc/apt/sources.list`` and, in ``/etc/apt/sources.list.d/``, ``*.list`` files in the
one-line format and ``*.sources`` files in the deb822 format (sources.list(5), "ONE-LINE-STYLE
FORMAT" and "DEB822-STYLE FORMAT"); files with any other name there are ignored, as apt does. A
mirror for a suite is the first binary (``deb``) source, not disabled, whose suites include it
(``bookworm`` for the archive, ``bookworm-security`` for the security archive).

Standard library only: the shell script runs it with the machine's python3, before any
virtualenv exists::

    python3 conformance/targets/apt_sources.py mirror bookworm [--root /]

prints the URI, or exits 1 saying what it looked at.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

#: the URI schemes debootstrap can fetch from (others, e.g. cdrom: or mirror+file:, are skipped)
FETCHABLE = ("http://", "https://", "ftp://", "file:")


@dataclass(frozen=True)
class Source:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    origin: str  # file (and line or stanza) it came from, for messages
    enabled: bool = True


def _strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def parse_one_line(text: str, origin: str = "sources.list") -> list[Source]:
    """``deb [ option=value ... ] URI SUITE [COMPONENT ...]`` lines; comments and blank lines skipped."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = _strip_comment(raw).split()
        if not words or words[0] not in ("deb", "deb-src"):
            continue
        kind, rest = words[0], words[1:]
        if rest and rest[0].startswith("["):  # options: "[arch=amd64]" or "[ arch=amd64 signed-by=... ]"
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if rest and rest[0].startswith("cdrom:[") and "]" not in rest[0]:  # "cdrom:[Debian GNU/Linux 12]/"
            end = next((i for i, w in enumerate(rest) if "]" in w), len(rest) - 1)
            rest = [" ".join(rest[:end + 1]), *rest[end + 1:]]
        if len(rest) < 2:
            continue  # apt refuses such a line too; nothing to take from it
        found.append(Source((kind,), (rest[0],), (rest[1],), tuple(rest[2:]), f"{origin}:{number}"))
    return found


def parse_deb822(text: str, origin: str = "debian.sources") -> list[Source]:
    """Stanzas of ``Field: value`` lines separated by blank lines; ``#`` lines are comments and a
    line starting with white space continues the previous field. Field names are case-insensitive."""
    found = []
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = None
    for raw in [*text.splitlines(), ""]:
        if raw.lstrip().startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
            continue
        if raw[0] in " \t" and last is not None:
            current[last] += " " + raw.strip()
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        last = name.strip().lower()
        current[last] = value.strip()
    for n, stanza in enumerate(stanzas, 1):
        found.append(Source(tuple(stanza.get("types", "").split()), tuple(stanza.get("uris", "").split()),
                            tuple(stanza.get("suites", "").split()), tuple(stanza.get("components", "").split()),
                            f"{origin} (stanza {n})",
                            enabled=stanza.get("enabled", "yes").lower() not in ("no", "false", "0")))
    return found


def source_files(root: Path = Path("/")) -> list[Path]:
    """The files apt reads, in its order: sources.list, then sources.list.d/ sorted by name."""
    etc = Path(root) / "etc" / "apt"
    parts = etc / "sources.list.d"
    listed = sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources")) if parts.is_dir() else []
    return [p for p in [etc / "sources.list", *listed] if p.is_file()]


def read_sources(root: Path = Path("/")) -> list[Source]:
    found = []
    for path in source_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        found += parse_deb822(text, str(path)) if path.suffix == ".sources" else parse_one_line(text, str(path))
    return found


def mirror_for(sources: list[Source], suite: str) -> str | None:
    """The first fetchable URI of an enabled ``deb`` source that serves ``suite``."""
    for source in sources:
        if source.enabled and "deb" in source.types and suite in source.suites:
            for uri in source.uris:
                if uri.startswith(FETCHABLE):
                    return uri.rstrip("/")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apt_sources.py", description="the Debian mirror apt uses here")
    sub = parser.add_subparsers(dest="command", required=True)
    mirror = sub.add_parser("mirror", help="print the mirror serving SUITE (exit 1 when there is none)")
    mirror.add_argument("suite", help="e.g. bookworm, bookworm-security")
    mirror.add_argument("--root", default="/", help="file system root holding etc/apt (default /)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    files = source_files(root)
    uri = mirror_for(read_sources(root), args.suite)
    if uri is None:
        looked = ", ".join(map(str, files)) or f"nothing: no {root / 'etc/apt/sources.list'} and no " \
                                                f"*.list or *.sources in {root / 'etc/apt/sources.list.d'}"
        print(f"no enabled 'deb' source for suite {args.suite!r} in apt's sources (read {looked})", file=sys.stderr)
        return 1
    print(uri)
    return 0


if __name__ == "__main__":
    sys.exit(main())
