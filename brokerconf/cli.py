"""The `brokerconf` command line. Subcommands:

  brokerconf run            the main job: the smoke scenario against the reference broker (and
                            ActiveMQ Classic when installed), ending in a report
  brokerconf broker ...     run the reference broker (same flags as `python -m reference_broker`)
  brokerconf bench stomp    STOMP throughput and peak RSS, reference vs ActiveMQ, side by side
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path


def _progress(message: str) -> None:
    print(message, flush=True)


def cmd_broker(args: argparse.Namespace) -> int:
    from reference_broker.__main__ import run

    return run(args)


def cmd_bench_stomp(args: argparse.Namespace) -> int:
    from conformance.bench.stomp import format_table, run_stomp_bench, write_json

    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    unknown = [t for t in targets if t not in ("reference", "activemq")]
    if unknown:
        print(f"brokerconf bench stomp: unknown target(s) {', '.join(unknown)} in --targets "
              "(known: reference, activemq)", file=sys.stderr)
        return 2
    results = run_stomp_bench(messages=args.messages, body_size=args.body_size, repeats=args.repeats,
                              targets=targets, warmup_messages=args.warmup_messages, progress=_progress)
    print()
    print(format_table(results, args.messages, args.body_size))
    if args.json:
        write_json(results, Path(args.json))
        print(f"results written to {args.json}")
    return 1 if any(r.error for r in results) else 0


def _targets(text: str, known: tuple[str, ...], command: str) -> tuple[str, ...] | None:
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in targets if t not in known]
    if unknown:
        print(f"brokerconf {command}: unknown target(s) {', '.join(unknown)} in --targets "
              f"(known: {', '.join(known)})", file=sys.stderr)
        return None
    return targets


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
    from conformance.smoke import SmokeScenario
    from conformance.targets.activemq import ActiveMQProcess, activemq_available, activemq_mqtt_available
    from conformance.targets.reference import ReferenceBrokerProcess
    from reports.render.run_report import write_run_report

    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.out) / run_id
    run = {"run_id": run_id, "started": datetime.now(timezone.utc).isoformat(), "targets": {}}
    failures = 0
    with tempfile.TemporaryDirectory(prefix="brokerconf-run-") as tmp:
        launchers = {"reference": lambda: ReferenceBrokerProcess(name="reference", data_dir=Path(tmp) / "reference",
                                                                 mqtt=True, amqp=True)}
        wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
        for name in wanted:
            if name not in ("reference", "activemq"):
                print(f"brokerconf run: unknown target {name!r} in --targets (known: reference, activemq)", file=sys.stderr)
                return 2
        for name in wanted:
            if name == "activemq":
                ok, reason = activemq_available()
                if not ok:
                    run["targets"][name] = {"status": "not applicable", "reason": reason, "checks": []}
                    _progress(f"activemq: not applicable: {reason}")
                    continue
                launcher = ActiveMQProcess(Path(tmp) / "activemq", mqtt=activemq_mqtt_available()[0])
            else:
                launcher = launchers[name]()
            _progress(f"starting {name}...")
            started = time.monotonic()
            try:
                launcher.start()
            except Exception as exc:
                run["targets"][name] = {"status": "could not start", "reason": str(exc), "checks": []}
                _progress(f"{name}: could not start: {exc}")
                failures += 1
                continue
            try:
                _progress(f"{name} ready on 127.0.0.1:{launcher.stomp_port} after {time.monotonic() - started:.1f} s; running the smoke scenario")
                results = SmokeScenario("127.0.0.1", launcher.stomp_port, name,
                                        mqtt_port=getattr(launcher, "mqtt_port", None),
                                        amqp_port=getattr(launcher, "amqp_port", None)).run(progress=_progress)
                run["targets"][name] = {"status": "ran", "reason": "", "checks": [asdict(r) for r in results],
                                        "log_tail": launcher.log_tail()}
                if name == "reference":
                    failures += sum(r.outcome not in ("passed", "not applicable") for r in results)
            finally:
                launcher.stop()
    json_path, html_path = write_run_report(out_dir, run)
    print()
    for name, target in run["targets"].items():
        checks = target["checks"]
        passed = sum(c["outcome"] == "passed" for c in checks)
        not_applicable = sum(c["outcome"] == "not applicable" for c in checks)
        extra = f", {not_applicable} not applicable" if not_applicable else ""
        print(f"{name:<10} {target['status']:<15} {passed}/{len(checks)} checks passed{extra} {target.get('reason') or ''}")
    print(f"report: {html_path.resolve()}\nresults: {json_path.resolve()}")
    # Non-zero only when the reference broker fails its own smoke checks: a real broker that
    # deviates is a finding shown in the report, not a crash of the run.
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    from reference_broker.__main__ import add_arguments

    parser = argparse.ArgumentParser(prog="brokerconf", description="Conformance suite and chaos harness for message brokers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="the main job: smoke scenario against the reference broker (and ActiveMQ if installed), with a report")
    run.add_argument("--targets", default="reference,activemq", help="comma-separated targets (default: reference,activemq)")
    run.add_argument("--out", default="reports/out", help="directory for reports (default: reports/out)")
    run.set_defaults(func=cmd_run)

    broker = sub.add_parser("broker", help="run the reference broker")
    add_arguments(broker)
    broker.set_defaults(func=cmd_broker)

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    stomp = bench_sub.add_parser("stomp", help="STOMP throughput: reference broker vs ActiveMQ Classic")
    stomp.add_argument("--messages", type=_positive_int, default=200_000)
    stomp.add_argument("--body-size", type=_positive_int, default=256)
    stomp.add_argument("--repeats", type=_positive_int, default=3)
    stomp.add_argument("--warmup-messages", type=_positive_int, default=100_000,
                       help="messages in the discarded first run per target (JIT warm-up)")
    stomp.add_argument("--targets", default="reference,activemq")
    stomp.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    stomp.set_defaults(func=cmd_bench_stomp)

    mqtt = bench_sub.add_parser("mqtt", help="MQTT QoS 0/1 throughput: reference vs Mosquitto, ActiveMQ, amqtt")
    mqtt.add_argument("--messages", type=_positive_int, default=200_000)
    mqtt.add_argument("--repeats", type=_positive_int, default=3)
    mqtt.add_argument("--qos", default="0,1", choices=["0", "1", "0,1"], help="QoS levels to measure (default 0,1)")
    mqtt.add_argument("--targets", default="reference,mosquitto,activemq,amqtt")
    mqtt.add_argument("--warmup-messages", type=_positive_int, default=50_000)
    mqtt.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    mqtt.set_defaults(func=cmd_bench_mqtt)

    amqp = bench_sub.add_parser("amqp", help="AMQP 1.0 throughput: reference vs RabbitMQ")
    amqp.add_argument("--messages", type=_positive_int, default=100_000)
    amqp.add_argument("--repeats", type=_positive_int, default=3)
    amqp.add_argument("--targets", default="reference,rabbitmq")
    amqp.add_argument("--warmup-messages", type=_positive_int, default=20_000)
    amqp.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    amqp.set_defaults(func=cmd_bench_amqp)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
