"""The smoke scenario: a short series of documented behaviours checked over STOMP with the
stomp.py client against any broker address. It is the main job's first stage until the full
conformance suites land; each check names the rule it exercises and keeps its evidence.
"""

from __future__ import annotations

import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Callable

import stomp


@dataclass
class CheckResult:
    check: str
    spec_id: str
    target: str
    outcome: str  # passed | failed | error
    detail: str
    seconds: float
    evidence: list[str] = field(default_factory=list)


class _Collector(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: list[stomp.utils.Frame] = []
        self.errors: list[stomp.utils.Frame] = []
        self.receipts: set[str] = set()
        self.cond = threading.Condition()

    def on_message(self, frame) -> None:
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame) -> None:
        with self.cond:
            self.receipts.add(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
            return True


class CheckFailed(AssertionError):
    pass


class NotApplicable(Exception):
    """The target cannot run this check (a protocol it does not speak here); the reason is
    shown in the report, never counted as passed."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class SmokeScenario:
    def __init__(self, host: str, port: int, target: str, login: str | None = None, passcode: str | None = None,
                 *, mqtt_port: int | None = None, amqp_port: int | None = None) -> None:
        self.host, self.port, self.target = host, port, target
        self.login, self.passcode = login, passcode
        self.mqtt_port, self.amqp_port = mqtt_port, amqp_port
        self.run_id = uuid.uuid4().hex[:8]
        self._open: list[stomp.Connection12] = []

    def _connect(self) -> tuple[stomp.Connection12, _Collector]:
        conn = stomp.Connection12([(self.host, self.port)], heartbeats=(0, 0), auto_content_length=True)
        listener = _Collector()
        conn.set_listener("collector", listener)
        conn.connect(self.login, self.passcode, wait=True)
        self._open.append(conn)
        return conn, listener

    def _dest(self, kind: str, name: str) -> str:
        return f"/{kind}/brokerconf.smoke.{self.run_id}.{name}"

    def close(self) -> None:
        for conn in self._open:
            try:
                if conn.is_connected():
                    conn.disconnect()
            except Exception:
                pass
        self._open.clear()

    # ---------------------------------------------------------------- checks

    def check_queue_fifo(self) -> str:
        conn, got = self._connect()
        dest = self._dest("queue", "fifo")
        conn.subscribe(dest, id="fifo", ack="auto")
        for i in range(200):
            conn.send(dest, f"m{i}")
        _expect(got.wait(lambda: len(got.messages) >= 200), f"received {len(got.messages)} of 200 messages")
        bodies = [f.body for f in got.messages]
        _expect(bodies == [f"m{i}" for i in range(200)], "messages arrived out of order")
        return "200 messages in send order"

    def check_persistent_receipt(self) -> str:
        conn, got = self._connect()
        dest = self._dest("queue", "persistent")
        for i in range(20):
            conn.send(dest, f"p{i}", headers={"persistent": "true"}, receipt=f"r{i}")
        _expect(got.wait(lambda: len(got.receipts) >= 20), f"{len(got.receipts)} of 20 receipts")
        conn.subscribe(dest, id="p", ack="client-individual")
        _expect(got.wait(lambda: len(got.messages) >= 20), f"received {len(got.messages)} of 20")
        for frame in got.messages:
            conn.ack(frame.headers["ack"])
        return "20 persistent sends confirmed by receipt and consumed"

    def check_competing_consumers(self) -> str:
        a, got_a = self._connect()
        b, got_b = self._connect()
        dest = self._dest("queue", "compete")
        a.subscribe(dest, id="a", ack="auto", headers={"activemq.prefetchSize": "1"})
        b.subscribe(dest, id="b", ack="auto", headers={"activemq.prefetchSize": "1"}, receipt="sub-b")
        _expect(got_b.wait(lambda: "sub-b" in got_b.receipts), "no receipt for the second subscription")
        producer, _ = self._connect()
        for i in range(100):
            producer.send(dest, f"c{i}")
        both = lambda: len(got_a.messages) + len(got_b.messages) >= 100  # noqa: E731
        _expect(got_a.wait(both), f"received {len(got_a.messages) + len(got_b.messages)} of 100")
        bodies = [f.body for f in got_a.messages + got_b.messages]
        _expect(sorted(bodies) == sorted(f"c{i}" for i in range(100)), "duplicates or losses between consumers")
        return f"100 messages split {len(got_a.messages)}/{len(got_b.messages)}, none duplicated"

    def check_message_groups(self) -> str:
        a, got_a = self._connect()
        b, got_b = self._connect()
        dest = self._dest("queue", "groups")
        a.subscribe(dest, id="a", ack="auto")
        b.subscribe(dest, id="b", ack="auto", receipt="sub-b")
        _expect(got_b.wait(lambda: "sub-b" in got_b.receipts), "no receipt for the second subscription")
        producer, _ = self._connect()
        for i in range(60):
            producer.send(dest, f"g{i % 3}:{i}", headers={"JMSXGroupID": f"G{i % 3}"})
        both = lambda: len(got_a.messages) + len(got_b.messages) >= 60  # noqa: E731
        _expect(got_a.wait(both), f"received {len(got_a.messages) + len(got_b.messages)} of 60")
        owners: dict[str, set[str]] = {}
        for name, got in (("a", got_a), ("b", got_b)):
            for frame in got.messages:
                owners.setdefault(frame.body.split(":")[0], set()).add(name)
        split = {g: sorted(c) for g, c in owners.items() if len(c) > 1}
        _expect(not split, f"groups delivered to more than one consumer: {split}")
        return "3 groups, each pinned to one consumer: " + ", ".join(f"{g}->{''.join(sorted(c))}" for g, c in sorted(owners.items()))

    def check_selector(self) -> str:
        conn, got = self._connect()
        dest = self._dest("queue", "selector")
        conn.subscribe(dest, id="s", ack="auto", headers={"selector": "color = 'red'"})
        for i, color in enumerate(["red", "blue", "red", "green", "red"]):
            conn.send(dest, f"{color}{i}", headers={"color": color})
        _expect(got.wait(lambda: len(got.messages) >= 3), f"received {len(got.messages)} of 3 red messages")
        time.sleep(0.2)
        bodies = [f.body for f in got.messages]
        _expect(bodies == ["red0", "red2", "red4"], f"selector delivered {bodies}")
        return "selector color = 'red' delivered exactly the 3 red messages"

    def check_nack_redelivery(self) -> str:
        # STOMP 1.2 "NACK" leaves the choice to the server: redeliver (to this or another
        # client), discard, or dead-letter. Losing it silently is the only wrong answer we can
        # see from outside, so accept a redelivery flagged redelivered:true or a dead letter.
        conn, got = self._connect()
        dest = self._dest("queue", "nack")
        marker = f"nack-{self.run_id}"
        conn.subscribe(dest, id="n", ack="client-individual")
        conn.send(dest, "retry-me", headers={"persistent": "true", "smoke_marker": marker})
        _expect(got.wait(lambda: len(got.messages) >= 1), "first delivery missing")
        conn.nack(got.messages[0].headers["ack"])
        if got.wait(lambda: len(got.messages) >= 2, timeout=2.0):
            redelivered = got.messages[1].headers.get("redelivered")
            conn.ack(got.messages[1].headers["ack"])
            _expect(redelivered == "true", f"redelivered header was {redelivered!r}")
            return "NACKed message redelivered with redelivered:true"
        conn.subscribe("/queue/ActiveMQ.DLQ", id="dlq", ack="client-individual",
                       headers={"selector": f"smoke_marker = '{marker}'"})
        _expect(got.wait(lambda: len(got.messages) >= 2), "NACKed message neither redelivered nor dead-lettered")
        conn.ack(got.messages[1].headers["ack"])
        return "NACKed message not redelivered but moved to ActiveMQ.DLQ (allowed by STOMP 1.2 NACK)"

    def check_transaction_abort(self) -> str:
        conn, got = self._connect()
        dest = self._dest("queue", "tx")
        conn.subscribe(dest, id="t", ack="auto")
        tx = conn.begin()
        conn.send(dest, "aborted", transaction=tx)
        conn.abort(tx)
        tx = conn.begin()
        conn.send(dest, "committed", transaction=tx)
        conn.commit(tx)
        _expect(got.wait(lambda: len(got.messages) >= 1), "committed message not delivered")
        time.sleep(0.2)
        bodies = [f.body for f in got.messages]
        _expect(bodies == ["committed"], f"delivered {bodies}")
        return "aborted send discarded, committed send delivered"

    def check_topic_fanout(self) -> str:
        a, got_a = self._connect()
        b, got_b = self._connect()
        dest = self._dest("topic", "fanout")
        a.subscribe(dest, id="a", ack="auto", receipt="sub-a")
        b.subscribe(dest, id="b", ack="auto", receipt="sub-b")
        _expect(got_a.wait(lambda: "sub-a" in got_a.receipts) and got_b.wait(lambda: "sub-b" in got_b.receipts),
                "no subscription receipts")
        for i in range(50):
            a.send(dest, f"t{i}")
        _expect(got_a.wait(lambda: len(got_a.messages) >= 50) and got_b.wait(lambda: len(got_b.messages) >= 50),
                f"subscribers got {len(got_a.messages)} and {len(got_b.messages)} of 50")
        return "both subscribers received all 50 messages"

    def check_bad_frame_isolated(self) -> str:
        # A garbage frame must get an ERROR and a closed connection, and nobody else suffers.
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            login = f"login:{self.login}\npasscode:{self.passcode}\n" if self.login else ""
            sock.sendall(f"CONNECT\naccept-version:1.2\nhost:localhost\n{login}\n\0".encode())
            sock.sendall(b"BOGUS\n\n\0")
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        _expect(b"ERROR" in data, f"no ERROR frame for an unknown command; got {data[:200]!r}")
        self.check_queue_roundtrip_after_error()
        return "unknown command answered with ERROR; other clients unaffected"

    def check_queue_roundtrip_after_error(self) -> None:
        conn, got = self._connect()
        dest = self._dest("queue", "after-error")
        conn.subscribe(dest, id="x", ack="auto")
        conn.send(dest, "still-alive")
        _expect(got.wait(lambda: len(got.messages) >= 1), "broker stopped serving after a bad frame")

    # ---------------------------------------------------------------- across protocols

    def check_mqtt_to_stomp(self) -> str:
        """An MQTT 5 publish with a user property reaches a STOMP topic subscriber, the property
        as a header and MQTT's `a/b` as the engine's `a.b`."""
        if self.mqtt_port is None:
            raise NotApplicable("target has no MQTT listener here")
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        conn, got = self._connect()
        conn.subscribe(f"/topic/smoke.{self.run_id}.mqtt", id="x", ack="auto", receipt="sub")
        _expect(got.wait(lambda: "sub" in got.receipts), "no receipt for the STOMP subscription")
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        connack: list = []
        client.on_connect = lambda c, userdata, flags, reason, props: connack.append(reason)
        client.connect(self.host, self.mqtt_port)
        client.loop_start()
        try:
            deadline = time.monotonic() + 5
            while not connack and time.monotonic() < deadline:
                time.sleep(0.02)
            if connack and connack[0].value in (0x01, 0x84):
                # Only a CONNACK that says "unsupported protocol version" makes this not
                # applicable (ActiveMQ Classic 5.17 speaks MQTT 3.1.1 only); anything else fails.
                raise NotApplicable(f"target refuses MQTT 5 ({connack[0]})")
            _expect(bool(connack) and not connack[0].is_failure, f"MQTT 5 CONNECT not accepted: {connack}")
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = ("color", "red")
            client.publish(f"smoke/{self.run_id}/mqtt", b"from-mqtt", qos=1, properties=props).wait_for_publish(5)
            _expect(got.wait(lambda: len(got.messages) >= 1), "STOMP subscriber got nothing from MQTT")
        finally:
            client.loop_stop()
            client.disconnect()
        frame = got.messages[0]
        _expect(frame.body == "from-mqtt", f"body {frame.body!r}")
        _expect(frame.headers.get("color") == "red", f"user property lost: {frame.headers}")
        return "MQTT 5 publish (user property color=red) received by a STOMP subscriber with the header"

    def check_amqp_to_stomp(self) -> str:
        """An AMQP 1.0 message with a group id and an application property reaches a STOMP queue
        consumer as JMSXGroupID and a header."""
        if self.amqp_port is None:
            raise NotApplicable("target has no AMQP listener here")
        from proton import Message as AmqpMessage
        from proton.utils import BlockingConnection

        queue = f"smoke.{self.run_id}.amqp"
        amqp = BlockingConnection(f"amqp://{self.host}:{self.amqp_port}", timeout=10)
        try:
            sender = amqp.create_sender(f"queue://{queue}")
            sender.send(AmqpMessage(body=b"from-amqp", group_id="G1", properties={"color": "blue"}))
        finally:
            amqp.close()
        conn, got = self._connect()
        conn.subscribe(f"/queue/{queue}", id="x", ack="auto")
        _expect(got.wait(lambda: len(got.messages) >= 1), "STOMP consumer got nothing from AMQP")
        frame = got.messages[0]
        _expect(frame.headers.get("JMSXGroupID") == "G1", f"group id lost: {frame.headers}")
        _expect(frame.headers.get("color") == "blue", f"application property lost: {frame.headers}")
        return "AMQP message (group-id G1, property color=blue) received over STOMP with both"

    CHECKS = [
        ("queue FIFO order", "Q-FIFO-1", "check_queue_fifo"),
        ("persistent send receipt", "STORE-RECEIPT-1", "check_persistent_receipt"),
        ("competing consumers", "Q-COMPETE-1", "check_competing_consumers"),
        ("message groups pin to one consumer", "GRP-PIN-1", "check_message_groups"),
        ("JMS selector", "SEL-MATCH-1", "check_selector"),
        ("NACK redelivers", "ACK-NACK-1", "check_nack_redelivery"),
        ("transaction abort", "TX-ABORT-1", "check_transaction_abort"),
        ("topic fan-out", "TOPIC-FANOUT-1", "check_topic_fanout"),
        ("bad frame isolated", "STOMP-ERROR-1", "check_bad_frame_isolated"),
        ("MQTT publish reaches a STOMP subscriber", "XPROTO-MQTT-1", "check_mqtt_to_stomp"),
        ("AMQP message reaches a STOMP consumer", "XPROTO-AMQP-1", "check_amqp_to_stomp"),
    ]

    def run(self, progress: Callable[[str], None] = print) -> list[CheckResult]:
        results = []
        for title, spec_id, method in self.CHECKS:
            start = time.monotonic()
            try:
                detail = getattr(self, method)()
                outcome = "passed"
                evidence: list[str] = []
            except NotApplicable as exc:
                outcome, detail, evidence = "not applicable", str(exc), []
            except CheckFailed as exc:
                outcome, detail, evidence = "failed", str(exc), []
            except Exception as exc:
                outcome, detail, evidence = "error", f"{type(exc).__name__}: {exc}", [traceback.format_exc()]
            finally:
                self.close()
            seconds = time.monotonic() - start
            results.append(CheckResult(title, spec_id, self.target, outcome, detail, round(seconds, 3), evidence))
            progress(f"  [{self.target}] {spec_id:<16} {outcome.upper():<7} {title}: {detail}")
        return results
