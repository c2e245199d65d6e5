"""Tests for the AMQP 1.0 load generator (conformance.bench.amqp_load)."""

from __future__ import annotations

import collections
import socket
import threading

import pytest

from conformance.requirements import skip_or_fail
from conformance.bench.amqp_load import AmqpBenchResult, run_amqp_load
from conformance.targets.rabbitmq.process import RabbitMQProcess, rabbitmq_available


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeAmqpBroker:
    """A small in-process AMQP 1.0 queue broker on proton's reactor (in a thread), after
    qpid-proton's examples/python/broker.py: one queue per address, messages go round-robin
    to the consumers of that address, pre-settled when the consumer's link asked for it.
    Proton's built-in server SASL offers ANONYMOUS only (PLAIN needs Cyrus SASL), so clients
    connect with ``user=None``.
    ``reject=True`` rejects every incoming unsettled delivery instead of accepting it.
    Counts ``received`` and ``delivered`` messages and the SASL mechanisms clients used."""

    def __init__(self, *, reject: bool = False) -> None:
        from proton import Delivery, Link
        from proton.handlers import MessagingHandler
        from proton.reactor import ApplicationEvent, Container, EventInjector

        self.port = _free_port()
        self.host = "127.0.0.1"
        self.received = 0
        self.delivered = 0
        self.rejected = 0
        broker = self

        class Handler(MessagingHandler):
            def __init__(self) -> None:
                super().__init__(prefetch=1000, auto_accept=False)
                self.queues: dict[str, collections.deque] = collections.defaultdict(collections.deque)
                self.consumers: dict[str, list] = collections.defaultdict(list)
                self.acceptor = None

            def on_start(self, event) -> None:
                self.acceptor = event.container.listen(f"{broker.host}:{broker.port}")
                broker._listening.set()

            def on_link_opening(self, event) -> None:
                link = event.link
                if link.is_sender:
                    addr = link.remote_source.address
                    link.source.address = addr
                    link.snd_settle_mode = link.remote_snd_settle_mode
                    self.consumers[addr].append(link)
                else:
                    link.target.address = link.remote_target.address

            def _unsubscribe(self, link) -> None:
                if link.is_sender:
                    for subs in self.consumers.values():
                        if link in subs:
                            subs.remove(link)

            def on_link_closing(self, event) -> None:
                self._unsubscribe(event.link)

            def on_disconnected(self, event) -> None:
                for subs in self.consumers.values():
                    subs[:] = [lk for lk in subs if lk.connection != event.connection]

            def on_sendable(self, event) -> None:
                self.dispatch(event.link.source.address)

            def on_message(self, event) -> None:
                dlv = event.delivery
                if broker.reject and not dlv.settled:
                    self.reject(dlv)
                    broker.rejected += 1
                    return
                if not dlv.settled:
                    self.accept(dlv)
                broker.received += 1
                addr = event.link.target.address
                self.queues[addr].append(event.message)
                self.dispatch(addr)

            def dispatch(self, addr) -> None:
                q = self.queues[addr]
                subs = self.consumers.get(addr) or []
                progress = True
                while q and progress:
                    progress = False
                    for link in subs:
                        if q and link.credit > 0:
                            dlv = link.send(q.popleft())
                            if link.snd_settle_mode == Link.SND_SETTLED:
                                dlv.settle()
                            broker.delivered += 1
                            progress = True

            def on_settled(self, event) -> None:
                pass

            def on_stop_broker(self, event) -> None:
                if self.acceptor is not None:
                    self.acceptor.close()
                broker._container.stop()

        self.reject = reject
        self._listening = threading.Event()
        self._handler = Handler()
        self._container = Container(self._handler)
        self._injector = EventInjector()
        self._container.selectable(self._injector)
        self._event_cls = ApplicationEvent
        self._delivery = Delivery
        self._thread = threading.Thread(target=self._container.run, daemon=True)

    def __enter__(self) -> "FakeAmqpBroker":
        self._thread.start()
        assert self._listening.wait(10), "fake broker did not start listening"
        return self

    def __exit__(self, *exc) -> None:
        self._injector.trigger(self._event_cls("stop_broker"))
        self._thread.join(timeout=10)


# ---------------------------------------------------------------------- fake broker


@pytest.mark.parametrize("presettled", [True, False])
def test_small_run_against_fake_broker(presettled):
    with FakeAmqpBroker() as broker:
        res = run_amqp_load(broker.host, broker.port, target="fake", messages=2_000, warmup=300,
                            presettled=presettled, credit=200, timeout=30, user=None)
    assert isinstance(res, AmqpBenchResult)
    assert res.error is None, res.error
    assert (res.target, res.presettled, res.messages) == ("fake", presettled, 2_000)
    assert res.consumer_received == 2_000 and res.producer_sent == 2_000
    assert res.producer_acked == (0 if presettled else 2_000)
    assert res.seconds > 0 and res.msgs_per_sec > 0
    assert broker.received == 2_300 and broker.delivered == 2_300
    assert res.generator_cpu_seconds >= 0 and res.broker_cpu_seconds is None
    assert "generator_cpu_seconds" in res.to_dict()


def test_no_warmup_small_credit_other_address():
    with FakeAmqpBroker() as broker:
        res = run_amqp_load(broker.host, broker.port, target="anon", messages=500, warmup=0, user=None,
                            body_size=10, address="other", credit=1, timeout=30)
    assert res.error is None, res.error
    assert res.consumer_received == 500


def test_plain_sasl_against_anonymous_only_server_is_an_error():
    with FakeAmqpBroker() as broker:
        res = run_amqp_load(broker.host, broker.port, target="plain", messages=10, warmup=0, timeout=10)
    assert res.error is not None and "unauthorized-access" in res.error


def test_rejected_deliveries_are_an_error():
    with FakeAmqpBroker(reject=True) as broker:
        res = run_amqp_load(broker.host, broker.port, target="rej", messages=100, warmup=10,
                            presettled=False, timeout=10, user=None)
    assert res.error is not None and "rejected" in res.error
    assert broker.rejected > 0


def test_connection_refused_is_an_error_not_an_exception():
    res = run_amqp_load("127.0.0.1", _free_port(), target="nobody", messages=10, warmup=0, timeout=5)
    assert res.error is not None
    assert "refused" in res.error.lower()
    assert res.msgs_per_sec == 0.0


def test_argument_checks():
    with pytest.raises(ValueError):
        run_amqp_load("127.0.0.1", 1, target="x", messages=0)
    with pytest.raises(ValueError):
        run_amqp_load("127.0.0.1", 1, target="x", credit=0)


# ---------------------------------------------------------------------- real broker


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    ok, reason = rabbitmq_available()
    if not ok:
        skip_or_fail("rabbitmq", reason)
    with RabbitMQProcess(tmp_path_factory.mktemp("rmq")) as r:
        yield r


@pytest.mark.real_broker
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("presettled", [True, False])
def test_against_rabbitmq(rabbitmq, presettled):
    res = run_amqp_load("127.0.0.1", rabbitmq.amqp_port, target="rabbitmq", messages=10_000, warmup=1_000,
                        presettled=presettled, address=f"bench-{int(presettled)}", timeout=60,
                        broker_pid=rabbitmq.beam_pid)
    assert res.error is None, res.error + "\n" + rabbitmq.log_tail(20)
    assert res.consumer_received == 10_000 and res.producer_sent == 10_000
    assert res.producer_acked == (0 if presettled else 10_000)
    assert res.msgs_per_sec > 0
    assert res.broker_cpu_seconds is not None and res.broker_cpu_seconds > 0


@pytest.mark.real_broker
@pytest.mark.slow
def test_rabbitmq_unknown_exchange_is_an_error(rabbitmq):
    res = run_amqp_load("127.0.0.1", rabbitmq.amqp_port, target="rabbitmq", messages=10, warmup=0,
                        address="/exchange/no-such-exchange/rk", timeout=20)
    assert res.error is not None
    assert "not-found" in res.error and "no-such-exchange" in res.error


@pytest.fixture(scope="module")
def activemq(tmp_path_factory):
    from conformance import requirements
    from conformance.targets.activemq.process import ActiveMQProcess, activemq_amqp_available

    ok, reason = activemq_amqp_available()
    if not ok:
        requirements.skip_or_fail("activemq-amqp", reason)
    with ActiveMQProcess(tmp_path_factory.mktemp("amq"), amqp=True, jvm_heap_mb=512) as broker:
        yield broker


@pytest.mark.real_broker
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("presettled", [True, False])
def test_against_activemq(activemq, presettled):
    # anonymous SASL: this broker has no users configured
    res = run_amqp_load("127.0.0.1", activemq.amqp_port, target="activemq", messages=10_000, warmup=1_000,
                        presettled=presettled, address=f"queue://bench-{int(presettled)}", timeout=60,
                        user=None, broker_pid=activemq.pid)
    assert res.error is None, res.error + "\n" + activemq.log_tail(20)
    assert res.consumer_received == 10_000 and res.producer_sent == 10_000
    assert res.producer_acked == (0 if presettled else 10_000)
    assert res.msgs_per_sec > 0
