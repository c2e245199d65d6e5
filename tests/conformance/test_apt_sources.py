"""conformance/targets/apt_sources.py: the Debian mirror read from apt's own sources (one-line and
deb822 formats), and docker/bootstrap-base-image.sh's use of it (--print-mirrors, overrides, the
error when there is none). Mirror hosts here are made up: the project names no real one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.targets import apt_sources
from conformance.targets.apt_sources import mirror_for, parse_deb822, parse_one_line, read_sources

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "bootstrap-base-image.sh"

ONE_LINE = textwrap.dedent("""\
    # the archive, with options in brackets
    deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/repo/ bookworm main contrib
    deb-src http://src.example/repo bookworm main
    deb [ trusted=yes ] https://sec.example/repo-security bookworm-security main  # trailing comment
    deb cdrom:[Debian GNU/Linux 12]/ bookworm main
    deb http://broken.example
""")

DEB822 = textwrap.dedent("""\
    # disabled first: must not win
    Types: deb
    URIs: http://old.example/repo
    Suites: bookworm
    Components: main
    Enabled: no

    Types: deb deb-src
    # a snapshot once used here
    URIs: mirror+file:/etc/apt/mirrors.txt
     http://mirror.example/repo
    Suites: bookworm bookworm-updates
    Components: main

    types: deb
    uris: http://sec.example/repo-security
    suites: bookworm-security
    components: main
""")


def test_one_line_format_with_options_and_comments():
    sources = parse_one_line(ONE_LINE, "sources.list")
    assert [(s.types, s.uris, s.suites) for s in sources] == [
        (("deb",), ("http://mirror.example/repo/",), ("bookworm",)),
        (("deb-src",), ("http://src.example/repo",), ("bookworm",)),
        (("deb",), ("https://sec.example/repo-security",), ("bookworm-security",)),
        (("deb",), ("cdrom:[Debian GNU/Linux 12]/",), ("bookworm",)),  # never fetchable by debootstrap
    ]
    assert sources[0].components == ("main", "contrib") and sources[0].origin == "sources.list:2"
    assert mirror_for(sources, "bookworm") == "http://mirror.example/repo"  # deb-src and cdrom never chosen
    assert mirror_for(sources, "bookworm-security") == "https://sec.example/repo-security"
    assert mirror_for(sources, "trixie") is None


def test_deb822_stanzas_continuations_case_and_enabled():
    sources = parse_deb822(DEB822, "debian.sources")
    assert [s.enabled for s in sources] == [False, True, True]
    assert sources[1].uris == ("mirror+file:/etc/apt/mirrors.txt", "http://mirror.example/repo")
    assert sources[1].types == ("deb", "deb-src") and sources[2].suites == ("bookworm-security",)
    # the disabled stanza and the scheme debootstrap cannot fetch are passed over
    assert mirror_for(sources, "bookworm") == "http://mirror.example/repo"
    assert mirror_for(sources, "bookworm-updates") == "http://mirror.example/repo"
    assert mirror_for(sources, "bookworm-security") == "http://sec.example/repo-security"


def _apt_root(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "etc" / "apt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_files_are_read_in_apt_order_and_other_names_ignored(tmp_path):
    root = _apt_root(tmp_path, {
        "sources.list.d/zz.sources": "Types: deb\nURIs: http://later.example/repo\nSuites: bookworm\n",
        "sources.list.d/aa.list": "deb http://first.example/repo bookworm main\n",
        "sources.list.d/00.list.disabled": "deb http://ignored.example/repo bookworm main\n",
        "sources.list.d/01.sources.bak": "Types: deb\nURIs: http://ignored.example/repo\nSuites: bookworm\n",
    })
    assert [p.name for p in apt_sources.source_files(root)] == ["aa.list", "zz.sources"]
    assert mirror_for(read_sources(root), "bookworm") == "http://first.example/repo"
    (root / "etc/apt/sources.list").write_text("deb http://main.example/repo bookworm main\n")
    assert mirror_for(read_sources(root), "bookworm") == "http://main.example/repo"  # sources.list comes first


def test_command_prints_the_mirror_or_says_what_it_read(tmp_path, capsys):
    root = _apt_root(tmp_path / "a", {"sources.list.d/debian.sources": DEB822})
    assert apt_sources.main(["mirror", "bookworm", "--root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "http://mirror.example/repo"
    assert apt_sources.main(["mirror", "trixie", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "no enabled 'deb' source for suite 'trixie'" in err and "debian.sources" in err
    (tmp_path / "empty").mkdir()
    assert apt_sources.main(["mirror", "bookworm", "--root", str(tmp_path / "empty")]) == 1
    assert "no *.list or *.sources" in capsys.readouterr().err


# ---------------------------------------------------------------------- the shell script


def _script(*args: str, root: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BROKERCONF_DEBIAN_")}
    # the machine's python3 runs apt_sources.py; this interpreter's directory first on PATH
    path = f"{Path(sys.executable).parent}:{clean.get('PATH', '')}"
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**clean, "PATH": path, "BROKERCONF_APT_ROOT": str(root), **env})


def test_script_takes_the_mirrors_from_apt(tmp_path):
    root = _apt_root(tmp_path, {"sources.list": ONE_LINE})
    proc = _script("--print-mirrors", root=root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["mirror http://mirror.example/repo",
                                        "security-mirror https://sec.example/repo-security"]


def test_script_option_beats_variable_beats_apt(tmp_path):
    root = _apt_root(tmp_path, {"sources.list": ONE_LINE})
    proc = _script("--print-mirrors", root=root, BROKERCONF_DEBIAN_MIRROR="http://env.example/repo")
    assert proc.stdout.splitlines()[0] == "mirror http://env.example/repo", proc.stderr
    proc = _script("--print-mirrors", "--mirror", "http://opt.example/repo", "--security-mirror=http://s.example/ds",
                   root=root, BROKERCONF_DEBIAN_MIRROR="http://env.example/repo")
    assert proc.stdout.splitlines() == ["mirror http://opt.example/repo", "security-mirror http://s.example/ds"]


def test_script_without_any_mirror_says_how_to_give_one(tmp_path):
    proc = _script("--print-mirrors", root=tmp_path)
    assert proc.returncode == 1
    assert "no Debian mirror to debootstrap bookworm from" in proc.stderr
    assert "--mirror URL or set BROKERCONF_DEBIAN_MIRROR" in proc.stderr
    # a security archive is optional: the suite's mirror alone is enough
    root = _apt_root(tmp_path / "main-only", {"sources.list": "deb http://mirror.example/repo bookworm main\n"})
    proc = _script("--print-mirrors", root=root)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1] == "security-mirror none", proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--mirror"], "--mirror needs a URL"),
    (["--mirrors", "x"], "unknown option --mirrors"),
    (["a:1", "b:2"], "one IMAGE only"),
])
def test_script_usage_errors_exit_2(tmp_path, args, message):
    proc = _script(*args, root=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
