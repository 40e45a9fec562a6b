"""Walks of a SymPy expression as the DAG it is: each distinct sub-expression visited once.

A traced expression shares its sub-expressions (``e = sin(e) + cos(e)`` repeated, a layer of a network
feeding every neuron of the next), so its tree is exponentially larger than its DAG. SymPy's own walks
(``preorder_traversal``, ``has``, ``free_symbols``, ``xreplace``, ``replace``, ``bottom_up``) follow the
tree; these follow the DAG, in time linear in the number of distinct nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import sympy


def nodes(*roots: sympy.Basic) -> Iterator[sympy.Basic]:
    """Every distinct sub-expression of ``roots`` once, children before parents (each root after its own)."""
    seen: set[sympy.Basic] = set()
    stack: list[tuple[sympy.Basic, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in seen)


def preorder(expr: sympy.Basic) -> Iterator[sympy.Basic]:
    """Every distinct sub-expression of ``expr`` once, parents before children, in the order of
    ``sympy.preorder_traversal`` (which visits shared ones again)."""
    seen: set[sympy.Basic] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(a for a in reversed(node.args) if a not in seen)


def count(expr: sympy.Basic, limit: int | None = None) -> int:
    """The number of distinct sub-expressions of ``expr``; stops counting past ``limit``."""
    n = 0
    for n, _ in enumerate(nodes(expr), 1):
        if limit is not None and n > limit:
            break
    return n


def tree_size(expr: sympy.Basic) -> int:
    """The number of nodes of ``expr`` as a tree (what printing it writes), computed over the DAG."""
    size: dict[sympy.Basic, int] = {}
    for node in nodes(expr):
        size[node] = 1 + sum(size[a] for a in node.args)
    return size[expr]


def free_symbols(expr: sympy.Basic) -> set[sympy.Basic]:
    """``expr.free_symbols`` for expressions of symbols, numbers and functions (no bound variables)."""
    return {node for node in nodes(expr) if node.is_Symbol}


def has(expr: sympy.Basic, *patterns: type | sympy.Basic) -> bool:
    """Whether a sub-expression of ``expr`` is an instance of one of the classes in ``patterns`` or equal
    to one of the expressions in it (``Basic.has`` for those patterns)."""
    types = tuple(p for p in patterns if isinstance(p, type))
    values = {p for p in patterns if not isinstance(p, type)}
    return any(isinstance(node, types) or node in values for node in nodes(expr))


def bottom_up(
    expr: sympy.Basic, fn: Callable[[sympy.Basic], sympy.Basic], memo: dict | None = None
) -> sympy.Basic:
    """``sympy.bottom_up(expr, fn)``: each non-atom rebuilt from its rewritten arguments, then ``fn`` applied
    to it; once per distinct sub-expression (``memo`` may be shared between calls with the same ``fn``)."""
    done: dict[sympy.Basic, sympy.Basic] = {} if memo is None else memo
    for node in nodes(expr):
        if node in done:
            continue
        if not node.args:
            done[node] = node
            continue
        args = tuple(done[a] for a in node.args)
        new = node if args == node.args else node.func(*args)
        done[node] = fn(new)
    return done[expr]


def rename(expr: sympy.Basic, rule: dict[sympy.Symbol, sympy.Symbol]) -> sympy.Basic:
    """``expr.xreplace(rule)`` for a ``rule`` that renames symbols to symbols of the same assumptions: no
    function is evaluated again (its evaluation, unchanged by a renaming, asks assumption queries that walk
    its argument as a tree)."""
    return xreplace(expr, rule, evaluate=False)


def xreplace(expr: sympy.Basic, rule: dict, evaluate: bool = True) -> sympy.Basic:
    """``expr.xreplace(rule)``, once per distinct sub-expression; functions (not ``Add``, ``Mul``, ``Pow``)
    rebuilt unevaluated unless ``evaluate``."""
    if not rule:
        return expr
    done: dict[sympy.Basic, sympy.Basic] = {}
    for node in nodes(expr):
        if node in rule:
            done[node] = rule[node]
        elif not node.args:
            done[node] = node
        else:
            args = tuple(done[a] for a in node.args)
            if args == node.args:
                done[node] = node
            elif evaluate or not isinstance(node, sympy.Function):
                done[node] = node.func(*args)
            else:
                done[node] = node.func(*args, evaluate=False)
    return done[expr]


def replace(
    expr: sympy.Basic, query: Callable[[sympy.Basic], bool], value: Callable[[sympy.Basic], sympy.Basic]
) -> sympy.Basic:
    """``expr.replace(query, value)`` with callables: every sub-expression (its arguments replaced first)
    for which ``query`` holds becomes ``value(it)``; once per distinct sub-expression."""
    return bottom_up(expr, lambda e: value(e) if query(e) else e)


def larger_than(expr: object, limit: int) -> bool:
    """Whether ``expr`` has more than ``limit`` nodes as a tree; stops after ``limit`` of them."""
    if not isinstance(expr, sympy.Basic):
        return False
    stack, seen = [expr], 0
    while stack:
        seen += 1
        if seen > limit:
            return True
        stack.extend(stack.pop().args)
    return False


def serialize(expr: sympy.Basic) -> str:
    """A text that determines ``expr`` (as ``sympy.srepr`` does), of a size linear in its DAG: one line per
    distinct sub-expression, an atom as its ``srepr``, any other node as its class and its arguments'
    line numbers."""
    index: dict[sympy.Basic, int] = {}
    lines = []
    for node in nodes(expr):
        index[node] = len(lines)
        if node.args:
            lines.append(f"{type(node).__name__}({','.join(str(index[a]) for a in node.args)})")
        else:
            lines.append(sympy.srepr(node))
    return "\n".join(lines)
