"""chaos.nemesis.container without an engine: the partition shapes as cuts (pure), and the nemesis
against a fake docker client (which rules it adds, that it removes exactly those, that every fault
heals at teardown and is recorded with its window)."""

from __future__ import annotations

import pytest

from chaos.history import History, read_history
from chaos.nemesis.base import NemesisError
from chaos.nemesis.container import ContainerPartitionNemesis, grudge
from conformance.targets.activemq.container import ActiveMQContainer
from conformance.targets.artemis.container import ArtemisContainer
from machinery.container import NetworkedContainer

NODES = ["A", "B", "C", "D", "E"]


def both(*pairs: str) -> set[tuple[str, str]]:
    out = set()
    for p in pairs:
        a, b = p.split("-")
        out |= {(a, b), (b, a)}
    return out


# ---------------------------------------------------------------- shapes


def test_isolate_cuts_one_node_from_all_others():
    assert grudge("isolate", ["A", "B", "C"], node="B") == both("B-A", "B-C")


def test_halves_default_split_puts_smaller_half_first():
    cuts = grudge("halves", NODES)
    assert cuts == both(*(f"{a}-{b}" for a in "AB" for b in "CDE"))


def test_halves_with_explicit_groups():
    assert grudge("halves", ["A", "B", "C"], groups=[["A", "C"], ["B"]]) == both("A-B", "C-B")


def test_bridge_node_sees_both_halves():
    cuts = grudge("bridge", NODES, bridge="C")
    assert not any("C" in cut for cut in cuts)  # the bridge talks to everyone
    assert cuts == both("A-D", "A-E", "B-D", "B-E")


def test_one_way_drops_only_one_direction():
    assert grudge("one-way", ["A", "B"], src=["A"], dst=["B"]) == {("A", "B")}


@pytest.mark.parametrize("shape, params, message", [
    ("isolate", {}, "needs node=NAME"),
    ("isolate", {"node": "Z"}, r"unknown node\(s\) \['Z'\]"),
    ("halves", {"groups": [["A", "B"], ["B"]]}, "both halves"),
    ("halves", {"groups": [["A"], []]}, "two non-empty groups"),
    ("bridge", {}, "at least 3 nodes"),
    ("one-way", {"src": ["A"]}, "needs src"),
    ("one-way", {"src": "A", "dst": "A"}, "in both src and dst"),
    ("ring", {}, "unknown partition shape 'ring'"),
])
def test_bad_shapes_say_what_is_wrong(shape, params, message):
    with pytest.raises(ValueError, match=message):
        grudge(shape, ["A", "B"], **params)


# ---------------------------------------------------------------- fake engine


class FakeContainer:
    def __init__(self, cid: str, ip: str, network: str) -> None:
        self.id = cid
        self.status = "running"
        self.rules: list[tuple[str, ...]] = []
        self.network = network
        self.attrs = {"NetworkSettings": {"Networks": {network: {"IPAddress": ip, "Aliases": [cid[:12], f"nob-{cid}"]}}}}
        self.fail_next_add = False

    def reload(self) -> None:
        pass

    def exec_run(self, argv):
        assert argv[:3] == ["iptables", "-w", "5"]
        action, spec = argv[3], tuple(argv[4:])
        if action == "-S":
            return 0, b"-P OUTPUT ACCEPT\n"
        if action == "-A":
            if self.fail_next_add:
                return 4, b"iptables: Permission denied (you must be root)."
            self.rules.append(spec)
            return 0, b""
        if action == "-D":
            if spec not in self.rules:
                return 1, b"iptables: Bad rule (does a matching rule exist in that chain?)."
            self.rules.remove(spec)
            return 0, b""
        raise AssertionError(argv)


class FakeNetwork:
    def __init__(self, name, containers):
        self.name = name
        self.containers = containers
        self.log: list[tuple] = []

    def disconnect(self, container):
        self.log.append(("disconnect", container.id))
        self.saved = container.attrs["NetworkSettings"]["Networks"].pop(self.name)

    def connect(self, container, aliases=None):
        self.log.append(("connect", container.id, tuple(aliases or ())))
        container.attrs["NetworkSettings"]["Networks"][self.name] = {**self.saved, "Aliases": list(aliases or [])}


class FakeDocker:
    def __init__(self, names):
        self.by_id = {f"id{n}": FakeContainer(f"id{n}", f"172.30.0.{i + 2}", "scn") for i, n in enumerate(names)}
        self.network = FakeNetwork("scn", self.by_id)
        self.containers = self
        self.networks = self

    def get(self, key):
        if key == "scn":
            return self.network
        if key not in self.by_id:
            raise LookupError(f"No such container: {key}")
        return self.by_id[key]


def make(tmp_path, names=("A", "B", "C")):
    docker = FakeDocker(names)
    history = History(tmp_path / "h.jsonl", run="r")
    nemesis = ContainerPartitionNemesis({n: f"id{n}" for n in names}, history, network="scn",
                                        client_factory=lambda: docker)
    return docker, history, nemesis


def test_partition_adds_input_and_output_mirror_rules_and_heal_removes_them(tmp_path):
    docker, history, nemesis = make(tmp_path, ("A", "B"))
    with nemesis:
        result = nemesis.invoke("partition", shape="one-way", src=["A"], dst=["B"])
        assert result["cuts"] == ["A->B"] and result["rules"] == 2
        assert docker.by_id["idB"].rules == [("INPUT", "-s", "172.30.0.2", "-j", "DROP")]
        assert docker.by_id["idA"].rules == [("OUTPUT", "-d", "172.30.0.3", "-j", "DROP")]
        healed = nemesis.heal()
        assert [w["fault"] for w in healed["fault_window"]] == ["partition"]
        assert all(not c.rules for c in docker.by_id.values())
    history.close()


def test_teardown_heals_a_partition_left_active_after_an_error(tmp_path):
    docker, history, nemesis = make(tmp_path)
    with pytest.raises(RuntimeError, match="experiment failed"):
        with nemesis:
            nemesis.invoke("partition", shape="isolate", node="A")
            assert sum(len(c.rules) for c in docker.by_id.values()) == 8  # 4 cuts x (INPUT + OUTPUT)
            raise RuntimeError("experiment failed")
    assert all(not c.rules for c in docker.by_id.values())
    history.close()
    events = read_history(tmp_path / "h.jsonl")
    assert all(e["process"] == "nemesis" for e in events)
    end = [e for e in events if e["f"] == "teardown" and e["value"]["phase"] == "end"][0]
    (window,) = end["value"]["fault_window"]
    assert window["fault"] == "partition" and window["start"] <= window["end"]


def test_half_applied_partition_is_undone_and_reported(tmp_path):
    docker, history, nemesis = make(tmp_path, ("A", "B"))
    docker.by_id["idB"].fail_next_add = True
    with nemesis:
        with pytest.raises(NemesisError, match="needs NET_ADMIN"):
            nemesis.invoke("partition", shape="halves")
        assert "partition" not in nemesis.active
        assert all(not c.rules for c in docker.by_id.values())
    history.close()


def test_second_partition_asks_to_heal_first(tmp_path):
    _, history, nemesis = make(tmp_path)
    with nemesis:
        nemesis.invoke("partition", shape="isolate", node="C")
        with pytest.raises(NemesisError, match="heal it first"):
            nemesis.invoke("partition", shape="isolate", node="A")
    history.close()


def test_disconnect_and_reconnect_keep_the_network_aliases(tmp_path):
    docker, history, nemesis = make(tmp_path)
    with nemesis:
        result = nemesis.invoke("disconnect", node="B")
        assert result["aliases"] == ["nob-idB"] and result["address"] == "172.30.0.3"
        with pytest.raises(NemesisError, match="no address on network"):
            nemesis.address("B")
        with pytest.raises(NemesisError, match="is not disconnected"):
            nemesis.invoke("reconnect", node="A")
        nemesis.invoke("reconnect", node="B")
        assert nemesis.address("B") == "172.30.0.3"
        nemesis.invoke("disconnect", node="C")
    # teardown reconnected C
    assert docker.network.log[-1] == ("connect", "idC", ("nob-idC",))
    history.close()


def test_removed_container_needs_no_heal(tmp_path):
    docker, history, nemesis = make(tmp_path, ("A", "B"))
    with nemesis:
        nemesis.invoke("partition", shape="halves")
        del docker.by_id["idA"]  # the broker's container was removed (crash test, cleanup)
    assert not docker.by_id["idB"].rules
    history.close()


def test_needs_two_nodes_and_a_network():
    with pytest.raises(ValueError, match="at least two containers"):
        ContainerPartitionNemesis({"A": "idA"}, network="n")
    with pytest.raises(ValueError, match="network=NAME"):
        ContainerPartitionNemesis({"A": "idA", "B": "idB"})


class FakeLauncher:
    """A launcher as the nemesis sees it (`machinery.container.NetworkedContainer`)."""

    def __init__(self, container_id: str) -> None:
        self.container_id = container_id
        self.network_name = "scn"
        self.refreshed = 0

    def refresh_ports(self) -> None:
        self.refreshed += 1


def test_launchers_give_the_network_and_reread_their_ports_after_a_reconnect(tmp_path):
    docker = FakeDocker(("A", "B"))
    launchers = {n: FakeLauncher(f"id{n}") for n in ("A", "B")}
    assert all(isinstance(n, NetworkedContainer) for n in launchers.values())
    history = History(tmp_path / "h.jsonl", run="r")
    with ContainerPartitionNemesis(launchers, history, client_factory=lambda: docker) as nemesis:
        assert nemesis.network_name == "scn"
        nemesis.invoke("disconnect", node="B")
        assert launchers["B"].refreshed == 0
        nemesis.invoke("reconnect", node="B")
        assert (launchers["A"].refreshed, launchers["B"].refreshed) == (0, 1)
    history.close()


def test_both_container_launchers_declare_what_the_nemesis_needs():
    # container_id is set per instance; the rest is declared on the classes
    for launcher in (ActiveMQContainer, ArtemisContainer):
        assert callable(launcher.refresh_ports) and isinstance(launcher.network_name, property), launcher
