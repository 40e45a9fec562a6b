"""Readable names for a program's temporaries: the user's own name for the value (a local of the traced body,
``Spec.names``), else a name from its structure (``sin_x``, ``x_sq``, ``naming.readable``), else ``t<k>``.

Every name goes through the program's ``Namer`` (sanitized, unique, never an argument's or a reserved name)
and depends only on the program, so generated text stays deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from sympy import Symbol

from symgrad.compiler import dag
from symgrad.compiler.fastdiff import free
from symgrad.compiler.naming import Namer, readable


class TempNames:
    """The user's names of a function's values, matched against each program's temporaries."""

    def __init__(
        self, names: tuple[tuple[sympy.Expr, str], ...], known: set[Symbol], clean: Callable
    ) -> None:
        self.by_value: dict[sympy.Basic, str] = {}
        for expr, name in names:
            self.by_value.setdefault(expr, name)
        for expr, name in names:  # also in the form the outputs took (the stable forms)
            self.by_value.setdefault(clean(expr), name)
        self.known = known  # the argument symbols the values are written over
        self._negated: dict[sympy.Basic, str] | None = None
        #: the values built by ``ProgramNames._value``, by expression and the values of its symbols
        self.built: dict[tuple[sympy.Basic, frozenset], sympy.Basic] = {}
        #: no value larger (as a tree) than every named one can be one of them
        self.largest = max((dag.tree_size(e) for e in self.by_value), default=0)

    def negated(self, value: sympy.Basic) -> str | None:
        """The user's name of ``-value``. The named values are negated once (not each asked value: negating a
        large sum rebuilds every term, with assumption queries over its unevaluated functions)."""
        if self._negated is None:
            self._negated = {}
            for expr, name in self.by_value.items():
                self._negated.setdefault(-expr, name)
        return self._negated.get(value)

    def program(self, namer: Namer) -> ProgramNames:
        return ProgramNames(self, namer.copy())


class ProgramNames:
    """Names the temporaries of one program, in order."""

    def __init__(self, names: TempNames, namer: Namer) -> None:
        self.names, self.namer, self.count = names, namer, 0
        #: a temporary's value over the arguments and its size as a tree; None once it depends on anything
        #: else (a cotangent) or is larger than every named value
        self.value: dict[Symbol, tuple[sympy.Basic, int] | None] = {}

    def __call__(self, sym: Symbol, expr: sympy.Basic, shown: sympy.Basic) -> str:
        """The name of ``sym := expr`` (``shown``: ``expr`` in the readable names given so far)."""
        user = self._user_name(sym, expr)
        if user is None:
            user = readable(self._operand_named(expr, shown))
        if user is None:
            user, self.count = f"t{self.count}", self.count + 1
        return self.namer(user)

    def _user_name(self, sym: Symbol, expr: sympy.Basic) -> str | None:
        self.value[sym] = self._value(expr)
        return None if self.value[sym] is None else self.names.by_value.get(self.value[sym][0])

    def _value(self, expr: sympy.Basic, negated: bool = False) -> tuple[sympy.Basic, int] | None:
        """``expr`` over the arguments and its size as a tree; None when it depends on anything else or can
        be no named value (nor, if ``negated``, the negation of one: each term's -1 makes it larger)."""
        if not self.names.by_value or dag.has(expr, sympy.Piecewise):
            return None  # rebuilding a Piecewise re-folds its conditions (exponential when nested)
        symbols = free(expr)  # remembered per node: the programs share most
        if any(s not in self.names.known and self.value.get(s) is None for s in symbols):
            return None
        rule = {s: self.value[s] for s in symbols if s in self.value}
        size = sum(rule[n][1] if n in rule else 1 for n in dag.occurrences(expr))
        if size > (2 * self.names.largest + 1 if negated else self.names.largest):
            return None
        values = {s: v for s, (v, _) in rule.items()}
        key = (expr, frozenset(values.items()))  # the programs of a kernel share most temporaries
        if key not in self.names.built:
            self.names.built[key] = dag.xreplace(expr, values, evaluate=False)  # functions unevaluated
        return self.names.built[key], size

    def _operand_named(self, expr: sympy.Basic, shown: sympy.Basic) -> sympy.Basic:
        """``shown`` with its one operand (of a function of one argument, a power, a number times it) as a
        symbol of the user's name for it (``sqrt(s)``, ``-total``) where it has one, so that the structural
        name says it (``sqrt_s``, ``neg_total``); else ``shown``."""
        at = _operand_at(expr)
        if at is None or _operand_at(shown) != at or len(shown.args) != len(expr.args):
            return shown
        value = self._value(expr.args[at], negated=True)
        if value is None:
            return shown
        name = self.names.by_value.get(value[0])
        if name is None:
            negated = self.names.negated(value[0])
            return shown if negated is None else _with_operand(shown, at, -Symbol(negated, real=True))
        return _with_operand(shown, at, Symbol(name, real=True))


def _operand_at(expr: sympy.Basic) -> int | None:
    """The position of the one non-number operand of ``expr`` (a function of one argument, a power with a
    number exponent, a number times one factor), or None."""
    if isinstance(expr, sympy.Function) and len(expr.args) == 1 and not expr.is_Piecewise:
        return 0
    if isinstance(expr, (sympy.Pow, sympy.Mul)) and len(expr.args) == 2:
        numbers = [a.is_Number for a in expr.args]
        if numbers.count(True) == 1 and not (isinstance(expr, sympy.Pow) and numbers[0]):
            return numbers.index(False)
    return None


def _with_operand(expr: sympy.Basic, at: int, operand: sympy.Basic) -> sympy.Basic:
    """``expr`` with argument ``at`` replaced by ``operand`` (a symbol or its negation: only the name of the
    result is wanted, never its value)."""
    return expr.func(*expr.args[:at], operand, *expr.args[at + 1 :])
