"""The spec catalogue: every checkable statement of the documents, with a stable ID.

One TOML file per document in this directory::

    document = "artemis-message-grouping.md"       # file in ../shared/spec/, or "core" rules
    title = "Artemis message grouping"

    [[statement]]
    id = "GRP-PIN-1"                                # stable; used in test markers and reports
    section = "Message Grouping"                    # the heading it comes from
    paraphrase = "..."                              # our own words, never the document's
    applies_to = ["reference", "artemis", "activemq"]   # target kinds the rule is claimed for
    note = "..."                                    # optional: caveats, Classic differences
    not_observable = "..."                          # optional: why no client of ours can see it
    observable_with = ["artemis-core-client 2.40.0"]  # optional, client statements: the real clients
                                                    # (client subjects) whose tests do observe it
    subject = "client"                              # optional: who the statement is about, "broker"
                                                    # (default) or "client" (a client library's
                                                    # behaviour, e.g. the failover transport)

    [[uncatalogued]]                                # a checkable claim of the document with no ID yet
    section = "..."
    summary = "..."                                 # our own words, a line
    why = "..."                                     # why it has no ID yet

The ``[[uncatalogued]]`` rows make the per-document coverage honest: a document's checkable
statements are its catalogued statements plus these (``scripts/not_checked.py`` reports both).

A test ties itself to statements with ``@pytest.mark.spec("GRP-PIN-1", ...)``; the plugin
refuses IDs that are not catalogued, and the report shows per target how many catalogued
statements were checked and how many passed.

A statement's ``subject`` says whose behaviour it describes. A *client* statement (a failover
transport option, a client-side load-balancing policy) is checked by exercising a client library
against some broker; its verdict belongs to that client, not to the broker it ran against, so a
test tied to one names the client it exercised (``@pytest.mark.client_subject("...")``) and the
matrix books it under a column of that client (conformance/matrix.py).

A client statement's ``not_observable`` reason speaks for brokerconf's own clients; where a real
client library does observe it (Artemis's Core client through the Java driver), ``observable_with``
names that client's subject, and its column then shows a verdict or "not checked", never the reason.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOGUE_DIR = Path(__file__).resolve().parent
ID_PATTERN = re.compile(r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)*-[0-9]+$")
KNOWN_KINDS = frozenset({"reference", "activemq", "artemis", "rabbitmq", "mosquitto"})
SUBJECTS = ("broker", "client")


class CatalogueError(ValueError):
    pass


@dataclass(frozen=True)
class Statement:
    id: str
    document: str
    title: str
    section: str
    paraphrase: str
    applies_to: frozenset[str]
    note: str = ""
    #: why none of our clients can observe the statement (an OpenWire-only command, a product that
    #: is not installed): it stays catalogued, and the matrix says not applicable with this reason
    not_observable: str = ""
    #: whose behaviour the statement describes: "broker" or "client" (see the module docstring)
    subject: str = "broker"
    #: client subjects that observe a client statement the not_observable reason says ours cannot
    observable_with: frozenset[str] = frozenset()

    @property
    def about_client(self) -> bool:
        return self.subject == "client"

    def not_observable_by(self, client_subject: str) -> str:
        """The not_observable reason as it holds for ``client_subject``: none for a client that observes it."""
        return "" if client_subject in self.observable_with else self.not_observable

    def applies(self, kind: str) -> bool:
        # An external broker is checked against every rule: the user chose to point us at it.
        return kind == "external" or kind in self.applies_to

    def citation(self) -> str:
        return f"{self.document}, \u00a7 {self.section}"


def _load_file(path: Path) -> list[Statement]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path.name}: not valid TOML: {exc}") from None
    document, title = data.get("document"), data.get("title", "")
    if not document:
        raise CatalogueError(f"{path.name}: missing top-level 'document'")
    unknown_top = set(data) - {"document", "title", "statement", "uncatalogued"}
    if unknown_top:
        raise CatalogueError(f"{path.name}: unknown top-level key(s) {sorted(unknown_top)}")
    out = []
    for n, raw in enumerate(data.get("statement", []), 1):
        where = f"{path.name}: statement #{n}"
        unknown = set(raw) - {"id", "section", "paraphrase", "applies_to", "note", "not_observable", "subject",
                              "observable_with"}
        if unknown:
            raise CatalogueError(f"{where}: unknown key(s) {sorted(unknown)}")
        for key in ("id", "section", "paraphrase", "applies_to"):
            if not raw.get(key):
                raise CatalogueError(f"{where}: missing {key!r}")
        if not ID_PATTERN.match(raw["id"]):
            raise CatalogueError(f"{where}: id {raw['id']!r} is not like 'GRP-PIN-1'")
        kinds = frozenset(raw["applies_to"])
        if kinds - KNOWN_KINDS:
            raise CatalogueError(f"{where} ({raw['id']}): unknown target kind(s) {sorted(kinds - KNOWN_KINDS)}")
        subject = raw.get("subject", "broker")
        if subject not in SUBJECTS:
            raise CatalogueError(f"{where} ({raw['id']}): subject {subject!r} is not one of {list(SUBJECTS)}")
        observable_with = raw.get("observable_with", [])
        if observable_with and (subject != "client" or not raw.get("not_observable")
                                or not all(isinstance(c, str) and c.strip() for c in observable_with)):
            raise CatalogueError(f"{where} ({raw['id']}): observable_with lists client subjects (non-empty "
                                 f"strings) on a client statement with a not_observable reason")
        out.append(Statement(raw["id"], document, title, raw["section"], raw["paraphrase"].strip(),
                             kinds, raw.get("note", "").strip(), " ".join(raw.get("not_observable", "").split()),
                             subject, frozenset(observable_with)))
    return out


@lru_cache(maxsize=None)
def load_catalogue(directory: Path = CATALOGUE_DIR) -> dict[str, Statement]:
    """Every statement of every ``*.toml`` in ``directory``, by ID; duplicate IDs are an error."""
    statements: dict[str, Statement] = {}
    for path in sorted(directory.glob("*.toml")):
        for statement in _load_file(path):
            if statement.id in statements:
                raise CatalogueError(f"{path.name}: duplicate id {statement.id} "
                                     f"(also in {statements[statement.id].document})")
            statements[statement.id] = statement
    return statements


@dataclass(frozen=True)
class Uncatalogued:
    """A checkable claim of a document that has no statement ID yet (see the module docstring)."""
    document: str
    section: str
    summary: str
    why: str


def _load_uncatalogued(path: Path) -> list[Uncatalogued]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out = []
    for n, raw in enumerate(data.get("uncatalogued", []), 1):
        where = f"{path.name}: uncatalogued #{n}"
        if set(raw) != {"section", "summary", "why"} or not all(raw.values()):
            raise CatalogueError(f"{where}: needs exactly 'section', 'summary' and 'why', each non-empty")
        out.append(Uncatalogued(data["document"], raw["section"], " ".join(raw["summary"].split()),
                                " ".join(raw["why"].split())))
    return out


@lru_cache(maxsize=None)
def load_uncatalogued(directory: Path = CATALOGUE_DIR) -> tuple[Uncatalogued, ...]:
    """Every ``[[uncatalogued]]`` row of every ``*.toml`` in ``directory``, in file order."""
    _ = load_catalogue(directory)  # the same files, validated once
    return tuple(row for path in sorted(directory.glob("*.toml")) for row in _load_uncatalogued(path))
