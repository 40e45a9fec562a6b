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
  ``atan2(y, x)``: through its angle and ``hypot``, never through ``x**2 + y**2``.
"""

from __future__ import annotations

from functools import lru_cache

import sympy
from sympy import And, Eq, Mul, Piecewise, Pow, S, Symbol, exp
from sympy.logic.boolalg import Boolean

from symgrad.compiler.display import formula
from symgrad.compiler.piecewise import PiecewiseOperand
from symgrad.compiler.primitives import hypot
from symgrad.compiler.rules import apply_subgradients, check_supported


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
    logs = [
        sympy.diff(f.args[0], wrt) if isinstance(f, exp) else f.exp * sympy.diff(f.base, wrt) / f.base
        for f in through
    ]
    return sympy.diff(rest, wrt) * Mul(*through) + sym * sympy.Add(*logs)


def _power(expr: Pow, sym: Symbol, wrt: Symbol) -> sympy.Expr:
    """d(b**e) for a symbolic exponent: e*b**(e - 1)*db (no NaN at b == 0) + sym*log(b)*de, the second 0
    where b == 0 and e >= 0 (x**y at x = 0: d/dy = 0, as torch.pow)."""
    b, e = expr.args
    d = sympy.powsimp(e * b ** (e - 1)) * sympy.diff(b, wrt) if b.has(wrt) else S.Zero
    de = sympy.diff(e, wrt)
    if de != 0:
        # a constant base's log as a number, which the printers put first: (log(2)*g)*2**x stays finite
        # where g*2**x would overflow first
        log_term = sym * (sympy.log(b).evalf(20) if b.is_number else sympy.log(b))
        if not b.is_number:
            log_term = Piecewise((S.Zero, And(Eq(b, 0), e >= 0)), (log_term, True))
        d += log_term * de
    return d


def _atan2(expr: sympy.atan2, sym: Symbol, wrt: Symbol) -> sympy.Expr:
    """d atan2(y, x) = (cos(t)*dy - sin(t)*dx)/hypot(x, y) for t = atan2(y, x) (x = r*cos(t), y = r*sin(t)):
    x/(x**2 + y**2) would underflow to x/0 at 1e-200. 0 at the origin (torch: (0, -0))."""
    y, x = expr.args
    r = hypot(x, y)
    d = (sympy.cos(sym) * sympy.diff(y, wrt) - sympy.sin(sym) * sympy.diff(x, wrt)) / r
    # the origin as one comparison (a C `&&` is control flow, which keeps a loop from vectorizing)
    return Piecewise((S.Zero, Eq(sympy.Abs(x) + sympy.Abs(y), 0)), (d, True))


def _zero_branch(e: sympy.Basic) -> bool:
    return isinstance(e, Piecewise) and any(v == 0 for v, _ in e.args)


def select(d: sympy.Expr) -> sympy.Expr:
    """``d`` with every product that has a Piecewise factor with a zero branch folded into that Piecewise:
    ``where(c, 1, 0)*exp(2*x)`` -> ``where(c, exp(2*x), 0)`` (an exact 0 where c fails, even if exp(2*x) is
    inf there)."""
    if d.is_Atom or not d.has(Piecewise):
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
    if isinstance(expr, Piecewise):
        return Piecewise(*[(_rule(v, sym, wrt), c) for v, c in expr.args])
    if isinstance(expr, Pow) and not expr.exp.is_Number:
        return _power(expr, sym, wrt)
    if isinstance(expr, sympy.atan2):
        return _atan2(expr, sym, wrt)
    d = _through_output(expr, sym, wrt)
    return sympy.diff(expr, wrt) if d is None else d


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

    for sym, expr in assigns:
        out.append((sym, visit(expr, False)))
    return out, [visit(r, False) for r in results]


@lru_cache(maxsize=4096)
def local_derivative(expr: sympy.Expr, sym: Symbol, wrt: Symbol, where: str) -> sympy.Expr:
    """d expr / d wrt for the assignment ``sym = expr``, by the rules of the module, with the subgradient
    table applied. Cached: the vjp, each Jacobian row and the jvp of one function walk the same forward
    program, so they ask for the same derivatives."""
    d = select(apply_subgradients(_rule(expr, sym, wrt)))
    check_supported(d, lambda: f"{where}: derivative of {formula(expr)} with respect to {wrt}")
    return d
