"""No branch on a topology's kind by name outside the place it is parsed (issue 27, "Done when": no
branch on ``topology.kind`` strings outside the one place each is parsed).

The experiment file's [topology] is a tagged union (chaos/experiment_file.py): its `kind` picks the
shape when the file is read, and from then on the harness asks the shape (`node_names`,
`conformance_topology`, `check_nemesis`, ``one_serves_at_a_time``...) or dispatches on its class
(chaos/experiment.py `SHAPE_RUNS`). Comparing a section's or a `Topology`'s ``kind`` with
"cluster" declares a second time what a cluster is, and the next shape added would have to be
found there too. The scan (tests/branch_scan.py) reads the source with `ast`.

The broker-neutral model has its shape too (conformance/topology.py `Topology.shape`, told from
its fields), and each target launches by it from one table (conformance/targets/runtime/
shape_launch.py); ``Topology.kind`` is the shape's name, for messages.

Allowed: reports/history_header.py, where a history's header, written by whichever harness
version ran (an old one wrote every key for every kind), is read once into a typed record.
"""

from __future__ import annotations

from tests.branch_scan import ROOT, Scanned, branches_in_tree
from tests.chaos.test_kind_dispatch import reads_kind

#: every topology kind's name: the experiment file's shapes and the broker-neutral model's kinds
#: (conformance/topology.py `Topology.kind`, which tells a database store from a file one)
TOPOLOGY_KINDS = frozenset({"single", "shared-store", "jdbc-store", "network", "cluster"})
#: the packages that describe, launch, run or judge a deployment
SCANNED = ("chaos", "conformance", "machinery", "reports", "brokerconf")
#: where a kind is parsed (see the module's docstring)
ALLOWED = {
    ROOT / "reports" / "history_header.py",
}


def scanned_files():
    return [path for package in SCANNED for path in sorted((ROOT / package).rglob("*.py"))
            if path not in ALLOWED and "tests" not in path.relative_to(ROOT).parts]


def test_no_module_but_the_parsers_branches_on_a_topology_kind():
    files = scanned_files()
    assert len(files) > 100, f"found only {len(files)} modules under {ROOT}: wrong root?"
    wrong = branches_in_tree(files, reads_kind, TOPOLOGY_KINDS)
    assert not wrong, ("branches on a topology kind's name outside the places it is parsed (ask the [topology] "
                       "shape, chaos/experiment_file.py, or dispatch on its class):\n" + "\n".join(wrong))


def test_the_allowance_is_the_history_reader_alone():
    # the harness, the model and the targets are clean: only the history's reader is allowed
    assert ALLOWED == {ROOT / "reports" / "history_header.py"}
    assert all(path.is_file() for path in ALLOWED), "an allowed module moved: drop or update its entry"


def test_the_scan_finds_every_shape_of_such_a_branch():
    # The check must be able to fail: the shapes the harness used to branch in, and near misses.
    source = '''
MANY = ("network", "cluster")
def run(exp, topology, record, target, workload):
    if exp.topology.kind == "single":                         # 4
        pass
    if topology.kind in ("shared-store", "jdbc-store"):       # 6
        pass
    cluster = (record.get("topology") or {}).get("kind") == "cluster"   # 8
    if self.kind in MANY:                                      # 9
        pass
    match topology.kind:
        case "network":                                        # 12
            pass
    if target.kind != "artemis" or workload.kind == "topic":   # other kinds: not a topology's
        pass
    if isinstance(exp.topology, ClusterTopology) or exp.topology.one_serves_at_a_time:   # the shape: allowed
        pass
    return f"topology.{topology.kind}"                         # named, not branched on
'''
    found = [line.split(":")[0] for line in Scanned(source).branches(reads_kind, TOPOLOGY_KINDS)]
    assert found == ["4", "6", "8", "9", "12"]
