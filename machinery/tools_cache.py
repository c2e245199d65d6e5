"""Where pinned downloads live and how they are checked, for every installer of the project
(Artemis distribution, ActiveMQ's AMQP transport, toxiproxy-server).

Versions and digests are pinned in ``pins.toml`` beside this file; what is fetched goes under
``.tools/`` in the checkout (git-ignored), or wherever ``$BROKERCONF_TOOLS_DIR`` points (tests, a
cache shared between checkouts).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS_FILE = Path(__file__).with_name("pins.toml")
TOOLS_DIR = Path(os.environ.get("BROKERCONF_TOOLS_DIR", ROOT / ".tools"))


def sha512_of(path: Path) -> str:
    """The file's sha512, hex, read in 1 MiB blocks (archives are tens of MB)."""
    digest = hashlib.sha512()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
