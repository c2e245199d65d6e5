"""Inputs the coverage-guided fuzzers (fuzz/, `python -m fuzz TARGET`) found that broke a parser,
each kept as a regression test named after what the input does. The bytes are the fuzzer's
minimised crash file without the target's control byte (fuzz/targets.py).
"""

from __future__ import annotations

import pytest

from reference_broker.config import ConfigError, load_config
from reference_broker.protocols.amqp.convert import ConversionError, decode_message


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
