"""JMS message selectors: grammar, three-valued logic, type rules, errors and caching."""

from __future__ import annotations

import functools
import operator
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.engine.message import Message, MessageRef
from reference_broker.engine.selector import (
    MAX_INTEGER_LITERAL,
    MAX_LIKE_UNDERSCORE_RUN,
    MAX_NESTING,
    MAX_SELECTOR_LENGTH,
    Selector,
    SelectorError,
    parse_selector,
)

T, F, U = True, False, None  # TRUE, FALSE, UNKNOWN

PROPS = {
    "i": 5, "j": -3, "zero": 0, "f": 2.5, "big": 10**20,
    "s": "abc", "color": "red", "empty": "",
    "yes": True, "no": False,
    "str_num": "12", "str_float": "2.5", "str_bool": "TRUE",
    "price": 9.99, "pct": "50%", "path": "a_b.c",
}


def evaluate(text: str, props: dict | None = None, **kw):
    selector = parse_selector(text, **kw)
    assert selector is not None
    lookup = (PROPS if props is None else props).get
    result = selector.evaluate(lookup)
    assert result in (True, False, None)
    assert selector.matches(lookup) is (result is True)
    return result


def check(cases, **kw):
    failures = [(text, want, got) for text, want in cases
                if (got := evaluate(text, **kw)) is not want]
    assert not failures, failures


# ---------------------------------------------------------------------------------------------
# Three-valued logic
# ---------------------------------------------------------------------------------------------

# Operands that evaluate to TRUE, FALSE and UNKNOWN ("missing" is absent from PROPS).
OPERAND = {T: "i = 5", F: "i = 6", U: "missing = 1"}
SQL_AND = {(T, T): T, (T, F): F, (T, U): U, (F, T): F, (F, F): F, (F, U): F,
           (U, T): U, (U, F): F, (U, U): U}
SQL_OR = {(T, T): T, (T, F): T, (T, U): T, (F, T): T, (F, F): F, (F, U): U,
          (U, T): T, (U, F): U, (U, U): U}


@pytest.mark.parametrize("a,b", list(SQL_AND))
def test_and_or_truth_tables(a, b):
    assert evaluate(f"({OPERAND[a]}) AND ({OPERAND[b]})") is SQL_AND[a, b]
    assert evaluate(f"({OPERAND[a]}) OR ({OPERAND[b]})") is SQL_OR[a, b]


@pytest.mark.parametrize("a", [T, F, U])
def test_not_truth_table(a):
    assert evaluate(f"NOT ({OPERAND[a]})") is {T: F, F: T, U: U}[a]


def test_long_and_or_chains_keep_three_valued_logic():
    assert evaluate("i = 5 AND f = 2.5 AND missing = 1") is U
    assert evaluate("i = 5 AND missing = 1 AND f = 0") is F
    assert evaluate("i = 0 OR missing = 1 OR f = 0") is U
    assert evaluate("i = 0 OR missing = 1 OR f = 2.5") is T


def test_absent_identifier_semantics_from_the_brief():
    # a absent, b = 2: the OR is TRUE
    assert parse_selector("a = 1 OR b = 2").matches({"b": 2}.get)
    # NOT of UNKNOWN is UNKNOWN: no match
    assert not parse_selector("NOT (a = 1)").matches({}.get)
    assert not parse_selector("a <> 1").matches({}.get)


def test_null_propagates_through_comparisons_and_arithmetic():
    check([
        ("missing = 1", U), ("missing <> 1", U), ("missing > 1", U), ("1 < missing", U),
        ("missing + 1 = 2", U), ("-missing = 1", U), ("i = missing", U),
        ("missing BETWEEN 1 AND 2", U), ("missing NOT BETWEEN 1 AND 2", U),
        ("i BETWEEN missing AND 10", U), ("i BETWEEN missing AND 1", F),
        ("missing IN ('a')", U), ("missing NOT IN ('a')", U),
        ("missing LIKE 'a%'", U), ("missing NOT LIKE 'a%'", U),
        ("missing", U), ("NULL", U), ("NOT NULL", U), ("NULL OR i = 5", T),
    ])


# ---------------------------------------------------------------------------------------------
# Comparisons and type rules
# ---------------------------------------------------------------------------------------------


def test_numeric_comparisons():
    check([
        ("i = 5", T), ("i = 5.0", T), ("i <> 5", F), ("i <> 4", T),
        ("i > 4", T), ("i > 5", F), ("i >= 5", T), ("i < 5.5", T), ("i <= 4.99", F),
        ("f > i", F), ("f < i", T), ("j < 0", T), ("j = -3", T), ("big > 1e19", T),
        ("4 < i", T), ("5 >= i", T), ("6 <= i", F),
    ])


def test_string_comparisons_and_ordering_between_string_values():
    check([
        ("s = 'abc'", T), ("s <> 'abc'", F), ("s = 'ABC'", F), ("empty = ''", T),
        ("color = 'red' AND s <> 'red'", T),
        # ActiveMQ orders two string values at run time (literals are refused, see errors)
        ("s < color", T), ("color <= s", F), ("s >= s", T),
    ])


def test_boolean_comparisons():
    check([
        ("yes = TRUE", T), ("yes = FALSE", F), ("no = FALSE", T), ("yes <> no", T),
        ("yes", T), ("no", F), ("NOT yes", F), ("yes AND NOT no", T),
        ("TRUE", T), ("FALSE", F), ("TRUE = TRUE", T), ("TRUE <> FALSE", T),
        ("s", F),  # a non-boolean identifier used as a condition is FALSE (ActiveMQ)
        ("yes > no", F), ("yes < 1", F),  # booleans only compare with = and <>
    ])


def test_unlike_types_compare_false_not_error():
    # JMS 2.0 3.8.1.2 / ActiveMQ: comparing unlike types is FALSE; <> is NOT =.
    check([
        ("s = 1", F), ("s <> 1", T), ("s > 1", F), ("s < 1", F),
        ("str_num = 12", F), ("str_num > 10", F),
        ("yes = 1", F), ("i = 'abc'", F), ("i = yes", F),
        ("s BETWEEN 1 AND 2", F), ("s NOT BETWEEN 1 AND 2", F),
    ])


def test_convert_string_expressions():
    cases = [
        ("str_num = 12", T), ("str_num > 10", T), ("str_num <> 12", F),
        ("str_num BETWEEN 10 AND 20", T), ("12 = str_num", T),
        ("str_float = 2.5", T), ("str_float > 2", F),  # '2.5' is not an integer string
        ("str_float > 2.0", T),
        ("str_bool = TRUE", T), ("s = 1", F), ("s <> 1", T),
        ("str_num IN (11, 12)", T), ("s IN (12)", F),
        ("str_num + 1 = 13", U),  # arithmetic does not convert (ActiveMQ)
    ]
    check(cases, convert_string_expressions=True)
    # The ActiveMQ text prefix turns it on as well; without it nothing converts.
    assert evaluate("convert_string_expressions:str_num > 10") is T
    assert evaluate("str_num > 10") is F
    assert parse_selector("convert_string_expressions:x = 1").convert_string_expressions


# ---------------------------------------------------------------------------------------------
# Arithmetic and precedence
# ---------------------------------------------------------------------------------------------


def test_arithmetic():
    check([
        ("i + 1 = 6", T), ("i - 1 = 4", T), ("i * 2 = 10", T), ("i / 2 = 2.5", T),
        ("7 / 2 = 3.5", T), ("-7 % 3 = -1", T), ("7 % -3 = 1", T), ("f * 2 = i", T),
        ("-i = -5", T), ("+i = 5", T), ("- -i = 5", T), ("-(i - 10) = 5", T),
        ("i / zero = 1", U), ("i / 0 = 1", U), ("NOT (i / 0 = 1)", U), ("i % zero = 0", U),
        ("s + 1 = 1", U), ("yes + 1 = 2", U), ("-s = 1", U),
    ])


def test_arithmetic_precedence():
    check([
        ("2 + 3 * 4 = 14", T), ("(2 + 3) * 4 = 20", T), ("10 - 4 - 3 = 3", T),
        ("10 - (4 - 3) = 9", T), ("8 / 2 / 2 = 2", T), ("-2 * -3 = 6", T),
        ("i + 1 > 5 AND i * 2 < 11", T), ("2 * i - 1 = 9", T), ("1 + i * 0 = 1", T),
        ("i - -1 = 6", T),
    ])


def test_logical_precedence():
    # AND binds tighter than OR
    assert evaluate("i = 5 OR i = 0 AND f = 0") is T
    assert evaluate("(i = 5 OR i = 0) AND f = 0") is F
    # NOT binds looser than comparison: NOT (i = 4), not (NOT i) = 4
    assert evaluate("NOT i = 4") is T
    assert evaluate("NOT missing = 4") is U
    # NOT binds tighter than AND / OR
    assert evaluate("NOT i = 5 OR f = 2.5") is T
    assert evaluate("NOT i = 5 AND f = 2.5") is F
    assert evaluate("NOT NOT i = 5") is T
    # comparison binds looser than arithmetic
    assert evaluate("i + 1 BETWEEN 6 AND 6") is T
    assert evaluate("i * 2 IS NOT NULL") is T


# ---------------------------------------------------------------------------------------------
# LIKE, BETWEEN, IN, IS NULL
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value,pattern,escape,expected", [
    ("abc", "abc", None, T), ("abc", "ab", None, F), ("abc", "a%", None, T),
    ("abc", "%c", None, T), ("abc", "%b%", None, T), ("abc", "%x%", None, F),
    ("abc", "a_c", None, T), ("abc", "a_", None, F), ("abc", "___", None, T),
    ("abc", "____", None, F), ("abc", "%", None, T), ("", "%", None, T), ("", "_", None, F),
    ("", "", None, T), ("abc", "", None, F), ("a%b", "a\\%b", "\\", T), ("axb", "a\\%b", "\\", F),
    ("a_b", "a!_b", "!", T), ("axb", "a!_b", "!", F), ("a!b", "a!!b", "!", T),
    ("a!b", "a!b", "!", T),  # escape before an ordinary character stands for itself (ActiveMQ)
    ("50%", "%!%", "!", T), ("50", "%!%", "!", F), ("a.c", "a.c", None, T),
    ("abc", "a.c", None, F), ("a+b(c)[d]^$", "a+b(c)[d]^$", None, T),
    ("line1\nline2", "line1%", None, T), ("x\ny", "x_y", None, T),
    ("it's", "it's", None, T), ("its", "it's", None, F),
    ("aXbXc", "a%b%c", None, T), ("acb", "a%b%c", None, F),
])
def test_like(value, pattern, escape, expected):
    quoted = "'" + pattern.replace("'", "''") + "'"
    text = f"v LIKE {quoted}" + (f" ESCAPE '{escape}'" if escape else "")
    assert evaluate(text, {"v": value}) is expected
    assert evaluate(text.replace("LIKE", "NOT LIKE"), {"v": value}) is (not expected)


def test_like_on_headers_and_non_strings():
    check([
        ("path LIKE 'a\\_b%' ESCAPE '\\'", T), ("pct LIKE '%\\%' ESCAPE '\\'", T),
        ("i LIKE '5'", F), ("i NOT LIKE '5'", T),  # LIKE on a non-string is FALSE (ActiveMQ)
        ("yes LIKE '%'", F),
    ])


def test_between():
    check([
        ("i BETWEEN 1 AND 10", T), ("i BETWEEN 5 AND 5", T), ("i BETWEEN 6 AND 10", F),
        ("i BETWEEN 10 AND 1", F), ("f BETWEEN 2 AND 3", T), ("i NOT BETWEEN 1 AND 4", T),
        ("i NOT BETWEEN 1 AND 5", F), ("i BETWEEN 1 AND 10 AND f = 2.5", T),
        ("i BETWEEN -1 * 10 AND i + 0", T), ("j BETWEEN -5 AND -1", T),
    ])


def test_in():
    check([
        ("color IN ('red', 'green')", T), ("color IN ('green')", F),
        ("color NOT IN ('green', 'blue')", T), ("color NOT IN ('red')", F),
        ("s IN ('a', 'b', 'c', 'd', 'e', 'abc')", T),
        ("i IN (1, 5)", T), ("i IN (1, 5.0)", T), ("j IN (-3)", T), ("i NOT IN (1, 2)", T),
        ("f IN (2.5)", T), ("i IN ('5')", U),  # a type the list does not hold: UNKNOWN
        ("i NOT IN ('5')", U), ("s IN (1, 2)", U), ("yes IN ('true')", U),
        ("color in ('it''s', 'red')", T),
    ])


def test_is_null():
    check([
        ("missing IS NULL", T), ("missing IS NOT NULL", F), ("i IS NULL", F),
        ("i IS NOT NULL", T), ("empty IS NOT NULL", T), ("no IS NULL", F),
        ("(missing = 1) IS NULL", T), ("(i = 1) IS NULL", F), ("i + missing IS NULL", T),
        ("NOT missing IS NULL", F),
    ])


# ---------------------------------------------------------------------------------------------
# Lexical rules
# ---------------------------------------------------------------------------------------------


def test_literals():
    check([
        ("1 = 1", T), ("0 = 0", T), ("5L = 5", T), ("5l = 5", T), ("0x1F = 31", T),
        ("0XffL = 255", T), ("010 = 8", T), ("1.5 = 1.5", T), ("1. = 1", T), (".5 = 0.5", T),
        ("1e3 = 1000", T), ("1.5E-2 = 0.015", T), ("2.5e+1 = 25", T), ("2f = 2", T),
        ("2.5D = 2.5", T), ("9223372036854775808 > 0", T),
        ("'it''s' = 'it''s'", T), ("'' = ''", T), ("'a' <> 'b'", T),
    ])


def test_keywords_are_case_insensitive():
    check([
        ("i = 5 and f = 2.5", T), ("i = 5 AnD f = 2.5", T), ("i = 0 or i = 5", T),
        ("not i = 0", T), ("i between 1 and 10", T), ("i Not Between 1 AnD 2", T),
        ("color in ('red')", T), ("color not in ('red')", F), ("missing is null", T),
        ("i iS nOt NuLl", T), ("path like 'a!_%' escape '!'", T), ("yes = true", T),
        ("no = False", T), ("TrUe", T), ("nOt FaLsE", T),
    ])


def test_identifiers():
    props = {"$dollar": 1, "_under": 2, "a1": 3, "été": 4, "ANDROID": 5, "notx": 6,
             "Color": "Red", "color": "red", "x$y_z": 7, "inValue": 8, "NULLS": 9}
    check_props = [
        ("$dollar = 1", T), ("_under = 2", T), ("a1 = 3", T), ("été = 4", T),
        ("ANDROID = 5", T), ("notx = 6", T), ("x$y_z = 7", T), ("inValue = 8", T),
        ("NULLS = 9", T),
        ("Color = 'Red' AND color = 'red'", T),  # identifiers are case-sensitive
    ]
    for text, want in check_props:
        assert evaluate(text, props) is want, text
    assert parse_selector("a = 1 AND (b > c OR d IS NULL) AND e LIKE 'x'").identifiers == \
        frozenset({"a", "b", "c", "d", "e"})
    assert parse_selector("TRUE").identifiers == frozenset()


def test_whitespace_and_comments():
    check([
        ("  i\t=\n5  ", T), ("i=5 AND(f=2.5)", T), ("i = 5 -- trailing comment", T),
        ("i /* inline */ = 5", T), ("/* lead */ i = 5", T),
    ])


# ---------------------------------------------------------------------------------------------
# Headers through a real MessageRef
# ---------------------------------------------------------------------------------------------


def make_ref(delivery_count=0, **kw) -> MessageRef:
    message = Message(
        message_id="ID:broker-1:1", destination="queue://ORDERS",
        properties={"color": "red", "weight": 2.5}, **kw,
    )
    return MessageRef(message, sequence=1, delivery_count=delivery_count)


def test_header_identifiers():
    ref = make_ref(priority=7, persistent=True, group_id="G1", group_seq=3,
                   correlation_id="corr-1", type="order", timestamp=1000, expiration=0)
    lookup = ref.selector_value
    for text, want in [
        ("JMSPriority > 4", True), ("JMSPriority BETWEEN 0 AND 4", False),
        ("JMSDeliveryMode = 'PERSISTENT'", True), ("JMSDeliveryMode = 'NON_PERSISTENT'", False),
        ("JMSXGroupID = 'G1' AND JMSXGroupSeq = 3", True),
        ("JMSRedelivered = FALSE", True), ("JMSRedelivered", False), ("NOT JMSRedelivered", True),
        ("JMSXDeliveryCount = 1", True), ("JMSCorrelationID = 'corr-1'", True),
        ("JMSType = 'order' AND color = 'red' AND weight > 2", True),
        ("JMSMessageID LIKE 'ID:broker-1:%'", True), ("JMSTimestamp >= 1000", True),
        ("JMSExpiration = 0", True), ("JMSReplyTo IS NULL", True),
        ("JMSPriority > 4 AND color = 'red'", True), ("jmspriority > 4", False),
    ]:
        assert parse_selector(text).matches(lookup) is want, text


def test_header_identifiers_redelivered_and_absent_group():
    ref = make_ref(delivery_count=2, priority=1)
    lookup = ref.selector_value
    assert parse_selector("JMSRedelivered = TRUE AND JMSXDeliveryCount = 3").matches(lookup)
    assert parse_selector("JMSRedelivered").matches(lookup)
    assert not parse_selector("JMSPriority > 4").matches(lookup)
    assert parse_selector("JMSDeliveryMode = 'NON_PERSISTENT'").matches(lookup)
    assert parse_selector("JMSXGroupID IS NULL AND JMSXGroupSeq IS NULL").matches(lookup)
    assert not parse_selector("JMSXGroupID = 'G1' OR NOT (JMSXGroupID = 'G1')").matches(lookup)


# ---------------------------------------------------------------------------------------------
# API: empty selectors, caching, errors
# ---------------------------------------------------------------------------------------------


def test_empty_selector_means_match_everything():
    assert parse_selector(None) is None
    assert parse_selector("") is None
    assert parse_selector("  \t\n") is None
    with pytest.raises(TypeError):
        parse_selector(5)  # type: ignore[arg-type]


def test_compiled_selectors_are_cached():
    a = parse_selector("color = 'red'")
    assert isinstance(a, Selector)
    assert parse_selector("color = 'red'") is a
    assert parse_selector("color = 'red'", convert_string_expressions=True) is not a
    assert a.text == "color = 'red'" and repr(a) == "Selector(\"color = 'red'\")"


@pytest.mark.parametrize("text,position,fragment", [
    ("price >", 8, "unexpected end of selector"),
    ("a = 'abc", 5, "unterminated string"),
    ("and = 1", 1, "unexpected keyword 'and'"),
    ("a = 1 b", 7, "unexpected identifier 'b'"),
    ("a = = 1", 5, "expected an operand"),
    ("(a = 1", 7, "expected"),
    ("a = 1)", 6, "unexpected ')'"),
    ("a ! b", 3, "unexpected character '!'"),
    ("a != 1", 3, "use <>"),
    ('a = "x"', 5, "single quotes"),
    ("a like 'x' escape 'ab'", 19, "ESCAPE must be exactly one character"),
    ("a like 'x' escape ''", 19, "ESCAPE must be exactly one character"),
    ("x IN ()", 6, "IN list must contain at least one value"),
    ("x IN (y)", 7, "expected"),
    ("1 IN ('a')", 1, "IN needs an identifier"),
    ("'a' LIKE 5", 10, "expected a string literal"),
    ("a LIKE b", 8, "expected a string literal"),
    ("TRUE + 1", 1, "needs numbers, not the boolean TRUE"),
    ("TRUE + 1 = 2", 1, "needs numbers"),
    ("'a' * 2 = 2", 1, "needs numbers, not the string 'a'"),
    ("-'a' = 1", 2, "needs numbers"),
    ("a = NULL", 5, "use IS NULL"),
    ("NULL <> a", 1, "use IS NULL"),
    ("TRUE = 1", 1, "cannot compare TRUE with 1"),
    ("name > 'm'", 8, "the string 'm' cannot be used with >"),
    ("x BETWEEN 'a' AND 'z'", 11, "cannot be used with BETWEEN"),
    ("TRUE < 1", 1, "booleans only compare with = and <>"),
    ("(a = 1) > 0", 2, "booleans only compare"),
    ("a > NULL", 5, "IS NULL"),
    ("5", 1, "must be a boolean condition, not the number 5"),
    ("'abc'", 1, "must be a boolean condition"),
    ("a + 1", 1, "must be a boolean condition, not the arithmetic expression a + 1"),
    ("a = 1 AND 5", 11, "right operand of AND"),
    ("'x' OR a", 1, "left operand of OR"),
    ("NOT 'x'", 5, "operand of NOT"),
    ("08 = 8", 1, "invalid octal literal"),
    ("a = 1 AND", 10, "unexpected end of selector"),
    ("a BETWEEN 1", 12, "expected"),
    ("a IS 5", 6, "expected NOT or NULL"),
    ("a = 1 = 1", 7, "unexpected '='"),
    ("a.b = 1", 2, "unexpected"),
])
def test_invalid_selectors(text, position, fragment):
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    error = info.value
    assert isinstance(error, ValueError)
    assert error.position == position, str(error)
    assert fragment in error.message, str(error)
    assert str(error).startswith(f"invalid selector at column {position}: ")
    quoted = text.replace('"', '\\"')
    assert str(error).endswith(f'(selector: "{quoted}")')


def test_error_str_format_and_pickling():
    with pytest.raises(SelectorError) as info:
        parse_selector("price >")
    assert str(info.value) == (
        "invalid selector at column 8: unexpected end of selector; expected an operand "
        "(identifier, literal or '(') (selector: \"price >\")"
    )
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.message, copy.position, copy.selector) == ("unexpected end of selector; "
                                                             "expected an operand (identifier, "
                                                             "literal or '(')", 8, "price >")
    # positions count from the start of the text, including the ActiveMQ prefix
    with pytest.raises(SelectorError) as info:
        parse_selector("convert_string_expressions:a >")
    assert info.value.position == len("convert_string_expressions:a >") + 1


def test_nesting_limit_and_long_chains():
    with pytest.raises(SelectorError, match="nested too deeply"):
        parse_selector("NOT " * (MAX_NESTING + 5) + "a")
    assert parse_selector("NOT " * 100 + "a = 1").matches({"a": 1}.get)
    # generated selectors with thousands of terms compile and match (chains are flattened)
    many = parse_selector(" OR ".join(f"x = {n}" for n in range(2000)))
    assert many.matches({"x": 1999}.get) and not many.matches({"x": 2000}.get)


# ---------------------------------------------------------------------------------------------
# Hostile selectors (issue 20): nothing a client writes may hold the broker's loop without bound
# ---------------------------------------------------------------------------------------------


def like(value: str, pattern: str, escape: str | None = None) -> bool | None:
    quoted = "'" + pattern.replace("'", "''") + "'"
    escape_clause = "" if escape is None else " ESCAPE '" + escape.replace("'", "''") + "'"
    return parse_selector(f"v LIKE {quoted}{escape_clause}").evaluate({"v": value}.get)


@pytest.mark.timeout(20)  # the backtracking regex it replaced did not finish in hours
def test_like_with_many_wildcards_does_not_block_the_loop():
    # The attack: `%a` twelve times then `b`, against 100 `a`s.
    assert like("a" * 100, "%a" * 12 + "%b") is False
    assert like("a" * 100 + "b", "%a" * 12 + "%b") is True
    # Bigger: more wildcards, a longer value, and _ in the runs between the % signs.
    assert like("a" * 100_000, "%a" * 500 + "%b") is False
    assert like("a" * 100_000, "%a_" * 500 + "%b") is False
    assert like("a" * 100_000 + "b", "%a_" * 500 + "%b") is True
    assert like("ab" * 50_000, "%" + "_b" * (MAX_LIKE_UNDERSCORE_RUN // 2) + "%c") is False
    assert like("a" * 100_000, "a%" + "%".join(["a" * 60] * 100) + "%b") is False


def test_like_with_long_runs_of_underscore_is_refused_with_the_limit_named():
    ok = "v LIKE '%" + "_" * MAX_LIKE_UNDERSCORE_RUN + "%'"
    assert parse_selector(ok).matches({"v": "x" * MAX_LIKE_UNDERSCORE_RUN}.get)
    assert not parse_selector(ok).matches({"v": "x" * (MAX_LIKE_UNDERSCORE_RUN - 1)}.get)
    with pytest.raises(SelectorError, match="MAX_LIKE_UNDERSCORE_RUN") as info:
        parse_selector("v LIKE '%a" + "_" * MAX_LIKE_UNDERSCORE_RUN + "%'")
    assert info.value.position == len("v LIKE ") + 1
    # literal text has no such limit: it is found with str.find
    long_literal = "x" * 5000
    assert parse_selector(f"v LIKE '%{long_literal}%'").matches({"v": "y" + long_literal}.get)


@pytest.mark.parametrize("text,fragment", [
    ("a = " + "9" * 5000, "must fit in a Java long"),
    ("a = 9223372036854775809", "must fit in a Java long"),
    ("a = 0x" + "F" * 17, "must fit in a Java long"),
    ("a = 0" + "7" * 23, "must fit in a Java long"),
    ("a IN (" + "9" * 5000 + ")", "must fit in a Java long"),
    ("a = 1e999999", "range of a Java double"),
    ("a = -" + "9" * 400 + ".5", "range of a Java double"),
])
def test_a_huge_number_in_a_selector_is_a_clear_error(text, fragment):
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    assert fragment in info.value.message, str(info.value)
    assert info.value.position is not None
    assert len(info.value.message) < 300, "the error shows a long literal cut short"


def test_numbers_at_the_edges_of_the_java_ranges_are_accepted():
    check([
        ("big = -9223372036854775808 - 1 * 0 OR i = 5", T),
        ("i < 9223372036854775807", T), ("i > -9223372036854775808", T),
        ("i < 0x7FFFFFFFFFFFFFFF", T), ("i = 0000000000000000000000000005", T),
        ("i < 1.7976931348623157e308", T), ("i > 1e-999", T),  # underflow is just 0
    ])


def test_long_numeric_strings_with_convert_string_expressions_compare_false():
    # ActiveMQ converts with Long.valueOf, which refuses what does not fit in a long.
    props = {"s": "9" * 5000, "t": "0" * 5000 + "7", "u": "9223372036854775808"}
    for text, want in [("s = 5", F), ("s > 5", F), ("t = 7", T), ("u > 5", F), ("s > 5.0", T)]:
        assert evaluate(text, props, convert_string_expressions=True) is want, text


def test_selector_length_is_bounded_and_the_limit_named():
    longest = "a = 1 OR " + " " * (MAX_SELECTOR_LENGTH - len("a = 1 OR b = 2")) + "b = 2"
    assert len(longest) == MAX_SELECTOR_LENGTH
    assert parse_selector(longest).matches({"b": 2}.get)
    with pytest.raises(SelectorError, match="MAX_SELECTOR_LENGTH") as info:
        parse_selector(longest + " ")
    assert f"at most {MAX_SELECTOR_LENGTH}" in info.value.message
    assert len(str(info.value)) < 600  # the selector itself is shown cut short


@pytest.mark.timeout(60)
def test_deep_parentheses_and_long_operator_chains_compile_or_fail_cleanly():
    depth = (MAX_SELECTOR_LENGTH - 10) // 2
    nested = parse_selector("(" * depth + "a = 1" + ")" * depth)
    assert nested.matches({"a": 1}.get)
    with pytest.raises(SelectorError):
        parse_selector("(" * depth + "a = 1")
    with pytest.raises(SelectorError, match="nested too deeply"):
        parse_selector("a = " + " - " * (MAX_NESTING + 5) + "b")
    with pytest.raises(SelectorError, match="nested too deeply"):
        parse_selector("(" * 300 + "a" + " + a)" * 300 + " = 1")
    with pytest.raises(SelectorError, match="nested too deeply"):
        parse_selector("a = " + " + ".join(["a"] * 5000))  # + nests to the left


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=40))
def test_random_ascii_only_ever_raises_selector_error(text):
    try:
        selector = parse_selector(text)
    except SelectorError as error:
        assert error.message
        assert error.position is None or 1 <= error.position <= len(text) + 1
        return
    if selector is not None:
        assert selector.evaluate({}.get) in (True, False, None)


TOKENS = ["a", "b", "s", "=", "<>", "<", ">=", "AND", "OR", "NOT", "(", ")", "1", "2.5", "'x'",
          "+", "-", "*", "/", "LIKE", "'a%'", "ESCAPE", "'!'", "BETWEEN", "IN", ",", "IS",
          "NULL", "TRUE", "FALSE"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=12))
def test_random_token_soup_only_ever_raises_selector_error(tokens):
    # Token sequences reach deeper into the grammar than random characters do.
    text = " ".join(tokens)
    try:
        selector = parse_selector(text)
    except SelectorError:
        return
    if selector is not None:
        assert selector.evaluate({"a": 1, "b": 2.5, "s": "abc"}.get) in (True, False, None)


PY_OPS = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le,
          ">": operator.gt, ">=": operator.ge}
numbers = st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=400, deadline=None)
@given(numbers, st.sampled_from(sorted(PY_OPS)), numbers)
def test_numeric_comparison_agrees_with_python(x, op, y):
    expected = PY_OPS[op](x, y)
    assert parse_selector(f"a {op} b").matches({"a": x, "b": y}.get) is expected
    # and against a literal, when y can be written as one: integer literals are Java longs
    # (JMS 1.1 section 3.8.1.1), so a bigger one is refused and names the range
    if isinstance(y, int) and abs(y) > MAX_INTEGER_LITERAL:
        with pytest.raises(SelectorError, match="must fit in a Java long"):
            parse_selector(f"a {op} {y!r}")
    elif isinstance(y, int) or y == y and abs(y) != float("inf"):
        assert parse_selector(f"a {op} {y!r}").matches({"a": x}.get) is expected


def reference_like(value: str, pattern: str, escape: str | None) -> bool:
    """LIKE by brute force, for small inputs: the pattern's tokens (the escape character quotes
    a following _, % or itself, else stands for itself, as in ActiveMQ), then every way to
    match them, memoised."""
    tokens: list[str | None] = []  # a character, "%" for any run, None for _
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape and pattern[i + 1:i + 2] in ("_", "%", escape):
            tokens.append("lit:" + pattern[i + 1])
            i += 2
            continue
        tokens.append("%" if c == "%" else None if c == "_" else "lit:" + c)
        i += 1

    @functools.lru_cache(maxsize=None)
    def match(t: int, v: int) -> bool:
        if t == len(tokens):
            return v == len(value)
        token = tokens[t]
        if token == "%":
            return any(match(t + 1, w) for w in range(v, len(value) + 1))
        if v == len(value):
            return False
        if token is None or token[4:] == value[v]:
            return match(t + 1, v + 1)
        return False

    return match(0, 0)


@settings(max_examples=1500, deadline=None)
@given(value=st.one_of(st.text(alphabet="ab", max_size=8), st.text(alphabet="ab!%_\n", max_size=12)),
       pattern=st.one_of(st.text(alphabet="ab%_", max_size=8), st.text(alphabet="ab!%_\n", max_size=10)),
       escape=st.sampled_from([None, "!", "a", "%", "_"]))
def test_like_agrees_with_a_brute_force_reference(value, pattern, escape):
    expected = reference_like(value, pattern, escape)
    assert like(value, pattern, escape) is expected
    # and with the whole-pattern regular expression LIKE used to be (fine on inputs this small)
    regex = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape and pattern[i + 1:i + 2] in ("_", "%", escape):
            regex.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        regex.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    assert (re.fullmatch("".join(regex), value, re.DOTALL) is not None) is expected
