"""Artemis instances copied from a template (artemis/template.py) equal what ``artemis create``
writes with the same arguments; the template is made once per shape, also when several
processes ask at once; where templates cannot be used, ``create`` runs as before."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import threading
from pathlib import Path

import pytest

from conformance.requirements import skip_or_fail
from conformance.targets.artemis import template as artemis_template
from conformance.targets.artemis.dist import home, installed
from conformance.targets.artemis.template import CreateOptions, create_instance, run_create, template_for


def _options(**changes) -> CreateOptions:
    values = dict(user="brokerconf-admin", password="s3cret-admin", anonymous=True, host="127.0.0.1",
                  http_host="127.0.0.1", http_port=18765, java_options="-Xms64m -Xmx256m")
    values.update(changes)
    return CreateOptions(**values)


def _snapshot(instance: Path) -> dict[str, object]:
    """Relative path -> text (bin/, etc/) or kind and mode (everything else, directories too)."""
    found: dict[str, object] = {}
    for path in sorted(instance.rglob("*")):
        rel = str(path.relative_to(instance))
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_file() and rel.split("/")[0] in ("bin", "etc"):
            found[rel] = (mode, path.read_text(encoding="utf-8"))
        else:
            found[rel] = ("dir" if path.is_dir() else "file", mode)
    return found


def _password_matches(line: str, password: str) -> bool:
    # Artemis's default codec: PBKDF2WithHmacSHA1, ENC(iterations:salt:hash) in hex
    iterations, salt, key = re.fullmatch(r"[^=]+ = ENC\((\d+):([0-9A-F]+):([0-9A-F]+)\)", line).groups()
    derived = hashlib.pbkdf2_hmac("sha1", password.encode(), bytes.fromhex(salt), int(iterations),
                                  dklen=len(key) // 2)
    return derived.hex().upper() == key


def _comparable(rel: str, entry: object, password: str) -> object:
    """``entry`` with only what legitimately differs between two `create` runs taken out."""
    if not isinstance(entry, tuple) or not isinstance(entry[1], str) or rel.split("/")[0] not in ("bin", "etc"):
        return entry
    mode, text = entry
    if rel == "etc/artemis-users.properties":
        # the hash is salted with fresh random bytes on every run, so it never repeats: checked to
        # be the password's hash instead, then left out
        lines = text.split("\n")
        hashed = [i for i, ln in enumerate(lines) if " = ENC(" in ln]
        assert len(hashed) == 1 and _password_matches(lines[hashed[0]], password), text
        lines[hashed[0]] = lines[hashed[0]].split(" = ")[0] + " = <password hash>"
        text = "\n".join(lines)
    if rel == "etc/broker.xml":
        # `create` times sync writes on this disk ("Auto tuning journal") and writes what it measured;
        # the launcher replaces broker.xml with its own anyway
        text = re.sub(r"could perform [0-9.]+ writes per millisecond", "could perform N writes per millisecond", text)
        text = re.sub(r"a sync write every \d+ nanoseconds", "a sync write every N nanoseconds", text)
        text = re.sub(r"<(journal-buffer-timeout|page-sync-timeout)>\d+<", r"<\1>N<", text)
    return mode, text


def _require() -> Path:
    ok, reason = installed()
    if not ok:
        skip_or_fail("artemis", reason)
    return home()


@pytest.mark.slow
@pytest.mark.parametrize("anonymous", [True, False], ids=["allow-anonymous", "require-login"])
def test_copy_equals_what_create_writes(tmp_path, anonymous):
    artemis_home = _require()
    options = _options(anonymous=anonymous)
    # one path for both, so that the instance path must come out exactly as `create` writes it;
    # through a symbolic link (as .tools often is), since `create` writes some paths resolved and
    # some as given
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    instance = tmp_path / "link" / "launch" / "instance"
    instance.parent.mkdir()
    run_create(artemis_home, instance, options, timeout=120)
    created = _snapshot(instance)
    assert f"='{tmp_path / 'real' / 'launch' / 'instance'}'" in created["etc/artemis.profile"][1]
    assert f"file:{instance}/" in created["etc/artemis.profile"][1]
    shutil.rmtree(instance)

    log = create_instance(artemis_home, instance, options, timeout=120, cache=tmp_path / "link" / "templates")
    copied = _snapshot(instance)

    assert "copied from the Artemis template" in log and "Creating ActiveMQ Artemis instance" in log, log
    assert sorted(copied) == sorted(created), "the same files and directories"
    for rel in created:
        assert _comparable(rel, copied[rel], options.password) == _comparable(rel, created[rel], options.password), rel
    # what the template was made with must not leak into the copy
    profile = copied["etc/artemis.profile"][1]
    assert "-Xms64m -Xmx256m" in profile and "placeholder" not in profile
    assert "127.0.0.1:18765" in copied["etc/bootstrap.xml"][1]
    assert not any("templates" in entry[1] for entry in copied.values() if isinstance(entry[1], str))


@pytest.mark.slow
def test_one_template_per_shape_rewritten_per_launch(tmp_path):
    artemis_home = _require()
    cache = tmp_path / "templates"
    first = _options(http_port=18001, java_options="-Xms64m -Xmx384m")
    second = _options(http_port=18002, java_options="-Xms64m -Xmx128m", password="other")
    create_instance(artemis_home, tmp_path / "a", first, timeout=120, cache=cache)
    create_instance(artemis_home, tmp_path / "b", second, timeout=120, cache=cache)
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1, "port, heap and password need no template of their own"
    create_instance(artemis_home, tmp_path / "c", _options(anonymous=False), timeout=120, cache=cache)
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 2, "require-login writes another login.config"
    b = (tmp_path / "b" / "etc" / "artemis.profile").read_text()
    assert f"ARTEMIS_INSTANCE='{tmp_path / 'b'}'" in b and "-Xmx128m " in b and "-Xmx384m" not in b
    users = (tmp_path / "b" / "etc" / "artemis-users.properties").read_text().splitlines()[-1]
    assert _password_matches(users, "other")


# ------------------------------------------------------------------ without Java: a fake `create`

FAKE_CREATE = r"""#!/bin/sh
# stands in for `artemis create INSTANCE --silent --force --user U --password P ... --http-port N
# ... --java-options J`: writes the files the rewrite rules touch, and counts its runs
echo run >> "$(dirname "$0")/../runs"
instance="$2"; shift 2
while [ $# -gt 0 ]; do
  case "$1" in
    --user) user="$2"; shift;; --password) password="$2"; shift;; --http-port) port="$2"; shift;;
    --java-options) java="$2"; shift;;
  esac
  shift
done
sleep 0.3
mkdir -p "$instance/bin" "$instance/etc" "$instance/data"
printf "#!/bin/sh\nARTEMIS_INSTANCE_ETC='%s/etc'\n" "$instance" > "$instance/bin/artemis"
chmod 755 "$instance/bin/artemis"
printf "ARTEMIS_INSTANCE='%s'\nJAVA_ARGS=\"-Xmx2G %s \"\n" "$instance" "$java" > "$instance/etc/artemis.profile"
printf '<binding uri="http://127.0.0.1:%s">\n' "$port" > "$instance/etc/bootstrap.xml"
printf "%s = ENC(1024:00:00)" "$user" > "$instance/etc/artemis-users.properties"
echo "Creating ActiveMQ Artemis instance at: $instance"
"""


@pytest.fixture
def fake_home(tmp_path) -> Path:
    root = tmp_path / "dist" / "apache-artemis-9.9.9"
    (root / "bin").mkdir(parents=True)
    script = root / "bin" / "artemis"
    script.write_text(FAKE_CREATE)
    script.chmod(0o755)
    return root


def _runs(fake_home: Path) -> int:
    runs = fake_home / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_workers_asking_at_once_share_one_create(tmp_path, fake_home):
    cache, results, errors = tmp_path / "templates", [], []

    def launch(i: int) -> None:
        try:
            results.append(create_instance(fake_home, tmp_path / f"w{i}" / "instance",
                                           _options(http_port=19000 + i), timeout=30, cache=cache))
        except Exception as exc:  # reported below, with the others
            errors.append(exc)

    # separate open()s take separate flocks, so threads contend like xdist worker processes do
    threads = [threading.Thread(target=launch, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 6
    assert _runs(fake_home) == 1, "one `create` for one shape"
    entries = [p.name for p in cache.iterdir() if not p.name.endswith(".lock")]
    assert len(entries) == 1 and not entries[0].startswith("."), f"one template, no staging left behind: {entries}"
    for i in range(6):
        instance = tmp_path / f"w{i}" / "instance"
        assert f'127.0.0.1:{19000 + i}"' in (instance / "etc" / "bootstrap.xml").read_text()
        assert os.access(instance / "bin" / "artemis", os.X_OK)


def test_a_crashed_creator_leaves_nothing_that_is_used(tmp_path, fake_home):
    cache = tmp_path / "templates"
    template = template_for(fake_home, _options(), cache=cache, timeout=30)
    # what a creator killed before its rename leaves: a staging directory, never the template
    stale = cache / f".{template.name}.99999.deadbeef"
    (stale / "instance").mkdir(parents=True)
    shutil.rmtree(template)
    again = template_for(fake_home, _options(), cache=cache, timeout=30)
    assert again == template and (again / "template.json").is_file() and not stale.exists()
    assert _runs(fake_home) == 2


def test_without_a_usable_cache_create_runs_directly(tmp_path, fake_home, monkeypatch):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache directory would go")
    log = create_instance(fake_home, tmp_path / "x" / "instance", _options(), timeout=30, cache=blocked / "t")
    assert "run directly" in log and "not usable" in log and _runs(fake_home) == 1
    monkeypatch.setenv("BROKERCONF_ARTEMIS_TEMPLATES", "0")
    log = create_instance(fake_home, tmp_path / "y" / "instance", _options(), timeout=30, cache=tmp_path / "t")
    assert "BROKERCONF_ARTEMIS_TEMPLATES=0" in log and not (tmp_path / "t").exists()


def test_a_path_create_would_encode_is_not_copied(tmp_path, fake_home):
    log = create_instance(fake_home, tmp_path / "with space" / "instance", _options(), timeout=30,
                          cache=tmp_path / "t")
    assert "run directly" in log and "URI-encode" in log


def test_a_template_that_no_longer_matches_the_rules_is_an_error(tmp_path, fake_home):
    template = template_for(fake_home, _options(), cache=tmp_path / "t", timeout=30)
    bootstrap = template / "instance" / "etc" / "bootstrap.xml"
    bootstrap.write_text(bootstrap.read_text().replace("127.0.0.1:1\"", "127.0.0.1:2\""))
    with pytest.raises(artemis_template.ArtemisCreateError, match="update artemis/template.py"):
        artemis_template.instantiate(template, tmp_path / "z" / "instance", _options())


def test_a_damaged_template_falls_back_to_create(tmp_path, fake_home):
    cache = tmp_path / "t"
    template = template_for(fake_home, _options(), cache=cache, timeout=30)
    (template / "instance" / "etc" / "bootstrap.xml").unlink()
    log = create_instance(fake_home, tmp_path / "z" / "instance", _options(), timeout=30, cache=cache)
    assert "run directly" in log and "could not be used" in log and _runs(fake_home) == 2
    assert '127.0.0.1:18765"' in (tmp_path / "z" / "instance" / "etc" / "bootstrap.xml").read_text()
