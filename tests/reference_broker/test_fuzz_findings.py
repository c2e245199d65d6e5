"""Inputs the coverage-guided fuzzers (fuzz/, `python -m fuzz TARGET`) found that broke a parser,
each kept as a regression test named after what the input does. The bytes are the fuzzer's
minimised crash file without the target's control byte (fuzz/targets.py).
"""

from __future__ import annotations

import pytest

from reference_broker.config import ConfigError, load_config
from proton import ulong

from reference_broker.protocols.amqp.convert import ConversionError, decode_message
from reference_broker.protocols.amqp.sasl import SASL_HEADER, SASL_INIT, SaslServer, SaslState


def _sasl_init(response) -> bytes:
    return SASL_HEADER + SaslServer._encode(SASL_INIT, ["PLAIN", response])


def _accept_all(login, passcode):
    return None


def test_amqp_section_with_a_list_as_descriptor_is_a_decode_error():
    # A described value whose descriptor is itself a list (0x45, list0): decode_message looked it
    # up in a set of section codes and raised TypeError (unhashable), which the AMQP session
    # turned into a dropped connection instead of amqp:decode-error on that one transfer.
    payload = (b"\x00Sp@\x00E@S!s@\xc0\x07@@@\xa3\x18applic1t\x01\xff\xff\x00\x00\x00"
               b"ion/Moctetbin")
    with pytest.raises(ConversionError, match="does not start a message section"):
        decode_message(payload)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_config_file_that_is_not_utf8_is_a_config_error(tmp_path, suffix):
    # load_config let UnicodeDecodeError through: `brokerconf broker -c FILE` then died with a
    # traceback instead of naming the file and what is wrong with it.
    path = tmp_path / f"broker{suffix}"
    path.write_bytes(b'name = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match=r"broker\.(toml|json): not UTF-8 text"):
        load_config(path)


def test_config_path_that_is_a_directory_is_a_config_error(tmp_path):
    # Same family as the non-UTF-8 file (not from the fuzzer, which writes files): IsADirectoryError escaped.
    with pytest.raises(ConfigError, match="cannot read the configuration file"):
        load_config(tmp_path)


def test_sasl_init_with_a_string_as_initial_response_is_refused():
    # The fuzzer's input: sasl-init whose initial-response is an AMQP string, not binary
    # (AMQP 1.0 5.3.3.2 types it binary). bytes(str) raised TypeError out of the SASL layer.
    server = SaslServer(["PLAIN"], _accept_all)
    server.feed(_sasl_init("\x00user\x00secret"))
    assert server.state is SaslState.FAILED, server.state
    assert "initial-response must be binary" in server.error


def test_sasl_init_with_a_huge_number_as_initial_response_allocates_nothing():
    # Same spot, worse input: bytes(int) makes that many zero bytes, so an initial-response of
    # ulong 2**40 asked for a terabyte (MemoryError; a few GB would be allocated for real).
    server = SaslServer(["PLAIN"], _accept_all)
    server.feed(_sasl_init(ulong(2**40)))
    assert server.state is SaslState.FAILED, server.state
    assert "initial-response must be binary" in server.error
