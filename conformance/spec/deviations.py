"""Known deviations: where a real broker does not do what its own documentation says.

One TOML file per area in ``conformance/known_deviations/``::

    [[deviation]]
    target = "activemq"                 # target kind
    spec = "SLOW-EVICT-2"               # catalogue ID the broker breaks
    test = "test_oldest_evicted_first"  # optional: only this test function
    protocol = "amqp"                   # optional: only this protocol's parametrization
    summary = "what the broker does instead, in one line"
    evidence = \"\"\"configuration excerpt, observed messages or counters, broker log lines\"\"\"

The plugin marks each matching test a *strict* xfail for that target kind: the test must keep
failing there, so a broker that starts conforming turns the run red and the entry is removed.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DEVIATIONS_DIR = Path(__file__).resolve().parents[1] / "known_deviations"


class DeviationError(ValueError):
    pass


@dataclass(frozen=True)
class Deviation:
    target: str
    spec: str
    summary: str
    evidence: str
    test: str | None = None
    source: str = ""
    protocol: str | None = None

    def matches(self, kind: str, specs: list[str], test_name: str, protocol: str | None = None) -> bool:
        return (kind == self.target and self.spec in specs and (self.test is None or self.test == test_name)
                and (self.protocol is None or self.protocol == protocol))


def load_deviations(directory: Path, catalogue: dict) -> list[Deviation]:
    deviations: list[Deviation] = []
    for path in sorted(Path(directory).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise DeviationError(f"{path}: not valid TOML: {exc}") from None
        for n, raw in enumerate(data.get("deviation", []), 1):
            where = f"{path.name}: deviation #{n}"
            unknown = set(raw) - {"target", "spec", "test", "protocol", "summary", "evidence"}
            if unknown:
                raise DeviationError(f"{where}: unknown key(s) {sorted(unknown)}")
            for key in ("target", "spec", "summary", "evidence"):
                if not str(raw.get(key, "")).strip():
                    raise DeviationError(f"{where}: missing {key!r} (a deviation needs its evidence)")
            if raw["spec"] not in catalogue:
                raise DeviationError(f"{where}: spec {raw['spec']!r} is not in the catalogue")
            deviations.append(Deviation(raw["target"], raw["spec"], raw["summary"].strip(), raw["evidence"].strip(),
                                        raw.get("test"), path.name, raw.get("protocol")))
    return deviations
