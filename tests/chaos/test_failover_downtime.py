"""The failover-downtime checker on literal histories named after the anomaly (Jepsen style),
and on a history a queue workload writes while a nemesis pauses a reference broker process."""

from __future__ import annotations

import functools

import pytest

from reports.checkers.failover_downtime import failover_downtime

MS = 1_000_000


def op(t_ms, process, type_, f, value=None):
    return {"time": int(t_ms * MS), "process": process, "type": type_, "f": f, "value": value}


def nem(t_ms, f, phase, nemesis="process", error=None, **value):
    event = {"time": int(t_ms * MS), "process": "nemesis", "type": "info", "f": f, "node": "A",
             "value": {"nemesis": nemesis, "phase": phase, **value}}
    if error:
        event["error"] = error
    return event


def kill(at_ms, heal_ms, key="down"):
    """A kill at ``at_ms`` and the start step that heals it at ``heal_ms`` (chaos/nemesis/process.py)."""
    return ([nem(at_ms, "kill", "start"), nem(at_ms + 1, "kill", "end", fault=key)],
            [nem(heal_ms - 50, "start", "start"),
             nem(heal_ms, "start", "end", fault_window=[{"fault": key, "f": "kill", "start": at_ms * MS,
                                                          "end": heal_ms * MS}])])


def msg(producer, seq, **extra):
    return {"id": f"r-{producer}-{seq}", "producer": producer, "seq": seq, **extra}


def send(process, producer, seq, invoked_ms, done_ms, outcome="ok"):
    return [op(invoked_ms, process, "invoke", "send", msg(producer, seq)),
            op(done_ms, process, outcome, "send", msg(producer, seq))]


def receive(process, consumer, invoked_ms, done_ms, got=None, outcome="ok"):
    value = msg(*got, consumer=consumer) if got else None
    return [op(invoked_ms, process, "invoke", "receive"), op(done_ms, process, outcome, "receive", value)]


def timeline(*parts):
    return sorted((e for part in parts for e in part), key=lambda e: e["time"])


def kill_with_a_producer_and_a_consumer():
    """Killed at 100 ms, restarted at 600 ms. Producer 0 (process 0) has a send in doubt, retires
    and carries on as process 2, which sends ok at 710 ms. Consumer 0 (process 1) had a receive
    open across the kill that completes at 650 ms (invoked before: does not count) and its next
    receive, invoked at 660 ms, is ok at 670 ms."""
    start, heal = kill(100, 600)
    return timeline(
        send(0, 0, 0, 10, 20), send(0, 0, 1, 90, 130, outcome="info"),
        [op(140, 2, "invoke", "connect"), op(690, 2, "ok", "connect")], send(2, 0, 2, 700, 710),
        receive(1, 0, 30, 40, got=(0, 0)), receive(1, 0, 90, 650, got=(0, 1)), receive(1, 0, 660, 670, got=(0, 2)),
        start, heal)


def test_downtime_is_time_to_first_ok_invoked_after_the_fault():
    result = failover_downtime(kill_with_a_producer_and_a_consumer())
    assert result.valid is True, result.reason
    (fault,) = result.faults
    assert (fault.f, fault.faults, fault.start_ns, fault.healed_ns) == ("kill", ["down"], 100 * MS, 600 * MS)
    assert fault.downtime_ms == {"producer-0": 610.0, "consumer-0": 570.0}
    assert (fault.min_ms, fault.median_ms, fault.max_ms) == (570.0, 590.0, 610.0)
    assert result.summary["worst"] == {"ms": 610.0, "fault": "kill", "client": "producer-0"}


def test_retired_process_is_grouped_with_its_worker():
    result = failover_downtime(kill_with_a_producer_and_a_consumer())
    assert result.identity == "worker"
    assert "process-0" not in result.faults[0].downtime_ms and "process-2" not in result.faults[0].downtime_ms


def test_downtime_over_limit_is_invalid():
    result = failover_downtime(kill_with_a_producer_and_a_consumer(), max_downtime_s=0.6)
    assert result.valid is False and result.faults[0].valid is False
    assert "down longer than 0.6s: producer-0" in result.reason and "consumer-0" not in result.reason


def test_downtime_within_limit_is_valid():
    assert failover_downtime(kill_with_a_producer_and_a_consumer(), max_downtime_s=1.0).valid is True


def test_client_never_recovered():
    start, heal = kill(100, 600)
    history = timeline(receive(1, 0, 30, 40, got=(0, 0)), receive(1, 0, 50, 550, outcome="fail"),
                       receive(1, 0, 560, 1060, outcome="fail"), send(0, 0, 0, 10, 20), send(0, 0, 1, 650, 660),
                       start, heal)
    result = failover_downtime(history)
    fault = result.faults[0]
    assert result.valid == "unknown" and fault.valid == "unknown"
    assert fault.never_recovered == {"consumer-0": 960.0} and fault.downtime_ms == {"producer-0": 560.0}
    assert "never recovered before the history ended: consumer-0" in result.reason


def test_never_recovered_client_is_described_by_what_it_did_after_the_fault():
    # The CI run that lost a consumer showed only empty receives after the kill: the reason must
    # say so, so a client that kept failing is told from one that never tried.
    start, heal = kill(100, 600)
    empty = [[op(t, 1, "invoke", "receive"), {**op(t + 500, 1, "fail", "receive"),
                                              "error": "nothing arrived within 0.5s"}]
             for t in (150, 660, 1170)]
    history = timeline(receive(1, 0, 30, 40, got=(0, 0)), *empty, start, heal)
    result = failover_downtime(history)
    assert result.valid == "unknown"
    assert ("consumer-0: 3 receive fail (most often 'nothing arrived within 0.5s'), "
            "last ok 0.06 s before the fault") in result.reason, result.reason


def test_client_never_recovered_for_longer_than_the_limit_is_invalid():
    start, heal = kill(100, 600)
    history = timeline(receive(1, 0, 30, 40, got=(0, 0)), receive(1, 0, 50, 2050, outcome="fail"), start, heal)
    result = failover_downtime(history, max_downtime_s=1.0)
    assert result.valid is False and "consumer-0" in result.reason


def test_client_stuck_in_an_open_operation_is_down_until_the_history_ends():
    start, heal = kill(100, 600)
    history = timeline(send(0, 0, 0, 10, 20), [op(30, 0, "invoke", "send", msg(0, 1))], start, heal,
                       send(5, 1, 0, 10, 20), send(5, 1, 1, 900, 1100))
    fault = failover_downtime(history).faults[0]
    assert fault.never_recovered == {"producer-0": 1000.0}, "open send: down at least until the last event"


def test_client_idle_at_the_fault_is_not_measured():
    start, heal = kill(100, 600)
    history = timeline(send(0, 0, 0, 10, 20), send(1, 1, 0, 10, 20), send(1, 1, 1, 700, 710), start, heal)
    fault = failover_downtime(history).faults[0]
    assert fault.downtime_ms == {"producer-1": 610.0} and fault.never_recovered == {}


def test_failed_operations_do_not_count_as_recovery():
    start, heal = kill(100, 600)
    history = timeline(send(0, 0, 0, 10, 20), send(0, 0, 1, 200, 210, outcome="fail"),
                       send(0, 0, 2, 300, 800), start, heal)
    assert failover_downtime(history).faults[0].downtime_ms == {"producer-0": 700.0}


def test_unattributed_process_falls_back_to_process_identity():
    """A consumer that never got a message carries no consumer index anywhere in the history."""
    start, heal = kill(100, 600)
    history = timeline(receive(3, 0, 10, 60, outcome="fail"), receive(3, 0, 70, 650, outcome="fail"),
                       receive(3, 0, 660, 680, got=None, outcome="fail"), send(0, 0, 0, 10, 20),
                       send(0, 0, 1, 700, 705), start, heal)
    result = failover_downtime(history)
    assert result.identity == "process" and "process-3" in result.faults[0].never_recovered


def test_two_stream_toxic_is_one_fault_healed_when_both_are():
    toxics = ["amq/toxic/bc_partition_upstream", "amq/toxic/bc_partition_downstream"]
    history = timeline(
        [nem(100, "partition", "start", nemesis="proxy"), nem(102, "partition", "end", nemesis="proxy", toxics=toxics)],
        [nem(400, "heal", "start", nemesis="proxy"),
         nem(405, "heal", "end", nemesis="proxy", fault_window=[
             {"fault": toxics[0], "f": "partition", "start": 100 * MS, "end": 401 * MS},
             {"fault": toxics[1], "f": "partition", "start": 100 * MS, "end": 403 * MS}])],
        send(0, 0, 0, 10, 20), send(0, 0, 1, 420, 430))
    result = failover_downtime(history)
    (fault,) = result.faults
    assert (fault.f, fault.faults, fault.healed_ns) == ("partition", toxics, 403 * MS)
    assert fault.downtime_ms == {"producer-0": 330.0}


def test_fault_never_healed_has_no_heal_time():
    start, _ = kill(100, 600)
    history = timeline(send(0, 0, 0, 10, 20), send(0, 0, 1, 300, 310), start)
    fault = failover_downtime(history).faults[0]
    assert fault.healed_ns is None and fault.downtime_ms == {"producer-0": 210.0}


def test_failed_fault_step_is_ignored():
    history = timeline([nem(100, "pause", "start"), nem(101, "pause", "end", error="NemesisError: not running")],
                       send(0, 0, 0, 10, 20), send(0, 0, 1, 300, 310))
    result = failover_downtime(history)
    assert result.faults == [] and result.valid is True and "no nemesis faults" in result.reason


def test_restart_of_a_running_broker_is_a_fault():
    history = timeline([nem(100, "restart", "start"), nem(400, "restart", "end", old_pid=10, pid=11, healed=[])],
                       send(0, 0, 0, 10, 20), send(0, 0, 1, 150, 450))
    (fault,) = failover_downtime(history).faults
    assert (fault.f, fault.healed_ns, fault.downtime_ms) == ("restart", 400 * MS, {"producer-0": 350.0})


def test_each_fault_is_measured_on_its_own():
    first, first_heal = kill(100, 300)
    second, second_heal = kill(1000, 1200)
    history = timeline(first, first_heal, second, second_heal, send(0, 0, 0, 10, 20), send(0, 0, 1, 310, 320),
                       send(0, 0, 2, 900, 910), send(0, 0, 3, 1300, 1400))
    result = failover_downtime(history)
    assert [f.downtime_ms for f in result.faults] == [{"producer-0": 220.0}, {"producer-0": 400.0}]
    assert result.summary | {"worst": None} == {"faults": 2, "measured": 2, "never_recovered": 0, "min_ms": 220.0,
                                                "median_ms": 310.0, "max_ms": 400.0, "worst": None}
    assert result.to_json()["faults"][1]["downtime_ms"] == {"producer-0": 400.0}


# ---------------------------------------------------------------------- real history


@pytest.mark.slow
def test_reference_broker_pause_downtime(tmp_path):
    """A queue workload while a nemesis pauses a reference broker process for 0.8 s: every
    client is measured, no producer recovers before the resume, and all recover after it."""
    from chaos.history import History, read_history
    from chaos.nemesis import ProcessNemesis
    from chaos.workloads import QueueWorkload
    from conformance.clients import connect
    from conformance.targets.reference.process import ReferenceBrokerProcess
    from conformance.targets.runtime.node import ProcessNode

    broker = ReferenceBrokerProcess(name="downtime", http=False).start()
    try:
        make = functools.partial(connect, "127.0.0.1", broker.stomp_port, "stomp", timeout=0.5)
        with History(tmp_path / "h.jsonl", run="d1", target="reference", node="A") as history:
            workload = QueueWorkload(history, make, destination="queue://d.p", producers=2, consumers=1,
                                     rate=50, receive_timeout=0.2, reconnect_delay=0.05)
            with ProcessNemesis(ProcessNode("A", broker), history, node="A") as nemesis:
                workload.start()
                workload._stop_producers.wait(0.5)
                nemesis.invoke("pause")
                workload._stop_producers.wait(0.8)
                nemesis.invoke("resume")
                workload._stop_producers.wait(1.5)
                workload.stop()
        events = read_history(tmp_path / "h.jsonl")
    finally:
        broker.stop()
    result = failover_downtime(events)
    (fault,) = result.faults
    assert fault.f == "pause" and fault.healed_ns is not None, result.to_json()
    assert set(fault.downtime_ms) == {"producer-0", "producer-1", "consumer-0"}, result.to_json()
    # The resume step starts before SIGCONT is sent: no send can be confirmed before it (a send
    # waits for the broker's receipt). A receive may: stomp.py can hold a MESSAGE frame that
    # arrived just before the pause, and handing it over needs no broker.
    (resume,) = [e for e in events
                 if e["process"] == "nemesis" and e["f"] == "resume" and e["value"]["phase"] == "start"]
    paused_ms = (resume["time"] - fault.start_ns) / MS
    sends = {client: ms for client, ms in fault.downtime_ms.items() if client.startswith("producer-")}
    assert all(ms >= paused_ms for ms in sends.values()), f"a send succeeded while paused: {result.to_json()}"
    assert result.valid is True and result.identity == "worker", result.to_json()


def test_a_send_invoked_while_the_fault_was_being_injected_is_not_recovery():
    # Seen in CI (experiment 3): a send invoked 1 ms after the partition step started went
    # through before the proxy cut, "recovering" in 6 ms. The step completes at 110 ms here.
    start = [nem(100, "partition", "start", nemesis="proxy"), nem(110, "partition", "end", nemesis="proxy",
                                                                  fault="proxy/disabled")]
    heal = [nem(590, "heal", "start", nemesis="proxy"),
            nem(600, "heal", "end", nemesis="proxy",
                fault_window=[{"fault": "proxy/disabled", "f": "partition", "start": 100 * MS, "end": 600 * MS}])]
    history = timeline(send(0, 0, 0, 10, 20), send(0, 0, 1, 101, 106),  # slipped through
                       send(0, 0, 2, 120, 640), start, heal)
    fault = failover_downtime(history).faults[0]
    assert fault.downtime_ms == {"producer-0": 540.0}  # the send invoked at 120 ms, ok at 640 ms
