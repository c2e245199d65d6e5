"""Give every traceback entry a line number before pytest renders it.

A signal's handler raises (conformance/signals.py) at whatever instruction the main thread is on.
On Python 3.11 some instructions have no line number (the clean-up code the compiler adds for a
``with`` block, for one), and a traceback entry made there has ``tb_lineno`` None. pytest's
rendering subtracts 1 from it (``TracebackEntry.lineno``) and crashes with a TypeError: the
session that was being interrupted then ends with status 1 instead of "interrupted", and its
report is that TypeError (seen in CI: tests/conformance/test_signals.py, SIGTERM).

`give_line_numbers` replaces each such entry in place by one for the same frame and instruction,
with the line of the nearest instruction before it that has one (the ``with`` statement's body or
header, where the interrupted clean-up belongs), and does so through the exception's chain.
"""

from __future__ import annotations

import types


def give_line_numbers(exc: BaseException | None) -> None:
    """Patch ``exc``'s traceback, and those of its causes and contexts, as the module doc says."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = _patched(current.__traceback__)
        todo += [current.__cause__, current.__context__]
        todo += list(getattr(current, "exceptions", ()))  # an ExceptionGroup's members


def _patched(head: types.TracebackType | None) -> types.TracebackType | None:
    """The chain from ``head`` with its line-less entries replaced; the head object itself is kept
    whenever it has a line (pytest's ExceptionInfo holds it; the catching frame always has one)."""
    if head is None:
        return None
    if head.tb_lineno is None:
        head = _with_line(head)
    previous = head
    while previous.tb_next is not None:
        entry = previous.tb_next
        if entry.tb_lineno is None:
            previous.tb_next = _with_line(entry)
        previous = previous.tb_next
    return head


def _with_line(entry: types.TracebackType) -> types.TracebackType:
    return types.TracebackType(entry.tb_next, entry.tb_frame, entry.tb_lasti,
                               _nearest_line(entry.tb_frame.f_code, entry.tb_lasti))


def _nearest_line(code: types.CodeType, offset: int) -> int:
    line = code.co_firstlineno
    for start, _end, number in code.co_lines():
        if start > offset:
            break
        if number is not None:
            line = number
    return line
