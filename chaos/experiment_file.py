"""The experiment file: a TOML description of one chaos experiment, checked up front.

    name = "reference-kill-restart"
    duration_s = 20                 # how long the workload runs under faults
    seed = 1

    [target]
    name = "reference:process"      # a target name (`brokerconf targets list`); must be killable for kill faults
    protocol = "stomp"
    failover = true                 # clients use failover:(...) over the target's address
    failover_options = "randomize=false&initialReconnectDelay=100&maxReconnectDelay=1000"

    [workload]
    kind = "queue"                  # queue (the others arrive with later work)
    producers = 2
    consumers = 2
    rate = 100                      # sends per second per producer
    persistent = true
    destination = "queue://chaos.kill"

    [[nemesis]]
    kind = "kill"                   # kill | pause | stop (each followed by a restart / resume) |
                                    # partition (clients cut off through the fault proxy, then healed)
    every_s = 5                     # seconds of quiet before each fault (the first after N s, the next N s after a heal)
    down_s = 1                      # how long the broker stays down (or paused)

    [checkers]
    total_queue = true
    duplicates_allowed = false      # at-least-once systems may redeliver unacknowledged messages

A bad file is refused before anything starts, naming the offending key (with a did-you-mean).
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ExperimentError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TargetSection(_Strict):
    name: str = "reference:process"
    protocol: Literal["stomp", "mqtt", "amqp"] = "stomp"
    failover: bool = True
    failover_options: str = "randomize=false&initialReconnectDelay=100&maxReconnectDelay=1000"


class WorkloadSection(_Strict):
    kind: Literal["queue"] = "queue"
    producers: int = Field(default=2, ge=1, le=64)
    consumers: int = Field(default=2, ge=1, le=64)
    rate: float = Field(default=100, gt=0)
    persistent: bool = True
    destination: str = "queue://chaos.queue"


class NemesisSection(_Strict):
    # kill | pause | stop act on the broker's process; partition cuts the clients off through
    # the fault proxy (both ways, or one stream: upstream = client -> broker).
    kind: Literal["kill", "pause", "stop", "partition"]
    every_s: float = Field(gt=0)
    down_s: float = Field(default=1.0, ge=0)
    direction: Literal["both", "upstream", "downstream"] = "both"


class CheckersSection(_Strict):
    total_queue: bool = True
    duplicates_allowed: bool = False


class Experiment(_Strict):
    name: str = Field(min_length=1)
    duration_s: float = Field(gt=0, le=24 * 3600)
    seed: int = 0  # reserved for randomised schedules; nothing in a run draws on it yet
    drain_quiet_s: float = Field(default=2.0, gt=0)
    target: TargetSection = Field(default_factory=TargetSection)
    workload: WorkloadSection = Field(default_factory=WorkloadSection)
    nemesis: list[NemesisSection] = Field(default_factory=list)
    checkers: CheckersSection = Field(default_factory=CheckersSection)


def _fields_at(loc: tuple) -> list[str]:
    model: type[BaseModel] = Experiment
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[str(part)].annotation
        inner = getattr(annotation, "__args__", (annotation,))[0]
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return []
        model = inner
    return list(model.model_fields)


def _explain(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = err["loc"]
        where = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(str(loc[-1]), _fields_at(loc), n=1)
            section = ".".join(str(p) for p in loc[:-1]) or "the top level"
            lines.append(f"unknown key {loc[-1]!r} in {section}" + (f": did you mean {hint[0]!r}?" if hint else ""))
        else:
            lines.append(f"invalid value for {where!r}: {err['msg']}")
    return "; ".join(lines)


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExperimentError(f"experiment file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from None
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(f"{path}: {_explain(exc)}") from None
