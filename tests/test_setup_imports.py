"""The set-up (scripts/bootstrap.sh) runs the Maven fetches and the Go build with the venv's
interpreter while pip is still filling the venv: on a fresh machine those steps start a minute
earlier that way. So the modules it runs then must import with Python's standard library alone.
``python -S`` leaves site-packages (the venv's and the system's) off the path, as an empty venv has none."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: what bootstrap.sh runs before pip has finished (the ``-m`` modules of its background chain and the Go build,
#: and the package install itself, which runs in the empty venv)
BEFORE_PIP = ("conformance.targets.artemis.dist", "conformance.targets.activemq.amqp",
              "conformance.clients.java_build", "machinery.faultproxy.install", "machinery.package_install")


@pytest.mark.parametrize("module", BEFORE_PIP)
def test_a_step_run_beside_pip_needs_only_the_standard_library(module):
    done = subprocess.run([sys.executable, "-S", "-c", f"import {module}"], cwd=REPO, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, f"{module} needs more than the standard library:\n{done.stderr[-2000:]}"


def test_the_list_names_every_module_the_set_up_runs_beside_pip():
    """A step moved into the background chain of bootstrap.sh must be added to BEFORE_PIP."""
    script = (REPO / "scripts" / "bootstrap.sh").read_text()
    # from the package install's start to the first step after it has ended
    chain = script[script.index("    _bc_install_packages &\n"):script.index("\n_bc_check_amqp_tls\n")]
    functions = [name for name in ("_bc_ensure_artemis", "_bc_ensure_activemq_amqp", "_bc_ensure_java_clients",
                                   "_bc_ensure_toxiproxy") if name in chain]
    assert len(functions) == 4, chain
    for function in functions:
        body = script[script.index(f"{function}() {{"):]
        body = body[:body.index("\n}\n")]
        modules = re.findall(r"\.venv/bin/python (?:-m ([\w.]+)|-c '[^']*from ([\w.]+) import)", body)
        for module in {name for pair in modules for name in pair if name}:
            assert module in BEFORE_PIP, f"{function} runs {module} beside pip; add it to BEFORE_PIP"
        assert modules, f"{function} runs no Python module any more; update this test"
