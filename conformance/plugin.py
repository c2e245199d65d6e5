"""The brokerconf pytest plugin (registered under the ``pytest11`` entry point as ``brokerconf``).

It turns a suite written once into checks per target and per documented rule:

* ``--target NAME`` (repeatable; default ``reference``) and ``--targets-file FILE`` choose the
  brokers; a test that asks for the ``broker`` fixture runs once per target (module-scoped: one
  broker per target per suite module, configured from the module's ``SCENARIO``). An unknown
  name is a usage error (with a did-you-mean). A target named with ``--target`` that cannot run
  here stops the run with its reason, unless ``--allow-unavailable``: then, as for the default
  targets of the ini option, its tests are not applicable with that reason.
* ``@pytest.mark.spec(ID, ...)`` ties a test to catalogue statements, ``@pytest.mark.requires(cap,
  ...)`` to target capabilities, ``@pytest.mark.protocols(p, ...)`` parametrizes over protocols.
  A rule documented for other brokers, a missing capability, an unavailable target or an
  operation the protocol cannot express is reported as *not applicable* with the reason.
* Known deviations (``conformance/known_deviations/*.toml``) become strict xfails for their
  target kind, reported as *known deviation* only when the test fails with an AssertionError whose
  message matches the entry's ``failure`` pattern; any other failure is a failure. A test outside
  the suites pins a known failure the same way with ``@pytest.mark.known_failure(failure=REGEX,
  reason=TEXT)``, never with a hand-written xfail.
* ``--conformance-matrix FILE`` writes target x spec ID -> outcome as JSON.
* A test tied to a statement about the client (catalogue ``subject = "client"``) names the client
  it exercised, ``@pytest.mark.client_subject("NAME")`` (on the ``pytest.param`` of a parametrized
  test); the matrix books its verdict under the column ``client: NAME``, not under the broker it
  ran against. Without that marker the test is refused at collection, unless
  ``@pytest.mark.broker_part(ID, ...)`` says it checks the broker's part of those statements.
* A failing test carries evidence: the broker's log excerpt, its generated configuration and each
  client's exchange, as report sections (and Allure attachments when allure-pytest is active).
* Under pytest-xdist (``-n N --dist loadgroup``) each suite module's tests of one target form one
  ``xdist_group``, so its module-scoped broker starts once, on one worker (on pytest >= 9.2 with
  conformance/xdist_groups.py's help). A worker computes each
  test's matrix record and hands it to the controller on the report (``user_properties``); the
  controller records it, writes the matrix and prints the summary, the same as a serial run.

* SIGTERM and SIGHUP end the session like Ctrl-C (conformance/signals.py), so an interrupted run
  tears its fixtures down and stops its brokers, on pytest-xdist workers too.

Tests that do not use the ``broker`` fixture are untouched, so the plugin is inert in other
projects' suites (apart from the signal handling above).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from conformance import requirements, schedule, signals, xdist_groups
from conformance.clients.base import Unsupported
from conformance.matrix import ConformanceResults, TestRecord
from conformance.scenario import DEFAULT_SCENARIO, PROTOCOLS, Scenario
from conformance.spec.catalogue import CatalogueError, load_catalogue
from conformance.spec.deviations import DEFAULT_DEVIATIONS_DIR, DeviationError, known_failures, load_deviations
from conformance.targets.base import CAPABILITIES, BrokerHandle, TargetUnavailable, address, is_real_broker
from conformance.targets.registry import UnknownTarget, load_targets_file, resolve
from conformance.clients import connect

NOT_APPLICABLE = "not applicable: "
STATE = pytest.StashKey["PluginState"]()
CLIENTS = pytest.StashKey[list]()
BROKER = pytest.StashKey[BrokerHandle]()
DEVIATIONS = pytest.StashKey[list]()
#: a suite test's node ID as collected: pytest-xdist's loadgroup appends "@<group>" to it on the
#: workers, and the matrix keeps the ID a serial run records
NODEID = pytest.StashKey[str]()
#: the test's index in the collection (before any ordering by cost), to list the matrix's records in that order
ORDER = pytest.StashKey[int]()
#: the name of the report's user property that carries the plugin's record from a worker
RECORD_PROPERTY = "brokerconf_record"


class PluginState:
    """Everything the plugin knows for one pytest session."""

    def __init__(self, config: pytest.Config) -> None:
        # --target beats the ini option (a project's default targets) beats "reference".
        named = config.getoption("brokerconf_targets") or []
        self.target_names: list[str] = named or config.getini("brokerconf_targets") or ["reference"]
        #: targets the user asked for on the command line: one that cannot run here fails the run
        #: (unless --allow-unavailable); a default target is not applicable there, with the reason
        self.explicit: frozenset[str] = frozenset(named)
        self.allow_unavailable: bool = config.getoption("brokerconf_allow_unavailable")
        targets_file = config.getoption("brokerconf_targets_file")
        try:
            self.external = load_targets_file(Path(targets_file)) if targets_file else {}
        except UnknownTarget as exc:
            raise pytest.UsageError(f"--targets-file: {exc}") from None
        catalogue_dir = config.getoption("brokerconf_catalogue")
        self.catalogue = load_catalogue(Path(catalogue_dir).resolve()) if catalogue_dir else load_catalogue()
        deviations_dir = config.getoption("brokerconf_known_deviations")
        self.deviations = load_deviations(Path(deviations_dir) if deviations_dir else DEFAULT_DEVIATIONS_DIR,
                                          self.catalogue)
        self.targets: dict = {}
        for name in dict.fromkeys(self.target_names):  # keep order, drop repeats
            try:
                self.targets[name] = resolve(name, self.external)
            except UnknownTarget as exc:
                # a typo must not turn into a run that skips everything and passes
                where = "--target" if name in self.explicit else "the ini option brokerconf_targets"
                raise pytest.UsageError(f"{where}: {exc}") from None
        self.availability = {name: t.availability() for name, t in self.targets.items()}
        self.results = ConformanceResults(self.catalogue)
        #: target -> launch mode of a broker the ``broker`` fixture started in this process (what
        #: a report tells the controller; a target's default stays the controller's own)
        self.launched: dict[str, str] = {}
        for name, target in self.targets.items():
            ok, reason = self.availability[name]
            self.results.add_target(name, kind=target.kind, launch=target.launch_mode,
                                    available=ok, reason=reason, capabilities=sorted(target.capabilities()))


# --------------------------------------------------------------------------- options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("brokerconf", "brokerconf conformance")
    group.addoption("--target", action="append", dest="brokerconf_targets", metavar="NAME",
                    help="broker target to test (repeatable; default: reference). "
                         "Built in: reference, reference:process, activemq, rabbitmq, mosquitto, artemis")
    parser.addini("brokerconf_targets", type="args", default=[],
                  help="default targets when no --target is given (default: reference)")
    group.addoption("--allow-unavailable", action="store_true", dest="brokerconf_allow_unavailable",
                    help="a --target that cannot run here makes its tests not applicable (with the reason) "
                         "instead of failing the run")
    group.addoption("--targets-file", dest="brokerconf_targets_file", metavar="FILE",
                    help="TOML file naming already running brokers ([target.NAME] host, ports, kind)")
    group.addoption("--conformance-matrix", dest="brokerconf_matrix", metavar="FILE",
                    help="write the conformance matrix (target x spec ID -> outcome) as JSON to FILE")
    group.addoption("--spec-catalogue", dest="brokerconf_catalogue", metavar="DIR",
                    help="directory of catalogue TOML files (default: conformance/spec)")
    group.addoption("--known-deviations", dest="brokerconf_known_deviations", metavar="DIR",
                    help="directory of known-deviation TOML files (default: conformance/known_deviations)")
    schedule.add_options(group)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec(*ids): catalogue statements (conformance/spec/*.toml) the test checks")
    config.addinivalue_line("markers", "requires(*capabilities): target capabilities the test needs")
    config.addinivalue_line("markers", "client_subject(name): the client library a test exercised, for the client "
                                       "statements it checks (their verdicts go to the matrix column 'client: name')")
    config.addinivalue_line("markers", "broker_part(*ids): client statements whose broker's part the test checks "
                                       "(their verdicts count for the broker it ran against)")
    config.addinivalue_line("markers", "protocols(*names): run the test once per protocol (stomp, mqtt, amqp)")
    config.addinivalue_line("markers", "network(key): the network a network-of-brokers suite test runs on, started by "
                                       "its `net` fixture at set-up (suites/test_networks.py)")
    config.addinivalue_line("markers", "known_failure(failure, reason): a strict xfail that accepts only an "
                                       "AssertionError whose message matches the regular expression `failure`")
    config.addinivalue_line("markers", "real_broker: runs against a real broker (added to suite tests on non-reference targets)")
    config.addinivalue_line("markers", "brokerconf_requirement_present: a requirement the test needs is present "
                                       "(conformance.requirements.missing_mark)")
    config.addinivalue_line("markers", "brokerconf_required_missing(message): a required thing is missing: the test "
                                       "fails at set-up (conformance.requirements)")
    try:
        requirements.required()
    except requirements.UnknownRequirement as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        config.stash[STATE] = PluginState(config)
    except (CatalogueError, DeviationError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(MatrixRecorder(config), "brokerconf-matrix-recorder")
    xdist_groups.register(config)
    schedule.register(config)
    # SIGTERM / SIGHUP end the session like Ctrl-C, so the fixtures stop their brokers (conformance/signals.py)
    signals.register(config)


def unavailable_named_targets(state: PluginState) -> list[str]:
    """One line per target named with --target that cannot run here (empty with --allow-unavailable)."""
    if state.allow_unavailable:
        return []
    return [f"target {name} cannot run here: {state.availability[name][1]}"
            for name in state.targets if name in state.explicit and not state.availability[name][0]]


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE, None)
    problems = unavailable_named_targets(state) if state is not None else []
    if problems:
        # Asked for by name: a run that reports it "not applicable" everywhere and exits 0 would
        # read as a pass. Stopped before anything runs, with the reason and the way out.
        pytest.exit("brokerconf: " + "; ".join(problems) + " (install what it needs, see `brokerconf targets "
                    "list`; or pass --allow-unavailable to report its tests not applicable)",
                    returncode=pytest.ExitCode.TESTS_FAILED)


def _state(config: pytest.Config) -> PluginState:
    return config.stash[STATE]


def _marker_args(node, name: str) -> list[str]:
    return [arg for mark in node.iter_markers(name) for arg in mark.args]


#: requested by this plugin's ``broker`` fixture and by nothing else: a test whose fixture closure
#: holds it uses the plugin's broker. ``metafunc.fixturenames`` is that closure, built from the
#: definitions that win for the test, so a project's own ``broker`` fixture (which does not request
#: it) leaves it out. Public API, in place of pytest's private ``metafunc._arg2fixturedefs``.
PLUGIN_BROKER_SENTINEL = "_brokerconf_plugin_broker"


def _uses_plugin_broker(metafunc: pytest.Metafunc) -> bool:
    """True when the test's ``broker`` is this plugin's fixture (not a project's own of that name)."""
    return PLUGIN_BROKER_SENTINEL in metafunc.fixturenames


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "broker" not in metafunc.fixturenames or not _uses_plugin_broker(metafunc):
        return
    state = _state(metafunc.config)
    names = list(dict.fromkeys(state.target_names))
    # Module scope: every test of a module shares one broker per target.
    metafunc.parametrize("target_name", names, ids=names, scope="module")
    protocols = _marker_args(metafunc.definition, "protocols")
    if protocols:
        bad = [p for p in protocols if p not in PROTOCOLS]
        if bad:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: unknown protocol(s) {bad} in "
                                    f"@pytest.mark.protocols (known: {list(PROTOCOLS)})")
        metafunc.parametrize("protocol", protocols, ids=protocols)


def xdist_group_name(item: pytest.Item, target_name: str) -> str:
    """The suite test's pytest-xdist group: its module on its target (one broker per pair).
    Neither "@" nor "]": pytest-xdist's scheduler takes the text after the last "@" of a node ID
    as its group only when no "]" follows (xdist/scheduler/loadgroup.py)."""
    return f"{item.nodeid.split('::', 1)[0]}({target_name})"


# tryfirst: before pytest-xdist's worker hook, which reads the xdist_group marks (and renames the
# node IDs) in this same hook
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = _state(config)
    for n, item in enumerate(items):
        # the matrix lists records in the collection's order, taken here: a parallel run orders
        # its items by cost afterwards (conformance/schedule.py), which must not reorder the matrix
        item.stash[ORDER] = n
        _add_known_failures(item)
        if "target_name" not in _params(item):
            continue
        item.stash[NODEID] = item.nodeid
        # The broker fixture is module-scoped: the module's tests on one target must run on one
        # worker (under --dist loadgroup), or each worker would start that broker again.
        xdist_groups.add_group(item, xdist_group_name(item, item.callspec.params["target_name"]))
        specs = _marker_args(item, "spec")
        unknown = [s for s in specs if s not in state.catalogue]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: spec ID(s) {unknown} are not in the catalogue (conformance/spec/)")
        _check_client_subject(item, specs, state.catalogue)
        missing = [c for c in _marker_args(item, "requires") if c not in CAPABILITIES]
        if missing:
            raise pytest.UsageError(f"{item.nodeid}: unknown capabilities {missing} in @pytest.mark.requires "
                                    f"(known: {sorted(CAPABILITIES)})")
        target = state.targets.get(item.callspec.params["target_name"])
        if target is None:
            continue
        if is_real_broker(target):
            item.add_marker(pytest.mark.real_broker)
        matching = [d for d in state.deviations if d.matches(target.kind, specs, item.originalname,
                                                                   _params(item).get("protocol", "stomp"))]
        if matching:
            item.stash[DEVIATIONS] = [*item.stash.get(DEVIATIONS, []), *matching]
        for deviation in matching:
            # raises=AssertionError: another exception (a broken JMX query, a client error) fails the
            # test; the message check in pytest_runtest_makereport does the rest.
            item.add_marker(pytest.mark.xfail(raises=AssertionError, strict=True,
                                              reason=f"known deviation {deviation.spec} on {deviation.target}: "
                                                     f"{deviation.summary}"))


def client_subject(item: pytest.Item) -> str:
    """The client the test exercised (its closest ``client_subject`` marker), or ""."""
    mark = item.get_closest_marker("client_subject")
    return mark.args[0] if mark is not None and mark.args else ""


def _check_client_subject(item: pytest.Item, specs: list[str], catalogue: dict) -> None:
    """A verdict on a client statement must say whose it is: refuse a test that would book it to a broker."""
    broker_part = _marker_args(item, "broker_part")
    stray = [s for s in broker_part if s not in specs or not catalogue[s].about_client]
    if stray:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.broker_part{tuple(stray)} names no client statement of "
                                f"the test's @pytest.mark.spec")
    mark = item.get_closest_marker("client_subject")
    if mark is not None and not (len(mark.args) == 1 and isinstance(mark.args[0], str) and mark.args[0].strip()):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.client_subject takes one name, the client exercised "
                                f"(e.g. \"brokerconf failover (python)\"); got {mark.args!r}")
    about_client = [s for s in specs if catalogue[s].about_client and s not in broker_part]
    if about_client and mark is None:
        raise pytest.UsageError(
            f"{item.nodeid}: {', '.join(about_client)} describe the client, not the broker (subject = \"client\" in "
            f"conformance/spec/), so the test must name the client it exercised with "
            f"@pytest.mark.client_subject(\"<client>\") (on the pytest.param of a parametrized test); its verdict "
            f"then goes to that client's column of the matrix, never to the broker's. A test that checks the "
            f"broker's part of such a statement says so with @pytest.mark.broker_part(ID).")


def _add_known_failures(item: pytest.Item) -> None:
    """A ``known_failure`` mark: a strict xfail narrowed like a known deviation (same check in
    pytest_runtest_makereport), for tests outside the suites (conformance/spec/deviations.py)."""
    try:
        known = known_failures(item.iter_markers("known_failure"), getattr(item, "originalname", item.name),
                               item.nodeid)
    except DeviationError as exc:
        raise pytest.UsageError(str(exc)) from None
    if known:
        item.stash[DEVIATIONS] = known
    for failure in known:
        item.add_marker(pytest.mark.xfail(raises=AssertionError, strict=True,
                                          reason=f"known failure: {failure.summary}"))


def _params(item: pytest.Item) -> dict:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "target_name" in params and not isinstance(params["target_name"], str):
        # a suite that generates a test only for some target kinds, none of them in this run, gets
        # pytest's empty parameter set (a NOTSET value, skipped by its mark): no target to record
        params = {k: v for k, v in params.items() if k != "target_name"}
    return params


def _not_applicable_reason(item: pytest.Item, state: PluginState) -> str | None:
    """Why this test cannot run on its target (None when it can), decided before any broker starts."""
    name = item.callspec.params["target_name"]
    target = state.targets[name]
    ok, reason = state.availability[name]
    if not ok:
        requirement = requirements.target_requirement(target)
        if requirement in requirements.KNOWN and requirements.is_required(requirement):
            pytest.fail(f"target {name}: " + requirements.failure_message(requirement, reason), pytrace=False)
        return f"target {name} cannot run here: {reason}"
    specs = _marker_args(item, "spec")
    if specs and not any(state.catalogue[s].applies(target.kind) for s in specs):
        documented = sorted({k for s in specs for k in state.catalogue[s].applies_to})
        return f"{', '.join(specs)} documented for {', '.join(documented)}, not {target.kind}"
    capabilities = target.capabilities()
    needed = list(_marker_args(item, "requires"))
    protocol = item.callspec.params.get("protocol", "stomp")
    needed.append(f"protocol.{protocol}")
    missing = [c for c in needed if c not in capabilities]
    if missing:
        why = target.why_missing
        # a capability that stands for something this machine must have (BROKERCONF_REQUIRE, e.g.
        # activemq-amqp for ActiveMQ's protocol.amqp) fails the test instead of skipping it
        for capability in missing:
            requirement = target.capability_requirements.get(capability)
            if requirement in requirements.KNOWN and requirements.is_required(requirement):
                pytest.fail(f"target {name}: " + requirements.failure_message(
                    requirement, why(capability) or CAPABILITIES.get(capability, capability)), pytrace=False)
        details = "; ".join(f"{c}: {why(c) or CAPABILITIES.get(c, c)}" for c in missing)
        return f"{name} lacks {', '.join(missing)} ({details})"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    requirements.check_required_marks(item)
    if "target_name" not in _params(item):
        return
    reason = _not_applicable_reason(item, _state(item.config))
    if reason:
        pytest.skip(NOT_APPLICABLE + reason)


# --------------------------------------------------------------------------- fixtures


def _scenario(module) -> Scenario:
    scenario = getattr(module, "SCENARIO", DEFAULT_SCENARIO)
    if not isinstance(scenario, Scenario):
        raise pytest.UsageError(f"{module.__name__}.SCENARIO must be a conformance.scenario.Scenario")
    return scenario


@pytest.fixture(scope="session", name=PLUGIN_BROKER_SENTINEL)
def _plugin_broker_sentinel() -> None:
    """Marks a test's ``broker`` as this plugin's (see `_uses_plugin_broker`); holds nothing."""
    return None


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, target_name: str, tmp_path_factory: pytest.TempPathFactory,
           _brokerconf_plugin_broker: None):
    """A running broker of the current target, configured for the module's SCENARIO."""
    state = _state(request.config)
    target = state.targets[target_name]
    scenario = _scenario(request.module)
    workdir = tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", f"{target_name}-{scenario.name}"))
    try:
        handle = target.launch(scenario, workdir)
    except TargetUnavailable as exc:
        failure = str(exc)
    else:
        failure = None
    if failure is not None:
        # The target was expected to run here but could not start: an error with its own log.
        state.results.target_failed(target_name, failure)
        pytest.fail(f"target {target_name} could not start for scenario {scenario.name!r}:\n{failure}", pytrace=False)
    state.results.note_launch(target_name, handle.launch)
    state.launched[target_name] = handle.launch
    yield handle
    handle.stop()


@pytest.fixture
def protocol() -> str:
    """The protocol a test's clients speak; @pytest.mark.protocols parametrizes it (default stomp)."""
    return "stomp"


@pytest.fixture
def client(request: pytest.FixtureRequest, broker: BrokerHandle, protocol: str):
    """``client(protocol=None, **options)`` -> a connected conformance client, closed at teardown."""

    made: list = []
    request.node.stash[CLIENTS] = made
    request.node.stash[BROKER] = broker
    test_protocol = protocol

    def factory(protocol: str | None = None, **options):
        chosen = protocol or test_protocol
        try:
            host, port = address(broker, chosen)
        except KeyError as exc:
            raise Unsupported(str(exc.args[0])) from None
        login, passcode = broker.credentials
        options = {**broker.client_options.get(chosen, {}), **options}
        options.setdefault("login", login)
        options.setdefault("passcode", passcode)
        made.append(connect(host, port, chosen, **options))
        return made[-1]

    yield factory
    for c in reversed(made):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - a broken connection must not hide the test's own outcome
            pass


@pytest.fixture
def dest(request: pytest.FixtureRequest):
    """``dest(kind="queue", prefix="t")`` -> a fresh destination name, ``queue://prefix.<test>.<random>``.

    The prefix lets a scenario's wildcard policies match; the test name and random suffix keep tests
    (and repeated runs against a long-lived external broker) apart."""
    test = re.sub(r"[^A-Za-z0-9]", "_", request.node.originalname)[:40]

    def make(kind: str = "queue", prefix: str = "t") -> str:
        if kind not in ("queue", "topic"):
            raise ValueError(f"dest kind must be 'queue' or 'topic', not {kind!r}")
        return f"{kind}://{prefix}.{test}.{uuid.uuid4().hex[:8]}"

    return make


# --------------------------------------------------------------------------- outcomes and evidence


def _evidence(item: pytest.Item) -> list[tuple[str, str]]:
    handle = item.stash.get(BROKER, None) or getattr(item, "funcargs", {}).get("broker")
    sections: list[tuple[str, str]] = []
    if handle is not None:
        try:
            sections.append((f"broker log ({handle.target})", handle.log_tail(60)))
            sections.append((f"broker configuration ({handle.target})", handle.config_text()))
        except Exception as exc:  # noqa: BLE001 - evidence is best effort; say why it is missing
            sections.append(("broker evidence unavailable", repr(exc)))
    for n, c in enumerate(item.stash.get(CLIENTS, []), 1):
        if c.exchange:  # every client records its exchange (conformance.clients.base.Client)
            sections.append((f"client {n} ({c.protocol}) exchange", "\n".join(c.exchange)))
    return sections


def _attach_to_allure(sections: list[tuple[str, str]]) -> None:
    try:
        import allure
    except ImportError:
        return
    for name, text in sections:
        try:
            allure.attach(text, name=name, attachment_type=allure.attachment_type.TEXT)
        except Exception:  # noqa: BLE001 - no allure run in progress
            return


def _not_the_known_deviation(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> str | None:
    """Why an xfailed report is not one of the item's known deviations reproducing (None when it is).

    The deviation is an assertion failure of the test body whose message matches the entry's
    ``failure`` pattern; a failure while setting up (a network that did not start) or an assertion
    with another message (a ``setup:`` check, another statement's assertion) is an error of the run."""
    deviations = item.stash.get(DEVIATIONS, [])
    if not deviations or not hasattr(report, "wasxfail") or not report.skipped or call.excinfo is None:
        return None
    patterns = " or ".join(repr(d.failure) for d in deviations)
    if call.when != "call":
        return f"the test failed during {call.when}, before the broker's behaviour was checked"
    if not call.excinfo.errisinstance(AssertionError):
        return f"{call.excinfo.typename} is not an assertion failure"
    message = str(call.excinfo.value)
    if any(d.explains(message) for d in deviations):
        return None
    return f"the assertion message does not match the recorded failure {patterns}"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    why_not = _not_the_known_deviation(item, call, report)
    if why_not is not None:
        # A failure the deviation entry does not describe: report it as the failure it is.
        report.outcome = "failed"
        del report.wasxfail
        report.sections.append(("brokerconf: not the known deviation",
                                f"{why_not}; known deviation(s) of this test: "
                                + "; ".join(f"{d.spec} ({d.source}): failure = {d.failure!r}"
                                            for d in item.stash.get(DEVIATIONS, []))))
    params = _params(item)
    if "target_name" not in params:
        return
    # An operation the protocol cannot express is not a failure of the broker: not applicable.
    if call.excinfo is not None and call.excinfo.errisinstance(Unsupported) and not hasattr(report, "wasxfail"):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, NOT_APPLICABLE + str(call.excinfo.value))
    if report.failed and call.when in ("setup", "call"):
        sections = _evidence(item)
        for name, text in sections:
            report.sections.append((f"brokerconf: {name}", text))
        _attach_to_allure(sections)
    state = _state(item.config)
    target_name = params["target_name"]
    record = TestRecord.from_report(item.stash.get(NODEID, item.nodeid), target_name, params.get("protocol", "stomp"),
                                    _marker_args(item, "spec"), report, NOT_APPLICABLE)
    if record is not None:
        record.client_subject = client_subject(item)
        record.broker_part = _marker_args(item, "broker_part")
    # Recorded in pytest_runtest_logreport, which runs where the matrix is kept: in this process
    # in a serial run, in the controller under pytest-xdist (this hook runs in the worker). The
    # report carries the record there, with what the broker fixture learnt about the target (in
    # this process). A new list: the report shares the item's, which every phase's report gets.
    report.user_properties = [*report.user_properties, (RECORD_PROPERTY, {
        "record": asdict(record) if record is not None else None,
        "order": item.stash.get(ORDER, None),
        "target": target_name,
        "launch": state.launched.get(target_name),
        "start_error": getattr(state.results.targets.get(target_name), "start_error", ""),
    })]


def _take_record(report: pytest.TestReport) -> dict | None:
    """The plugin's entry on the report, removed from its user properties (JUnit XML lists those)."""
    ours = [p for p in report.user_properties if isinstance(p, (tuple, list)) and len(p) == 2 and p[0] == RECORD_PROPERTY]
    if not ours:
        return None
    report.user_properties = [p for p in report.user_properties if not any(p is o for o in ours)]
    return ours[-1][1]


class MatrixRecorder:
    """Records the reports' entries into the session's matrix (registered in pytest_configure:
    ``pytest_runtest_logreport`` is not handed the config)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    # tryfirst: the entry is taken off the report before other plugins (JUnit XML) see it
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if xdist_groups.in_worker(self.config):
            return  # a worker sends the report on as it is; the controller records it
        entry = _take_record(report)
        state = self.config.stash.get(STATE, None)
        if entry is None or state is None:
            return
        if entry["launch"]:
            state.results.note_launch(entry["target"], entry["launch"])
        if entry["start_error"]:
            state.results.target_failed(entry["target"], entry["start_error"])
        if entry["record"] is not None:
            state.results.record(TestRecord(**entry["record"]), entry["order"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE, None)
    path = session.config.getoption("brokerconf_matrix")
    if state is None or not path or xdist_groups.in_worker(session.config):
        return  # only the controller writes: a worker's matrix would hold only its own tests
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(state.results.to_json(), indent=2))


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or xdist_groups.in_worker(config) or not state.results.has_records():
        return
    terminalreporter.section("brokerconf conformance")
    for line in state.results.summary_lines():
        terminalreporter.write_line(line)
    path = config.getoption("brokerconf_matrix")
    if path:
        terminalreporter.write_line(f"matrix written to {path}")
