"""machinery/tools_cache.extract_tar: modes kept, escaping members refused with one error, on
Pythons with and without tarfile's extraction filters (Debian 12's python3 3.11.2 has none)."""

from __future__ import annotations

import io
import tarfile

import pytest

from machinery import tools_cache
from machinery.tools_cache import UnsafeArchiveError, extract_tar

WITH_AND_WITHOUT_FILTERS = pytest.mark.parametrize("filters", [True, False], ids=["filters", "no-filters"])


@pytest.fixture
def python_filters(monkeypatch):
    """Run the test as on a Python without tarfile's filters when asked."""
    def use(filters: bool) -> None:
        if not filters:
            monkeypatch.delattr(tools_cache.tarfile, "data_filter", raising=False)
            real = tarfile.TarFile.extractall

            def old_extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
                assert not kwargs, f"Python 3.11.2's extractall takes no {sorted(kwargs)}"
                return real(self, path, members, numeric_owner=numeric_owner)
            monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    return use


def _archive(tmp_path, *members: tarfile.TarInfo, data: bytes = b"#!/bin/sh\n") -> tarfile.TarFile:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer)


def _file(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(b"#!/bin/sh\n"), mode
    return info


def _link(name: str, target: str, kind=tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@WITH_AND_WITHOUT_FILTERS
def test_a_distribution_unpacks_with_its_scripts_executable(tmp_path, python_filters, filters):
    python_filters(filters)
    extract_tar(_archive(tmp_path, _file("dist/bin/artemis", 0o755), _file("dist/lib/a.jar"),
                         _link("dist/bin/run", "artemis")), tmp_path / "out")
    script = tmp_path / "out" / "dist" / "bin" / "artemis"
    assert script.read_bytes() == b"#!/bin/sh\n"
    assert script.stat().st_mode & 0o111 == 0o111
    assert (tmp_path / "out" / "dist" / "bin" / "run").resolve() == script.resolve()


@WITH_AND_WITHOUT_FILTERS
@pytest.mark.parametrize("member", [_file("../escaped"), _file("/tmp/absolute"), _file("dist/../../escaped"),
                                    _link("dist/up", "../../outside"), _link("dist/abs", "/etc/passwd"),
                                    _link("dist/hard", "../outside", tarfile.LNKTYPE)],
                         ids=["dotdot", "absolute", "nested-dotdot", "symlink-up", "symlink-absolute", "hardlink-up"])
def test_a_member_that_would_land_outside_is_refused(tmp_path, python_filters, filters, member):
    python_filters(filters)
    (tmp_path / "out").mkdir()
    with pytest.raises(UnsafeArchiveError):
        extract_tar(_archive(tmp_path, member), tmp_path / "out")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "outside").exists()
