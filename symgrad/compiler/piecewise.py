"""Piecewise construction that never folds a Piecewise into a condition.

SymPy rewrites a condition that contains a Piecewise (``where(clamp(x, -1, 1) > y, ...)``) into nested
``ITE`` conditions, one per combination of branches, through ``piecewise_fold`` and logic simplification:
exponential in the nesting, and deep enough to pass Python's recursion limit when the result is rebuilt
(cases: docs/performance.md). ``piecewise`` builds a Piecewise whose conditions hold every nested
Piecewise as a ``PiecewiseOperand`` instead: the same function, opaque to that folding. The lowering
(``passes.hoist_operands``) turns each operand back into a Piecewise of its own temporary, so that the
condition compares plain symbols.
"""

from __future__ import annotations

import sympy
from sympy import And, Not, Or, Piecewise, Tuple
from sympy.core.relational import Relational, _canonical_coeff
from sympy.functions.elementary.piecewise import ExprCondPair

from symgrad.compiler import dag


class PiecewiseOperand(sympy.Function):
    """``Piecewise(*pairs)`` inside a condition, held whole: args are ``value0, cond0, value1, cond1, ...``.
    Real, as every value symgrad computes (an untaken branch's NaN is never selected)."""

    is_real = True

    @classmethod
    def eval(cls, *args):
        if len(args) % 2:
            raise TypeError(f"PiecewiseOperand takes value/condition pairs, got {len(args)} arguments")
        if all(c.is_Boolean and c.is_Atom for c in args[1::2]):  # every condition decided: select
            return Piecewise(*zip(args[::2], args[1::2]))

    @classmethod
    def of(cls, pw: Piecewise) -> PiecewiseOperand:
        return cls(*[x for pair in pw.args for x in pair])

    def as_piecewise(self) -> sympy.Expr:
        """The Piecewise itself; cheap, since its conditions hold nested ones as operands too."""
        return Piecewise(*branches(self))

    def _eval_evalf(self, prec):
        value = self.as_piecewise()._eval_evalf(prec)
        return PiecewiseOperand.of(value) if isinstance(value, Piecewise) else value

    def _eval_derivative(self, s):
        value = held_value(self)
        return (self.as_piecewise() if value is None else value).diff(s)

    def _print_as_piecewise(self, printer, *args, **kwargs):
        value = self.as_piecewise()
        text = printer._print(value, *args, **kwargs)
        # a held value (``held``) collapses to a plain expression: parenthesized, as the operand it is
        return text if isinstance(value, Piecewise) or value.is_Atom else f"({text})"

    # SymPy's printers (str, LaTeX, pretty, lambdify's) print it as the Piecewise it stands for
    _sympystr = _latex = _pretty = _pythoncode = _numpycode = _mpmathcode = _lambdacode = _print_as_piecewise


def held(value: sympy.Expr) -> PiecewiseOperand:
    """``value`` as an operand SymPy cannot look into: a power of it is never distributed over its factors
    (``held(x/s)**2`` is not ``x**2/s**2``), nor a product with it merged (``held(x/h)/h`` is not ``x/h**2``).
    The lowering gives it a temporary of its own; ``Eq(value, 0)`` must be undecided (a symbolic value)."""
    return PiecewiseOperand(sympy.S.Zero, sympy.Eq(value, 0), value, sympy.true)


def held_value(e: sympy.Basic) -> sympy.Expr | None:
    """The value ``v`` of a ``held(v)`` (a PiecewiseOperand, or the Piecewise the lowering made of it: 0 where
    v == 0, else v), else None. Its derivative is v's, also where v == 0."""
    if not isinstance(e, (Piecewise, PiecewiseOperand)):
        return None
    pairs = branches(e)
    if len(pairs) == 2 and pairs[1][1] is sympy.true and pairs[0] == (sympy.S.Zero, sympy.Eq(pairs[1][0], 0)):
        return pairs[1][0]
    return None


def branches(e: Piecewise | PiecewiseOperand) -> list[tuple[sympy.Basic, sympy.Basic]]:
    """The (value, condition) pairs of a Piecewise, held or not."""
    return list(e.args) if isinstance(e, Piecewise) else list(zip(e.args[::2], e.args[1::2]))


def operands(cond: sympy.Basic) -> sympy.Basic:
    """``cond`` with every Piecewise in it held as a ``PiecewiseOperand`` (innermost first), each distinct
    sub-expression rewritten once, and no Piecewise rebuilt on the way (SymPy's construction walks its
    conditions as a tree: exponential in the nesting of ``where``s)."""
    if not isinstance(cond, sympy.Basic) or not dag.has(cond, Piecewise):
        return cond
    done: dict[sympy.Basic, sympy.Basic] = {}
    for node in dag.nodes(cond):
        args = tuple(done[a] for a in node.args)
        if isinstance(node, Piecewise):
            done[node] = PiecewiseOperand(*[x for pair in args for x in pair.args])
        elif args == node.args:
            done[node] = node
        elif isinstance(node, ExprCondPair):
            done[node] = Tuple.__new__(ExprCondPair, *args)
        else:
            done[node] = node.func(*args)
    return done[cond]


def settled(rel: Relational) -> Relational:
    """``rel``, or ``lhs - rhs`` compared with 0 where SymPy's canonical form of ``rel`` is not a fixed point.

    Piecewise canonicalizes its conditions until nothing changes; for some comparisons of two compound sides
    that form flips back and forth (``maximum(...) > 1/(x**4 + 1) - 0.89`` and ``0.89 - 1/(x**4 + 1) >
    -maximum(...)``), and the Piecewise is never built (a RecursionError). The difference compared with 0
    settles, and is the same test for finite sides."""
    once = _canonical_coeff(rel)
    if _canonical_coeff(once) == once:
        return rel
    return rel.func(rel.lhs - rel.rhs, 0)


def _settle(cond: sympy.Basic) -> sympy.Basic:
    """The comparisons of ``cond``'s logic (not those inside held operands, settled when those were built)
    in SymPy's canonical form, each ``settled`` first."""
    if isinstance(cond, Relational):
        return _canonical_coeff(settled(cond))
    if isinstance(cond, (And, Or, Not)):
        return cond.func(*map(_settle, cond.args))
    return cond


#: Conditions larger than this (as trees) are not handed to SymPy's Piecewise construction, which walks them.
TREE_WALK_LIMIT = 2000


def piecewise(*pairs: tuple[sympy.Basic, sympy.Basic]) -> sympy.Expr:
    """``Piecewise(*pairs)``, with any Piecewise inside a condition held as an operand (see the module) and
    every comparison in a form that SymPy's canonicalization keeps (``settled``).

    SymPy's construction walks every condition as a tree (canonical forms, a search for Piecewise), which
    is exponential for conditions on nested ``where``s, whose operands share their sub-expressions: large
    conditions are built directly, with SymPy's canonical comparisons, ``False`` ones dropped and none after
    a ``True`` one (what it would do short of merging repeated conditions)."""
    held = []
    for v, c in pairs:
        c = _settle(operands(sympy.sympify(c)))
        if c is sympy.false:
            continue
        held.append((sympy.sympify(v), c))
        if c is sympy.true:
            break
    if len(held) == 1 and held[0][1] is sympy.true:
        return held[0][0]
    if not held or all(dag.tree_size(c) <= TREE_WALK_LIMIT for _, c in held):
        return Piecewise(*held)
    return sympy.Basic.__new__(Piecewise, *[Tuple.__new__(ExprCondPair, v, c) for v, c in held])
