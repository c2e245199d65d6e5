"""A history's header, parsed once into a typed record: what the judges read of the experiment.

The header is the history's first line (chaos/history.py, "Harness records"): the experiment file
as loaded, as JSON, and the run's checker list (reports/checker_list.py). It was written by the
version of the harness that ran, so it is read leniently: a key a newer harness writes is ignored,
a key an older one did not write takes its default below (a history from before seeds, checker
lists or topologies existed), and a value of the wrong type counts as absent. It is not validated
against today's experiment model (chaos/experiment_file.py): a history stays readable when the
file format moves on.

Every reader of the header (reports/run_record.py `RunRecord`, and through it the checkers'
``applies`` and options) reads this record, never the dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaos.experiment_file import WORKLOAD_KINDS


@dataclass(frozen=True)
class ClusterSettings:
    """A cluster topology's settings the judges need, each the file's value or, where the file left
    it unset, the documented default the brokers applied (conformance/topology.py
    CLUSTER_CONNECTION_DEFAULTS)."""

    #: message_load_balancing: the redistribution checker's ON_DEMAND rule needs it
    load_balancing: str
    #: redistribution_delay_ms (-1: never)
    redistribution_delay_ms: int


@dataclass(frozen=True)
class ExperimentHeader:
    """The experiment as the history's header records it."""

    name: str | None = None
    #: the seed the run's schedule was drawn from; None in a header written before runs had one
    seed: int | None = None
    #: the [checkers] keys the file gave (the file format's defaults are filled in by the reader,
    #: reports/run_record.py, from today's declaration)
    checkers: dict[str, Any] = field(default_factory=dict)
    #: the workload's destination
    destination: str | None = None
    #: a workload that fans out to subscribers (a topic: `WorkloadKind.fans_out`)
    topic: bool = False
    #: the [[nemesis]] entries' kinds, in file order
    nemesis_kinds: tuple[str, ...] = ()
    #: a cluster topology's settings; None for every other topology (and a header without one)
    cluster: ClusterSettings | None = None
    #: the run's checker list as written (reports/checker_list.py parses it); None in a header
    #: written before runs wrote one
    checker_list: dict | None = None

    @classmethod
    def parse(cls, value: object) -> "ExperimentHeader | None":
        """The header of an experiment record's ``value`` (``{"format", "experiment", "checkers"}``);
        None when it carries no experiment (not a header this harness wrote)."""
        if not isinstance(value, dict) or not isinstance(value.get("experiment"), dict):
            return None
        experiment: dict = value["experiment"]
        workload = _table(experiment, "workload")
        kind = WORKLOAD_KINDS.get(workload.get("kind")) if isinstance(workload.get("kind"), str) else None
        name, seed, destination = experiment.get("name"), experiment.get("seed"), workload.get("destination")
        return cls(
            name=None if name is None else str(name),
            seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
            checkers=_table(experiment, "checkers"),
            destination=destination if isinstance(destination, str) else None,
            topic=kind is not None and kind.fans_out,
            nemesis_kinds=tuple(str(n.get("kind")) for n in experiment.get("nemesis") or [] if isinstance(n, dict)),
            cluster=_cluster_settings(_table(experiment, "topology")),
            checker_list=value["checkers"] if isinstance(value.get("checkers"), dict) else None,
        )


def _table(experiment: dict, name: str) -> dict:
    table = experiment.get(name)
    return table if isinstance(table, dict) else {}


def _cluster_settings(topology: dict) -> ClusterSettings | None:
    # the history's one reading of the topology's kind (the experiment file's parser declared it
    # when the run started): only a cluster has these settings
    if topology.get("kind") != "cluster":
        return None
    from conformance.topology import CLUSTER_CONNECTION_DEFAULTS

    def setting(name: str):
        given = topology.get(name)
        return CLUSTER_CONNECTION_DEFAULTS[name] if given is None else given

    return ClusterSettings(setting("message_load_balancing"), setting("redistribution_delay_ms"))
