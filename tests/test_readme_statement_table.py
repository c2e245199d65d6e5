"""The README's per-document table of catalogued and checked statements is what
`scripts/not_checked.py --by-document` prints today: it went stale once (the Artemis clusters row
kept 74 / 71 / 7 of 7 client statements after CLU-DISC-11 and the real clients' cells landed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import not_checked  # noqa: E402


def test_the_readme_shows_the_table_the_script_prints():
    printed = subprocess.run([sys.executable, str(ROOT / "scripts" / "not_checked.py"), "--by-document"],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert not_checked.readme_table((ROOT / "README.md").read_text()) == printed.stdout.strip("\n"), (
        "README.md's statement table is stale: run `.venv/bin/python scripts/not_checked.py --by-document "
        "--update-readme`")


def test_the_table_is_replaced_between_its_markers_only():
    readme = f"intro\n{not_checked.TABLE_START}\n| old |\n{not_checked.TABLE_END}\nafter\n"
    updated = not_checked.with_readme_table(readme, "| new |")
    assert updated == f"intro\n{not_checked.TABLE_START}\n| new |\n{not_checked.TABLE_END}\nafter\n"
    assert not_checked.readme_table(updated) == "| new |"
    with pytest.raises(ValueError):
        not_checked.readme_table("a README without the markers")
