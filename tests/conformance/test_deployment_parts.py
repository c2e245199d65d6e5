"""The launched deployment's contract is kept: every launcher claims what it implements, implements
what it claims, and keeps no stub (issue 27, "no getattr on the deployment; no stubs in the
contract").

The core (`Cluster`, `Node`, conformance/topology.py) is what every launched deployment has; the
parts (conformance/deployment.py) are what only some have, and a launcher claims one by naming it
among its bases. Read from the classes themselves (no broker is started):

* a class that claims a Protocol defines every member of it: a method or property found on the
  Protocol's own body (which returns None and does nothing) is a claim not kept;
* a class that has every method of a Protocol claims it, so that asking for a part
  (``part(deployment, Renaming)``) and reading a launcher's bases tell the same story;
* no class implementing the core or a part has a public method that only raises: a deployment
  that cannot do something does not claim that part (the three ``rename_connector`` stubs of
  single brokers and shared stores, and the clusters' ones, were such methods);
* no suite asks a deployment, node, handle or target for a member by name (``getattr`` /
  ``hasattr``): what it needs is in the core, a part, or the handle's and target's contracts
  (conformance/targets/base.py). Read from the suites' source (an AST scan).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from pathlib import Path
from typing import Protocol

import pytest

import conformance.targets
from conformance.deployment import (DEPLOYMENT_PARTS, NODE_PARTS, Formation, Forwarding, MissingPart,
                                    NativeListener, Renaming, SharedStorage, part, require)
from conformance.topology import Cluster, Node

CORE: tuple[type, ...] = (Cluster, Node)
CONTRACT: tuple[type, ...] = CORE + DEPLOYMENT_PARTS + NODE_PARTS

#: what typing puts into every Protocol class: not members of the contract
_TYPING_NAMES = {"__init__", "__subclasshook__", "__init_subclass__", "__class_getitem__", "__parameters__",
                 "__orig_bases__", "__abstractmethods__", "__protocol_attrs__", "__non_callable_proto_members__"}


def launcher_classes(package=conformance.targets) -> list[type]:
    """Every class defined in a module under ``package`` (each module imported), Protocols aside."""
    found = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if cls.__module__ == module.__name__ and not _is_protocol(cls)]
    return found


def _is_protocol(cls: type) -> bool:
    return cls is Protocol or bool(cls.__dict__.get("_is_protocol", False))


def methods_of(protocol: type) -> set[str]:
    """The methods and properties ``protocol`` declares (its own and its Protocol bases')."""
    names = set()
    for base in protocol.__mro__:
        if base is Protocol or not _is_protocol(base):
            continue
        names |= {name for name, value in vars(base).items()
                  if name not in _TYPING_NAMES and (not name.startswith("_") or name in ("__getitem__",))
                  and (inspect.isfunction(value) or isinstance(value, property))}
    return names


def data_of(protocol: type) -> set[str]:
    """The data members ``protocol`` declares (annotated names without a body)."""
    names = set()
    for base in protocol.__mro__:
        if base is not Protocol and _is_protocol(base):
            names |= set(vars(base).get("__annotations__", {}))
    return names


def defining_class(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO whose body defines ``name`` (None: none does)."""
    return next((klass for klass in cls.__mro__ if name in vars(klass)), None)


def assigned_on_self(cls: type) -> set[str]:
    """Names the implementing classes of ``cls`` set on ``self`` or declare in their bodies."""
    names = set()
    for klass in cls.__mro__:
        if klass is object or _is_protocol(klass):
            continue
        names |= set(vars(klass)) | set(vars(klass).get("__annotations__", {}))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) \
                            and element.value.id == "self":
                        names.add(element.attr)
    return names


def unkept_claims(cls: type) -> list[str]:
    """Members of the Protocols ``cls`` claims that it does not define itself."""
    problems = []
    for protocol in (p for p in CONTRACT if p in cls.__mro__):
        for name in sorted(methods_of(protocol)):
            owner = defining_class(cls, name)
            if owner is None or _is_protocol(owner):
                problems.append(f"{cls.__qualname__} claims {protocol.__name__} but does not define {name}")
        missing = data_of(protocol) - assigned_on_self(cls)
        problems += [f"{cls.__qualname__} claims {protocol.__name__} but never sets {name}" for name in sorted(missing)]
    return problems


def has_every_method(cls: type, protocol: type) -> bool:
    return all((owner := defining_class(cls, name)) is not None and not _is_protocol(owner)
               for name in methods_of(protocol))


def unclaimed(cls: type) -> list[str]:
    """The Protocols whose every method ``cls`` has without naming the Protocol among its bases."""
    return [f"{cls.__qualname__} has every method of {p.__name__} but does not claim it"
            for p in CONTRACT if p not in cls.__mro__ and has_every_method(cls, p)]


def only_raises(function) -> bool:
    """Whether ``function``'s body, its docstring aside, is one ``raise`` (or does nothing: ``...``,
    ``pass``, what a Protocol's body copied into a launcher would be)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError):
        return False
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) != 1:
        return False
    only = body[0]
    return isinstance(only, (ast.Raise, ast.Pass)) or (
        isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant) and only.value.value is Ellipsis)


def stubs(cls: type) -> list[str]:
    """Public methods of a class implementing the contract that only raise."""
    if not any(p in cls.__mro__ or has_every_method(cls, p) for p in CONTRACT):
        return []
    found = []
    for name in sorted({name for klass in cls.__mro__ for name in vars(klass) if not name.startswith("_")}):
        owner = defining_class(cls, name)  # the method that runs, not one a subclass overrides
        if owner is object or _is_protocol(owner):
            continue
        value = vars(owner)[name]
        function = value.fget if isinstance(value, property) else value
        if inspect.isfunction(function) and only_raises(function):
            found.append(f"{cls.__qualname__}.{name} (defined on {owner.__qualname__}) only raises")
    return found


def contract_problems(classes: list[type]) -> list[str]:
    return sorted({problem for cls in classes for problem in unkept_claims(cls) + unclaimed(cls) + stubs(cls)})


# --------------------------------------------------------------------------- the launchers


def test_every_launcher_keeps_its_claims_claims_what_it_has_and_keeps_no_stub():
    classes = launcher_classes()
    problems = contract_problems(classes)
    assert not problems, "the launched deployment's contract is broken:\n" + "\n".join(problems)


def test_the_walk_sees_the_launchers_and_their_parts():
    # the check above must have something to check: the launchers of each shape are found, and
    # each part is claimed by the deployments that have it (and only by them)
    classes = {cls.__qualname__: cls for cls in launcher_classes()}
    claims = {name: {p.__name__ for p in CONTRACT if p in cls.__mro__} for name, cls in classes.items()}
    assert claims["ActiveMQNetwork"] == claims["ReferenceNetwork"] == {"Cluster", "Renaming"}
    assert claims["ArtemisCluster"] == claims["ReferenceCluster"] == {"Cluster", "Formation"}
    assert claims["SharedStoreCluster"] == claims["SharedStoreGroup"] == {"Cluster", "SharedStorage"}
    assert claims["SingleNodeCluster"] == {"Cluster"}
    assert claims["ReferenceClusterNode"] == {"Node", "Forwarding", "InFlight"}
    assert claims["ArtemisClusterNode"] == {"Node", "Forwarding", "NativeListener"}
    assert claims["NetworkNode"] == {"Node", "InFlight", "NativeListener"} and claims["ProcessNode"] == {"Node"}
    assert claims["ActiveMQNode"] == claims["ArtemisNode"] == {"Node", "NativeListener"}


def test_part_answers_from_the_launchers_themselves(tmp_path):
    # real launcher objects, made and never started: the isinstance check of `part` sees the
    # members a launcher sets in its constructor (a shared store's rig, lock file and store)
    from conformance.targets.reference.clustering import ReferenceCluster
    from conformance.targets.reference.network import ReferenceNetwork
    from conformance.targets.runtime.shared_group import SharedStoreCluster
    from conformance.topology import Bridge, ClusterConnection, SharedStore, Topology

    cluster = ReferenceCluster(Topology(("A", "B"), cluster=ClusterConnection()))
    network = ReferenceNetwork(tmp_path, ("A", "B"), (Bridge("A", "B"),))
    store = SharedStoreCluster(Topology(("A", "B"), shared_store=SharedStore()), {}, tmp_path, label="unstarted")
    found = {name: {p.__name__ for p in DEPLOYMENT_PARTS if part(deployment, p) is not None}
             for name, deployment in (("cluster", cluster), ("network", network), ("store", store))}
    assert found == {"cluster": {"Formation"}, "network": {"Renaming"}, "store": {"SharedStorage"}}
    assert require(store, SharedStorage).rig is None  # a local directory: nothing for a lock-loss nemesis
    with pytest.raises(MissingPart, match="SharedStoreCluster.* has no Renaming part, needed to rename"):
        require(store, Renaming, "rename a connector")


# --------------------------------------------------------------------------- the check can fail


class _Core:
    """Every core method, defined for real (the planted classes below add to it)."""

    topology = nodes = None

    def __getitem__(self, name): return name
    def addresses(self, protocol): return []
    def serving(self): return []
    def bridge_establishments(self): return 0
    def subscription_discards(self, destination): return None
    def restart(self, name, timeout=90): return None
    def stop_broker(self, name): return None
    def start_broker(self, name, timeout=90): return None
    def log_tail(self, lines=40): return ""
    def config_text(self): return ""
    def stop(self): return None


def test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part():
    class StubRenaming(_Core, Cluster):  # today's single broker: renaming "implemented" by a raise
        def rename_connector(self, source, old, new):
            """No connectors."""
            raise ValueError("a single broker has no network connectors to rename")

    class ClaimsFormation(_Core, Cluster, Formation):  # claims a part, inherits the Protocol's body
        pass

    class FormsUnclaimed(_Core, Cluster):
        def wait_formed(self, timeout):
            return None

    class StoreWithoutRig(_Core, Cluster, SharedStorage):
        def __init__(self):
            self.store, self.lock_file = "s", None

        def master(self): return None
        def wait_for_master(self, timeout): return None

    assert contract_problems([StubRenaming, ClaimsFormation, FormsUnclaimed, StoreWithoutRig]) == sorted([
        "test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part.<locals>.StubRenaming has every "
        "method of Renaming but does not claim it",
        "test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part.<locals>.StubRenaming.rename_connector "
        "(defined on test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part.<locals>.StubRenaming) "
        "only raises",
        "test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part.<locals>.ClaimsFormation claims "
        "Formation but does not define wait_formed",
        "test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part.<locals>.FormsUnclaimed has every "
        "method of Formation but does not claim it",
        "test_the_check_finds_a_stub_an_unkept_claim_and_an_unclaimed_part.<locals>.StoreWithoutRig claims "
        "SharedStorage but never sets rig",
    ])


# --------------------------------------------------------------------------- asking for a part


def test_part_gives_the_part_or_none_and_require_names_what_is_missing():
    class Network(_Core, Cluster, Renaming):
        def rename_connector(self, source, old, new):
            self.renamed = (source, old, new)

        def __repr__(self):
            return "<Network A-B>"

    class FakeFormation:  # a test's fake that has the method counts without naming the part
        def wait_formed(self, timeout):
            return None

    network = Network()
    assert part(network, Renaming) is network and part(network, Formation) is None
    require(network, Renaming).rename_connector("A", "x", "y")
    assert network.renamed == ("A", "x", "y")
    assert part(FakeFormation(), Formation) is not None and part(object(), Forwarding) is None
    with pytest.raises(MissingPart) as missing:
        require(network, Formation, "wait until the cluster formed")
    message = str(missing.value)
    assert "<Network A-B>" in message and "no Formation part" in message and "wait until the cluster formed" in message


def test_a_real_brokers_node_names_its_own_listener(tmp_path):
    # unstarted processes: the part reads the port the launcher assigned, from the process itself
    from types import SimpleNamespace

    from conformance.targets.activemq.node import ActiveMQNode
    from conformance.targets.artemis.node import ArtemisNode
    from conformance.targets.runtime.node import ProcessNode

    activemq = ActiveMQNode("A", SimpleNamespace(host="127.0.0.1", openwire_port=61616))
    artemis = ArtemisNode("B", SimpleNamespace(host="127.0.0.1", ports={"core": 61617, "stomp": 61613}))
    assert require(activemq, NativeListener).native_protocol == "openwire"
    assert activemq.native_address() == ("127.0.0.1", 61616)
    assert (artemis.native_protocol, artemis.native_address()) == ("core", ("127.0.0.1", 61617))
    with pytest.raises(KeyError, match="without its OpenWire connector"):
        ActiveMQNode("C", SimpleNamespace(host="127.0.0.1", openwire_port=0)).native_address()
    assert part(ProcessNode("R", SimpleNamespace(host="127.0.0.1", ports={"stomp": 1})), NativeListener) is None


# --------------------------------------------------------------------------- no member asked for by name

SUITES = Path(conformance.__file__).resolve().parents[1] / "suites"

#: the objects a suite may still ask for a member by name: none of them is a deployment, a node,
#: a handle or a target (name of the first argument -> what it is and why the member is optional)
NOT_THE_DEPLOYMENT = {
    "request": "pytest's fixture request: ``param`` exists only for a parametrized fixture",
    "frame": "a received protocol frame, printed in a failure message (a receipt has no headers)",
    "socket": "the socket module: AF_PACKET exists on Linux only",
}


def members_asked_by_name(source: str, path: str = "<source>") -> list[str]:
    """Every ``getattr(x, ...)`` / ``hasattr(x, ...)`` in ``source`` whose ``x`` (its leftmost name)
    is not one of `NOT_THE_DEPLOYMENT`, as ``path:line: call``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args):
            continue
        root = node.args[0]
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if not (isinstance(root, ast.Name) and root.id in NOT_THE_DEPLOYMENT):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_suite_asks_a_deployment_for_a_member_by_name():
    found = [hit for module in sorted(SUITES.rglob("*.py"))
             for hit in members_asked_by_name(module.read_text(), str(module.relative_to(SUITES.parent.parent)))]
    assert not found, ("a suite asks for a member by name; ask for a part (conformance/deployment.py) or read "
                       "the handle's / target's declared member instead:\n" + "\n".join(found))


def test_the_scan_finds_a_member_asked_by_name():
    source = textwrap.dedent("""
        def address(node, target, request, frame):
            port = getattr(node.process, "openwire_port", 0)
            mode = getattr(target, "launch_mode", None)
            if hasattr(cluster["A"], "wait_formed"):
                pass
            return getattr(request, "param", None), getattr(frame, "headers", None)
    """)
    assert members_asked_by_name(source) == [
        "<source>:3: getattr(node.process, 'openwire_port', 0)",
        "<source>:4: getattr(target, 'launch_mode', None)",
        "<source>:5: hasattr(cluster['A'], 'wait_formed')",
    ]
