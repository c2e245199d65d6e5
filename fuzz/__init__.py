"""Coverage-guided fuzzing of the reference broker's input parsers with atheris (issue 20).

Each target (fuzz/targets.py) takes one input from libFuzzer and runs it through one parser:
the STOMP codec, the MQTT codec, the AMQP layer the broker decodes itself (the SASL exchange and
the transfer payload sections), the selector parser and evaluator, and the configuration loader;
and whole STOMP and MQTT sessions on an in-process engine (where no exception may escape).
The parser's own error type for bad input (StompProtocolError, MqttProtocolError, SaslError /
ConversionError, SelectorError, ConfigError) is the expected answer; any other exception, an
assertion of a target's round-trip property, or one input running past the time-out is a finding.

`python -m fuzz TARGET --seconds N` runs one target (see fuzz/__main__.py); the seed corpus of
each target is committed under fuzz/corpus/TARGET/ and libFuzzer's new inputs go to a separate,
git-ignored work directory so the committed corpus stays small.
"""
