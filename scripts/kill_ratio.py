"""How many deliberate faults of the reference broker the suites catch, per statement family.

    .venv/bin/python scripts/kill_ratio.py [--alone] [--family CLU --family FT ...] [--fault NAME ...] [--list]

Runs each batch of faults (tests/conformance/fault_batches.py: several faults of one suite whose
statements do not overlap share a run; ``--alone``: one run per fault) against the reference
broker broken by tests/conformance/broken_reference.py, and prints per family (the statement ID's
prefix; GRP-CLUSTER apart from GRP): the statements that apply to the reference target, the
faults registered for it, how many were caught (every statement the fault names reported
failed), statements per fault, and the faults not caught. Exit status 1 when a fault was not
caught or a statement no fault touches failed anyway.

Statements whose subject is a client library (the catalogue's ``subject = "client"``: failover
and discovery URIs, the cluster-aware client) are checked on our own Python client, not on the
broker: they are left out of the counts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.spec.catalogue import load_catalogue  # noqa: E402
from tests.conformance.broken_reference import FAULTS  # noqa: E402
from tests.conformance.fault_batches import batches, run_batch  # noqa: E402

# The target ratio: at least one fault for every this many statements of a family.
STATEMENTS_PER_FAULT = 5


def family(spec_id: str) -> str:
    return "GRP-CLUSTER" if spec_id.startswith("GRP-CLUSTER-") else spec_id.split("-", 1)[0]


def broker_statements() -> dict[str, list[str]]:
    """Family -> IDs of statements about the broker that apply to the reference target."""
    out: dict[str, list[str]] = defaultdict(list)
    for statement in load_catalogue().values():
        if statement.applies("reference") and statement.subject != "client":
            out[family(statement.id)].append(statement.id)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alone", action="store_true", help="one suite run per fault instead of batches")
    parser.add_argument("--family", action="append", default=[], help="only the faults of this family")
    parser.add_argument("--fault", action="append", default=[], help="only this fault")
    parser.add_argument("--list", action="store_true", help="list the faults and batches, run nothing")
    args = parser.parse_args(argv)

    statements = broker_statements()
    chosen = [f for f in FAULTS.values()
              if (not args.family or family(f.breaks[0]) in args.family) and (not args.fault or f.name in args.fault)]
    plan = batches(chosen, alone=args.alone)
    if args.list:
        for each in chosen:
            print(f"{family(each.breaks[0]):12} {each.name:40} {each.suite:36} {' '.join(each.breaks)}\n"
                  f"{'':12} {each.summary}")
        print(f"\n{len(chosen)} faults in {len(plan)} suite runs")
        return 0

    caught: set[str] = set()
    trouble: list[str] = []
    total = 0.0
    with tempfile.TemporaryDirectory(prefix="kill-ratio-") as tmp:
        for n, batch in enumerate(plan, 1):
            print(f"[{n}/{len(plan)}] {batch.name} ...", end="", flush=True)
            verdict = run_batch(batch, Path(tmp) / f"run{n}")
            total += verdict.seconds
            caught.update(verdict.caught)
            print(f" {verdict.seconds:.0f} s: caught {len(verdict.caught)}/{len(batch.faults)}"
                  + (f"; NOT caught: {', '.join(verdict.uncaught)}" if verdict.uncaught else ""), flush=True)
            for name in verdict.uncaught:
                expected = FAULTS[name].breaks
                for spec in expected:
                    print(f"    {name}: {spec} expected failed, got {verdict.outcomes.get(spec, 'not run')}"
                          f" {verdict.reasons.get(spec, '')[:300]}")
            for spec, why in verdict.unexpected.items():
                trouble.append(f"{batch.name}: {spec} (touched by no fault of the run) {why}")
            if not verdict.outcomes:
                trouble.append(f"{batch.name}: no matrix (exit {verdict.exit_code}):\n{verdict.output_tail}")

    faults_of: dict[str, list[str]] = defaultdict(list)
    for each in chosen:
        faults_of[family(each.breaks[0])].append(each.name)
    print(f"\n{'family':12} {'statements':>10} {'faults':>6} {'caught':>6} {'stmts/fault':>11}  not caught"
          f" (a * after the ratio: above the target of {STATEMENTS_PER_FAULT})")
    families = sorted(set(statements) | set(faults_of)) if not (args.family or args.fault) else sorted(faults_of)
    for fam in families:
        names = faults_of.get(fam, [])
        got = [f for f in names if f in caught]
        count = len(statements.get(fam, []))
        ratio = f"{count / len(got):.1f}" if got else "-"
        ratio += "*" if count and (not got or count / len(got) > STATEMENTS_PER_FAULT) else " "
        missing = [f for f in names if f not in caught]
        print(f"{fam:12} {count:>10} {len(names):>6} {len(got):>6} {ratio:>12} {', '.join(missing)}")
    print(f"\n{len(caught)}/{len(chosen)} faults caught in {len(plan)} suite runs, {total:.0f} s of suite time")
    for line in trouble:
        print("TROUBLE:", line)
    return 1 if len(caught) < len(chosen) or trouble else 0


if __name__ == "__main__":
    sys.exit(main())
