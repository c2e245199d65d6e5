"""The workload and nemesis kind tables of the experiment file's parser (chaos/experiment_file.py:
`WORKLOAD_KINDS`, `FAULT_KINDS`, `STORE_FAULTS`) mean what the switches they replaced meant: the same
accepted names, heal steps, planes, step parameters and workload traits (issue 27; the switches were
in chaos/schedule.py, chaos/experiment.py and chaos/exit_watch.py, and their answers are written out
here). That no other module branches on a kind's name is tests/chaos/test_kind_dispatch.py's job."""

from __future__ import annotations

from typing import get_args

import pytest

from chaos.experiment_file import (FAULT_KINDS, PROCESS_FAULTS, PROXY_FAULTS, STORE_FAULTS, WORKLOAD_KINDS, FaultPlane,
                                   NemesisSection, WorkloadSection)


def test_the_sections_accept_exactly_the_declared_kinds():
    assert get_args(WorkloadSection.model_fields["kind"].annotation) == tuple(WORKLOAD_KINDS)
    assert get_args(NemesisSection.model_fields["kind"].annotation) == tuple(FAULT_KINDS)
    assert tuple(WORKLOAD_KINDS) == ("queue", "grouped", "topic")
    assert tuple(FAULT_KINDS) == ("kill", "pause", "stop", "partition", "latency", "bandwidth", "reset_peer",
                                  "lock-loss")


def test_each_kind_keeps_the_heal_step_and_the_plane_it_had():
    # the old schedule's FAULT_AND_HEAL and the old PROCESS_FAULTS / PROXY_FAULTS, written out
    heals = {"kill": "start", "pause": "resume", "stop": "start", "partition": "heal", "latency": "heal",
             "bandwidth": "heal", "reset_peer": "heal", "lock-loss": "heal"}
    assert {name: NemesisSection(kind=name, every_s=1).heal_step for name in FAULT_KINDS} == heals
    assert PROCESS_FAULTS == ("kill", "pause", "stop")
    assert PROXY_FAULTS == ("partition", "latency", "bandwidth", "reset_peer")
    assert [name for name, kind in FAULT_KINDS.items() if kind.plane is FaultPlane.STORE] == ["lock-loss"]


@pytest.mark.parametrize("kind, params", [
    ("partition", {"direction": "upstream"}),
    ("latency", {"latency": 250, "jitter": 20, "stream": "upstream"}),
    ("bandwidth", {"rate": 8, "stream": "upstream"}),
    ("reset_peer", {"timeout": 30, "stream": "upstream"}),
    ("kill", {}), ("pause", {}), ("stop", {}), ("lock-loss", {}),
])
def test_each_fault_step_passes_what_it_passed(kind, params):
    # the old schedule's fault_params, its answers written out
    section = NemesisSection(kind=kind, every_s=1, direction="upstream", latency_ms=250, jitter_ms=20, rate_kbps=8,
                             timeout_ms=30)
    assert section.fault_params() == params


@pytest.mark.parametrize("fault, params", [
    ("partition", {}), ("latency", {"latency": 250, "jitter": 20}), ("reset", {"timeout": 30}), ("expire", {}),
])
def test_each_store_fault_passes_what_the_runner_passed(fault, params):
    # the old runner's switch on a lock-loss entry's `fault`, its answers written out
    section = NemesisSection(kind="lock-loss", fault=fault, every_s=1, latency_ms=250, jitter_ms=20, timeout_ms=30)
    assert section.store_fault_params() == params
    assert get_args(NemesisSection.model_fields["fault"].annotation) == tuple(STORE_FAULTS)


def test_the_workload_traits_are_the_kinds_the_runner_switched_on():
    sections = {name: WorkloadSection(kind=name, destination=f"{kind.scheme}x") for name, kind in WORKLOAD_KINDS.items()}
    assert {name: (w.fans_out, w.grouped) for name, w in sections.items()} == {
        "queue": (False, False), "grouped": (False, True), "topic": (True, False)}
    assert {name: kind.scheme for name, kind in WORKLOAD_KINDS.items()} == {
        "queue": "queue://", "grouped": "queue://", "topic": "topic://"}


def test_every_plane_has_its_nemesis():
    from chaos.experiment import NEMESIS_OF_PLANE

    assert set(NEMESIS_OF_PLANE) == set(FaultPlane)
