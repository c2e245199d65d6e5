"""The experiment file's [topology] as a tagged union (issue 27): one shape per kind, each with only
its own keys, and every shipped experiment building what it built before the union existed.

``fixtures/experiment_topologies_before.json`` was recorded once with the flat section's code (commit
9b38cfb, before this change): for each file in chaos/experiments/, its node names, the broker-neutral
`Topology` chaos/topology.py built from it (with its kind and capability), and the section as the
history's header recorded it (``exp.model_dump(mode="json")["topology"]``). ClusterConnection's
``ttl_check_interval_ms``, added after the recording, was written into it unset (None), which is
what every shipped experiment builds: none sets it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from pydantic import BaseModel

import chaos
from chaos.experiment import SHAPE_RUNS
from chaos.experiment_file import (TOPOLOGY_SHAPES, ClusterTopology, Experiment, ExperimentError, NetworkTopology,
                                   SharedStoreTopology, SingleTopology, load_experiment, with_overrides)
from chaos.topology import topology_of
from conformance.topology import capability_of
from reports.check_plan import checker_list_for
from reports.history_header import ExperimentHeader

EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"
BEFORE = json.loads((Path(__file__).parent / "fixtures" / "experiment_topologies_before.json").read_text())


def plain(value):
    """A built `Topology` (dataclasses, pydantic models, tuples) as JSON-like data, as recorded."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseModel):
        return {k: plain(v) for k, v in value.model_dump().items()}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def test_the_record_covers_every_shipped_experiment():
    assert sorted(BEFORE) == sorted(p.name for p in EXPERIMENTS.glob("*.toml"))
    # every shape is among them, so the comparison below exercises each
    assert {BEFORE[name]["dumped_topology"]["kind"] for name in BEFORE} == {s.kind_name() for s in TOPOLOGY_SHAPES}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_shipped_experiment_builds_the_topology_it_built_before(name):
    before = BEFORE[name]
    exp = load_experiment(EXPERIMENTS / name)
    topology = topology_of(exp)
    assert exp.topology.node_names == before["node_names"]
    assert (topology.kind, capability_of(topology)) == (before["kind"], before["capability"])
    assert plain(topology) == before["topology"]


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_history_header_reads_the_same_for_old_readers(name):
    """The header now records the shape's own keys only: each has the value the flat section
    recorded, and the readers of the header (reports/history_header.py, the checker list the run
    writes) make of it what they made of the flat one."""
    old = BEFORE[name]["dumped_topology"]
    dumped = load_experiment(EXPERIMENTS / name).model_dump(mode="json")
    new = dumped["topology"]
    assert new["kind"] == old["kind"]
    assert {key: old[key] for key in new} == new
    as_before = {**dumped, "topology": old}
    assert ExperimentHeader.parse({"experiment": dumped}) == ExperimentHeader.parse({"experiment": as_before})
    assert checker_list_for(dumped) == checker_list_for(as_before)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_overrides_round_trip_through_the_dumped_section(name):
    # `with_overrides` validates `model_dump()` again: the shape must come back as itself
    exp = load_experiment(EXPERIMENTS / name)
    assert with_overrides(exp) == exp


def test_each_shape_has_only_its_own_keys():
    fields = {shape: set(shape.model_fields) for shape in TOPOLOGY_SHAPES}
    assert fields[SingleTopology] == {"kind"}
    assert "store" in fields[SharedStoreTopology] and "bridges" not in fields[SharedStoreTopology]
    assert "bridges" in fields[NetworkTopology] and "message_load_balancing" not in fields[NetworkTopology]
    assert "message_load_balancing" in fields[ClusterTopology] and "store" not in fields[ClusterTopology]


def test_a_section_without_kind_is_a_single_broker():
    exp = Experiment.model_validate({"name": "x", "duration_s": 5, "topology": {}})
    assert isinstance(exp.topology, SingleTopology) and exp.topology.node_names == ["A"]
    assert isinstance(Experiment.model_validate({"name": "x", "duration_s": 5}).topology, SingleTopology)


@pytest.mark.parametrize("topology, message", [
    ('kind = "single"\nnodes = 3', 'invalid value for \'topology\': nodes = 3 needs kind = "shared-store", "network" '
                                   'or "cluster", not \'single\''),
    ('kind = "network"\nstore = "nfs"', 'store = "nfs" needs kind = "shared-store", not \'network\''),
    ('kind = "shared-store"\nbridges = ["A->B"]', 'bridges = ["A->B"] needs kind = "network", not \'shared-store\''),
    ('kind = "network"\nconsumer_nodes = ["B"]', 'consumer_nodes = ["B"] needs kind = "cluster", not \'network\''),
    ('kind = "cluster"\nconsumer_node = "B"', 'consumer_node = "B" needs kind = "network", not \'cluster\''),
    ('kind = "ring"', 'kind should be "single", "shared-store", "network" or "cluster"'),
    # a key no shape has: unknown, with the shape's nearest key
    ('kind = "shared-store"\nstores = "nfs"', "unknown key 'stores' in topology: did you mean 'store'?"),
    # a shape's own value, named as the file spells it (no kind in the path)
    ('kind = "shared-store"\nstore = "postgres"', "invalid value for 'topology.store'"),
])
def test_a_key_the_shape_does_not_have_is_refused_naming_the_key_and_the_kinds_that_have_it(tmp_path, topology,
                                                                                             message):
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "bad"\nduration_s = 5\n[topology]\n{topology}\n')
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    assert message in str(info.value)


def test_an_override_of_a_key_the_shape_does_not_have_is_refused_by_name():
    exp = load_experiment(EXPERIMENTS / "reference-kill-restart.toml")
    assert isinstance(exp.topology, SingleTopology)
    with pytest.raises(ExperimentError, match=r"store = \"nfs\" needs kind = \"shared-store\", not 'single'"):
        with_overrides(exp, settings=['topology.store="nfs"'])
    # changing the kind itself picks the other shape, with its defaults
    changed = with_overrides(exp, settings=['topology.kind="shared-store"'])
    assert isinstance(changed.topology, SharedStoreTopology) and changed.topology.node_names == ["A", "B"]


def test_the_command_line_refuses_a_key_of_another_shape_as_a_usage_error(tmp_path):
    from tests.brokerconf.test_cli import _brokerconf

    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nduration_s = 5\n[topology]\nkind = "cluster"\nstore = "nfs"\n')
    proc = _brokerconf("chaos", "run", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'store = "nfs" needs kind = "shared-store", not \'cluster\'' in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_runner_has_one_entry_per_shape():
    # chaos/experiment.py dispatches on the section's class: a shape without its entry could not run
    assert set(SHAPE_RUNS) == set(TOPOLOGY_SHAPES)


def test_what_the_runner_asks_each_shape():
    single, store, network, cluster = (shape() for shape in TOPOLOGY_SHAPES)
    assert [s.one_serves_at_a_time for s in (single, store, network, cluster)] == [True, True, False, False]
    assert [s.launched_by_every_target for s in (single, store, network, cluster)] == [True, False, False, False]
    assert [s.fault_link for s in (single, store, network, cluster)] == ["clients", "clients", "bridges", "cluster"]
    assert SharedStoreTopology(store="nfs").on_simulated_nfs and not store.on_simulated_nfs
    assert store.process_fault_nodes() == ["A", "B", "master"] and network.process_fault_nodes() == ["A", "B"]
