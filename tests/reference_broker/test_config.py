"""Configuration: documented defaults, and refusals that name the bad option."""

import subprocess
import sys

import pytest

from reference_broker.config import BrokerConfig, ConfigError, build_config, load_config


def test_defaults_follow_the_documents():
    config = BrokerConfig()
    entry = build_config({"policy_entries": [{"queue": ">"}]}).policy_entries[0]
    # ActiveMQ RedeliveryPolicy / DeadLetterStrategy defaults.
    assert entry.maximum_redeliveries == 6
    assert entry.dead_letter_queue == "ActiveMQ.DLQ"
    assert entry.process_non_persistent is False
    # "Slow Consumer Handling": no strategy configured means nothing is discarded.
    assert entry.pending_message_limit_strategy is None
    assert entry.message_eviction_strategy.type == "oldest"
    assert config.store.sync == "always"
    # Artemis "Message Grouping": address-setting defaults.
    setting = build_config({"address_settings": [{"match": "orders.#"}]}).address_settings[0]
    assert (setting.default_group_rebalance, setting.default_group_buckets, setting.default_group_first_key) == (False, -1, None)


def test_unknown_option_is_named_with_a_suggestion():
    with pytest.raises(ConfigError) as info:
        build_config({"policy_entries": [{"topic": "PRICES.>", "pending_mesage_limit_strategy": {"type": "constant", "limit": 1}}]})
    message = str(info.value)
    assert "unknown option 'pending_mesage_limit_strategy' in [policy_entries.0]" in message
    assert "did you mean 'pending_message_limit_strategy'?" in message


def test_top_level_typo_is_named():
    with pytest.raises(ConfigError, match=r"unknown option 'stmop' in the top level: did you mean 'stomp'\?"):
        build_config({"stmop": "127.0.0.1:1"})


def test_invalid_values_are_named():
    with pytest.raises(ConfigError, match=r"policy_entries\.0\.pending_message_limit_strategy\.constant\.limit"):
        build_config({"policy_entries": [{"topic": ">", "pending_message_limit_strategy": {"type": "constant", "limit": -5}}]})
    with pytest.raises(ConfigError, match="exactly one of 'queue' or 'topic'"):
        build_config({"policy_entries": [{"queue": "A", "topic": "B"}]})
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        build_config({"stomp": "localhost"})
    with pytest.raises(ConfigError, match="group_buckets"):
        build_config({"address_settings": [{"match": "x", "default_group_buckets": -2}]})


def test_toml_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "broker.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="broker.toml: not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "missing.toml")


def test_broker_refuses_bad_config_at_startup(tmp_path):
    bad = tmp_path / "broker.toml"
    bad.write_text('[[policy_entries]]\ntopic = "A"\nnetwrok_ttl = 3\n')
    proc = subprocess.run([sys.executable, "-m", "reference_broker", "--config", str(bad), "--stomp", "127.0.0.1:0"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "unknown option 'netwrok_ttl' in [policy_entries.0]" in proc.stderr


def test_anonymous_only_when_no_users_or_explicitly_allowed():
    assert BrokerConfig().security.anonymous_allowed
    with_users = build_config({"security": {"users": [{"name": "u", "password": "p"}]}})
    assert not with_users.security.anonymous_allowed
    allowed = build_config({"security": {"users": [{"name": "u", "password": "p"}], "allow_anonymous": True}})
    assert allowed.security.anonymous_allowed


def test_port_taken_is_reported_with_the_option():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "reference_broker", "--stomp", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"cannot listen for STOMP on 127.0.0.1:{port} (option 'stomp')" in proc.stderr
    assert "address already in use" in proc.stderr


def test_value_errors_read_cleanly():
    with pytest.raises(ConfigError) as info:
        build_config({"stomp": "nonsense"})
    assert str(info.value) == "invalid value for 'stomp': expected HOST:PORT, got 'nonsense'"


def test_store_discard_damaged_is_off_by_default_and_named_when_misspelt():
    """Issue 20 item 8: losing a damaged journal segment takes the operator's explicit word."""
    assert BrokerConfig().store.discard_damaged is False
    assert build_config({"store": {"discard_damaged": True}}).store.discard_damaged is True
    with pytest.raises(ConfigError, match=r"unknown option 'discard_damage' in \[store\]: did you mean 'discard_damaged'\?"):
        build_config({"store": {"discard_damage": True}})


def test_the_command_line_keeps_what_the_configuration_file_left_out(tmp_path):
    """`python -m reference_broker --config FILE --stomp ...` validates the file's configuration
    again with the flags on top (reference_broker/__main__.py, config_from_args). An option the
    file left out must stay left out, where absence has a meaning of its own: consumer advisories
    are on for a broker with network connectors unless the file says otherwise, and an address
    setting supplies only the options it names. (A full dump marked them all set, to their
    defaults: broker processes with network connectors published no advisories, so their bridges
    never forwarded; found by FT-NOB-4's reference host pair, issue 26.)"""
    import json

    from reference_broker.__main__ import build_parser, config_from_args
    from reference_broker.cluster.advisories import publishes_advisories

    path = tmp_path / "broker.json"
    path.write_text(json.dumps({"name": "n", "network_connectors": [{"name": "b", "uri": "static:(tcp://127.0.0.1:1)"}],
                                "address_settings": [{"match": "#", "redistribution_delay": 0}]}))
    args = build_parser().parse_args(["--config", str(path), "--stomp", "127.0.0.1:0", "--data", str(tmp_path / "d")])
    config = config_from_args(args)
    assert publishes_advisories(config), config.model_fields_set
    assert config.address_settings[0].model_fields_set == {"match", "redistribution_delay"}
    # ... and the flags still apply on top
    assert (config.name, config.stomp, config.data, config.store.kind) == ("n", "127.0.0.1:0", str(tmp_path / "d"),
                                                                          "journal")
