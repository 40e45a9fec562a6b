"""The derivation passes: forward CSE -> straight-line program -> reverse (and forward) accumulation over it.

``sympy.diff`` is only ever applied to one small assignment at a time, so gradients cost a small multiple
of the forward program (the cheap-gradient principle) instead of swelling like tree differentiation.
Adjoint terms that may be an exact zero selected by a ``Piecewise`` are guarded (``a == 0 ? 0 : a*d``),
so an untaken branch's inf or NaN never reaches a gradient as ``0 * inf``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import count
from math import gcd

import sympy
from sympy import Eq, Piecewise, Pow, Symbol

from symgrad.compiler import cse, dag
from symgrad.compiler.fastdiff import free
from symgrad.compiler.local import local_derivative
from symgrad.compiler.piecewise import PiecewiseOperand, branches
from symgrad.compiler.primitives import SHARED_CORE

Assignments = list[tuple[Symbol, sympy.Expr]]


def internal(name: str) -> Symbol:
    """The real symbol of a name symgrad makes up (renamed readably later): ``_t0'``. The quote keeps it
    apart from every argument's symbol (an identifier such as ``_t0``, or an element such as ``v[0]``)
    and sorts as the bare name would, so programs come out in the same order."""
    return Symbol(f"{name}'", real=True)


def fresh(prefix: str):
    """An endless supply of internal symbols ``prefix0', prefix1', ...``."""
    return (internal(f"{prefix}{k}") for k in count())


def inline_booleans(assigns: Assignments, results: list[sympy.Expr]) -> tuple[Assignments, list[sympy.Expr]]:
    """CSE hoists conditions into Boolean temporaries; put them back so every temporary is a number."""
    subs: dict[Symbol, sympy.Basic] = {}
    kept: Assignments = []
    for sym, expr in assigns:
        expr = expr.xreplace(subs) if subs else expr
        if isinstance(expr, sympy.logic.boolalg.Boolean) and not isinstance(expr, sympy.Expr):
            subs[sym] = expr
        else:
            kept.append((sym, expr))
    return kept, [r.xreplace(subs) if subs else r for r in results]


def hoist_operands(
    assigns: Assignments, results: list[sympy.Expr], names
) -> tuple[Assignments, list[sympy.Expr]]:
    """Give every Piecewise and every exp(-|u|)-family primitive (``SHARED_CORE``: a Piecewise once in its
    stable form) nested inside a larger expression, and the operand of every ``Abs``, its own (real)
    temporary, so that the local derivative rules and the stable forms only ever see them applied to plain
    real symbols.

    - Local derivatives and stable forms build conditions from their operands (``maximum(a, b)``: ``a > b``,
      ``Eq(a, b)``; ``logaddexp``, ``softplus``); an operand that is a Piecewise would make SymPy fold it
      into the condition (exponential in the number of branches, through ``simplify_logic`` and inequality
      solving; see docs/performance.md).
    - A Piecewise that the model compares (``where(clamp(x, -1, 1) > y, ...)``) arrives held as a
      ``PiecewiseOperand`` (see ``symgrad.compiler.piecewise``); it becomes a Piecewise temporary of its own
      here.
    - ``diff(Abs(u))`` is ``sign(u)*du`` only when SymPy can prove ``u`` real; for ``Abs(atanh(t))`` or
      ``Abs(log(t))`` it returns ``re``/``im``/``atan2`` forms that are unprintable or wasteful."""
    out: Assignments = []
    branching = (Piecewise, PiecewiseOperand, sympy.Abs, *SHARED_CORE)
    bound: dict[sympy.Basic, Symbol] = {}  # value -> its temporary (a compared Piecewise is also a value)

    def bind(value: sympy.Expr) -> Symbol:
        if value not in bound:
            bound[value] = next(names)
            out.append((bound[value], value))
        return bound[value]

    def hoist(e: sympy.Basic, top: bool) -> sympy.Basic:
        if e.is_Atom or not e.has(*branching):
            return e
        if isinstance(e, (Piecewise, PiecewiseOperand)):
            new = Piecewise(*[(hoist(v, False), hoist(c, False)) for v, c in branches(e)])
            return new if top else bind(new)
        args = [hoist(a, False) for a in e.args]
        if isinstance(e, sympy.Abs) and not args[0].is_Atom:
            args[0] = bind(args[0])
        new = e.func(*args)
        return bind(new) if isinstance(new, (Piecewise, *SHARED_CORE)) and not top else new

    for sym, expr in assigns:
        expr = hoist(expr, True)
        out.append((sym, expr))
        bound.setdefault(expr, sym)
    reduced = [hoist(r, True) for r in results]
    return out, reduced


#: the smallest shared integer factor of a product's exponents that ``regroup_powers`` raises once
REGROUP_MIN_EXPONENT = 5


def regroup_powers(
    assigns: Assignments, results: list[sympy.Expr], names
) -> tuple[Assignments, list[sympy.Expr]]:
    """Undo SymPy's distribution of an integer power over a product, ``(a*b)**n -> a**n * b**n``, which
    overflows where the product itself is moderate: ``tanh(asinh(x))**125`` is ``x**125*(x**2 + 1)**(-125/2)``
    to SymPy, infinite over infinite in float32 from x = 2. A product of two or more powers whose rational
    exponents share an integer factor n >= ``REGROUP_MIN_EXPONENT`` gets its base product as a temporary
    of its own, raised once: ``t = x*(x**2 + 1)**(-1/2)``, ``t**125`` (exact for an integer n, whatever the
    signs; the derivative is then taken of ``t**125``, not of its distributed form). A quotient is regrouped
    from n = 2: the user's ``(x/s)**2``, which SymPy makes ``x**2/s**2`` (0/0 at x = s = 1e-200). Not when
    a base would get an exponent strictly between 0 and 1 (see the comment)."""
    out: Assignments = []

    def regroup(e: sympy.Basic) -> sympy.Basic:
        if e.is_Atom or not e.has(Pow):
            return e
        args = [regroup(a) for a in e.args]
        if isinstance(e, sympy.Mul):
            powers = [
                i
                for i, a in enumerate(args)
                if isinstance(a, Pow) and a.exp.is_Rational and not a.base.is_number
            ]
            n = gcd(*[abs(args[i].exp.p) for i in powers]) if len(powers) >= 2 else 1
            # not when a factor would become b**r with 0 < r < 1: its derivative is infinite at b = 0, where
            # t**(n - 1) = 0 would make the gradient 0*inf (x**5*y**(5/2) has a finite one there)
            signs = {args[i].exp > 0 for i in powers}
            if (n >= REGROUP_MIN_EXPONENT or n >= 2 and len(signs) == 2) and not any(
                0 < args[i].exp / n < 1 for i in powers
            ):
                sym = next(names)
                out.append((sym, sympy.Mul(*[Pow(args[i].base, args[i].exp / n) for i in powers])))
                rest = [a for i, a in enumerate(args) if i not in powers]
                return sympy.Mul(*rest, Pow(sym, n))
        return e if all(a is b for a, b in zip(args, e.args)) else e.func(*args)

    for sym, expr in assigns:
        out.append((sym, regroup(expr)))
    return out, [regroup(r) for r in results]


def straight_line(exprs: list[sympy.Expr], prefix: str) -> tuple[Assignments, list[sympy.Expr]]:
    """One joint CSE (order='none': fast, and never the slow 'basic' optimizations), then products of powers
    regrouped (``regroup_powers``), and nested Piecewise and ``Abs`` operands in temporaries of their own
    (``hoist_operands``)."""
    names = fresh(prefix)
    if cse.large(exprs):  # sympy.cse is quadratic in the number of sums and products (compiler.cse)
        temps, reduced = cse.cse(exprs, names)
    else:
        temps, reduced = sympy.cse(exprs, symbols=names, order="none")
    return hoist_operands(*regroup_powers(*inline_booleans(list(temps), list(reduced)), names), names)


def _polynomial_symbols(body: Assignments, inputs: list[Symbol]) -> set[Symbol]:
    """Inputs, and temporaries that are polynomials of them: finite wherever the inputs are."""
    finite = set(inputs)
    for sym, expr in body:
        if free(expr) <= finite and expr.is_polynomial():
            finite.add(sym)
    return finite


def _may_be_nonfinite(d: sympy.Expr, finite: set[Symbol]) -> bool:
    """False only for a finite constant, or a polynomial of symbols that are finite themselves
    (``t = 1/sqrt(r)`` makes ``2*t`` a polynomial in ``t``, yet infinite at r = 0)."""
    if d.is_number:
        return not d.is_finite
    return not (free(d) <= finite and d.is_polynomial())


@dataclass
class Reverse:
    """Result of reverse accumulation: adjoint assignments and one gradient expression per argument
    element."""

    assigns: Assignments
    grads: list[sympy.Expr]


def _sum_by_adjoint(terms: list[tuple[sympy.Expr | None, sympy.Expr]]) -> sympy.Expr:
    """Sum ``adjoint * d`` terms with each adjoint factored out once: ``g*(a + b)``, as tree
    differentiation of the whole assignment would give, not ``g*a + g*b`` (an adjoint None: a term as is)."""
    groups: dict[sympy.Expr | None, list[sympy.Expr]] = {}
    for adjoint, d in terms:
        groups.setdefault(adjoint, []).append(d)
    return sympy.Add(*[(1 if a is None else a) * sympy.Add(*ds) for a, ds in groups.items()])


def reverse_accumulate(
    body: Assignments, seeds: dict[Symbol, sympy.Expr], wrt: list[Symbol], where: str
) -> Reverse:
    """Walk ``body`` backwards from ``seeds`` (adjoints of some assigned symbols) to the ``wrt`` symbols."""
    differentiable = set(wrt) | {s for s, _ in body}
    terms: dict[Symbol, list[tuple[sympy.Expr | None, sympy.Expr]]] = defaultdict(list)
    selective: set[Symbol] = set()
    finite = _polynomial_symbols(body, wrt)
    for sym, seed in seeds.items():
        terms[sym].append((None, seed))
    # adjoint names are unique per seed set: lower() runs one pass per output for the Jacobian and joins
    # them into one program, where two passes' `_adj0` would be the same SymPy symbol
    adjoint_names = fresh("_adj" + "".join(sorted(str(s) for s in seeds)) + "_")
    assigns: Assignments = []
    for sym, expr in reversed(body):
        if not terms.get(sym):
            continue
        total = _sum_by_adjoint(terms.pop(sym))
        if total.is_Atom:
            adjoint = total
        else:
            adjoint = next(adjoint_names)
            assigns.append((adjoint, total))
        for arg in sorted(free(expr) & differentiable, key=str):
            d = local_derivative(expr, sym, arg, where)
            if d == 0:
                continue
            if sym in selective and _may_be_nonfinite(d, finite):
                terms[arg].append((None, Piecewise((0, Eq(adjoint, 0)), (adjoint * d, True))))
            else:
                terms[arg].append((adjoint, d))
            if sym in selective or d.has(Piecewise):
                selective.add(arg)
    grads = [_sum_by_adjoint(terms.get(x, [])) for x in wrt]
    return Reverse(assigns, grads)


def forward_accumulate(
    body: Assignments, tangents: dict[Symbol, sympy.Expr], where: str, prefix: str = ""
) -> tuple[Assignments, dict[Symbol, sympy.Expr]]:
    """Forward mode over ``body``: the tangent of every assigned symbol, given the tangents of the inputs;
    ``prefix`` keeps apart the temporaries of passes joined into one program.

    A Piecewise-selected zero factor is guarded (``d == 0 ? 0 : d*dt``) where the incoming tangent is a
    computed one, so an untaken branch's infinite tangent never becomes ``0 * inf``."""
    tangent: dict[Symbol, sympy.Expr] = dict(tangents)
    names = fresh(prefix + "_tan")
    local_names = fresh(prefix + "_dloc")
    assigns: Assignments = []
    for sym, expr in body:
        terms = []
        for arg in sorted((s for s in free(expr) if s in tangent), key=str):
            dt = tangent[arg]
            if dt == 0:
                continue
            d = local_derivative(expr, sym, arg, where)
            if d == 0:
                continue
            if arg not in tangents and d.has(Piecewise):
                # guard on a temporary: a condition Eq(<Piecewise>, 0) makes SymPy fold the Piecewise
                # into the condition (exponential in the number of branches, and it calls simplify)
                local = next(local_names)
                assigns.append((local, d))
                term = Piecewise((0, Eq(local, 0)), (local * dt, True))
            else:
                term = d * dt
            terms.append(term)
        total = sympy.Add(*terms)
        if total.is_Atom:
            tangent[sym] = total
        else:
            tangent[sym] = next(names)
            assigns.append((tangent[sym], total))
    return assigns, tangent


def topo_merge(assigns: Assignments, extra: Assignments) -> Assignments:
    """Order ``assigns`` (kept in order) plus ``extra`` (CSE temporaries) so each comes after what it uses,
    each temporary placed just before its first user."""
    pending = dict(extra)
    out: Assignments = []
    placed: set[Symbol] = set()

    def place(sym: Symbol, expr: sympy.Expr) -> None:
        stack = [(sym, expr, False)]
        while stack:
            s, e, ready = stack.pop()
            if s in placed:
                continue
            needed = [d for d in free(e) if d in pending and d not in placed]
            if ready or not needed:
                out.append((s, e))
                placed.add(s)
                pending.pop(s, None)
                continue
            stack.append((s, e, True))
            stack.extend((d, pending[d], False) for d in sorted(needed, key=str))

    for sym, expr in assigns:
        place(sym, expr)
    return out


def joint_cse(assigns: Assignments, exact: frozenset[Symbol] = frozenset()) -> Assignments:
    """CSE across every right-hand side (forward and backward together), then re-order. The assignments of
    ``exact`` (the forward's) keep their quotients by a symbol as divisions: CSE shares ``1/x`` between the
    value ``sin(x)/x`` and its derivative, and ``sin(x)*(1/x)`` at 1e-300 is 1 ulp off, which the derivative
    through the output, ``(cos(x) - sin(x)/x)/x``, turns into 1e284 instead of 0."""
    if not assigns:
        return assigns
    temps, reduced = straight_line([e for _, e in assigns], "_c")
    reciprocals = {
        t: v for t, v in temps if isinstance(v, Pow) and v.exp == -1 and isinstance(v.base, Symbol)
    }
    if reciprocals and exact:
        reduced = [r.xreplace(reciprocals) if s in exact else r for (s, _), r in zip(assigns, reduced)]
    return topo_merge([(s, r) for (s, _), r in zip(assigns, reduced)], temps)


def prune(assigns: Assignments, results: set[Symbol]) -> Assignments:
    """Dead-code elimination: keep what the results need."""
    live = set(results)
    kept: Assignments = []
    for sym, expr in reversed(assigns):
        if sym in live:
            kept.append((sym, expr))
            live |= free(expr)
    return kept[::-1]


#: exponents whose power prints its base once (x, 1/x, sqrt(x), 1/sqrt(x)); the printers write others with
#: the base repeated (t*t, 1/(t*t*t), t*sqrt(t)) or as pow(t, n)
_ONCE = frozenset({sympy.S.One, sympy.S.NegativeOne, sympy.S.Half, -sympy.S.Half})


def _bases(factors: tuple) -> set:
    return {f.base if isinstance(f, Pow) else f for f in factors if not f.is_number}


def _merging(user: sympy.Expr, subs: dict[Symbol, sympy.Expr]) -> list[Symbol]:
    """The symbols of ``subs`` whose substitution into ``user`` would merge factors into a power: with
    ``w = u/v`` in ``-g*w/v``, SymPy writes ``u/v**2``, where ``v**2`` overflows while ``w/v`` does not (and
    ``e*x`` in ``2*w*x`` becomes ``e*x**2``, 0*inf where ``(e*x)*x`` underflows to 0). One walk of
    ``user``'s distinct products for all of them."""
    symbols = free(user)
    candidates = {s: _bases(sympy.Mul.make_args(subs[s])) for s in symbols if s in subs}
    if not candidates:
        return []
    found: set[Symbol] = set()
    for node in dag.nodes(user):
        if isinstance(node, sympy.Mul):
            for s in candidates.keys() & set(node.args) - found:
                if candidates[s] & _bases(tuple(f for f in node.args if f != s)):
                    found.add(s)
    return [s for s in symbols if s in found]


def inline_single_use(assigns: Assignments, keep: set[Symbol]) -> Assignments:
    """Substitute temporaries used exactly once (and atoms) into their user, for readable programs, except
    into a condition (a Piecewise there is folded into it), into a product it would merge with
    (``_merging``) or as the base of a power (SymPy would distribute the power over a product again, see
    ``regroup_powers``); then give every compound base of a power its own temporary, so that ``sin(x)**3``
    does not print as three calls."""
    uses: dict[Symbol, int] = defaultdict(int)
    in_conditions: set[Symbol] = set()  # a Piecewise substituted there would be folded into it
    bases: set[Symbol] = set()  # a product substituted there would be distributed again
    for _, expr in assigns:
        for node in dag.occurrences(expr):
            if isinstance(node, Symbol):
                uses[node] += 1
            elif isinstance(node, Pow) and isinstance(node.base, Symbol) and node.exp not in _ONCE:
                bases.add(node.base)
            elif isinstance(node, sympy.logic.boolalg.Boolean) and not isinstance(node, sympy.Expr):
                in_conditions |= node.free_symbols
    subs: dict[Symbol, sympy.Expr] = {}
    out: Assignments = []

    def bind_bases(e: sympy.Basic) -> sympy.Basic:
        if e.is_Atom or not dag.has(e, Pow):
            return e
        args = [bind_bases(a) for a in e.args]
        if isinstance(e, Pow) and e.exp not in _ONCE and not args[0].is_Atom:
            base = sympy.Dummy("base", real=True)
            out.append((base, args[0]))
            args[0] = base
        return e if all(a is b for a, b in zip(args, e.args)) else e.func(*args)

    for sym, expr in assigns:
        for s in _merging(expr, subs) if subs else ():
            out.append((s, bind_bases(subs.pop(s))))  # kept in its temporary (``_merging``)
        expr = expr.xreplace(subs) if subs else expr
        if sym not in keep and (
            expr.is_Atom
            or uses[sym] <= 1
            and sym not in bases
            and not (sym in in_conditions and expr.has(Piecewise))
        ):
            subs[sym] = expr
        else:
            out.append((sym, bind_bases(expr)))
    return out
