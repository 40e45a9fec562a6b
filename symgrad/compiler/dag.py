"""Walks of a SymPy expression as the DAG it is: each distinct sub-expression visited once.

A traced expression shares its sub-expressions (``e = sin(e) + cos(e)`` repeated, a layer of a network
feeding every neuron of the next), so its tree is exponentially larger than its DAG. SymPy's own walks
(``preorder_traversal``, ``has``, ``free_symbols``, ``xreplace``, ``replace``, ``bottom_up``) follow the
tree; these follow the DAG, in time linear in the number of distinct nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Iterator

import sympy
from sympy.core.basic import _args_sortkey
from sympy.core.singleton import Singleton


def nodes(*roots: sympy.Basic, skip: Container = frozenset()) -> Iterator[sympy.Basic]:
    """Every distinct sub-expression of ``roots`` once, children before parents (each root after its own);
    a node in ``skip`` (e.g. a memo's keys: already known) is neither yielded nor entered."""
    seen: set[sympy.Basic] = set()
    stack: list[tuple[sympy.Basic, bool]] = [(r, False) for r in reversed(roots) if r not in skip]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in seen and a not in skip)


def preorder(expr: sympy.Basic, skip: set | frozenset = frozenset()) -> Iterator[sympy.Basic]:
    """Every distinct sub-expression of ``expr`` once, parents before children, in the order of
    ``sympy.preorder_traversal`` (which visits shared ones again); a node in ``skip`` is not entered."""
    seen: set[sympy.Basic] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if node in seen or node in skip:
            continue
        seen.add(node)
        yield node
        stack.extend(a for a in reversed(node.args) if a not in seen and a not in skip)


def occurrences(expr: sympy.Basic) -> Iterator[sympy.Basic]:
    """Every node of ``expr`` as a tree, parents before children: a shared sub-expression once per
    occurrence, as ``sympy.preorder_traversal`` visits them (without its generator's cost per node)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.args))


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


#: Entries a memo (``fold``'s, ``bottom_up``'s shared ones) holds before it is emptied: memory stays bounded.
MEMO_LIMIT = 200_000
#: Held while a memo shared between calls is read and filled (threads that lower at once never see one
#: emptied half-way through a walk).
_MEMO_LOCK = threading.RLock()


def fold(expr: sympy.Basic, fn: Callable[[sympy.Basic, list], object], memo: dict) -> object:
    """``fn(node, [its arguments' values])`` for ``expr``, computed children first, once per distinct
    sub-expression across every call that shares ``memo`` (a structural fact: what ``fn`` returns depends
    on the node alone)."""
    with _MEMO_LOCK:
        if expr not in memo:
            if len(memo) > MEMO_LIMIT:
                memo.clear()
            for node in nodes(expr, skip=memo):
                memo[node] = fn(node, [memo[a] for a in node.args])
        return memo[expr]


_TYPES: dict[sympy.Basic, frozenset[type]] = {}
_TYPE_SETS: dict[frozenset[type], frozenset[type]] = {}  # equal sets shared: memory per node is one reference


def _types(node: sympy.Basic, children: list[frozenset[type]]) -> frozenset[type]:
    found = frozenset({type(node)}.union(*children))
    return _TYPE_SETS.setdefault(found, found)


def types(expr: sympy.Basic) -> frozenset[type]:
    """The classes of every sub-expression of ``expr``, remembered per node: asked again of ``expr`` or of
    an expression that contains it, only the new nodes are walked."""
    return fold(expr, _types, _TYPES)


def has(expr: sympy.Basic, *patterns: type | sympy.Basic) -> bool:
    """Whether a sub-expression of ``expr`` is an instance of one of the classes in ``patterns`` or equal
    to one of the expressions in it (``Basic.has`` for those patterns). Classes and singletons (``nan``,
    ``zoo``, ``I``: the one instance of their class): from ``types``."""
    single = [p for p in patterns if not isinstance(p, type) and isinstance(type(p), Singleton)]
    classes = tuple(p for p in patterns if isinstance(p, type)) + tuple(type(p) for p in single)
    values = {p for p in patterns if not isinstance(p, type) and p not in single}
    if not values:
        return any(issubclass(t, classes) for t in types(expr))
    return any(isinstance(node, classes) or node in values for node in nodes(expr))


def bottom_up(
    expr: sympy.Basic, fn: Callable[[sympy.Basic], sympy.Basic], memo: dict | None = None
) -> sympy.Basic:
    """``sympy.bottom_up(expr, fn)``: each non-atom rebuilt from its rewritten arguments, then ``fn`` applied
    to it; once per distinct sub-expression (``memo`` may be shared between calls with the same ``fn``: a
    node in it is not entered again; it is emptied past ``MEMO_LIMIT`` entries)."""
    if memo is None:
        return _bottom_up(expr, fn, {})
    with _MEMO_LOCK:
        if len(memo) > MEMO_LIMIT and expr not in memo:
            memo.clear()
        return _bottom_up(expr, fn, memo)


def _bottom_up(expr: sympy.Basic, fn: Callable[[sympy.Basic], sympy.Basic], done: dict) -> sympy.Basic:
    for node in nodes(expr, skip=done):
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


def resorted(node: sympy.Add | sympy.Mul, args: list | tuple) -> sympy.Basic:
    """A commutative sum or product in SymPy's canonical form over ``args`` that merge with nothing (each
    replaces an argument of ``node`` one-to-one): its coefficient first, the others sorted as
    ``Add``/``Mul.flatten`` sort them, without their evaluation."""
    head = 1 if args[0].is_Number else 0
    if any(a.is_Number for a in args[head:]):  # built unevaluated (not canonical): SymPy's evaluation
        return node.func(*args)
    return node.func._from_args((*args[:head], *sorted(args[head:], key=_args_sortkey)), True)


def _rebuilt(node: sympy.Basic, args: list) -> sympy.Basic:
    """``node`` over renamed ``args``, in SymPy's canonical form without evaluating anything: a renaming
    (one-to-one, same assumptions) merges no terms, factors or powers and changes no value, so a sum or a
    product only needs its arguments sorted again as ``Add``/``Mul.flatten`` sort them (the coefficient
    first). Evaluation would ask assumption queries: of a function's new argument (walked as a tree) and of
    the new Float that each product's coefficient becomes (a 5-layer tanh net spent most of its lowering
    there)."""
    if isinstance(node, sympy.Function):
        return node.func(*args, evaluate=False)
    if isinstance(node, (sympy.Add, sympy.Mul)) and node.is_commutative:
        return resorted(node, args)
    if isinstance(node, sympy.Pow):
        return sympy.Pow(*args, evaluate=False)
    return node.func(*args)


def renamed(expr: sympy.Basic, rule: dict, memo: dict) -> sympy.Basic:
    """``expr.xreplace(rule)`` for a ``rule`` that renames symbols to symbols of the same assumptions, once
    per distinct sub-expression across calls that share ``memo``, whatever their rules: a remembered result
    is reused where every symbol under it is renamed as it was then (a program's temporaries are renamed
    again by the next program; the arguments, and what depends on them alone, keep their names). Each
    changed node is rebuilt as ``_rebuilt`` says."""
    if not rule:
        return expr
    if len(memo) > MEMO_LIMIT:
        memo.clear()
    done: dict[sympy.Basic, tuple] = {}
    stack: list[tuple[sympy.Basic, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done:
            continue
        if expanded:
            if node in rule:
                value = (rule[node], True, frozenset({(node, rule[node])}))
            elif not node.args:
                value = (node, False, frozenset({(node, None)}) if node.is_Symbol else frozenset())
            else:
                parts = [done[a] for a in node.args]
                changed = any(p[1] for p in parts)
                new = _rebuilt(node, [p[0] for p in parts]) if changed else node
                value = (new, changed, frozenset().union(*[p[2] for p in parts]))
            done[node] = memo[node] = value
            continue
        hit = memo.get(node)
        if hit is not None and all(rule.get(s) == t for s, t in hit[2]):
            done[node] = hit
            continue
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in done)
    return done[expr][0]


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
