"""docker/artemis/build.sh without an engine: a fake `docker` (and `mvn`) on PATH record what the
script asks for. Checked: the pinned version and sha512 are read from pins.toml's [artemis] table
only; an image whose labels carry that sha512 and the recipe digest is not rebuilt; otherwise the
archive is verified and the build gets a context holding the archive, the Dockerfile and the
entrypoint, plus the labels; a wrong archive or a failed fetch stops the build naming the file.
(The real build: tests/docker/test_artemis_container.py runs the image it makes.)"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "docker" / "artemis" / "build.sh"

FAKE_DOCKER = """#!/bin/sh
# fake docker: `image inspect` answers labels from the environment; `build` records its arguments
# and the files of its context (the last argument)
case "$1" in
  image)
    case "$*" in
      *artemis.sha512*) printf '%s\\n' "$FAKE_SHA_LABEL" ;;
      *artemis.recipe*) printf '%s\\n' "$FAKE_RECIPE_LABEL" ;;
    esac ;;
  build)
    printf '%s\\n' "$@" > "$FAKE_LOG"
    for last; do :; done
    ls "$last" > "$FAKE_LOG.context" ;;
esac
"""

FAKE_MVN = """#!/bin/sh
echo "fake mvn: $*" >&2
exit 1
"""


def _project(tmp_path: Path, archive: bytes | None, pinned_sha: str) -> Path:
    root = tmp_path / "project"
    (root / "machinery").mkdir(parents=True)
    (root / "machinery" / "pins.toml").write_text(f"""
[artemis]
group = "org.apache.activemq"
artifact = "apache-artemis"
version = "9.9.9"
classifier = "bin"
packaging = "tar.gz"
sha512 = "{pinned_sha}"

[toxiproxy]
version = "v2.12.0"
sha512 = "not-this-one"
""")
    if archive is not None:
        (root / ".tools" / "artemis").mkdir(parents=True)
        (root / ".tools" / "artemis" / "apache-artemis-9.9.9-bin.tar.gz").write_bytes(archive)
    return root


def _run(tmp_path: Path, root: Path, sha_label: str = "", recipe_label: str = "") -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("docker", FAKE_DOCKER), ("mvn", FAKE_MVN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "build.log"),
           "FAKE_SHA_LABEL": sha_label, "FAKE_RECIPE_LABEL": recipe_label, "BROKERCONF_REBUILD": "0"}
    return subprocess.run(["bash", str(BUILD), "debian:bookworm-slim", str(root)], env=env, capture_output=True,
                          text=True, timeout=60)


def _recipe() -> str:
    here = BUILD.parent
    return hashlib.sha256((here / "Dockerfile").read_bytes() + (here / "docker-run.sh").read_bytes()).hexdigest()


def test_up_to_date_image_is_not_rebuilt(tmp_path):
    sha = hashlib.sha512(b"archive").hexdigest()
    result = _run(tmp_path, _project(tmp_path, None, sha), sha_label=sha, recipe_label=_recipe())
    assert result.returncode == 0, result.stderr
    assert "brokerconf/artemis:9.9.9 is up to date" in result.stderr
    assert not (tmp_path / "build.log").exists(), "nothing may be built (not even the archive is needed)"


def test_changed_recipe_rebuilds_from_the_verified_archive(tmp_path):
    archive = b"pretend tar.gz"
    sha = hashlib.sha512(archive).hexdigest()
    result = _run(tmp_path, _project(tmp_path, archive, sha), sha_label=sha, recipe_label="an older recipe")
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "build.log").read_text().splitlines()
    assert args[:4] == ["build", "--pull=false", "--force-rm", "--build-arg"]
    assert "ARTEMIS_VERSION=9.9.9" in args and "BASE_IMAGE=debian:bookworm-slim" in args
    assert f"org.brokerconf.artemis.sha512={sha}" in args
    assert f"org.brokerconf.artemis.recipe={_recipe()}" in args
    assert args[args.index("-t") + 1] == "brokerconf/artemis:9.9.9"
    context = (tmp_path / "build.log.context").read_text().split()
    assert sorted(context) == ["Dockerfile", "apache-artemis-9.9.9-bin.tar.gz", "docker-run.sh"]
    assert not Path(args[-1]).exists(), "the temporary build context must be removed"


def test_archive_with_another_sha512_stops_the_build(tmp_path):
    root = _project(tmp_path, b"tampered", hashlib.sha512(b"the real one").hexdigest())
    result = _run(tmp_path, root)
    assert result.returncode == 1
    assert "apache-artemis-9.9.9-bin.tar.gz has sha512" in result.stderr and "pins.toml pins" in result.stderr
    assert not (tmp_path / "build.log").exists()


def test_missing_archive_is_fetched_with_maven_and_a_failure_is_reported(tmp_path):
    result = _run(tmp_path, _project(tmp_path, None, hashlib.sha512(b"x").hexdigest()))
    assert result.returncode == 1
    assert "fake mvn: -q -B dependency:copy -Dartifact=org.apache.activemq:apache-artemis:9.9.9:tar.gz:bin" \
           in result.stderr
    assert "mvn could not fetch the Artemis 9.9.9 distribution" in result.stderr
    assert not (tmp_path / "build.log").exists()
