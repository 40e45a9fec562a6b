"""Common subexpression elimination in time linear in the DAG, for large programs.

``sympy.cse`` first looks for shared subsets of the arguments of every pair of sums and of products
(``opt_cse``: quadratic in their number) and asks each sum whether it could extract a minus sign (a sort of
its terms), then rebuilds every expression with evaluation. For programs of thousands of assignments that
is most of the compile time; ``cse`` here does only what ``tree_cse`` does: a sub-expression that occurs
twice or more (as a tree) becomes a temporary, each distinct node visited once and rebuilt once.
"""

from __future__ import annotations

from collections.abc import Iterator

import sympy
from sympy.core.containers import Tuple

from symgrad.compiler import dag

#: programs of more distinct sub-expressions than this get this module's CSE, not ``sympy.cse``
LARGE_PROGRAM_NODES = 4000


def large(exprs: list[sympy.Basic]) -> bool:
    """Whether ``exprs`` together have more than ``LARGE_PROGRAM_NODES`` distinct sub-expressions."""
    return dag.count(Tuple(*exprs), LARGE_PROGRAM_NODES) > LARGE_PROGRAM_NODES


def _occurrences(exprs: list[sympy.Basic]) -> tuple[dict[sympy.Basic, int], list[sympy.Basic]]:
    """How often each compound sub-expression occurs as a tree (its arguments visited on its first
    occurrence only), and the distinct ones in post-order."""
    counts: dict[sympy.Basic, int] = {}
    order: list[sympy.Basic] = []
    stack: list[tuple[sympy.Basic, bool]] = [(e, False) for e in reversed(exprs)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node.is_Atom or not isinstance(node, sympy.Basic):
            continue
        if node in counts:
            counts[node] += 1
            continue
        counts[node] = 1
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args))
    return counts, order


def cse(
    exprs: list[sympy.Basic], names: Iterator[sympy.Symbol]
) -> tuple[list[tuple[sympy.Symbol, sympy.Basic]], list[sympy.Basic]]:
    """``sympy.cse(exprs, symbols=names, order='none')`` without its sum and product argument matching:
    (temporaries in dependency order, the reduced expressions). A tuple of arguments (a Piecewise's
    (value, condition) pairs) is never a temporary."""
    counts, order = _occurrences(exprs)
    new: dict[sympy.Basic, sympy.Basic] = {}
    temps: list[tuple[sympy.Symbol, sympy.Basic]] = []
    for node in order:
        args = tuple(new.get(a, a) for a in node.args)
        if all(a is b for a, b in zip(args, node.args)):
            built = node
        elif isinstance(node, (sympy.Add, sympy.Mul)) and node.is_commutative:
            built = dag.resorted(node, args)  # a new symbol merges with no other argument
        else:
            built = node.func(*args)
        if counts[node] >= 2 and not isinstance(node, Tuple) and not built.is_Atom:
            sym = next(names)
            temps.append((sym, built))
            built = sym
        new[node] = built
    return temps, [new.get(e, e) for e in exprs]
