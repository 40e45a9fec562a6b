"""What to write instead: the ``sg.`` spelling for Python that cannot run on symbols, added to trace errors.

Tracing calls the user's function on SymPy symbols. Python's ``if``, ``max()``/``min()``, ``numpy`` and
``math`` functions need numbers and fail there with SymPy's or NumPy's words; each rule here recognizes one
such failure, from the error and the line of the model it happened on, and says what works.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable

#: (what the error says, what the failing line says) -> the hint; the first rule that matches applies
RULES: list[tuple[str, str, Callable[[re.Match, re.Match], str]]] = [
    (r"truth value of Relational", r"\bmax\(", lambda e, s: "use sg.maximum(a, b) (Python's max() compares)"),
    (r"truth value of Relational", r"\bmin\(", lambda e, s: "use sg.minimum(a, b) (Python's min() compares)"),
    (r"truth value of Relational", r"\b(np|numpy)\.where\(", lambda e, s: "use sg.where(condition, a, b)"),
    (
        r"truth value of Relational",
        r"^\s*(if|elif|while)\b|\bif\b.*\belse\b|\b(and|or|not)\b",
        lambda e, s: (
            "Python's if/and/or cannot branch on a symbol; use sg.where(condition, a, b) "
            "(sg.And/sg.Or/sg.Not to combine conditions)"
        ),
    ),
    (r"has no callable (\w+) method", r"", lambda e, s: f"use sg.{e[1]}(...), not NumPy's, on symbols"),
    (
        r"Cannot convert expression to float|must be real number",
        r"\bmath\.(\w+)\(",
        lambda e, s: f"use sg.{s[1]}(...), not math.{s[1]}, on symbols",
    ),
]


def hint(exc: BaseException, filename: str, line: int) -> str:
    """``"; <what to write instead>"`` for a trace error ``exc`` raised on ``line`` of ``filename``, or ''."""
    text = linecache.getline(filename, line) if line else ""
    for error, source, say in RULES:
        e, s = re.search(error, str(exc)), re.search(source, text)
        if e and s:
            return f"; {say(e, s)}"
    return ""
