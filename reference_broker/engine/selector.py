"""JMS message selectors (JMS 1.1, section 3.8.1), compiled once into Python closures.

A selector is parsed with a lark LALR grammar and the parse tree is turned, by a lark
`Transformer`, into nested closures: matching a message calls those closures and never walks a
tree or dispatches on node types. Compiled selectors are cached by text, because many
subscriptions share the same selector.

Semantics follow the JMS specification; where the specification is silent or vague, ActiveMQ
Classic's implementation (`org.apache.activemq.selector.SelectorParser` and the
`org.apache.activemq.filter` expressions) is the reference:

* Three-valued logic. An identifier that names no header or property is NULL; comparisons and
  arithmetic involving NULL are UNKNOWN (`None`), AND/OR/NOT follow the SQL truth tables and a
  selector matches only when it evaluates to TRUE.
* Comparing values of unlike types (a string with a number, a boolean with a number, ...) is
  FALSE, not an error, as in JMS 2.0 section 3.8.1.2 and ActiveMQ; `<>` is NOT `=`, so `x <> 1`
  is TRUE for a string x (ActiveMQ `createNotEqual`). int and float compare numerically.
  Ordering (`<`, `<=`, `>`, `>=`, BETWEEN) works on two numbers or, as in ActiveMQ, on two
  string values at run time; booleans compare only with `=` and `<>`.
* Type errors visible in the text raise `SelectorError` where ActiveMQ rejects the selector:
  a selector that is not a condition (`price * 2`), AND/OR/NOT over a non-boolean operand, a
  string/boolean/NULL literal in an ordering comparison or BETWEEN (`name > 'm'`), `x = NULL`,
  a boolean literal compared with another kind of literal, IN without an identifier on its left,
  an ESCAPE that is not one character. Arithmetic on a string or boolean literal (`TRUE + 1`)
  is rejected too (ActiveMQ fails it only when evaluated); at run time arithmetic on a
  non-number, or a division by zero, is UNKNOWN.
* `/` always divides as floating point and `%` is Java's floating-point remainder (ActiveMQ's
  ArithmeticExpression); LIKE on a non-string value is FALSE; IN on a value of a type absent
  from the list is UNKNOWN (ActiveMQ), and IN accepts numeric literals as well as strings.
* `convert_string_expressions=True` (or the ActiveMQ text prefix `convert_string_expressions:`)
  turns on ActiveMQ's ConvertStringExpressions: a string compared with a number or boolean is
  first converted to the other side's type (an integer string for an integer, a floating-point
  string for a float, 'true'/'false' for a boolean); a string that does not convert compares
  FALSE. STOMP clients can only send string properties, which is what this is for.

Hostile selectors (issue 20): LIKE is matched without a backtracking regular expression
(`_like_matcher`), in time linear in the value; a selector is at most MAX_SELECTOR_LENGTH
characters and MAX_NESTING operators deep; integer literals must fit a Java long and decimal
ones a double (JMS 1.1 section 3.8.1.1). Each refusal is a SelectorError naming the limit.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from typing import Any, Callable

from lark import Lark, Token
from lark.visitors import Transformer_NonRecursive
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

__all__ = ["Lookup", "Selector", "SelectorError", "parse_selector"]

Lookup = Callable[[str], Any]

CONVERT_STRING_EXPRESSIONS_PREFIX = "convert_string_expressions:"  # ActiveMQ's selector prefix
MAX_NESTING = 200  # deeper selectors are refused rather than risking Python's recursion limit
# Longest selector accepted, in characters: the STOMP listener's default header block
# (stomp_options.max_header_block). Bounds what one SUBSCRIBE or AMQP attach may make the
# broker parse (about 0.4 s for 64 K on a slow machine) and what a match can cost: every
# operator's cost is linear in the values it looks at, and the selector has at most this many.
MAX_SELECTOR_LENGTH = 64 * 1024
# Longest run of a LIKE pattern between two % signs that holds a _ (see _Segment): such a run is
# searched for in O(len(value) * run length).
MAX_LIKE_UNDERSCORE_RUN = 256
# JMS 1.1 section 3.8.1.1: exact numeric literals are in the range of a Java long, approximate
# ones in the range of a Java double. A magnitude of 2**63 is accepted so -9223372036854775808
# can be written.
MAX_INTEGER_LITERAL = 2**63
_CACHE_SIZE = 1024
_CACHE_MAX_TEXT = 4096  # longer selectors are compiled every time, so the cache stays small


class SelectorError(ValueError):
    """An invalid selector: `.message` says what is wrong, `.position` the 1-based column."""

    def __init__(self, message: str, position: int | None = None, selector: str | None = None):
        self.message = message
        self.position = position
        self.selector = selector
        super().__init__(self._render())

    def _render(self) -> str:
        where = f" at column {self.position}" if self.position is not None else ""
        text = f"invalid selector{where}: {self.message}"
        if self.selector is not None:
            shown = self.selector if len(self.selector) <= 200 else self.selector[:200] + "..."
            text += ' (selector: "' + shown.replace('"', '\\"') + '")'
        return text

    def __reduce__(self):
        return (type(self), (self.message, self.position, self.selector))


class Selector:
    """A compiled selector. `matches(lookup)` is True only when the selector evaluates to TRUE."""

    __slots__ = ("text", "identifiers", "convert_string_expressions", "_fn")

    def __init__(self, text: str, fn: Callable[[Lookup], bool | None],
                 identifiers: frozenset[str], convert_string_expressions: bool) -> None:
        self.text = text
        self.identifiers = identifiers
        self.convert_string_expressions = convert_string_expressions
        self._fn = fn

    def matches(self, lookup: Lookup) -> bool:
        return self._fn(lookup) is True

    def evaluate(self, lookup: Lookup) -> bool | None:
        """The three-valued result: True, False, or None for UNKNOWN."""
        return self._fn(lookup)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def parse_selector(text: str | None, convert_string_expressions: bool = False) -> Selector | None:
    """Compile `text`; None, '' or whitespace give None, meaning "match every message".

    Raises SelectorError for an invalid selector. Results are cached on (text, option).
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"selector must be a str, not {type(text).__name__}")
    if not text.strip():
        return None
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"selector is {len(text)} characters long; at most "
                            f"{MAX_SELECTOR_LENGTH} are accepted (MAX_SELECTOR_LENGTH)", None, text)
    if len(text) > _CACHE_MAX_TEXT:
        return _compile.__wrapped__(text, bool(convert_string_expressions))
    return _compile(text, bool(convert_string_expressions))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(text: str, convert: bool) -> Selector:
    offset = 0
    if text.startswith(CONVERT_STRING_EXPRESSIONS_PREFIX):
        convert = True
        offset = len(CONVERT_STRING_EXPRESSIONS_PREFIX)
        if not text[offset:].strip():
            raise SelectorError("nothing follows the convert_string_expressions: prefix",
                                len(text) + 1, text)
    body = text[offset:]
    try:
        tree = _parser().parse(body)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, offset) from None
    except RecursionError:
        raise SelectorError("selector is nested too deeply", None, text) from None
    compiler = _Compiler(text, offset, convert)
    try:
        root = compiler.transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SelectorError):
            raise exc.orig_exc from None
        if isinstance(exc.orig_exc, RecursionError):
            raise SelectorError("selector is nested too deeply", None, text) from None
        raise
    except RecursionError:
        raise SelectorError("selector is nested too deeply", None, text) from None
    fn = compiler.condition(root, "a selector")
    return Selector(text, fn, frozenset(compiler.identifiers), convert)


# --------------------------------------------------------------------------------------------
# Grammar. Precedence, loosest first: OR, AND, NOT, comparison (=, <>, <, <=, >, >=, LIKE,
# BETWEEN, IN, IS NULL), + -, * / %, unary + -. Keywords are case-insensitive and reserved.
# --------------------------------------------------------------------------------------------

_GRAMMAR = r"""
?start: or_expr

?or_expr: and_expr
        | or_expr _OR and_expr                      -> or_
?and_expr: not_expr
        | and_expr _AND not_expr                    -> and_
?not_expr: predicate
        | NOT not_expr                              -> not_
?predicate: sum
        | sum COMPARE_OP sum                        -> compare
        | sum NOT? LIKE STRING (ESCAPE STRING)?     -> like
        | sum NOT? BETWEEN sum _AND sum             -> between
        | sum NOT? IN LPAR [in_items] ")"           -> in_
        | sum IS NOT? NULL                          -> is_null
in_items: in_item ("," in_item)*
in_item: STRING | NUMBER | ADD_OP NUMBER
?sum: product
        | sum ADD_OP product                        -> arith
?product: unary
        | product MUL_OP unary                      -> arith
?unary: primary
        | ADD_OP unary                              -> unary_op
?primary: STRING                                    -> string
        | NUMBER                                    -> number
        | TRUE                                      -> true
        | FALSE                                     -> false
        | NULL                                      -> null
        | IDENT                                     -> ident
        | "(" or_expr ")"

_OR: "OR"i
_AND: "AND"i
NOT: "NOT"i
LIKE: "LIKE"i
ESCAPE: "ESCAPE"i
BETWEEN: "BETWEEN"i
IN: "IN"i
IS: "IS"i
NULL: "NULL"i
TRUE: "TRUE"i
FALSE: "FALSE"i
LPAR: "("
COMPARE_OP: /<>|<=|>=|=|<|>/
ADD_OP: /[+-]/
MUL_OP: /[*\/%]/
STRING: /'(?:[^']|'')*'/
NUMBER: /(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)[fFdD]?|[0-9]+[fFdD]|0[xX][0-9a-fA-F]+[lL]?|[0-9]+[lL]?/
IDENT: /(?:[^\W\d]|\$)[\w$]*/i
COMMENT: /--[^\n\r]*/ | /\/\*(?:[^*]|\*+[^*\/])*\*+\//

%ignore /[ \t\n\r\f]+/
%ignore COMMENT
"""


@functools.cache
def _parser() -> Lark:
    # The basic lexer (not the contextual one) so keywords are reserved everywhere: "and = 1"
    # is an error, as in ActiveMQ, rather than a comparison on a property named "and".
    return Lark(_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False)


_TERMINAL_NAMES = {
    "_OR": "OR", "_AND": "AND", "NOT": "NOT", "LIKE": "LIKE", "ESCAPE": "ESCAPE",
    "BETWEEN": "BETWEEN", "IN": "IN", "IS": "IS", "NULL": "NULL", "TRUE": "TRUE",
    "FALSE": "FALSE", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
}
_OPERATORS = {"COMPARE_OP", "ADD_OP", "MUL_OP", "LIKE", "BETWEEN", "IN", "IS"}


def _describe_expected(expected: set[str]) -> str:
    parts: list[str] = []
    operand = "IDENT" in expected
    operators = expected & _OPERATORS
    if operand:
        parts.append("an operand (identifier, literal or '(')")
        operators = operators - {"ADD_OP"}  # a leading + or - belongs to the operand
    else:
        for name, words in (("STRING", "a string literal"), ("NUMBER", "a number"),
                            ("LPAR", "'('")):
            if name in expected:
                parts.append(words)
    if "NOT" in expected and (operand or not operators):
        parts.append("NOT")
    if "NULL" in expected and not operand:
        parts.append("NULL")
    if operators:
        parts.append("an operator")
    if "ESCAPE" in expected:
        parts.append("ESCAPE")
    for name in ("_AND", "_OR", "RPAR", "COMMA"):
        if name in expected:
            parts.append(_TERMINAL_NAMES[name])
    if "$END" in expected:
        parts.append("the end of the selector")
    if not parts:
        return ""
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _describe_token(token: Token) -> str:
    if token.type == "$END":
        return "end of selector"
    kind = {"IDENT": "identifier", "NUMBER": "number", "STRING": "string"}.get(token.type)
    if kind is None and token.type in _TERMINAL_NAMES and token.value[:1].isalpha():
        kind = "keyword"
    return f"{kind} {token.value!r}" if kind else repr(token.value)


def _syntax_error(exc: UnexpectedInput, text: str, offset: int) -> SelectorError:
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream
        char = exc.char
        if char == "'":
            return SelectorError("unterminated string literal (no closing quote)",
                                 offset + pos + 1, text)
        if char == "!" and text[offset + pos + 1:offset + pos + 2] == "=":
            return SelectorError("unexpected '!=': use <> for not-equal", offset + pos + 1, text)
        if char == '"':
            return SelectorError("unexpected '\"': string literals use single quotes",
                                 offset + pos + 1, text)
        return SelectorError(f"unexpected character {char!r}", offset + pos + 1, text)
    if isinstance(exc, UnexpectedToken):
        token = exc.token
        if token.type == "$END":
            position = len(text) + 1
        else:
            position = offset + token.start_pos + 1
        expected = _describe_expected(set(exc.expected))
        message = f"unexpected {_describe_token(token)}"
        if expected:
            message += f"; expected {expected}"
        return SelectorError(message, position, text)
    return SelectorError(str(exc).splitlines()[0], None, text)  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Run-time value helpers
# --------------------------------------------------------------------------------------------

# Static kinds of expressions, known at compile time.
BOOL, NUM, STR, NULL, ANY = "boolean", "number", "string", "NULL", "identifier"
_FAIL = object()


def _kind(value: Any) -> str:
    """'s', 'n', 'b' or 'o' (other) for a non-null run-time value."""
    t = type(value)
    if t is str:
        return "s"
    if t is int or t is float:
        return "n"
    if t is bool or isinstance(value, bool):
        return "b"
    if isinstance(value, (int, float)):
        return "n"
    if isinstance(value, str):
        return "s"
    return "o"


def _is_number(value: Any) -> bool:
    t = type(value)
    if t is int or t is float:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _convert(text: str, like: Any) -> Any:
    """ActiveMQ ConvertStringExpressions: `text` as the type of `like`, or _FAIL."""
    kind = _kind(like)
    if kind == "b":
        low = text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        return _FAIL
    if not text.isascii() or "_" in text:
        return _FAIL
    if isinstance(like, int):
        digits = text[1:] if text[:1] in "+-" else text
        if not digits.isdigit():
            return _FAIL
        # ActiveMQ converts with Long.valueOf, which refuses what does not fit in a long; the
        # check comes before int(), which is quadratic in the digits and refuses over 4300.
        significant = digits.lstrip("0")
        if len(significant) > 19:
            return _FAIL
        value = int(significant or "0") * (-1 if text[:1] == "-" else 1)
        return value if -MAX_INTEGER_LITERAL <= value < MAX_INTEGER_LITERAL else _FAIL
    candidate = text.strip()
    if candidate[-1:] in ("f", "F", "d", "D") and candidate[-2:-1] in "0123456789.":
        candidate = candidate[:-1]
    try:
        return float(candidate)
    except ValueError:
        return _FAIL


def _equal(left: Any, right: Any, convert: bool) -> bool:
    """`=` on two non-null values (ActiveMQ ComparisonExpression.compare with answer == 0)."""
    kl, kr = _kind(left), _kind(right)
    if kl == kr:
        return bool(left == right)
    if convert:
        if kl == "s" and kr in "nb":
            left = _convert(left, right)
            return left is not _FAIL and left == right
        if kr == "s" and kl in "nb":
            right = _convert(right, left)
            return right is not _FAIL and left == right
    return False


def _order(op: Callable[[Any, Any], bool], left: Any, right: Any, convert: bool) -> bool:
    """An ordering comparison on two non-null values: numbers with numbers, strings with strings."""
    kl, kr = _kind(left), _kind(right)
    if kl == kr and (kl == "n" or kl == "s"):
        return op(left, right)
    if convert:
        if kl == "s" and kr == "n":
            left = _convert(left, right)
            return left is not _FAIL and op(left, right)
        if kr == "s" and kl == "n":
            right = _convert(right, left)
            return right is not _FAIL and op(left, right)
    return False


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _java_mod(a: Any, b: Any) -> float:
    return math.fmod(a, b)  # Java's double %: the result takes the dividend's sign


_ORDER_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_MIRRORED = {operator.lt: operator.gt, operator.le: operator.ge,
             operator.gt: operator.lt, operator.ge: operator.le}
_ARITH_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul,
              "/": operator.truediv, "%": _java_mod}


# --------------------------------------------------------------------------------------------
# The compiler: parse tree -> closures
# --------------------------------------------------------------------------------------------


class _Expr:
    """A compiled sub-expression: its closure plus what is statically known about it."""

    __slots__ = ("fn", "kind", "start", "end", "const", "value", "name", "depth", "parts")

    def __init__(self, fn, kind, start, end, *, const=False, value=None, name=None, depth=1,
                 parts=None):
        self.fn = fn  # Callable[[Lookup], value | None]
        self.kind = kind  # BOOL, NUM, STR, NULL or ANY (an identifier: any type at run time)
        self.start = start  # 0-based offsets in the full selector text
        self.end = end
        self.const = const  # a literal (or a folded constant); its value is `value`
        self.value = value
        self.name = name  # the identifier, for identifier expressions
        self.depth = depth
        self.parts = parts  # operand closures of a flattened AND / OR chain, and which one


def _constant(value):
    return lambda lookup: value


class _Compiler(Transformer_NonRecursive):
    # Non-recursive, so a long generated chain (x = 1 OR x = 2 OR ... ) cannot hit Python's
    # recursion limit while compiling; AND/OR chains are flattened into loops for matching.

    def __init__(self, text: str, offset: int, convert: bool) -> None:
        super().__init__()
        self.text = text
        self.offset = offset
        self.convert = convert
        self.identifiers: set[str] = set()

    # ----- helpers ---------------------------------------------------------------------------

    def error(self, message: str, start: int) -> SelectorError:
        return SelectorError(message, start + 1, self.text)

    def span(self, token: Token) -> tuple[int, int]:
        return self.offset + token.start_pos, self.offset + token.end_pos

    def source(self, expr: _Expr) -> str:
        return self.text[expr.start:expr.end]

    def described(self, expr: _Expr) -> str:
        """'the string 'a'', 'the boolean TRUE', 'the condition a = 1', ... for messages."""
        if expr.kind == NULL:
            return "NULL"
        if expr.kind == BOOL:
            what = "boolean" if expr.const else "condition"
        elif expr.kind == NUM:
            what = "number" if expr.const else "arithmetic expression"
        elif expr.kind == STR:
            what = "string"
        else:
            what = "identifier"
        return f"the {what} {self.source(expr)}"

    def make(self, fn, kind, start, end, children, depth=None, **kw) -> _Expr:
        if depth is None:
            depth = 1 + max((c.depth for c in children), default=0)
        if depth > MAX_NESTING:
            raise self.error(f"selector is nested too deeply (over {MAX_NESTING} levels)", start)
        return _Expr(fn, kind, start, end, depth=depth, **kw)

    def condition(self, expr: _Expr, context: str) -> Callable[[Lookup], bool | None]:
        """The closure of `expr` used as a condition: its value must be TRUE, FALSE or UNKNOWN."""
        if expr.kind == BOOL or expr.kind == NULL:
            return expr.fn
        if expr.kind == ANY:  # an identifier used as a condition: a boolean property
            name = expr.name

            def boolean_property(lookup):
                value = lookup(name)
                if value is None or value is True or value is False:
                    return value
                return False  # a non-boolean value used as a condition: FALSE (ActiveMQ)

            return boolean_property
        raise self.error(f"{context} must be a boolean condition, not {self.described(expr)}",
                         expr.start)

    # ----- literals and identifiers ----------------------------------------------------------

    def string(self, children):
        (token,) = children
        start, end = self.span(token)
        value = token.value[1:-1].replace("''", "'")
        return _Expr(_constant(value), STR, start, end, const=True, value=value)

    def number(self, children):
        (token,) = children
        start, end = self.span(token)
        value = self.number_value(token)
        return _Expr(_constant(value), NUM, start, end, const=True, value=value)

    def number_value(self, token: Token) -> int | float:
        text = token.value
        low = text.lower()
        if low.startswith("0x"):
            return self.integer(token, low[2:].rstrip("l"), 16)
        if "." in low or "e" in low or low[-1] in "fd":
            value = float(low.rstrip("fd"))  # linear in the length, any exponent
            if math.isinf(value):
                raise self.error(f"the number {self.shown(text)} is out of range: approximate "
                                 "numeric literals must be within the range of a Java double "
                                 "(JMS 1.1 section 3.8.1.1)", self.offset + token.start_pos)
            return value
        digits = low.rstrip("l")
        if len(digits) > 1 and digits[0] == "0":
            if any(c not in "01234567" for c in digits):
                raise self.error(f"invalid octal literal {self.shown(text)} (a leading 0 means "
                                 "octal)", self.offset + token.start_pos)
            return self.integer(token, digits, 8)
        return self.integer(token, digits, 10)

    def integer(self, token: Token, digits: str, base: int) -> int:
        """An exact numeric literal, refused outside a Java long's range (JMS 1.1 section
        3.8.1.1). The digit count is checked before converting: int() of a long decimal string
        takes quadratic time, and Python refuses more than 4300 digits with a ValueError."""
        significant = digits.lstrip("0")
        limit_digits = {8: 22, 10: 19, 16: 16}[base]  # digits of 2**63 in that base
        value = int(significant, base) if significant and len(significant) <= limit_digits else 0
        if len(significant) > limit_digits or value > MAX_INTEGER_LITERAL:
            raise self.error(f"the number {self.shown(token.value)} is out of range: exact "
                             "numeric literals must fit in a Java long, -2**63 to 2**63-1 "
                             "(JMS 1.1 section 3.8.1.1)", self.offset + token.start_pos)
        return value

    @staticmethod
    def shown(text: str) -> str:
        """A literal as error messages show it: a long one cut, with its length."""
        if len(text) <= 40:
            return text
        return f"{text[:20]}...{text[-8:]} ({len(text)} characters)"

    def true(self, children):
        start, end = self.span(children[0])
        return _Expr(_constant(True), BOOL, start, end, const=True, value=True)

    def false(self, children):
        start, end = self.span(children[0])
        return _Expr(_constant(False), BOOL, start, end, const=True, value=False)

    def null(self, children):
        start, end = self.span(children[0])
        return _Expr(_constant(None), NULL, start, end, const=True, value=None)

    def ident(self, children):
        (token,) = children
        name = token.value
        self.identifiers.add(name)
        start, end = self.span(token)

        def identifier(lookup):
            return lookup(name)

        return _Expr(identifier, ANY, start, end, name=name)

    # ----- logic -----------------------------------------------------------------------------

    def not_(self, children):
        token, operand = children
        start, _ = self.span(token)
        fn = self.condition(operand, "the operand of NOT")

        def not_fn(lookup):
            value = fn(lookup)
            return None if value is None else not value

        return self.make(not_fn, BOOL, start, operand.end, [operand])

    def and_(self, children):
        return self.logic(children, "AND")

    def or_(self, children):
        return self.logic(children, "OR")

    def logic(self, children, op):
        left, right = children
        fns = []
        depth = 0
        for side, expr in (("left", left), ("right", right)):
            if expr.parts is not None and expr.parts[0] == op:
                fns.extend(expr.parts[1])  # flatten a AND b AND c into one closure
                depth = max(depth, expr.depth)
            else:
                fns.append(self.condition(expr, f"the {side} operand of {op}"))
                depth = max(depth, expr.depth + 1)
        fns = tuple(fns)
        fn = _and_chain(fns) if op == "AND" else _or_chain(fns)
        return self.make(fn, BOOL, left.start, right.end, [left, right], depth=depth,
                         parts=(op, fns))

    # ----- comparisons -----------------------------------------------------------------------

    def compare(self, children):
        left, token, right = children
        op = token.value
        if op in ("=", "<>"):
            for expr in (left, right):
                if expr.kind == NULL:
                    raise self.error(
                        f"cannot compare with NULL using {op!r}; use IS NULL or IS NOT NULL",
                        expr.start)
            if left.const and right.const and (left.kind == BOOL) != (right.kind == BOOL):
                raise self.error(f"cannot compare {self.source(left)} with {self.source(right)}",
                                 left.start)
            fn = self.equality(left, right, negate=(op == "<>"))
        else:
            self.check_orderable(left, op)
            self.check_orderable(right, op)
            fn = self.ordering(_ORDER_OPS[op], left, right)
        return self.make(fn, BOOL, left.start, right.end, [left, right])

    def check_orderable(self, expr: _Expr, op: str) -> None:
        if (expr.const and expr.kind != NUM) or expr.kind == BOOL:
            if expr.kind == STR:
                why = "string literals only compare with = and <> (as in ActiveMQ)"
            elif expr.kind == NULL:
                why = "use IS NULL to test for NULL"
            else:
                why = "booleans only compare with = and <>"
            raise self.error(f"{self.described(expr)} cannot be used with {op}: {why}",
                             expr.start)

    def equality(self, left: _Expr, right: _Expr, negate: bool):
        convert = self.convert
        if right.const and not left.const:
            left, right = right, left  # the constant (if any) goes left: = is symmetric
        if left.const and right.name is not None:
            c, name, ctype = left.value, right.name, type(left.value)
            if negate:
                def not_equal_constant(lookup):
                    v = lookup(name)
                    if v is None:
                        return None
                    if type(v) is ctype:
                        return v != c
                    return not _equal(v, c, convert)

                return not_equal_constant

            def equal_constant(lookup):
                v = lookup(name)
                if v is None:
                    return None
                if type(v) is ctype:
                    return v == c
                return _equal(v, c, convert)

            return equal_constant

        lf, rf = left.fn, right.fn

        def equal(lookup):
            a = lf(lookup)
            if a is None:
                return None
            b = rf(lookup)
            if b is None:
                return None
            result = _equal(a, b, convert)
            return not result if negate else result

        return equal

    def ordering(self, op, left: _Expr, right: _Expr):
        convert = self.convert
        if left.const and right.name is not None:  # 5 < x is x > 5
            left, right, op = right, left, _MIRRORED[op]
        if left.name is not None and right.const:
            name, c, ctype = left.name, right.value, type(right.value)

            def order_constant(lookup):
                v = lookup(name)
                if v is None:
                    return None
                if type(v) is ctype:
                    return op(v, c)
                return _order(op, v, c, convert)

            return order_constant
        return self.ordering_values(op, left.fn, right.fn)

    def ordering_values(self, op, lf, rf):
        convert = self.convert

        def order(lookup):
            a = lf(lookup)
            if a is None:
                return None
            b = rf(lookup)
            if b is None:
                return None
            return _order(op, a, b, convert)

        return order

    def between(self, children):
        value, *rest = children
        negate = isinstance(rest[0], Token) and rest[0].type == "NOT"
        low, high = rest[-2], rest[-1]
        word = "NOT BETWEEN" if negate else "BETWEEN"
        for expr in (value, low, high):
            self.check_orderable(expr, word)
        vf, lf, hf = value.fn, low.fn, high.fn
        convert = self.convert
        lt, le, gt, ge = operator.lt, operator.le, operator.gt, operator.ge

        def bound(v, b, op):
            return None if v is None or b is None else _order(op, v, b, convert)

        if negate:  # ActiveMQ: x < low OR x > high
            def not_between(lookup):
                v = vf(lookup)
                return _or(bound(v, lf(lookup), lt), bound(v, hf(lookup), gt))

            fn = not_between
        else:  # x >= low AND x <= high
            def between(lookup):
                v = vf(lookup)
                return _and(bound(v, lf(lookup), ge), bound(v, hf(lookup), le))

            fn = between
        return self.make(fn, BOOL, value.start, high.end, [value, low, high])

    def like(self, children):
        value = children[0]
        tokens = children[1:]
        negate = tokens[0].type == "NOT"
        strings = [t for t in tokens if t.type == "STRING"]
        pattern = strings[0].value[1:-1].replace("''", "'")
        escape = None
        if len(strings) > 1:
            escape = strings[1].value[1:-1].replace("''", "'")
            if len(escape) != 1:
                raise self.error(
                    f"ESCAPE must be exactly one character, got {escape!r}",
                    self.offset + strings[1].start_pos)
        pattern_start, _ = self.span(strings[0])
        test = _like_matcher(pattern, escape, lambda message: self.error(message, pattern_start))
        vf = value.fn

        def like_fn(lookup):
            v = vf(lookup)
            if v is None:
                return None
            if type(v) is not str and not isinstance(v, str):
                return negate  # LIKE on a non-string is FALSE (ActiveMQ), so NOT LIKE is TRUE
            return test(v) is not negate

        _, end = self.span(strings[-1])
        return self.make(like_fn, BOOL, value.start, end, [value])

    def in_items(self, children):
        return children

    def in_item(self, children):
        """(value, end offset) of one IN list element."""
        token = children[-1]
        end = self.offset + token.end_pos
        if len(children) == 2:
            value = self.number_value(token)
            return (-value if children[0].value == "-" else value), end
        if token.type == "STRING":
            return token.value[1:-1].replace("''", "'"), end
        return self.number_value(token), end

    def in_(self, children):
        value = children[0]
        negate = children[1].type == "NOT"
        lpar = next(c for c in children if isinstance(c, Token) and c.type == "LPAR")
        items = children[-1] if isinstance(children[-1], list) else None
        last = items[-1][1] if items else self.offset + lpar.end_pos
        end = self.text.find(")", last) + 1 or len(self.text)
        items = [v for v, _ in items] if items else None
        if value.name is None:
            raise self.error(f"IN needs an identifier on its left, not {self.described(value)}",
                             value.start)
        if not items:
            raise self.error("the IN list must contain at least one value",
                             self.offset + lpar.start_pos)
        strings = frozenset(v for v in items if isinstance(v, str))
        numbers = frozenset(v for v in items if not isinstance(v, str))
        name, convert = value.name, self.convert

        def member(v):
            if type(v) is str or isinstance(v, str):
                if v in strings:
                    return True
                if convert and numbers:
                    return any(c is not _FAIL and c == n for n in numbers
                               for c in (_convert(v, n),))
                return False if strings else None
            if numbers and _is_number(v):
                return v in numbers
            return None  # a type the list does not hold: UNKNOWN, as in ActiveMQ

        def in_fn(lookup):
            v = lookup(name)
            if v is None:
                return None
            found = member(v)
            if found is None:
                return None
            return found is not negate

        return self.make(in_fn, BOOL, value.start, end, [value])

    def is_null(self, children):
        value = children[0]
        negate = any(isinstance(c, Token) and c.type == "NOT" for c in children)
        vf = value.fn
        if value.name is not None:
            name = value.name
            fn = (lambda lookup: lookup(name) is not None) if negate else \
                (lambda lookup: lookup(name) is None)
        else:
            fn = (lambda lookup: vf(lookup) is not None) if negate else \
                (lambda lookup: vf(lookup) is None)
        _, end = self.span(children[-1])
        return self.make(fn, BOOL, value.start, end, [value])

    # ----- arithmetic ------------------------------------------------------------------------

    def check_arithmetic(self, expr: _Expr, op: str) -> None:
        if expr.kind == STR or expr.kind == BOOL:
            raise self.error(f"{op!r} needs numbers, not {self.described(expr)}", expr.start)

    def arith(self, children):
        left, token, right = children
        op = token.value
        self.check_arithmetic(left, op)
        self.check_arithmetic(right, op)
        fn = _arithmetic(_ARITH_OPS[op], left.fn, right.fn)
        if left.const and right.const and left.kind == NUM and right.kind == NUM:
            value = fn(None)
            if value is not None:  # fold constant arithmetic; 1/0 stays a run-time UNKNOWN
                return _Expr(_constant(value), NUM, left.start, right.end, const=True,
                             value=value)
        return self.make(fn, NUM, left.start, right.end, [left, right])

    def unary_op(self, children):
        token, operand = children
        start, _ = self.span(token)
        self.check_arithmetic(operand, token.value)
        if operand.const and operand.kind == NUM:
            value = -operand.value if token.value == "-" else operand.value
            return _Expr(_constant(value), NUM, start, operand.end, const=True, value=value)
        of = operand.fn
        if token.value == "-":
            def negate(lookup):
                v = of(lookup)
                return -v if v is not None and _is_number(v) else None

            fn = negate
        else:
            def plus(lookup):
                v = of(lookup)
                return v if v is not None and _is_number(v) else None

            fn = plus
        return self.make(fn, NUM, start, operand.end, [operand])


def _and_chain(fns):
    if len(fns) == 2:
        a, b = fns

        def and2(lookup):
            x = a(lookup)
            if x is False:
                return False
            y = b(lookup)
            if y is False:
                return False
            if x is None or y is None:
                return None
            return True

        return and2

    def and_n(lookup):
        unknown = False
        for f in fns:
            x = f(lookup)
            if x is False:
                return False
            if x is None:
                unknown = True
        return None if unknown else True

    return and_n


def _or_chain(fns):
    if len(fns) == 2:
        a, b = fns

        def or2(lookup):
            x = a(lookup)
            if x is True:
                return True
            y = b(lookup)
            if y is True:
                return True
            if x is None or y is None:
                return None
            return False

        return or2

    def or_n(lookup):
        unknown = False
        for f in fns:
            x = f(lookup)
            if x is True:
                return True
            if x is None:
                unknown = True
        return None if unknown else False

    return or_n


def _arithmetic(op, lf, rf):
    def arithmetic(lookup):
        a = lf(lookup)
        if a is None:
            return None
        b = rf(lookup)
        if b is None:
            return None
        if not (_is_number(a) and _is_number(b)):
            return None  # arithmetic on a string or boolean property: UNKNOWN
        try:
            return op(a, b)
        except (ZeroDivisionError, OverflowError, ValueError):
            return None  # division by zero (and friends): UNKNOWN

    return arithmetic


def _like_pieces(pattern: str, escape: str | None) -> list[tuple[str, str]]:
    """`pattern` as ("lit", text) / ("one", "") / ("any", "") pieces, literal runs merged and
    runs of % collapsed. As in ActiveMQ, the escape character quotes only a following _, % or
    escape character; elsewhere it stands for itself."""
    pieces: list[tuple[str, str]] = []
    literal: list[str] = []  # the literal run being collected (joined once: linear time)

    def wildcard(kind: str) -> None:
        if literal:
            pieces.append(("lit", "".join(literal)))
            literal.clear()
        if kind == "one" or not pieces or pieces[-1][0] != "any":  # %% is %
            pieces.append((kind, ""))

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape and i + 1 < n and pattern[i + 1] in ("_", "%", escape):
            literal.append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            wildcard("any")
        elif c == "_":
            wildcard("one")
        else:
            literal.append(c)
        i += 1
    if literal:
        pieces.append(("lit", "".join(literal)))
    return pieces


class _Segment:
    """A run of the pattern between two %: fixed length, literal text and _ only.

    `find(s, start, stop)` is the first index i >= start with the segment matching s[i:i+size]
    and i + size <= stop, or -1. A literal segment uses str.find (CPython's fast search, linear
    in the text); one with _ is a regular expression of literal characters and `.` only, with no
    repetition or alternation, so each starting place costs at most `size` steps and nothing
    can backtrack: O(len(s) * size), where size <= MAX_LIKE_UNDERSCORE_RUN."""

    __slots__ = ("size", "literal", "regex")

    def __init__(self, pieces: list[tuple[str, str]]) -> None:
        self.size = sum(len(text) if kind == "lit" else 1 for kind, text in pieces)
        if all(kind == "lit" for kind, _ in pieces):
            self.literal = "".join(text for _, text in pieces)
            self.regex = None
        else:
            self.literal = None
            self.regex = re.compile("".join(re.escape(text) if kind == "lit" else "."
                                            for kind, text in pieces), re.DOTALL)

    def at(self, s: str, i: int) -> bool:
        if self.literal is not None:
            return s.startswith(self.literal, i)
        return self.regex.match(s, i, i + self.size) is not None

    def find(self, s: str, start: int, stop: int) -> int:
        if self.literal is not None:
            return s.find(self.literal, start, stop)
        found = self.regex.search(s, start, stop)
        return -1 if found is None else found.start()


def _like_matcher(pattern: str, escape: str | None,
                  error: Callable[[str], SelectorError] | None = None) -> Callable[[str], bool]:
    """A test for LIKE `pattern`: _ is one character, % any run, `escape` quotes the next one.

    Never a backtracking regular expression over the whole pattern: `%a%a%a%b` became
    `.*a.*a.*a.*b`, which Python's re needs exponential time to reject on a long run of `a`s
    (issue 20). The pattern is split at its % signs into fixed-length segments S0 % S1 % ... %
    Sk. S0 must sit at the start and Sk at the end; each middle segment is then taken at its
    leftmost place after the previous one. Leftmost is always right: the segments have fixed
    lengths, so taking an earlier place never leaves less room for the segments after it. Each
    segment is searched once, left to right, from where the previous one ended: a match costs
    O(len(value)) for literal segments and O(len(value) * size) for segments with _ (see
    _Segment), never more.
    """
    pieces = _like_pieces(pattern, escape)
    segments: list[list[tuple[str, str]]] = [[]]
    for kind, text in pieces:
        if kind == "any":
            segments.append([])
        else:
            segments[-1].append((kind, text))
    compiled = [_Segment(run) for run in segments]
    for segment in compiled:
        if segment.regex is not None and segment.size > MAX_LIKE_UNDERSCORE_RUN:
            message = (f"a part of a LIKE pattern between % signs that contains _ may be at most "
                       f"{MAX_LIKE_UNDERSCORE_RUN} characters long (MAX_LIKE_UNDERSCORE_RUN), "
                       f"this one has {segment.size}")
            raise error(message) if error is not None else SelectorError(message)
    if len(compiled) == 1:  # no %: the whole value, fixed length
        (only,) = compiled
        if only.literal is not None:
            literal = only.literal
            return lambda s: s == literal
        return lambda s: len(s) == only.size and only.at(s, 0)
    head, middle, tail = compiled[0], compiled[1:-1], compiled[-1]
    if not middle and head.literal is not None and tail.literal is not None:
        prefix, suffix = head.literal, tail.literal
        need = len(prefix) + len(suffix)
        return lambda s: len(s) >= need and s.startswith(prefix) and s.endswith(suffix)
    fixed = head.size + tail.size + sum(m.size for m in middle)

    def like(s: str) -> bool:
        n = len(s)
        if n < fixed or not head.at(s, 0):
            return False
        stop = n - tail.size  # where the tail segment starts; middle segments end by here
        if not tail.at(s, stop):
            return False
        pos = head.size
        for segment in middle:
            found = segment.find(s, pos, stop)
            if found < 0:
                return False
            pos = found + segment.size
        return True

    return like
