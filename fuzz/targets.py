"""The fuzz targets: name -> factory(work_dir) returning libFuzzer's one-input callable.

A factory imports the broker modules itself, so that `python -m fuzz` can wrap the import in
atheris' instrumentation (coverage is collected for reference_broker only). The first input byte
of the codec targets is a control byte (protocol version, feed chunk size), so libFuzzer explores
those choices the way it explores the bytes; the seeds in fuzz/corpus/ start with one too.

What counts as a finding, per target:
* an exception other than the parser's own error type for bad input;
* the parser accepting something whose re-encoding does not parse back to the same thing
  (an assertion here): the broker would forward a message or a frame other than the one it read;
* one input taking longer than the run's time-out (a hang, e.g. a regular expression that
  backtracks).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable

OneInput = Callable[[bytes], None]


def _chunks(data: bytes, control: int) -> list[bytes]:
    """Split `data` the way a socket might deliver it: whole, or in pieces of 1..63 bytes."""
    size = control & 0x3F
    if size == 0:
        return [data]
    return [data[i:i + size] for i in range(0, len(data), size)] or [b""]


def _trailing_cr_unescapable(frame, version: str) -> bool:
    """A header name or value ending in CR in a frame that cannot escape CR (1.0 and 1.1 have no
    \\r escape; CONNECT and CONNECTED are never escaped): the CR reads back as part of the line
    end (CR LF), so such a header cannot round-trip in that version. Known and left alone: the
    format cannot carry it (STOMP 1.2 "Value Encoding", "Augmented BNF")."""
    if version == "1.2" and frame.command not in ("CONNECT", "CONNECTED"):
        return False
    return any(name.endswith("\r") or value.endswith("\r") for name, value in frame.headers)


def stomp(work: Path) -> OneInput:
    """STOMP frames through StompParser (1.0/1.1/1.2, fed in chunks); frames round-trip."""
    from reference_broker.protocols.stomp.codec import (
        HEARTBEAT,
        FrameLimits,
        StompParser,
        StompProtocolError,
        serialize_frame,
    )

    # Small limits, so the limit checks are reached by inputs of fuzzing size.
    limits = FrameLimits(max_frame_size=2048, max_header_block=512, max_headers=16, max_header_length=256)
    versions = ("1.0", "1.1", "1.2")

    def one(data: bytes) -> None:
        if not data:
            return
        control, data = data[0], data[1:]
        version = versions[(control >> 6) % 3]
        parser = StompParser(limits, version)
        frames = []
        try:
            for piece in _chunks(data, control):
                frames += parser.feed(piece)
        except StompProtocolError:
            return
        for frame in frames:
            if frame is HEARTBEAT or _trailing_cr_unescapable(frame, version):
                continue
            wire = serialize_frame(frame.command, frame.headers, frame.body, version)
            again = StompParser(version=version).feed(wire)
            assert len(again) == 1, f"{frame!r} re-encoded as {wire!r} parses as {again!r}"
            headers = again[0].headers
            if frame.get("content-length") is None:
                headers = [h for h in headers if h[0] != "content-length"]
            assert (again[0].command, headers, again[0].body) == (frame.command, frame.headers, frame.body), (
                f"{frame!r} re-encoded as {wire!r} parses as {again[0]!r}")

    return one


def mqtt(work: Path) -> OneInput:
    """MQTT packets through MqttParser (level from CONNECT, or fixed 3.1.1/5.0); packets round-trip."""
    from reference_broker.protocols.mqtt.codec import MQTT_5, MQTT_311, Connect, MqttParser, MqttProtocolError, encode

    levels = (None, MQTT_311, MQTT_5)

    def one(data: bytes) -> None:
        if not data:
            return
        control, data = data[0], data[1:]
        parser = MqttParser(max_packet_size=4096, protocol_level=levels[(control >> 6) % 3])
        packets = []
        try:
            for piece in _chunks(data, control):
                packets += parser.feed(piece)
        except MqttProtocolError as exc:
            packets = packets + exc.packets
        for packet in packets:
            # A CONNECT is laid out by the level it carries (MqttParser reads it from the packet
            # itself); every other packet by the parser's level.
            level = packet.protocol_level if isinstance(packet, Connect) else parser.protocol_level
            wire = encode(packet, level)
            again = MqttParser(protocol_level=level, max_packet_size=1 << 20).feed(wire)
            assert again == [packet], f"{packet!r} re-encoded as {wire!r} parses as {again!r}"

    return one


def amqp(work: Path) -> OneInput:
    """AMQP: the SASL layer (header, SASL frames) or a transfer payload into an engine Message."""
    from reference_broker.protocols.amqp.convert import ConversionError, decode_message, message_from_amqp
    from reference_broker.protocols.amqp.sasl import SaslError, SaslServer

    def authenticate(login, passcode):
        if login is not None and (login, passcode) != ("user", "secret"):
            raise ValueError("bad credentials")

    def one(data: bytes) -> None:
        if not data:
            return
        control, data = data[0], data[1:]
        if control & 0x80:
            try:
                message_from_amqp(decode_message(data), message_id="ID:fuzz", destination="queue://fuzz",
                                  now_ms=1_700_000_000_000)
            except ConversionError:
                pass
            return
        server = SaslServer(["PLAIN", "ANONYMOUS"], authenticate)
        for piece in _chunks(data, control):
            try:
                server.feed(piece)
            except SaslError:
                break  # fed after it finished: the listener hands over to proton then
            server.take_output()

    return one


def selector(work: Path) -> OneInput:
    """Selector text (before the first NUL) parsed, then evaluated against properties after it."""
    from reference_broker.engine.selector import SelectorError, parse_selector

    names = ("a", "b", "p", "JMSPriority", "JMSType", "x")

    def one(data: bytes) -> None:
        text, _, rest = data.partition(b"\0")
        try:
            compiled = parse_selector(text.decode("utf-8", "replace"))
        except SelectorError:
            return
        if compiled is None:
            return
        # Property values from the rest: each piece (split at NUL) is a number when it reads as
        # one, true/false, absent when empty, else a string.
        values: dict[str, object] = {}
        for name, raw in zip(names, itertools.chain(rest.split(b"\0"), itertools.repeat(b""))):
            piece = raw.decode("utf-8", "replace")
            if not piece:
                continue
            if piece in ("true", "false"):
                values[name] = piece == "true"
                continue
            for kind in (int, float):
                try:
                    values[name] = kind(piece)
                    break
                except ValueError:
                    continue
            else:
                values[name] = piece
        compiled.evaluate(values.get)

    return one


def config(work: Path) -> OneInput:
    """The configuration loader on a TOML file (or a JSON one, by the control byte)."""
    from reference_broker.config import ConfigError, load_config

    files = {suffix: work / f"fuzz-config{suffix}" for suffix in (".toml", ".json")}

    def one(data: bytes) -> None:
        if not data:
            return
        path = files[".json" if data[0] & 1 else ".toml"]
        path.write_bytes(data[1:])
        try:
            load_config(path)
        except ConfigError:
            pass

    return one


class _Transport:
    """The listener's side of a session (`SessionTransport`), keeping nothing."""

    closed = False

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _session_target(make_session) -> OneInput:
    """Bytes into a session's `data_received` (in chunks) and then `connection_lost`, as the
    listener does; nothing may escape but what the listener expects (nothing at all)."""

    def one(data: bytes) -> None:
        if not data:
            return
        control, data = data[0], data[1:]
        transport = _Transport()
        session = make_session(transport)
        try:
            for piece in _chunks(data, control):
                if transport.closed:
                    break
                session.data_received(piece)
        finally:
            session.connection_lost()

    return one


def _engine():
    from reference_broker.config import build_config
    from reference_broker.engine.broker import Broker

    # One engine for the whole run (a broker per input would cost more than the input); kept
    # MQTT sessions and retained messages pile up in it, which a fuzzing run's length allows.
    config = build_config({"stomp": None})
    return config, Broker(config, clock=lambda: 1_700_000_000.0)


def mqtt_session(work: Path) -> OneInput:
    """MQTT bytes into an MqttSession on an in-process engine (CONNECT first, as a client sends)."""
    from reference_broker.protocols.mqtt.session import MqttSession, MqttSessionRegistry

    config, broker = _engine()
    registry = MqttSessionRegistry(broker, config.mqtt_options, clock=lambda: 1000.0)
    return _session_target(lambda transport: MqttSession(broker, transport, registry, clock=lambda: 1000.0))


def stomp_session(work: Path) -> OneInput:
    """STOMP bytes into a StompSession on an in-process engine (small frame limits)."""
    from reference_broker.config import StompConfig
    from reference_broker.protocols.stomp.session import StompSession

    config, broker = _engine()
    options = StompConfig(max_frame_size=4096, max_header_block=1024, max_headers=30, max_header_length=512)
    return _session_target(lambda transport: StompSession(broker, transport, options, clock=lambda: 1000.0))


TARGETS: dict[str, Callable[[Path], OneInput]] = {
    "stomp": stomp, "mqtt": mqtt, "amqp": amqp, "selector": selector, "config": config,
    "stomp-session": stomp_session, "mqtt-session": mqtt_session,
}
