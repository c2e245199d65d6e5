"""The brokerconf pytest plugin (registered under the ``pytest11`` entry point as ``brokerconf``).

It turns a suite written once into checks per target and per documented rule:

* ``--target NAME`` (repeatable; default ``reference``) and ``--targets-file FILE`` choose the
  brokers; a test that asks for the ``broker`` fixture runs once per target (module-scoped: one
  broker per target per suite module, configured from the module's ``SCENARIO``).
* ``@pytest.mark.spec(ID, ...)`` ties a test to catalogue statements, ``@pytest.mark.requires(cap,
  ...)`` to target capabilities, ``@pytest.mark.protocols(p, ...)`` parametrizes over protocols.
  A rule documented for other brokers, a missing capability, an unavailable target or an
  operation the protocol cannot express is reported as *not applicable* with the reason.
* Known deviations (``conformance/known_deviations/*.toml``) become strict xfails for their
  target kind, reported as *known deviation*.
* ``--conformance-matrix FILE`` writes target x spec ID -> outcome as JSON.
* A failing test carries evidence: the broker's log excerpt, its generated configuration and each
  client's exchange, as report sections (and Allure attachments when allure-pytest is active).

Tests that do not use the ``broker`` fixture are untouched, so the plugin is inert in other
projects' suites.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from conformance import requirements
from conformance.clients.base import Unsupported
from conformance.matrix import ConformanceResults, TestRecord
from conformance.scenario import DEFAULT_SCENARIO, PROTOCOLS, Scenario
from conformance.spec.catalogue import CatalogueError, load_catalogue
from conformance.spec.deviations import DEFAULT_DEVIATIONS_DIR, DeviationError, load_deviations
from conformance.targets.base import CAPABILITIES, BrokerHandle, TargetUnavailable, address
from conformance.targets.registry import UnknownTarget, load_targets_file, resolve

NOT_APPLICABLE = "not applicable: "
STATE = pytest.StashKey["PluginState"]()
CLIENTS = pytest.StashKey[list]()
BROKER = pytest.StashKey[BrokerHandle]()


class PluginState:
    """Everything the plugin knows for one pytest session."""

    def __init__(self, config: pytest.Config) -> None:
        # --target beats the ini option (a project's default targets) beats "reference".
        self.target_names: list[str] = (config.getoption("brokerconf_targets")
                                        or config.getini("brokerconf_targets") or ["reference"])
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
        self.target_errors: dict[str, str] = {}
        for name in dict.fromkeys(self.target_names):  # keep order, drop repeats
            try:
                self.targets[name] = resolve(name, self.external)
            except UnknownTarget as exc:
                # Reported in the matrix and the terminal summary; the other targets still run.
                self.target_errors[name] = str(exc)
        self.availability = {name: t.availability() for name, t in self.targets.items()}
        self.results = ConformanceResults(self.catalogue)
        for name, error in self.target_errors.items():
            self.results.add_target(name, kind="unknown", launch="", available=False, reason=error)
        for name, target in self.targets.items():
            ok, reason = self.availability[name]
            self.results.add_target(name, kind=target.kind, launch=getattr(target, "launch_mode", "process"),
                                    available=ok, reason=reason, capabilities=sorted(target.capabilities()))


# --------------------------------------------------------------------------- options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("brokerconf", "brokerconf conformance")
    group.addoption("--target", action="append", dest="brokerconf_targets", metavar="NAME",
                    help="broker target to test (repeatable; default: reference). "
                         "Built in: reference, reference:process, activemq, rabbitmq, mosquitto, artemis")
    parser.addini("brokerconf_targets", type="args", default=[],
                  help="default targets when no --target is given (default: reference)")
    group.addoption("--targets-file", dest="brokerconf_targets_file", metavar="FILE",
                    help="TOML file naming already running brokers ([target.NAME] host, ports, kind)")
    group.addoption("--conformance-matrix", dest="brokerconf_matrix", metavar="FILE",
                    help="write the conformance matrix (target x spec ID -> outcome) as JSON to FILE")
    group.addoption("--spec-catalogue", dest="brokerconf_catalogue", metavar="DIR",
                    help="directory of catalogue TOML files (default: conformance/spec)")
    group.addoption("--known-deviations", dest="brokerconf_known_deviations", metavar="DIR",
                    help="directory of known-deviation TOML files (default: conformance/known_deviations)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec(*ids): catalogue statements (conformance/spec/*.toml) the test checks")
    config.addinivalue_line("markers", "requires(*capabilities): target capabilities the test needs")
    config.addinivalue_line("markers", "protocols(*names): run the test once per protocol (stomp, mqtt, amqp)")
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


def _state(config: pytest.Config) -> PluginState:
    return config.stash[STATE]


def _marker_args(node, name: str) -> list[str]:
    return [arg for mark in node.iter_markers(name) for arg in mark.args]


def _uses_plugin_broker(metafunc: pytest.Metafunc) -> bool:
    """True when the test's ``broker`` is this plugin's fixture (not a project's own of that name)."""
    definitions = metafunc._arg2fixturedefs.get("broker") or []
    return bool(definitions) and getattr(definitions[-1].func, "__module__", None) == __name__


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


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = _state(config)
    for item in items:
        if "target_name" not in _params(item):
            continue
        specs = _marker_args(item, "spec")
        unknown = [s for s in specs if s not in state.catalogue]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: spec ID(s) {unknown} are not in the catalogue (conformance/spec/)")
        missing = [c for c in _marker_args(item, "requires") if c not in CAPABILITIES]
        if missing:
            raise pytest.UsageError(f"{item.nodeid}: unknown capabilities {missing} in @pytest.mark.requires "
                                    f"(known: {sorted(CAPABILITIES)})")
        target = state.targets.get(item.callspec.params["target_name"])
        if target is None:
            continue
        if target.kind != "reference":
            # so `-m "not real_broker"` keeps the fast loop to the reference broker
            item.add_marker(pytest.mark.real_broker)
        for deviation in state.deviations:
            if deviation.matches(target.kind, specs, item.originalname, _params(item).get("protocol", "stomp")):
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"known deviation {deviation.spec} on "
                                                  f"{deviation.target}: {deviation.summary}"))


def _params(item: pytest.Item) -> dict:
    return getattr(getattr(item, "callspec", None), "params", {})


def _not_applicable_reason(item: pytest.Item, state: PluginState) -> str | None:
    """Why this test cannot run on its target (None when it can), decided before any broker starts."""
    name = item.callspec.params["target_name"]
    if name in state.target_errors:
        return state.target_errors[name]
    target = state.targets[name]
    ok, reason = state.availability[name]
    if not ok:
        requirement = getattr(target, "requirement", target.kind)
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
        why = getattr(target, "why_missing", lambda capability: None)
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


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, target_name: str, tmp_path_factory: pytest.TempPathFactory):
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
    yield handle
    handle.stop()


@pytest.fixture
def protocol() -> str:
    """The protocol a test's clients speak; @pytest.mark.protocols parametrizes it (default stomp)."""
    return "stomp"


@pytest.fixture
def client(request: pytest.FixtureRequest, broker: BrokerHandle, protocol: str):
    """``client(protocol=None, **options)`` -> a connected conformance client, closed at teardown."""
    from conformance.clients import connect

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
        options = {**getattr(broker, "client_options", {}).get(chosen, {}), **options}
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
        exchange = getattr(c, "exchange", None)
        if exchange:
            sections.append((f"client {n} ({c.protocol}) exchange", "\n".join(exchange)))
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
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
    state.results.record(TestRecord.from_report(item.nodeid, params["target_name"], params.get("protocol", "stomp"),
                                                _marker_args(item, "spec"), report, NOT_APPLICABLE))


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(STATE, None)
    path = session.config.getoption("brokerconf_matrix")
    if state is None or not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(state.results.to_json(), indent=2))


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or not state.results.has_records():
        return
    terminalreporter.section("brokerconf conformance")
    for line in state.results.summary_lines():
        terminalreporter.write_line(line)
    path = config.getoption("brokerconf_matrix")
    if path:
        terminalreporter.write_line(f"matrix written to {path}")
