"""The local derivative of one assignment ``sym = expr`` of a straight-line program: the chain-rule factor
that reverse (and forward) accumulation multiplies an adjoint (a tangent) by.

Three rules keep it finite wherever the true derivative is (docs/numerics.md):

- *through the output*: a factor ``exp(z)`` or ``v**e`` (e < 0: a quotient) of a product is differentiated
  through the assignment's own value, ``d(r*exp(z)) = dr*exp(z) + sym*dz`` and ``d(r/v) = dr/v - sym*dv/v``
  (PyTorch's division: ``g/v``, ``-g*w/v``), never through ``v**2`` or ``x**2*exp(-x**2)``, which overflow
  where the result is moderate or underflows to 0;
- *select, don't multiply*: a product with a Piecewise that has a zero branch becomes a Piecewise whose
  branch is an exact 0, so an unselected branch's inf never meets a selector's 0;
- ``b**e`` with both symbolic: d/de is ``sym*log(b)``, and 0 where b == 0 and e >= 0 (PyTorch's rule);
  ``atan2(y, x)``: through ``hypot``, never through ``x**2 + y**2``;
- *exact zeros and one denominator*: a product with an exponentially decaying factor is 0 where that factor
  is (``saturate``), and a function of 1/x is differentiated as a whole, over one denominator
  (``cancel_reciprocals``): atan(1/x)' at 1e-200 is -1, not inf/inf.
"""

from __future__ import annotations

from functools import lru_cache

import sympy
from sympy import And, Eq, Mul, Piecewise, Pow, S, Symbol, exp
from sympy.logic.boolalg import Boolean

from symgrad.compiler import dag
from symgrad.compiler.display import formula
from symgrad.compiler.fastdiff import diff
from symgrad.compiler.piecewise import PiecewiseOperand, held, held_value
from symgrad.compiler.primitives import hypot, sigmoid
from symgrad.compiler.rules import apply_subgradients, check_supported
from symgrad.compiler.textbook import rewrite_hypot


def _product_factor(f: sympy.Basic) -> bool:
    """A factor that a product's rule (``_through_output``) differentiates through the product's value."""
    return isinstance(f, exp) or isinstance(f, Pow) and f.exp.is_number and f.exp.is_negative


def _through(factor: sympy.Expr, wrt: Symbol) -> bool:
    return _product_factor(factor) and factor.has(wrt)


def _through_output(expr: sympy.Expr, sym: Symbol, wrt: Symbol) -> sympy.Expr | None:
    """d expr / d wrt with the product's ``exp`` and reciprocal factors differentiated through ``sym``,
    or None where the product has none."""
    factors = Mul.make_args(expr)
    through = [f for f in factors if _through(f, wrt)]
    if not through:
        return None
    rest = Mul(*[f for f in factors if not _through(f, wrt)])
    exps = sympy.Add(*[diff(f.args[0], wrt) for f in through if isinstance(f, exp)])
    powers = [f for f in through if not isinstance(f, exp)]
    # a lone 1/v: sym*dv/v held as sym*(dv/v), which CSE would merge into sym**2*dv (sym is 1/v): 1/sin(x**3)
    # at 1e-8 in float32 has sym**2 = 1e48, where sym*(dv/v) = 3e32
    lone = rest == 1 and len(powers) == 1 and not powers[0].base.is_Atom
    slopes = [f.exp * diff(f.base, wrt) / f.base for f in powers]
    slope = powers[0].exp * held(diff(powers[0].base, wrt) / powers[0].base) if lone else sympy.Add(*slopes)
    through_exp = sym * exps
    if any(isinstance(p, Pow) and p.exp.is_negative for p in dag.nodes(exps)):
        # d exp(-1/x**2) = sym*2/x**3 at 1e-200: sym is 0 and 1/x**3 inf; the true product is 0
        through_exp = Piecewise((S.Zero, Eq(sym, 0)), (through_exp, True))
    return diff(rest, wrt) * Mul(*through) + through_exp + sym * slope


def _power(expr: Pow, sym: Symbol, wrt: Symbol) -> sympy.Expr:
    """d(b**e) for a symbolic exponent: e*b**(e - 1)*db (no NaN at b == 0) + sym*log(b)*de, the second 0
    where b == 0 and e >= 0 (x**y at x = 0: d/dy = 0, as torch.pow)."""
    b, e = expr.args
    d = sympy.powsimp(e * b ** (e - 1)) * diff(b, wrt) if b.has(wrt) else S.Zero
    de = diff(e, wrt)
    if de != 0:
        # a constant base's log as a number, which the printers put first: (log(2)*g)*2**x stays finite
        # where g*2**x would overflow first
        log_term = sym * (sympy.log(b).evalf(20) if b.is_number else sympy.log(b))
        if not b.is_number:
            log_term = Piecewise((S.Zero, And(Eq(b, 0), e >= 0)), (log_term, True))
        d += log_term * de
    return d


def _atan2(expr: sympy.atan2, sym: Symbol, wrt: Symbol) -> sympy.Expr:
    """d atan2(y, x) = ((x/h)*dy - (y/h)*dx)/h for h = hypot(x, y), the ratios held whole (in [-1, 1]; SymPy
    would make them x/h**2, which overflows at 1e-200, and x/(x**2 + y**2) underflows to x/0 there; through
    cos/sin of the rounded angle, 6e-17 for 0 at (1, 0)). 0 at the origin (torch: (0, -0))."""
    y, x = expr.args
    r = hypot(x, y)
    d = (held(x / r) * diff(y, wrt) - held(y / r) * diff(x, wrt)) / r
    # the origin as one comparison (a C `&&` is control flow, which keeps a loop from vectorizing)
    return Piecewise((S.Zero, Eq(sympy.Abs(x) + sympy.Abs(y), 0)), (d, True))


def _zero_branch(e: sympy.Basic) -> bool:
    return isinstance(e, Piecewise) and any(v == 0 for v, _ in e.args)


def _underflowed(f: sympy.Basic) -> Boolean | None:
    """Where a factor that decays exponentially (exp(-u**2) from erf, sigmoid(u), tanh's 1 - tanh(u)**2) is
    an exact 0, or None for another factor: next to it a polynomial factor's inf (x**2 at 1e200) is beaten.
    exp(z) by its exponent (SymPy knows exp(z) != 0): exp(-800) is 0 in both dtypes."""
    if isinstance(f, exp):
        return f.args[0] < -800
    if isinstance(f, sigmoid) or (
        isinstance(f, sympy.Add) and f.args[0] == 1 and len(f.args) == 2 and dag.has(f.args[1], sympy.tanh)
    ):
        return Eq(f, 0)
    return None


def saturate(d: sympy.Expr) -> sympy.Expr:
    """``d`` with every product of a decaying factor (``_underflowed``) and other non-constant factors
    selected to an exact 0 where that factor is 0: GELU's ``x*(1 - tanh(z)**2)*(1 + 3c*x**2)`` at 1e200 is
    0*inf otherwise (true: 0 or 1)."""

    def fold(e: sympy.Basic) -> sympy.Basic:
        if not isinstance(e, Mul) or sum(not a.is_number for a in e.args) < 2:
            return e
        zeros = [c for c in map(_underflowed, e.args) if c is not None]
        # only next to a factor that can overflow: a power (x**2 at 1e200, x**-2 at 1e-200); not cos(x)
        grows = any(_underflowed(f) is None and dag.fold(f, _grows, _GROWS) for f in e.args)
        if not zeros or not grows:
            return e
        # one comparison (a C `||` is control flow): sigmoid(u)*sigmoid(-u) is 0 where either factor is
        ties = [c.lhs for c in zeros if isinstance(c, Eq)]
        zero = next((c for c in zeros if not isinstance(c, Eq)), None)
        zero = Eq(Mul(*ties), 0) if zero is None else zero
        return Piecewise((S.Zero, zero), (e, True))

    return dag.bottom_up(d, fold, _SATURATED) if dag.has(d, exp, sympy.tanh, sigmoid) else d


def _grows(e: sympy.Basic, children: list[bool]) -> bool:
    """Whether ``e`` has a power of a non-constant base (a factor that can overflow)."""
    return isinstance(e, Pow) and not e.base.is_number or any(children)


def _reciprocals(e: sympy.Basic, children: list[frozenset]) -> frozenset:
    """The symbols ``v`` of which ``e`` has a negative power ``v**-k``."""
    own = {e.base} if isinstance(e, Pow) and e.base.is_Symbol and e.exp.is_negative else set()
    found = frozenset(own.union(*children))
    return _RECIPROCAL_SETS.setdefault(found, found)


# structural facts and rewrites of a sub-expression, kept across derivatives (a layer's neurons share theirs)
_GROWS: dict[sympy.Basic, bool] = {}
_SATURATED: dict[sympy.Basic, sympy.Basic] = {}
_HYPOT: dict[sympy.Basic, sympy.Basic] = {}
_RECIPROCALS: dict[sympy.Basic, frozenset] = {}
_RECIPROCAL_SETS: dict[frozenset, frozenset] = {}


def _reciprocal_in(e: sympy.Basic, wrt: Symbol) -> bool:
    return wrt in dag.fold(e, _reciprocals, _RECIPROCALS)


def _reciprocal_of(e: sympy.Basic, wrt: Symbol) -> bool:
    return isinstance(e, Pow) and e.base == wrt and e.exp.is_negative


def cancel_reciprocals(d: sympy.Expr, wrt: Symbol) -> sympy.Expr:
    """``d`` with every product of a negative power of ``wrt`` and the reciprocal of a sum over negative
    powers of ``wrt`` put over one denominator: the chain rule through 1/x gives ``-x**-2/(1 + x**-2)`` for
    atan(1/x), inf/inf at 1e-200, where ``-1/(x**2 + 1)`` is -1."""

    def fold(e: sympy.Basic) -> sympy.Basic:
        if not isinstance(e, Mul) or not any(_reciprocal_of(f, wrt) for f in e.args):
            return e
        over_sum = any(
            isinstance(f, Pow) and f.exp.is_negative and isinstance(f.base, sympy.Add)
            and _reciprocal_in(f.base, wrt)
            for f in e.args
        )  # fmt: skip
        return sympy.together(e) if over_sum else e

    return dag.bottom_up(d, fold) if _reciprocal_in(d, wrt) else d


def select(d: sympy.Expr) -> sympy.Expr:
    """``d`` with every product that has a Piecewise factor with a zero branch folded into that Piecewise:
    ``where(c, 1, 0)*exp(2*x)`` -> ``where(c, exp(2*x), 0)`` (an exact 0 where c fails, even if exp(2*x) is
    inf there)."""
    if d.is_Atom or not dag.has(d, Piecewise):
        return d
    args = [select(a) for a in d.args]
    if isinstance(d, Mul):
        pick = next((a for a in args if _zero_branch(a)), None)
        if pick is not None:
            rest = Mul(*[a for a in args if a is not pick])
            return Piecewise(*[(S.Zero if v == 0 else v * rest, c) for v, c in pick.args])
    return d if all(a is b for a, b in zip(args, d.args)) else d.func(*args)


def _rule(expr: sympy.Expr, sym: Symbol, wrt: Symbol) -> sympy.Expr:
    """The derivative before the subgradient table; a Piecewise's branches each through ``sym``, which
    equals the value of the branch that is taken."""
    if held_value(expr) is not None:  # an identity that only keeps SymPy from merging: v's derivative
        return _rule(held_value(expr), sym, wrt)
    if isinstance(expr, Piecewise):
        return Piecewise(*[(_rule(v, sym, wrt), c) for v, c in expr.args])
    if isinstance(expr, Pow) and not expr.exp.is_Number:
        return _power(expr, sym, wrt)
    if isinstance(expr, sympy.atan2):
        return _atan2(expr, sym, wrt)
    d = _through_output(expr, sym, wrt)
    return diff(expr, wrt) if d is None else d


def _by_output(e: sympy.Basic) -> bool:
    """Whether ``e`` is differentiated through its own value by a rule of the module."""
    if e.is_number:
        return False
    if isinstance(e, (exp, sympy.atan2)):
        return True
    if isinstance(e, Pow):
        return not e.exp.is_Number or (e.exp.is_negative and not e.base.is_Atom)
    return isinstance(e, Mul) and any(
        isinstance(f, exp) or isinstance(f, Pow) and f.exp.is_negative and not f.base.is_Atom
        for f in e.args
        if not f.is_number
    )


def hoist_by_output(
    assigns: list[tuple[Symbol, sympy.Expr]], results: list[sympy.Expr], names
) -> tuple[list[tuple[Symbol, sympy.Expr]], list[sympy.Expr]]:
    """Give every sub-expression that a rule differentiates through its value (``_by_output``: a product
    with an exp or a quotient by a compound denominator, an exp, an atan2, a symbolic power) its own
    temporary, so that the rule sees it as a whole assignment: ``x*exp(-x**2) + 1`` -> ``t = x*exp(-x**2)``,
    ``t + 1``. Not a product's exp and reciprocal factors (the product's rule takes them), nothing inside a
    Piecewise (a branch's temporary would be computed whether or not the branch is taken), and not a product
    whose only quotients are by a symbol (``r/theta`` in a sum: the extra adjoints cost 4 % of bundle
    adjustment's vjp; such a quotient is through its output where it is a whole assignment)."""
    out: list[tuple[Symbol, sympy.Expr]] = []
    bound: dict[sympy.Basic, Symbol] = {}
    seen: dict[tuple[sympy.Basic, bool], sympy.Basic] = {}  # a DAG's shared nodes visited once

    def visit(e: sympy.Basic, bind: bool) -> sympy.Basic:
        if e.is_Atom or isinstance(e, (Piecewise, PiecewiseOperand, Boolean)):
            return e
        if (e, bind) in seen:
            return seen[e, bind]
        product = isinstance(e, Mul)
        args = [visit(a, not (product and _product_factor(a))) for a in e.args]
        new = e if all(a is b for a, b in zip(args, e.args)) else e.func(*args)
        if bind and _by_output(new):
            if new not in bound:
                bound[new] = next(names)
                out.append((bound[new], new))
            new = bound[new]
        seen[e, bind] = new
        return new

    assigns, results = _inline_reciprocals(assigns, results)
    for sym, expr in assigns:
        out.append((sym, visit(expr, False)))
    return out, [visit(r, False) for r in results]


def _inline_reciprocals(
    assigns: list[tuple[Symbol, sympy.Expr]], results: list[sympy.Expr]
) -> tuple[list[tuple[Symbol, sympy.Expr]], list[sympy.Expr]]:
    """A temporary ``t = x**-k`` (x a symbol; the joint CSE shares 1/x between its users) written back into
    its users, so that a function of it is differentiated as a whole: through ``t`` the chain rule multiplies
    atan'(t) = 1/(1 + t**2), 0 at x = 1e-200, by dt/dx = -1/x**2, inf; as one assignment ``atan(1/x)`` has
    the derivative -1/(x**2 + 1) (``cancel_reciprocals``). The assignment stays, for its other readers."""
    rule: dict[sympy.Basic, sympy.Expr] = {}
    out = []
    for sym, expr in assigns:
        expr = dag.xreplace(expr, rule) if rule else expr
        out.append((sym, expr))
        if isinstance(expr, Pow) and isinstance(expr.base, Symbol) and expr.exp.is_negative:
            rule[sym] = expr
    return out, [dag.xreplace(r, rule) for r in results] if rule else results


def _hypot(e: sympy.Expr) -> sympy.Expr:
    return rewrite_hypot(e) or e


@lru_cache(maxsize=4096)
def local_derivative(expr: sympy.Expr, sym: Symbol, wrt: Symbol, where: str) -> sympy.Expr:
    """d expr / d wrt for the assignment ``sym = expr``, by the rules of the module, with the subgradient
    table applied. Cached: the vjp, each Jacobian row and the jvp of one function walk the same forward
    program, so they ask for the same derivatives."""
    d = select(saturate(cancel_reciprocals(apply_subgradients(_rule(expr, sym, wrt)), wrt)))
    if dag.has(d, Pow):  # sqrt(1 + u**2) from asinh' (0 beyond 1e154 as written) and others: hypot
        d = dag.bottom_up(d, _hypot, _HYPOT)
    check_supported(d, lambda: f"{where}: derivative of {formula(expr)} with respect to {wrt}")
    return d
