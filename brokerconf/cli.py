"""The `brokerconf` command line. Subcommands:

  brokerconf run            the main job: the conformance suites against the reference broker (and
                            ActiveMQ Classic when installed), short chaos experiments, their histories
                            judged on Spark (embedded) and compared across targets, ending in a report
  brokerconf chaos run F    run a chaos experiment file; history + verdict
  brokerconf analyze PATH   histories -> verdicts and anomalies on Spark (reports/pipeline)
  brokerconf compare PATH.. runs and matrices -> target x spec ID / target x checker tables and a page
  brokerconf clients DIR    a run's client statements x clients and its measured reconnect gaps, as Markdown
  brokerconf proxy          serve the Toxiproxy HTTP API (fault proxy)
  brokerconf suite ...      the conformance suites through pytest: JUnit XML, Allure results, the matrix
  brokerconf targets ...    list targets (and why one cannot run here); install their packages
  brokerconf broker ...     run the reference broker (same flags as `python -m reference_broker`)
  brokerconf bench stomp    STOMP throughput and peak RSS, reference vs ActiveMQ, side by side
  brokerconf bench soak     the reference broker under mixed load and misbehaving clients: RSS and
                            loop lag over time, the memory trend after warm-up, a verdict

An unknown target name is a usage error (exit 2, with a did-you-mean) and nothing runs. A target
named on the command line that cannot run here fails the command with the reason (exit 1)
unless --allow-unavailable (suite, run) reports it not applicable instead.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from brokerconf import chaos_stage
from brokerconf.machine_speed import probe_seconds
from brokerconf.stage_times import StageClock, format_times, setup_seconds_from_env
from reports.pipeline.cli_args import positive_int


#: `brokerconf run` without --targets: ActiveMQ is reported not applicable where it cannot run
DEFAULT_RUN_TARGETS = "reference,activemq,artemis"
#: the main job's pytest-xdist workers: the suites wait on JVM starts, brokers' timers and
#: deliveries far more than they compute; measured on the 2-core machine (README, "Time"): four
#: workers 17 m 28 s for the whole job, six 13 m 38 s (1.5 cores busy on average); on one later
#: commit, one run after the other, six 14 m 50 s and seven 14 m 11 s (suites 13 m 47 s and
#: 13 m 08 s), the seven with more of the machine's other work beside it
DEFAULT_WORKERS = 7
#: the main job's chaos experiments running at once, beside the six suite workers: two, not the
#: stage's own four (chaos_stage.PARALLEL, measured alone). At the start of the job the costliest
#: suite modules and four experiments' JVMs together kept the load average at 15-18 on 2 cores,
#: and the flakes of those runs came from there (a cluster link that never formed, a lock-loss
#: experiment past its timeout); two at a time still end minutes before the suites do
CHAOS_PARALLEL = 2


def _progress(message: str) -> None:
    print(message, flush=True)


def cmd_broker(args: argparse.Namespace) -> int:
    from reference_broker.__main__ import run

    return run(args)


def cmd_bench_stomp(args: argparse.Namespace) -> int:
    from conformance.bench.stomp import format_table, run_stomp_bench, write_json

    targets = _targets(args.targets, ("reference", "activemq"), "bench stomp")
    if targets is None:
        return 2
    results = run_stomp_bench(messages=args.messages, body_size=args.body_size, repeats=args.repeats,
                              targets=targets, warmup_messages=args.warmup_messages, progress=_progress,
                              persistent=args.persistent)
    print()
    print(format_table(results, args.messages, args.body_size, persistent=args.persistent))
    if args.json:
        write_json(results, Path(args.json))
        print(f"results written to {args.json}")
    return 1 if any(r.error for r in results) else 0


def _targets(text: str, known: tuple[str, ...], command: str) -> tuple[str, ...] | None:
    """A benchmark's --targets, checked against the peers it can measure (None after naming an
    unknown one, with a did-you-mean, on stderr: the caller exits 2)."""
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in targets if t not in known]
    if unknown:
        hints = [h for t in unknown for h in difflib.get_close_matches(t, known, n=1)]
        print(f"brokerconf {command}: unknown target(s) {', '.join(unknown)} in --targets"
              + (f"; did you mean {', '.join(repr(h) for h in hints)}?" if hints else "")
              + f" (known: {', '.join(known)})", file=sys.stderr)
        return None
    if not targets:
        print(f"brokerconf {command}: --targets names no target (known: {', '.join(known)})", file=sys.stderr)
        return None
    return targets


def _check_targets(names: list[str], command: str, option: str, *, targets_file: str | None = None,
                   must_run: bool = True) -> int:
    """0 when every target name is known and, with ``must_run``, can run here. Otherwise says why
    on stderr and returns the exit status: 2 for an unknown name (a usage error, with a
    did-you-mean), 1 for a target the user asked for that cannot run here (with the reason)."""
    from conformance.targets.registry import UnknownTarget, load_targets_file, resolve

    try:
        external = load_targets_file(Path(targets_file)) if targets_file else {}
        targets = {name: resolve(name, external) for name in dict.fromkeys(names)}
    except UnknownTarget as exc:
        print(f"brokerconf {command}: {option}: {exc}", file=sys.stderr)
        return 2
    if not names:
        print(f"brokerconf {command}: {option} names no target", file=sys.stderr)
        return 2
    if not must_run:
        return 0
    missing = [(name, target.availability()) for name, target in targets.items()]
    missing = [(name, reason) for name, (ok, reason) in missing if not ok]
    for name, reason in missing:
        print(f"brokerconf {command}: target {name} cannot run here: {reason}", file=sys.stderr)
    if missing:
        print(f"brokerconf {command}: nothing was run; install what is missing (`brokerconf targets list`), "
              "or pass --allow-unavailable to report those targets not applicable", file=sys.stderr)
        return 1
    return 0


def cmd_bench_mqtt(args: argparse.Namespace) -> int:
    from conformance.bench.pubsub import format_table, run_mqtt_bench, write_json

    targets = _targets(args.targets, ("reference", "mosquitto", "activemq", "amqtt"), "bench mqtt")
    if targets is None:
        return 2
    qos_levels = tuple(int(q) for q in args.qos.split(","))
    results = run_mqtt_bench(messages=args.messages, repeats=args.repeats, qos_levels=qos_levels,
                             targets=targets, warmup_messages=args.warmup_messages, progress=_progress)
    print()
    print(format_table(
        f"MQTT 3.1.1 end-to-end, 1 publisher -> 1 subscriber, {args.messages:,} x 256-byte payloads",
        results, [f"qos{q}" for q in qos_levels], {"activemq": 1.5, "amqtt": 10, "mosquitto": None}))
    if args.json:
        write_json(results, Path(args.json))
        print(f"results written to {args.json}")
    return 1 if any(r.error for r in results) else 0


def cmd_bench_amqp(args: argparse.Namespace) -> int:
    from conformance.bench.pubsub import format_table, run_amqp_bench, write_json

    targets = _targets(args.targets, ("reference", "rabbitmq"), "bench amqp")
    if targets is None:
        return 2
    results = run_amqp_bench(messages=args.messages, repeats=args.repeats, targets=targets,
                             warmup_messages=args.warmup_messages, progress=_progress)
    print()
    print(format_table(f"AMQP 1.0 end-to-end, 1 sender -> 1 receiver, {args.messages:,} x 256-byte bodies",
                       results, ["presettled", "unsettled"], {"rabbitmq": None}))
    if args.json:
        write_json(results, Path(args.json))
        print(f"results written to {args.json}")
    return 1 if any(r.error for r in results) else 0


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: the conformance suites against the reference broker and every real broker
    named (those not installed are reported not applicable), short chaos experiments, the Spark
    stage, ending in one report. Each stage's wall time is printed at the end and kept in the report."""
    from reports.render.run_report import write_run_report

    # The default targets report ActiveMQ not applicable where it is not installed; targets the
    # user named must run (or --allow-unavailable says otherwise).
    named = args.targets is not None
    allow_unavailable = args.allow_unavailable or not named
    targets = [t.strip() for t in (args.targets if named else DEFAULT_RUN_TARGETS).split(",") if t.strip()]
    status = _check_targets(targets, "run", "--targets", must_run=not allow_unavailable)
    if status:
        return status
    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.out) / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _progress(f"brokerconf run {run_id}: results in {out_dir}")
    stages = StageClock(setup_seconds=setup_seconds_from_env())
    speed = {"start_seconds": probe_seconds()}  # before any broker runs: the machine's own speed
    status, verdicts = _suites_and_chaos(args, targets, out_dir, allow_unavailable, stages)
    matrix_path = out_dir / "matrix.json"
    if not matrix_path.exists():
        print(f"brokerconf run: the suites exited with {status} before writing the matrix", file=sys.stderr)
        return status or 1
    matrix = json.loads(matrix_path.read_text())
    timing = _read_json(out_dir / "timing.json") or {}
    # each chaos run's wall time beside the suites' units: scripts/record_costs.py keeps both, and
    # the next stage starts its longest runs first (brokerconf/chaos_stage.py)
    timing["chaos"] = {chaos_stage.cost_key(v["experiment"], v["target"]): v["wall_seconds"]
                       for v in verdicts if "wall_seconds" in v}
    (out_dir / "timing.json").write_text(json.dumps(timing, indent=2))
    # The Spark stage: the pipeline judges the same histories, and compares the targets.
    from reports.pipeline.main_job import run_spark_stage, stage_failed

    with stages.timed("Spark analysis"):
        spark = run_spark_stage(out_dir, progress=_progress)
    speed["end_seconds"] = probe_seconds()  # every broker stopped again
    times = {"stages": stages.to_json(), "total_seconds": round(stages.setup + time.monotonic() - started, 1),
             "targets": timing.get("targets", {}), "modules": timing.get("modules", {}), "workers": args.workers,
             "chaos_parallel": args.chaos_parallel, "machine_speed": speed}
    html_path = write_run_report(out_dir, run_id, matrix, seconds=time.monotonic() - started, chaos=verdicts,
                                 spark=spark, times=times)
    print()
    from conformance.matrix import columns, summary_line

    for name in columns(matrix):
        print(summary_line(name, matrix))
    for line in chaos_stage.console_lines(verdicts):
        print(line)
    if spark is not None:
        print(f"Spark ({spark['engine']} engine, {spark['master']}): "
              + (f"did not finish: {spark['error']}" if spark["error"] else
                 "; ".join(f"{v['run']} [{v['target']}] valid = {v['valid']}" for v in spark["verdicts"])))
    print()
    for line in format_times(times):
        print(line)
    print(f"report: {html_path.resolve()}\nmatrix: {matrix_path.resolve()}\njunit: {(out_dir / 'junit.xml').resolve()}")
    if status not in (0, 1):  # interrupted, internal or usage error: the run itself broke
        return status
    # Non-zero when the reference broker fails a statement: it is ours and must conform. A real
    # broker's failure is a finding, shown in the report (and, once confirmed, recorded as a
    # known deviation), not a crash of the main job.
    reference_failed = sum(matrix["summary"][t]["failed"] for t, info in matrix["targets"].items()
                           if info["kind"] == "reference")
    # a client statement failing against the reference broker is booked under its client, not the
    # broker; a run of ours against ours still must pass (our clients are checked against it)
    reference_failed += sum(1 for column in matrix.get("clients", {}) for cell in matrix["matrix"][column].values()
                            for test in cell["tests"] if test["outcome"] in ("failed", "error")
                            and matrix["targets"].get(test["target"], {}).get("kind") == "reference")
    chaos_failed = chaos_stage.stage_failed(verdicts) or stage_failed(spark)
    return 1 if reference_failed or chaos_failed else 0


def _suites_and_chaos(args: argparse.Namespace, targets: list[str], out_dir: Path, allow_unavailable: bool,
                      stages: StageClock) -> tuple[int, list[dict]]:
    """The suites (one pytest on ``args.workers`` workers) and the chaos stage side by side: both
    spend most of their time waiting on brokers, so the experiments run while the suites do rather
    than after them. Everything is started from this (the main) thread, so a signal is passed on
    to pytest and to every experiment, each of which then stops what it started (brokerconf/
    children.py). Returns pytest's exit status and the chaos verdicts."""
    import subprocess

    from brokerconf.children import Children

    with Children(name="brokerconf run") as kids:
        began = time.monotonic()
        _progress(f"brokerconf run: conformance suites against {', '.join(targets)} on {args.workers} "
                  f"worker{'s' if args.workers > 1 else ''}; the chaos stage runs beside them")
        suites = kids.start(_suite_command(targets, out_dir, allow_unavailable=allow_unavailable,
                                           workers=args.workers, suites=args.suite), stdin=subprocess.DEVNULL)
        runs, verdicts = chaos_stage.plan(args.chaos_duration, targets, out_dir, _progress, seed=args.chaos_seed)
        if runs:
            _progress(f"chaos: {len(runs)} experiments, {min(args.chaos_parallel, len(runs))} at a time")
        verdicts += chaos_stage.run_all(runs, parallel=args.chaos_parallel, progress=_progress, children=kids)
        chaos_seconds = time.monotonic() - began
        status = kids.wait(suites)
    # the suites' own wall time is their pytest session's (conformance/schedule.py's timing
    # report): pytest may have ended long before the chaos stage did
    timing = _read_json(out_dir / "timing.json") or {}
    stages.add("conformance suites", timing.get("wall_seconds", time.monotonic() - began))
    stages.add("chaos experiments (beside the suites)", chaos_seconds)
    return status, verdicts


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _suite_command(targets: list[str], out_dir: Path, *, targets_file: str | None = None,
                   suites: list[str] | None = None, extra: list[str] | None = None,
                   allow_unavailable: bool = False, workers: int = 1) -> list[str]:
    """The pytest command line `brokerconf suite` runs (a subprocess: each run gets a fresh
    interpreter, so in-process brokers and their native libraries never leak between runs).
    With ``workers`` > 1, on that many pytest-xdist workers: each suite module's tests of one
    target stay on one worker (its broker starts once), and the modules go out longest first by
    their recorded cost (conformance/schedule.py)."""
    # found, not imported: the suites sit above the command line (tests/test_import_graph.py LAYERS)
    suites_dir = Path(importlib.util.find_spec("suites").origin).resolve().parent
    command = [sys.executable, "-m", "pytest", *(suites or [str(suites_dir)]),
               "-p", "no:cacheprovider", "-o", "addopts=", "-rfExs",
               f"--rootdir={suites_dir.parent}",
               f"--junitxml={out_dir / 'junit.xml'}", f"--alluredir={out_dir / 'allure-results'}",
               f"--conformance-matrix={out_dir / 'matrix.json'}", f"--timing-report={out_dir / 'timing.json'}"]
    if workers > 1:
        command += ["-n", str(workers), "--dist", "loadgroup", "--no-loadscope-reorder"]
    for target in targets:
        command += ["--target", target]
    if targets_file:
        command += ["--targets-file", targets_file]
    if allow_unavailable:
        command.append("--allow-unavailable")
    return command + list(extra or [])


def cmd_suite(args: argparse.Namespace) -> int:
    import subprocess

    from brokerconf import children
    from reports.render.matrix_report import write_matrix_report

    targets = args.target or ["reference"]
    status = _check_targets(targets, "suite", "--target", targets_file=args.targets_file,
                            must_run=not args.allow_unavailable)
    if status:
        return status
    run_id = datetime.now(timezone.utc).strftime("suite-%Y%m%dT%H%M%SZ")
    out_dir = Path(args.out) / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    command = _suite_command(targets, out_dir, targets_file=args.targets_file, suites=args.suite,
                             extra=args.pytest_args, allow_unavailable=args.allow_unavailable, workers=args.workers)
    _progress(f"running: {' '.join(command)}")
    # a signal is passed on to pytest, which stops its brokers before this command ends (brokerconf/children.py)
    status = children.run(command, stdin=subprocess.DEVNULL)
    matrix = out_dir / "matrix.json"
    if not matrix.exists():
        print(f"brokerconf suite: pytest exited with {status} before writing the matrix", file=sys.stderr)
        return status or 1
    html_path = write_matrix_report(out_dir, json.loads(matrix.read_text()))
    print(f"\nmatrix: {matrix.resolve()}\nreport: {html_path.resolve()}\njunit: {(out_dir / 'junit.xml').resolve()}\n"
          f"allure results: {(out_dir / 'allure-results').resolve()} (view: allure serve {out_dir / 'allure-results'})")
    return status


def cmd_chaos_run(args: argparse.Namespace) -> int:
    from brokerconf.chaos_job import run_and_judge, summary
    from brokerconf.chaos_repeat import figures, render_table
    from chaos.experiment_file import ExperimentError, load_experiment, with_overrides

    if args.target is not None:
        status = _check_targets([args.target], "chaos run", "--target", must_run=False)
        if status:
            return status
    files = args.file if isinstance(args.file, list) else [args.file]
    try:
        experiments = [with_overrides(load_experiment(path), duration_s=args.duration, target=args.target,
                                      settings=args.set or (), seed=args.seed) for path in files]
    except ExperimentError as exc:
        print(f"brokerconf chaos run: {exc}", file=sys.stderr)
        return 2
    if args.run_dir is not None and (len(experiments) > 1 or args.repeat > 1):
        print("brokerconf chaos run: --run-dir takes one experiment file and no --repeat", file=sys.stderr)
        return 2
    status, table = 0, {}
    for path, exp in zip(files, experiments):
        # the experiment needs its broker: one that cannot run here fails (1), with the reason
        bad = _check_targets([exp.target.name], "chaos run", "[target] name" if args.target is None else "--target")
        if bad:
            return bad
        label = f"{exp.name} on {exp.target.name}"
        for run in range(args.repeat):
            stamp = datetime.now(timezone.utc).strftime(f"chaos-{exp.name}-%Y%m%dT%H%M%SZ")
            out_dir = Path(args.run_dir) if args.run_dir is not None else \
                Path(args.out) / (stamp if args.repeat == 1 else f"{stamp}-run{run + 1}")
            if args.repeat > 1:
                _progress(f"\n{label}: run {run + 1} of {args.repeat}")
            try:
                verdict = run_and_judge(exp, out_dir, progress=_progress)
            except ExperimentError as exc:
                print(f"brokerconf chaos run: {exc}", file=sys.stderr)
                return 2
            print(summary(verdict))
            print(f"history: {(out_dir / 'history.jsonl').resolve()}\nverdict: {(out_dir / 'verdict.json').resolve()}\n"
                  f"report: {Path(verdict['report']).resolve()}\nreplay: {replay_command(path, exp.seed, args)}")
            table.setdefault(label, []).append(figures(verdict))
            status = status or (0 if verdict["valid"] is True else 1)
    if args.repeat > 1 or len(experiments) > 1:
        print("\nmedian [min..max] over the runs (lock-loss: the first fault of each run; never: not seen "
              "while watched)\n" + render_table(table))
    return status


def replay_command(path: str, seed: int, args: argparse.Namespace) -> str:
    """The command that runs this experiment again with the same schedule: its seed, and the
    overrides it ran with (a replay of a --set run without them would be another experiment)."""
    import shlex

    command = ["brokerconf", "chaos", "run", str(path), "--seed", str(seed)]
    if args.duration is not None:
        command += ["--duration", str(args.duration)]
    if args.target is not None:
        command += ["--target", args.target]
    for setting in args.set or ():
        command += ["--set", setting]
    return shlex.join(command)


def cmd_analyze(args: argparse.Namespace) -> int:
    from reports.pipeline.analyze import run_and_stop

    return run_and_stop(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from reports.pipeline.compare import main as compare_main

    return compare_main([*args.paths, "--out", args.out])


def cmd_clients(args: argparse.Namespace) -> int:
    """Issue 28's table from a run directory (reports/client_table.py), printed as Markdown. A
    directory or matrix that cannot be read is a usage error naming the option; a run without
    junit.xml still gets its statement table, every gap "not measured in this run"."""
    from reports.client_table import (ClientTableError, read_junit, read_matrix, render_markdown, statement_table,
                                      wait_table)

    report_dir = Path(args.report_dir)
    if not report_dir.is_dir():
        print(f"brokerconf clients: REPORT_DIR: {report_dir} is not a directory (a run's output, e.g. "
              "reports/out/<run>)", file=sys.stderr)
        return 2
    matrix_path = Path(args.matrix) if args.matrix else report_dir / "matrix.json"
    option = "--matrix" if args.matrix else "REPORT_DIR"
    try:
        matrix = read_matrix(matrix_path)
    except ClientTableError as exc:
        print(f"brokerconf clients: {option}: {exc}", file=sys.stderr)
        return 2
    junit_path = Path(args.junit) if args.junit else report_dir / "junit.xml"
    measurements = []
    if args.junit or junit_path.exists():
        try:
            measurements = read_junit(junit_path)
        except ClientTableError as exc:
            print(f"brokerconf clients: {'--junit' if args.junit else 'REPORT_DIR'}: {exc}", file=sys.stderr)
            return 2
    else:
        print(f"brokerconf clients: no junit.xml in {report_dir}: no gaps to show", file=sys.stderr)
    print(render_markdown(statement_table(matrix), wait_table(matrix, measurements)))
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    from machinery.faultproxy.server import main as proxy_main

    return proxy_main(["--host", args.host, "--port", str(args.port)])


def _positive_float(text: str) -> float:
    """An argparse type: a number above 0 (argparse names the option and exits 2 otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from conformance.bench.soak import format_summary, run_soak, write_json
    from conformance.bench.soak_clients import OPTIONAL_WORKERS

    warmup = args.warmup if args.warmup is not None else args.duration / 3
    problems = []
    without = frozenset(name.strip() for name in (args.without or "").split(",") if name.strip())
    unknown = sorted(without - OPTIONAL_WORKERS.keys())
    if unknown:
        problems.append(f"--without: unknown client(s) {', '.join(unknown)} (known: {', '.join(OPTIONAL_WORKERS)})")
    if warmup >= args.duration:
        problems.append(f"--warmup ({warmup:g} s) must be shorter than --duration ({args.duration:g} s)")
    if args.sample_every > args.report_every:
        problems.append(f"--sample-every ({args.sample_every:g} s) must not exceed --report-every "
                        f"({args.report_every:g} s)")
    if args.report_every > args.duration:
        problems.append(f"--report-every ({args.report_every:g} s) must not exceed --duration ({args.duration:g} s)")
    if problems:
        for problem in problems:
            print(f"brokerconf bench soak: {problem}", file=sys.stderr)
        return 2
    result = run_soak(duration=args.duration, report_every=args.report_every, sample_every=args.sample_every,
                      warmup=warmup, rate=args.rate, max_slope=args.max_slope, without=without,
                      progress=_progress)
    print()
    print(format_summary(result))
    if args.json:
        write_json(result, Path(args.json))
        print(f"results written to {args.json}")
    return 0 if result.passed else 1


def cmd_bench_proxy(args: argparse.Namespace) -> int:
    from chaos.proxy_bench import format as format_bench
    from chaos.proxy_bench import run_proxy_bench

    _progress(f"fault proxy benchmark, ours and toxiproxy-server: {args.repeats} rounds of {args.round_trips} "
              f"round trips and {args.megabytes} MB streamed each...")
    result = run_proxy_bench(round_trips=args.round_trips, throughput_mb=args.megabytes, repeats=args.repeats)
    print(format_bench(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    return 0


def cmd_targets_list(args: argparse.Namespace) -> int:
    from conformance.targets.registry import BUILTIN, load_targets_file, resolve

    external = load_targets_file(Path(args.targets_file)) if args.targets_file else {}
    rows = []
    for name in [*BUILTIN, *external]:
        target = resolve(name, external)
        ok, reason = target.availability()
        capabilities = sorted(target.capabilities())
        protocols = ",".join(c.removeprefix("protocol.") for c in capabilities if c.startswith("protocol."))
        # how it would launch here: in-process, a local process, a container, or someone else's broker
        launch = getattr(target, "launch_mode", None) or ("external" if name in external else "process")
        rows.append((name, target.kind, launch, "yes" if ok else "no", protocols or "-", reason))
    width = max(len(r[0]) for r in rows)
    print(f"{'target':<{width}}  {'kind':<10} {'launch':<10} {'runs':<5} {'protocols':<16} why not")
    for name, kind, launch, ok, protocols, reason in rows:
        print(f"{name:<{width}}  {kind:<10} {launch:<10} {ok:<5} {protocols:<16} {reason}")
    return 0


def cmd_targets_install(args: argparse.Namespace) -> int:
    from machinery.faultproxy.install import ToxiproxyInstallError, install_toxiproxy
    from conformance.targets.install import PACKAGES, TOOLS, InstallError, install, packages_for

    # Debian packages come from apt (root); TOOLS (Artemis, ActiveMQ's AMQP transport) are fetched
    # with Maven into .tools/ and toxiproxy is built with `go install` into .tools/bin (no root)
    targets = args.targets or [*PACKAGES, "artemis", "toxiproxy"]
    others = [t for t in targets if t != "toxiproxy"]
    try:
        packages_for(others)  # a bad name is a usage error before anything is installed
    except InstallError as exc:
        print(f"brokerconf targets install: {exc}; or toxiproxy", file=sys.stderr)
        return 2
    try:
        if others:
            install(others, progress=_progress)
        if "toxiproxy" in targets:
            install_toxiproxy(progress=_progress)
    except (InstallError, ToxiproxyInstallError) as exc:
        print(f"brokerconf targets install: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    from reference_broker.__main__ import add_arguments

    parser = argparse.ArgumentParser(prog="brokerconf", description="Conformance suite and chaos harness for message brokers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="the main job: conformance suites against the reference broker (and ActiveMQ "
                                      "Classic and Artemis where installed), with a report")
    run.add_argument("--targets", default=None,
                     help=f"comma-separated targets (default: {DEFAULT_RUN_TARGETS}; a default target that cannot run "
                          "here is reported not applicable, a named one fails the run)")
    run.add_argument("--allow-unavailable", action="store_true",
                     help="report a named target that cannot run here as not applicable instead of failing")
    run.add_argument("--out", default="reports/out", help="directory for reports (default: reports/out)")
    run.add_argument("--chaos-duration", type=float, default=20.0, metavar="S",
                     help="seconds each chaos experiment of the stage runs (experiments 1 and 4 on the reference broker; 2 and 4 on ActiveMQ when installed); 0 skips the stage (default 20)")
    run.add_argument("--chaos-seed", type=int, default=None, metavar="N",
                     help="the seed of every chaos experiment of the stage (default: each file's own)")
    run.add_argument("--workers", type=positive_int, default=DEFAULT_WORKERS, metavar="N",
                     help=f"pytest-xdist workers for the suites (default {DEFAULT_WORKERS}; 1: one process)")
    run.add_argument("--chaos-parallel", type=positive_int, default=CHAOS_PARALLEL, metavar="N",
                     help=f"chaos experiments running at once (default {CHAOS_PARALLEL})")
    run.add_argument("--suite", action="append", metavar="PATH",
                     help="a suite file or directory (repeatable; default: every suite in suites/)")
    run.set_defaults(func=cmd_run)

    suite = sub.add_parser("suite", help="run the conformance suites against targets; writes JUnit XML, Allure "
                                          "results, the conformance matrix (JSON) and an HTML report")
    suite.add_argument("--target", action="append", metavar="NAME",
                       help="target to test (repeatable; default reference); see `brokerconf targets list`")
    suite.add_argument("--targets-file", metavar="FILE", help="TOML file naming already running brokers")
    suite.add_argument("--allow-unavailable", action="store_true",
                       help="report a --target that cannot run here as not applicable (with the reason) instead "
                            "of failing without running anything")
    suite.add_argument("--suite", action="append", metavar="PATH",
                       help="a suite file or directory (repeatable; default: every suite in suites/)")
    suite.add_argument("--out", default="reports/out", help="directory for reports (default: reports/out)")
    suite.add_argument("--workers", type=positive_int, default=1, metavar="N",
                       help="pytest-xdist workers (default 1: one process)")
    suite.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --, e.g. -- -k groups")
    suite.set_defaults(func=cmd_suite)

    chaos = sub.add_parser("chaos", help="chaos experiments")
    chaos_sub = chaos.add_subparsers(dest="chaos_command", required=True, metavar="ACTION")
    chaos_run = chaos_sub.add_parser("run", help="run an experiment file (TOML); writes the history and the verdict")
    chaos_run.add_argument("file", nargs="+", help="experiment file(s), e.g. chaos/experiments/reference-kill-restart.toml")
    chaos_run.add_argument("--duration", type=float, metavar="S", help="override the file's duration_s")
    chaos_run.add_argument("--target", metavar="NAME", help="override the file's [target] name (brokerconf targets list)")
    chaos_run.add_argument("--out", default="reports/out", help="directory for the run (default: reports/out)")
    chaos_run.add_argument("--run-dir", metavar="DIR",
                           help="write the run into exactly DIR instead of a new directory under --out (one file, "
                                "no --repeat; the main job's chaos stage uses it)")
    chaos_run.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                           help="run each file N times and print the median and spread of the figures side by side")
    chaos_run.add_argument("--seed", type=int, metavar="N",
                           help="override the file's seed, which draws the drawn nemesis timings (every_max_s, "
                                "down_max_s) and the cluster workload's churn: the seed a run printed replays it")
    chaos_run.add_argument("--set", action="append", metavar="KEY=VALUE",
                           help="override one setting of the file(s), e.g. topology.lock_keep_alive_period_ms=0 or "
                                "topology.nfs_version=3 (repeatable)")
    chaos_run.set_defaults(func=cmd_chaos_run)

    analyze = sub.add_parser("analyze", help="histories -> verdicts on Spark (local or --master spark://...); "
                                             "exit 1 when a verdict is false, 2 on bad input")
    from reports.pipeline.cli_args import add_arguments as add_analyze_arguments

    add_analyze_arguments(analyze)
    analyze.set_defaults(func=cmd_analyze)

    compare = sub.add_parser("compare", help="join runs' conformance matrices and chaos verdicts on Spark: "
                                             "target x spec ID and target x checker tables, and an HTML page")
    compare.add_argument("paths", nargs="+", metavar="PATH", help="run directories (searched recursively) or files")
    compare.add_argument("--out", default="reports/out/comparison", metavar="DIR",
                         help="where comparison.json, the Parquet tables and index.html go (default: reports/out/comparison)")
    compare.set_defaults(func=cmd_compare)

    clients = sub.add_parser("clients", help="a run's client statements x clients (real ActiveMQ, Artemis, ours) and "
                                             "their measured reconnect gaps side by side, as Markdown")
    clients.add_argument("report_dir", metavar="REPORT_DIR",
                         help="a run's output directory (matrix.json and junit.xml), e.g. reports/out/<run>")
    clients.add_argument("--matrix", metavar="FILE", help="read the matrix from FILE instead of REPORT_DIR/matrix.json")
    clients.add_argument("--junit", metavar="FILE", help="read the gaps from FILE instead of REPORT_DIR/junit.xml")
    clients.set_defaults(func=cmd_clients)

    proxy = sub.add_parser("proxy", help="serve the Toxiproxy HTTP API: a fault-injecting TCP proxy")
    proxy.add_argument("--host", default="127.0.0.1", help="API listen host (default 127.0.0.1)")
    proxy.add_argument("--port", type=int, default=8474, help="API port (default 8474, like Toxiproxy)")
    proxy.set_defaults(func=cmd_proxy)

    targets = sub.add_parser("targets", help="list targets and whether they can run here; install their packages")
    targets_sub = targets.add_subparsers(dest="targets_command", required=True, metavar="ACTION")
    targets_list = targets_sub.add_parser("list", help="each target, whether it can run here and why not")
    targets_list.add_argument("--targets-file", metavar="FILE", help="also list the brokers of this targets file")
    targets_list.set_defaults(func=cmd_targets_list)
    targets_install = targets_sub.add_parser("install", help="install the Debian packages of local targets (root); "
                                             "`docker` also starts the engine and builds the images; "
                                             "`artemis` fetches the pinned Artemis distribution and `activemq-amqp` "
                                             "ActiveMQ's AMQP transport with Maven into .tools/ (no root; `activemq` "
                                             "tries activemq-amqp too); `toxiproxy` builds the pinned toxiproxy-server "
                                             "into .tools/bin (Go)")
    targets_install.add_argument("targets", nargs="*",
                                 help="targets to install (default: activemq rabbitmq mosquitto docker artemis "
                                      "toxiproxy; also: activemq-amqp)")
    targets_install.set_defaults(func=cmd_targets_install)

    broker = sub.add_parser("broker", help="run the reference broker")
    add_arguments(broker)
    broker.set_defaults(func=cmd_broker)

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    stomp = bench_sub.add_parser("stomp", help="STOMP throughput: reference broker vs ActiveMQ Classic")
    stomp.add_argument("--messages", type=positive_int, default=200_000)
    stomp.add_argument("--body-size", type=positive_int, default=256)
    stomp.add_argument("--repeats", type=positive_int, default=3)
    stomp.add_argument("--warmup-messages", type=positive_int, default=100_000,
                       help="messages in the discarded first run per target (JIT warm-up)")
    stomp.add_argument("--targets", default="reference,activemq")
    stomp.add_argument("--persistent", action="store_true",
                       help="persistent sends; the reference broker on its journal store (sync always)")
    stomp.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    stomp.set_defaults(func=cmd_bench_stomp)

    mqtt = bench_sub.add_parser("mqtt", help="MQTT QoS 0/1 throughput: reference vs Mosquitto, ActiveMQ, amqtt")
    mqtt.add_argument("--messages", type=positive_int, default=200_000)
    mqtt.add_argument("--repeats", type=positive_int, default=3)
    mqtt.add_argument("--qos", default="0,1", choices=["0", "1", "0,1"], help="QoS levels to measure (default 0,1)")
    mqtt.add_argument("--targets", default="reference,mosquitto,activemq,amqtt")
    mqtt.add_argument("--warmup-messages", type=positive_int, default=50_000)
    mqtt.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    mqtt.set_defaults(func=cmd_bench_mqtt)

    amqp = bench_sub.add_parser("amqp", help="AMQP 1.0 throughput: reference vs RabbitMQ")
    amqp.add_argument("--messages", type=positive_int, default=100_000)
    amqp.add_argument("--repeats", type=positive_int, default=3)
    amqp.add_argument("--targets", default="reference,rabbitmq")
    amqp.add_argument("--warmup-messages", type=positive_int, default=20_000)
    amqp.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    amqp.set_defaults(func=cmd_bench_amqp)
    soak = bench_sub.add_parser("soak", help="the reference broker under mixed STOMP/MQTT/AMQP load with misbehaving "
                                             "clients: RSS and event-loop lag over time, memory trend after warm-up")
    soak.add_argument("--duration", type=_positive_float, default=600.0, metavar="S",
                      help="seconds of load (default 600)")
    soak.add_argument("--report-every", type=_positive_float, default=30.0, metavar="S",
                      help="seconds between table rows (default 30)")
    soak.add_argument("--sample-every", type=_positive_float, default=1.0, metavar="S",
                      help="seconds between RSS / loop-lag samples (default 1)")
    soak.add_argument("--warmup", type=_non_negative_float, default=None, metavar="S",
                      help="seconds left out of the memory trend (default: a third of --duration)")
    soak.add_argument("--rate", type=_positive_float, default=50.0, metavar="N",
                      help="messages per second of each well-behaved producer (default 50; misbehaving clients "
                           "act at a fifth of it)")
    soak.add_argument("--max-slope", type=_non_negative_float, default=0.5, metavar="MB_PER_MIN",
                      help="the verdict fails when RSS grows faster than this after warm-up (default 0.5 MB/min)")
    soak.add_argument("--without", metavar="NAMES",
                      help="leave these clients out, comma-separated: fresh (new topic names), stuck (never-reading "
                           "consumers), churn, garbage, tx (the never-committed transaction); to see which one a "
                           "memory trend comes from")
    soak.add_argument("--json", metavar="FILE", help="also write the samples and the summary as JSON")
    soak.set_defaults(func=cmd_bench_soak)
    proxy_bench = bench_sub.add_parser("proxy", help="latency the fault proxy adds (p50/p99) and its loopback throughput, "
                                                     "ours beside the real toxiproxy-server")
    proxy_bench.add_argument("--round-trips", type=positive_int, default=5000, help="per round and column (default 5000)")
    proxy_bench.add_argument("--megabytes", type=positive_int, default=200, help="streamed per round and column (default 200)")
    proxy_bench.add_argument("--repeats", type=positive_int, default=3, help="rounds; the columns take turns (default 3)")
    proxy_bench.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    proxy_bench.set_defaults(func=cmd_bench_proxy)
    return parser


def _stop_on_termination() -> dict:
    """SIGTERM / SIGHUP (a CI job's timeout, a closed terminal) end the run as Ctrl-C does: by an
    exception, so every ``finally`` and context manager stops what the run started (brokers,
    FUSE mounts, the store server, proxies). Python's default for SIGTERM exits at once and left
    two Artemis JVMs and both NFS mounts behind (seen when ``timeout`` ended a chaos run). A second
    signal while cleaning up is left to the default: exit now. Returns the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # signal handlers can only be set from the main thread (main() called by a test)

    def terminated(signum, frame):  # noqa: ARG001 - the signal module's signature
        for name in ("SIGTERM", "SIGHUP"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        print(f"brokerconf: {signal.Signals(signum).name} received; stopping what this run started", file=sys.stderr)
        raise SystemExit(128 + signum)

    return {number: signal.signal(number, terminated) for number in (signal.SIGTERM, signal.SIGHUP)}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        # throughput is what the optimising JIT is for: benchmarks' broker JVMs get it
        # (conformance/targets/runtime/jvm.py; everything else launches them with a quick start)
        from conformance.targets.runtime.jvm import full_jit_for_benchmarks

        full_jit_for_benchmarks()
    previous = _stop_on_termination()
    try:
        return args.func(args)
    finally:
        for number, handler in previous.items():  # as they were (main() called inside another program)
            signal.signal(number, handler)


if __name__ == "__main__":
    sys.exit(main())
