"""The Artemis broker's jars on the application class path (artemis/class_path.py): the block in
the instance's profile, its order (the boot loader's), and what the shell makes of it."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from conformance.targets.artemis.class_path import BLOCK_BEGIN, distribution_jars, write_into_profile


def _jar(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.txt", "x")
    return path


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    home, instance = tmp_path / "home", tmp_path / "instance"
    for name in ("b.jar", "a.jar", "c.zip"):
        _jar(home / "lib" / name)
    (home / "lib" / "notes.txt").write_text("not a jar")
    (instance / "lib").mkdir(parents=True)
    (instance / "etc").mkdir()
    (instance / "etc" / "artemis.profile").write_text("ARTEMIS_HOME='/h'\nJAVA_ARGS=\"-Xmx64m\"\n")
    return home, instance


def _sourced(instance: Path) -> list[str]:
    """The words bin/artemis gets from $JAVA_ARGS_APPEND after sourcing the profile (unquoted, as it expands it)."""
    script = f'unset JAVA_ARGS_APPEND; . "{instance}/etc/artemis.profile"; printf "%s\\n" $JAVA_ARGS_APPEND'
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.split()


def test_the_jars_go_in_the_boot_loaders_order_distribution_first(tmp_path):
    home, instance = _layout(tmp_path)
    _jar(instance / "lib" / "postgresql.jar")
    jars = write_into_profile(instance, home)
    assert jars == [home / "lib" / "a.jar", home / "lib" / "b.jar", home / "lib" / "c.zip",
                    instance / "lib" / "postgresql.jar"]
    assert _sourced(instance) == ["-classpath", ":".join(map(str, jars))]
    # the rest of the profile is kept
    assert "JAVA_ARGS=\"-Xmx64m\"" in (instance / "etc" / "artemis.profile").read_text()


def test_the_agent_jar_comes_between_the_distributions_and_the_instances(tmp_path):
    home, instance = _layout(tmp_path)
    driver = _jar(instance / "lib" / "postgresql.jar")
    agent = _jar(tmp_path / "tools" / "agent.jar")
    jars = write_into_profile(instance, home, agent=agent)
    assert jars[2:] == [home / "lib" / "c.zip", agent, driver]


def test_writing_again_replaces_the_block(tmp_path):
    home, instance = _layout(tmp_path)
    write_into_profile(instance, home)
    _jar(instance / "lib" / "driver.jar")  # a jar put in the instance's lib after the first write
    jars = write_into_profile(instance, home)
    profile = (instance / "etc" / "artemis.profile").read_text()
    assert profile.count(BLOCK_BEGIN) == 1 and jars[-1] == instance / "lib" / "driver.jar"
    assert _sourced(instance) == ["-classpath", ":".join(map(str, jars))]


def test_a_path_the_script_would_split_is_refused(tmp_path):
    home, instance = _layout(tmp_path / "with blank")
    with pytest.raises(ValueError, match="cannot pass on"):
        write_into_profile(instance, home)
    assert BLOCK_BEGIN not in (instance / "etc" / "artemis.profile").read_text()


def test_distribution_jars_are_only_the_lib_directory(tmp_path):
    home, _ = _layout(tmp_path)
    _jar(home / "lib" / "client" / "artemis-client-all.jar")  # a subdirectory: not the boot loader's
    assert [p.name for p in distribution_jars(home)] == ["a.jar", "b.jar", "c.zip"]
    assert distribution_jars(tmp_path / "nowhere") == []
