"""Differential tests for the fused loader's C line scanner (reports/pipeline/fused/_scan.c).

The scanner reads the "plain" client lines of a history at C speed and hands every line it is not
sure about back to Python. Whatever it decides, the result must be the one the slow reference path
gives (`load._line_by_line`, which parses every line with `json` by `line_problem`'s rules). So for
any file content:

- ``read_history_file(path, skip_malformed=True)`` gives the same rows (as a multiset) and the same
  malformed lines as ``_line_by_line(data, path, True)``;
- with ``skip_malformed=False`` both raise `MalformedHistory` with the same message, or both give
  the same rows;
- where the reference itself fails with another exception, the scanner path fails the same way
  (there is none known: 20-digit integers and lone surrogate escapes, which once crashed it, now
  read as Spark's reader reads them; test_fused_load.py).

Chunk boundaries matter to a chunked scanner, so every check is also run with ``_SCAN_CHUNK``
shrunk to a few lines' worth: boundaries then fall mid-line, on newlines, inside CRLF pairs and
at a last line without its newline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.pipeline.fused import load

from .histories import H, msg
from .test_fused_load import _arrow_rows

#: chunk sizes that put boundaries inside lines (a normal line here is about 150 bytes)
SMALL_CHUNKS = (64, 97, 300)


# ---------------------------------------------------------------------- the contract


def _outcome(read):
    """("ok", rows, malformed) or ("raised", exception type, message) of one read."""
    try:
        table, malformed = read()
    except Exception as exc:  # noqa: BLE001 - the reference's own crashes are part of the contract
        return ("raised", type(exc).__name__, str(exc))
    assert table.schema.equals(load.FLAT_SCHEMA), f"schema differs from FLAT_SCHEMA:\n{table.schema}"
    try:
        table.validate(full=True)  # e.g. a string column holding bytes that are not UTF-8
    except Exception as exc:  # noqa: BLE001
        return ("invalid table", type(exc).__name__, str(exc))
    return ("ok", _arrow_rows(table), malformed)


def _fused(path: Path, skip: bool):
    def read():
        got = load.read_history_file(path, skip_malformed=skip)
        return got.table, got.malformed
    return read


def _reference(path: Path, skip: bool):
    return lambda: load._line_by_line(path.read_bytes(), path, skip)  # pylint: disable=protected-access


def _compare(path: Path, skip: bool, want) -> None:
    got = _outcome(_fused(path, skip))
    assert got == want, (f"skip_malformed={skip}, _SCAN_CHUNK={load._SCAN_CHUNK}\n"  # pylint: disable=protected-access
                         f"file bytes: {path.read_bytes()!r}\n{_difference(got, want)}")


def _difference(got, want) -> str:
    """What differs, short enough to read: the rows only one side has, or both outcomes."""
    if got[0] == want[0] == "ok":
        def rows(side):
            return [dict((k, json.loads(v)) for k, v in row if json.loads(v) is not None) for row in side]
        only_got = [r for r in got[1] if r not in want[1]]
        only_want = [r for r in want[1] if r not in got[1]]
        return (f"rows only in the fused read: {rows(only_got)}\nrows only in the reference: {rows(only_want)}\n"
                f"row counts {len(got[1])} vs {len(want[1])}\n"
                f"malformed fused: {got[2]}\nmalformed reference: {want[2]}")
    return f"fused:     {str(got)[:1500]}\nreference: {str(want)[:1500]}"


def check_contract(path: Path, chunks=SMALL_CHUNKS, *, strict_everywhere: bool = False) -> None:
    """The contract at the default chunk size and at each of ``chunks``. The strict read
    (``skip_malformed=False``) takes another branch than the skipping one only where the reference
    finds a malformed line (or fails), so on a clean file it is left out unless
    ``strict_everywhere`` (a wrongly flagged line shows in the skipping read's list anyway): that
    keeps the several hundred literal cases fast, each fused read costing ~10 ms."""
    lenient = _outcome(_reference(path, True))
    clean = lenient[0] == "ok" and not lenient[2]
    strict = _outcome(_reference(path, False)) if not clean or strict_everywhere else None
    for chunk in (None, *chunks):
        with pytest.MonkeyPatch.context() as patch:
            if chunk is not None:
                patch.setattr(load, "_SCAN_CHUNK", chunk)
            _compare(path, True, lenient)
            if not clean or strict_everywhere:
                _compare(path, False, strict)


# ---------------------------------------------------------------------- named odd lines


def _normal_lines() -> list[bytes]:
    """A few plain client lines, as chaos/history.py writes them."""
    h = H("r").send(0, "a").receive(1, "a", consumer=0).send(2, "b", group="g", seq=1)
    return [json.dumps(e, separators=(",", ":")).encode() for e in h.lines]


_BASE = {"index": "99", "time": "123456789", "process": "3", "type": '"ok"', "f": '"send"',
         "value": '{"id":"m","producer":1,"seq":2,"destination":"queue://q"}',
         "target": '"t"', "node": '"A"', "run": '"r"'}


def line(*, raw_keys: dict | None = None, extra: str = "", **fields) -> bytes:
    """A client line with some fields' JSON text replaced (None deletes the field); ``raw_keys``
    renames fields to the given key text; ``extra`` is spliced in before the closing brace."""
    merged = {**_BASE, **fields}
    keys = raw_keys or {}
    parts = [f'{keys.get(k, json.dumps(k))}:{v}' for k, v in merged.items() if v is not None]
    return ("{" + ",".join(parts) + extra + "}").encode("utf-8", "surrogatepass")


def value(**fields) -> str:
    """A message value's JSON text with some fields' text replaced (None deletes)."""
    merged = {"id": '"m"', "producer": "1", "seq": "2", "destination": '"queue://q"', **fields}
    return "{" + ",".join(f'"{k}":{v}' for k, v in merged.items() if v is not None) + "}"


def _nemesis_lines() -> list[bytes]:
    h = H("r")
    h.kill(at=5)
    h.restart(at=9, killed_at=5)
    return [json.dumps(e, separators=(",", ":")).encode() for e in h.lines]


ODD_LINES = {
    # escapes and non-ASCII text
    "error_escaped_quote": line(error=r'"a\"b"'),
    "error_escaped_backslash": line(error=r'"a\\b"'),
    "error_escaped_u00e9": line(error=r'"caf\u00e9"'),
    "error_surrogate_pair": line(error=r'"\ud83d\ude00"'),
    "error_lone_surrogate": line(error=r'"\ud83d"'),
    "error_escaped_newline_and_slash": line(error=r'"a\nb\/c\t"'),
    "id_escaped_quote": line(value=value(id=r'"a\"b"')),
    "id_escaped_backslash": line(value=value(id=r'"a\\"')),
    "id_escaped_u00e9": line(value=value(id=r'"\u00e9"')),
    "id_surrogate_pair": line(value=value(id=r'"\ud83d\ude00"')),
    "f_escaped_to_send": line(f=r'"se\u006ed"'),
    "f_escaped_quote": line(f=r'"a\"b"'),
    "type_escaped_to_ok": line(type=r'"\u006fk"'),
    "process_escaped_to_nemesis": line(process=r'"nem\u0065sis"'),
    "key_escaped_to_index": line(raw_keys={"index": r'"ind\u0065x"'}),
    "key_escaped_to_value": line(raw_keys={"value": r'"valu\u0065"'}),
    "key_escaped_quote": line(extra=r',"a\"b":1'),
    "destination_escaped": line(value=value(destination=r'"queue://\u0071"')),
    "error_raw_utf8": line(error='"café"'),
    "id_raw_utf8": line(value=value(id='"é"')),
    "destination_raw_utf8": line(value=value(destination='"queue://é"')),
    "error_invalid_utf8": line(error='"a"').replace(b'"a"', b'"a\xff\xfeb"'),
    "id_invalid_utf8": line(value=value(id='"X"')).replace(b'"X"', b'"\xc3"'),
    "invalid_utf8_outside_strings": line() + b"\xff",
    "overlong_utf8_slash": line(error='"X"').replace(b'"X"', b'"\xc0\xaf"'),
    "nul_byte_in_string": line(error='"X"').replace(b'"X"', b'"a\x00b"'),
    "control_char_in_string": line(error='"X"').replace(b'"X"', b'"a\x01b"'),
    "bom_at_line_start": b"\xef\xbb\xbf" + line(),
    # numbers where integers go
    "time_float": line(time="1.5"),
    "time_float_integral": line(time="1.0"),
    "time_exponent": line(time="1e3"),
    "time_negative": line(time="-5"),
    "index_text": line(index='"5"'),
    "index_bool": line(index="true"),
    "index_null": line(index="null"),
    "index_20_digits": line(index="12345678901234567890"),
    "index_int64_max": line(index="9223372036854775807"),
    "index_int64_min": line(index="-9223372036854775808"),
    "index_leading_zero": line(index="01"),
    "index_minus_zero": line(index="-0"),
    "time_minus_zero_float": line(time="-0.0"),
    "process_bool": line(process="true"),
    "process_text_digits": line(process='"7"'),
    "process_negative": line(process="-3"),
    "process_text_negative": line(process='"-3"'),
    "process_float": line(process="7.0"),
    "process_text_spaced": line(process='" 7"'),
    "process_20_digits": line(process="12345678901234567890"),
    "process_null": line(process="null"),
    "process_object": line(process='{"a":1}'),
    "process_nemesis_client_value": line(process='"nemesis"'),
    "producer_float": line(value=value(producer="1.5")),
    "producer_bool": line(value=value(producer="true")),
    "producer_text": line(value=value(producer='"3"')),
    "producer_null": line(value=value(producer="null")),
    "producer_20_digits": line(value=value(producer="12345678901234567890")),
    "producer_exponent": line(value=value(producer="1E2")),
    "redelivered_one": line(value=value(redelivered="1")),
    "redelivered_text": line(value=value(redelivered='"true"')),
    "redelivered_true": line(value=value(redelivered="true")),
    "seq_exponent": line(value=value(seq="1e3")),
    "seq_nan": line(value=value(seq="NaN")),
    "consumer_negative": line(value=value(consumer="-1")),
    "subscriber_infinity": line(value=value(subscriber="Infinity")),
    "group_number": line(value=value(group="5")),
    "destination_null": line(value=value(destination="null")),
    "id_null": line(value=value(id="null")),
    "id_number": line(value=value(id="5")),
    "id_float": line(value=value(id="5.0")),
    "id_bool": line(value=value(id="false")),
    "id_object": line(value=value(id='{"a":[1,"b"]}')),
    "id_list": line(value=value(id="[1]")),
    "id_missing": line(value=value(id=None)),
    "id_empty_text": line(value=value(id='""')),
    # values of other shapes
    "value_text": line(value='"x"'),
    "value_number": line(value="5"),
    "value_null": line(value="null"),
    "value_missing": line(value=None),
    "value_list": line(value="[" + value() + "," + value(id='"n"') + "]"),
    "value_empty_list": line(value="[]"),
    "value_list_of_scalars": line(value='[1,"a",null]'),
    "value_messages": line(value=f'{{"messages":[{value()}],"subscriber":4}}'),
    "value_messages_empty": line(value='{"messages":[]}'),
    "value_messages_not_list": line(value='{"messages":5,"id":"m"}'),
    "value_messages_and_id": line(value=f'{{"id":"z","messages":[{value()}]}}'),
    "value_empty_object": line(value="{}"),
    "value_extra_phase": line(value=value(phase='"start"')),
    "value_extra_fault": line(value=value(fault='"down"', started="7")),
    "value_extra_fault_window": line(value=value(fault_window='[{"fault":"down","f":"kill","start":1,"end":2}]')),
    "value_extra_unknown_key": line(value=value(slow="true", nested='{"a":[1,2]}')),
    "value_duplicate_id": line(value='{"id":"m","id":"n","producer":1}'),
    "value_duplicate_producer": line(value='{"id":"m","producer":1,"producer":"x"}'),
    "value_duplicate_messages": line(value=f'{{"messages":[],"messages":[{value()}]}}'),
    # keys
    "duplicate_index": line(extra=",\"index\":7"),
    "duplicate_process_nemesis": line(extra=',"process":"nemesis"'),
    "duplicate_process_after_nemesis": line(process='"nemesis"', extra=',"process":4'),
    "duplicate_value": line(extra=',"value":null'),
    "duplicate_type_bad": line(extra=',"type":"bogus"'),
    "duplicate_run": line(extra=',"run":"other"'),
    "unknown_key_nested": line(extra=r',"extra":{"a":[1,{"b":"\"]}"}],"c":{}}'),
    "unknown_key_nan": line(extra=',"x":NaN,"y":[Infinity,-Infinity]'),
    "unknown_key_escapes": line(extra=r',"z":"\u00e9\\\"","w":"é"'),
    "unknown_key_messages_word": line(extra=',"messages":[1]'),
    "unknown_key_value_word_in_text": line(extra=',"note":"\\"value\\": [1]"'),
    "nemesis_word_in_error": line(error='"nemesis"'),
    "nan_time": line(time="NaN"),
    "infinity_index": line(index="Infinity"),
    # whitespace and line ends
    "whitespace_around_tokens": b' { "index" : 99 , "time" :\t1 ,\t"process" : 3 , "type" : "ok" , "f" : "send" ,'
                                b' "value" : { "id" : "m" , "producer" : 1 } } ',
    "tabs_only_separators": line().replace(b",", b",\t").replace(b":", b"\t:"),
    "crlf_line": line() + b"\r",
    "two_cr": line() + b"\r\r",
    "cr_inside": line().replace(b",", b"\r,", 1),
    "blank_line": b"",
    "whitespace_only": b"  \t ",
    "cr_only": b"\r",
    "form_feed_line": b"\x0c",
    "vertical_tab_line": b"\x0b",
    "file_separator_line": b"\x1c",
    "nbsp_line": "\u00a0".encode(),
    "line_separator_line": "\u2028".encode(),
    "form_feed_before_object": b"\x0c" + line(),
    "nul_line": b"\x00",
    # not a history line
    "trailing_text": line() + b" x",
    "trailing_object": line() + b"{}",
    "trailing_comma": line()[:-1] + b",}",
    "truncated": line()[:40],
    "truncated_in_escape": line(error=r'"a\u00e9"')[:-8],
    "json_list": b"[1,2]",
    "json_text": b'"text"',
    "json_number": b"5",
    "json_null": b"null",
    "empty_object": b"{}",
    "not_json": b"hello",
    "single_quotes": line().replace(b'"', b"'"),
    # fields missing or off the op types
    "empty_run": line(run='""'),
    "empty_target": line(target='""'),
    "run_number": line(run="5"),
    "missing_target": line(target=None),
    "missing_run": line(run=None),
    "missing_node": line(node=None),
    "node_null": line(node="null"),
    "missing_error": line(error=None),
    "error_null": line(error="null"),
    "error_object": line(error='{"code":1}'),
    "missing_index": line(index=None),
    "missing_time": line(time=None),
    "missing_process": line(process=None),
    "missing_type": line(type=None),
    "missing_f": line(f=None),
    "type_not_op_type": line(type='"done"'),
    "type_upper_case": line(type='"OK"'),
    "type_number": line(type="1"),
    "empty_f": line(f='""'),
    "f_number": line(f="5"),
    "f_null": line(f="null"),
}

# valid lines the scanner must hand back or take: nemesis steps with fault windows, a drain
for _i, _raw in enumerate(_nemesis_lines()):
    ODD_LINES[f"nemesis_step_{_i}"] = _raw
ODD_LINES["drain"] = json.dumps(H("r").drain(3, [msg("c", seq=5), msg("d", seq=6)]).lines[1]).encode()

_POSITIONS = ("first", "middle", "last", "last_without_newline")


def _file_with(odd: bytes, where: str) -> bytes:
    lines = _normal_lines()
    at = {"first": 0, "middle": len(lines) // 2}.get(where, len(lines))
    lines.insert(at, odd)
    return b"\n".join(lines) + (b"" if where == "last_without_newline" else b"\n")


@pytest.mark.parametrize("where", _POSITIONS)
@pytest.mark.parametrize("odd", list(ODD_LINES.values()), ids=list(ODD_LINES))
def test_odd_line_reads_as_the_reference_reads_it(tmp_path, odd, where):
    path = tmp_path / "r" / "history.jsonl"
    path.parent.mkdir()
    path.write_bytes(_file_with(odd, where))
    check_contract(path, chunks=(64,))


@pytest.mark.parametrize("odd", list(ODD_LINES.values()), ids=list(ODD_LINES))
def test_odd_line_reads_as_the_reference_reads_it_without_the_scanner(tmp_path, monkeypatch, odd):
    # where the scanner is not built, pyarrow's typed read is held to the same contract
    monkeypatch.setattr(load, "SCANNER", None)
    path = tmp_path / "r" / "history.jsonl"
    path.parent.mkdir()
    path.write_bytes(_file_with(odd, "middle"))
    check_contract(path, chunks=())


@pytest.mark.parametrize("ending", [b"\r\n", b"\n\r\n", b"\r\n\r\n"], ids=["crlf", "blank_crlf", "crlf_crlf"])
@pytest.mark.parametrize("final", [True, False], ids=["final_newline", "no_final_newline"])
def test_whole_file_with_crlf_line_ends(tmp_path, ending, final):
    path = tmp_path / "r" / "history.jsonl"
    path.parent.mkdir()
    lines = _normal_lines() * 3 + _nemesis_lines()
    path.write_bytes(ending.join(lines) + (ending if final else b""))
    check_contract(path)


@pytest.mark.parametrize("content", [b"", b"\n", b"\n\n\n", b"\r\n", b" ", b"\x0c\n", b"{}", b"{}\n"],
                         ids=["empty", "newline", "newlines", "crlf", "space", "form_feed", "empty_object",
                              "empty_object_newline"])
def test_file_with_no_history_line(tmp_path, content):
    path = tmp_path / "r" / "history.jsonl"
    path.parent.mkdir()
    path.write_bytes(content)
    check_contract(path)


@pytest.mark.slow
def test_every_odd_line_in_one_file(tmp_path):
    """All the odd lines between plain ones, so that in one scan every chunk boundary lands
    somewhere different relative to them."""
    lines = []
    for odd in ODD_LINES.values():
        lines += [*_normal_lines(), odd]
    path = tmp_path / "r" / "history.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"\n".join(lines))
    check_contract(path, chunks=(97, 300))


# ---------------------------------------------------------------------- generated files


def _json_value(ascii_only: bool):
    scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.integers(-(10**25), 10**25)
               | st.floats() | st.text(max_size=6))
    tree = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
    return tree.map(lambda v: json.dumps(v, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))


#: hand-written JSON texts the scanner must be careful with
_RAW_VALUES = [b'"nemesis"', b'"7"', b'"-3"', b"1e3", b"-0", b"01", b"1.0", b"NaN", b"-Infinity", b'"\\u00e9"',
               b'"a\\"b"', b'"\\ud83d\\ude00"', b'"ok"', b'"invoke"', b'"send"', b"[]", b"{}", b'{"messages":[]}',
               b'[{"id":"z"}]', '"café"'.encode(), b'"\xff"', b"9223372036854775807", b"-9223372036854775808",
               b"true", b"null", b'""', b'"\\\\"', b"[1,", b'{"id":"x","phase":"end"}', b"0"]

RAW_VALUE = st.one_of(st.sampled_from(_RAW_VALUES), st.booleans().flatmap(_json_value))
KEY = st.sampled_from([b'"index"', b'"time"', b'"process"', b'"type"', b'"f"', b'"value"', b'"id"', b'"producer"',
                       b'"seq"', b'"phase"', b'"messages"', b'"ind\\u0065x"', b'"x"', b'"nemesis"', b'"error"',
                       b'"run"', b'"redelivered"'])
WHITESPACE = st.sampled_from([b"", b" ", b"\t", b"  ", b"\r", b"\x0c", b"\n"])
ODD_WHOLE_LINES = st.sampled_from([b"", b" ", b"\x0c", b"\r", "\u00a0".encode(), b"[1,2]", b'"text"', b"{}",
                                   b"garbage", b"\x1c", *_nemesis_lines()])


def _template_lines() -> list[dict]:
    h = H("r").send(0, "a", group="g").receive(1, "a", consumer=0, redelivered=True)
    h.call(1, "subscribe", {"destination": "topic://t", "subscriber": 4})
    h.call(2, "receive", result={"messages": [msg("b", seq=1, consumer=1)], "subscriber": 4})
    h.send(0, "c", "info", error="timeout")
    h.drain(3, [msg("d", producer=2, seq=5)])
    h.kill(at=100)
    return h.lines


TEMPLATES = _template_lines()


def _fields(obj: dict, ascii_only: bool) -> list[list]:
    """[key text, value] pairs; a dict value becomes pairs itself so mutations can reach inside."""
    out = []
    for k, v in obj.items():
        text = json.dumps(k).encode()
        out.append([text, _fields(v, ascii_only) if isinstance(v, dict)
                    else json.dumps(v, ensure_ascii=ascii_only, separators=(",", ":")).encode()])
    return out


def _render(fields, space: bytes) -> bytes:
    parts = [k + space + b":" + space + (_render(v, space) if isinstance(v, list) else v) for k, v in fields]
    return b"{" + space + (b"," + space).join(parts) + space + b"}"


@st.composite
def history_line(draw, index: int) -> bytes:
    if draw(st.integers(0, 19)) == 0:
        return draw(ODD_WHOLE_LINES)
    event = dict(draw(st.sampled_from(TEMPLATES)), index=index)
    if isinstance(event.get("value"), dict) and "id" in event["value"] and draw(st.booleans()):
        event["value"] = dict(event["value"], id=draw(st.text(min_size=1, max_size=5)))
    fields = _fields(event, draw(st.booleans()))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        # a mutation at the top level or inside the value
        inner = [f[1] for f in fields if isinstance(f[1], list) and f[1]]
        target = draw(st.sampled_from([fields, *inner]))
        if not target:
            break
        at = draw(st.integers(0, len(target) - 1))
        kind = draw(st.sampled_from(["replace", "replace", "delete", "duplicate", "rename", "add"]))
        if kind == "replace":
            target[at] = [target[at][0], draw(RAW_VALUE)]
        elif kind == "delete":
            del target[at]
        elif kind == "duplicate":
            target.insert(draw(st.integers(0, len(target))), [target[at][0], draw(RAW_VALUE | st.just(target[at][1]))])
        elif kind == "rename":
            target[at] = [draw(KEY), target[at][1]]
        else:
            target.insert(at, [draw(KEY), draw(RAW_VALUE)])
    text = _render(fields, draw(WHITESPACE) if draw(st.integers(0, 9)) == 0 else b"")
    tail = draw(st.sampled_from(["none"] * 12 + ["cut", "garbage", "cr"]))
    if tail == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    elif tail == "garbage":
        text += draw(st.sampled_from([b"x", b" }", b"{}", b"\x00", b"\xff", b",", b'"']))
    elif tail == "cr":
        text += b"\r"
    return text


@st.composite
def history_file(draw) -> bytes:
    n = draw(st.integers(0, 14))
    lines = [draw(history_line(i)) for i in range(n)]
    ending = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    return ending.join(lines) + (ending if draw(st.booleans()) else b"")


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(content=history_file(), chunk=st.one_of(st.integers(64, 300), st.none()))
def test_generated_files_read_as_the_reference_reads_them(tmp_path_factory, content, chunk):
    path = tmp_path_factory.mktemp("gen") / "r" / "history.jsonl"
    path.parent.mkdir()
    path.write_bytes(content)
    check_contract(path, chunks=() if chunk is None else (chunk,), strict_everywhere=True)


# ---------------------------------------------------------------------- order and the extension


def _in_order_history() -> H:
    h = H("ordered")
    for i in range(12):
        h.send(i % 3, f"m{i}", seq=i).receive(3, f"m{i}", consumer=0, seq=i)
        if i == 4:
            h.kill(at=h.now / 1e6 + 1).restart(at=h.now / 1e6 + 5, killed_at=h.now / 1e6 + 1)
    return h.drain(4, [msg("x", seq=1), msg("y", seq=2)]).drain(4, [])


@pytest.mark.parametrize("chunk", [None, 64, 150, 300])
def test_rows_of_an_ordered_history_come_in_file_order(tmp_path, chunk):
    path = _in_order_history().write(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        if chunk is not None:
            patch.setattr(load, "_SCAN_CHUNK", chunk)
        table = load.read_history_file(path).table
    reference, _ = load._line_by_line(path.read_bytes(), path, False)  # pylint: disable=protected-access
    order = list(zip(table["index"].to_pylist(), table["pos"].to_pylist()))
    assert order == list(zip(reference["index"].to_pylist(), reference["pos"].to_pylist()))
    assert [i for i, _ in order] == sorted(i for i, _ in order)  # the reference is in file order too


def test_scanner_extension_is_built():
    # `pip install -e .` builds reports/pipeline/fused/_scan.c; without it every test above would
    # only exercise the pyarrow fallback
    assert load.SCANNER is not None, "reports.pipeline.fused._scan did not import: reinstall with `pip install -e .`"


def test_read_history_file_goes_through_the_scanner(tmp_path):
    """The C path is the one the differential tests exercise: a plain history's read calls into
    the scanner module (seen through a proxy that records what is looked up on it)."""
    real, used = load.SCANNER, []
    assert real is not None, "the scanner extension is not built (see test_scanner_extension_is_built)"

    class Recording:
        def __getattr__(self, name):
            used.append(name)
            return getattr(real, name)

    path = _in_order_history().write(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load, "SCANNER", Recording())
        load.read_history_file(path)
    assert used, "read_history_file never touched load.SCANNER"
