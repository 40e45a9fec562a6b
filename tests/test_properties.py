"""Property-based trust tests: random expression trees, compiled through every target and dtype.

Each example is a random tree (1-3 inputs, depth up to 6, at most ~40 nodes) over the functions symgrad
supports — elementary functions, the stable primitives and the naive patterns the rewrite pass turns into
them, kinks (Abs, Max/Min, relu, clamp, floor, sign) and piecewise ``sg.where`` (including the
domain-guarding idioms ``where(u > 0, sqrt(u), 0)``, ``where(u > 0, u*log(u), 0)``,
``where(Ne(u, 0), sin(u)/u, 1)``). Domains are kept valid by construction (``log(1 + u**2)``,
``sqrt(1 + u**2)``, ``asin(tanh(u))``, ...). The tree becomes an ``@sg.function`` (``sg.function`` on a
closure), compiled once (cached on disk by traced content) and run on the numpy and C backends, in float64
and float32.

References, computed per input point:
- value: SymPy's own evaluation of the traced expression (``lambdify(..., 'mpmath')`` at 40 digits, with
  symgrad's primitives expanded through their ``_elementary()``);
- gradient: forward-mode dual numbers over the *naive* tree at 40 digits (the textbook derivative of every
  node, no rewriting, no CSE).

Tolerances are per point and per dtype, from a rounding-error estimate: the same naive tree evaluated with
mpmath at the dtype's precision (53 / 24 bits) and two bits below it. A result passes when
``|got - want| <= 16 * estimate + 32 * eps * |want| + tiny``: a wrong formula is off by O(|want|), rounding
is not. Points are used only away from kinks and branch switches, *robustly*: every quantity whose sign
decides a branch or a kink must be farther from 0 than 64 times its own estimated rounding error, and every
node value stays below 1e5 (gradients below 1e7) so float32 does not overflow. Separate properties check
the kinks themselves (finite results exactly at 0, at ties and at integers) and the rewrite pass alone.

Budget: a bounded number of examples in ``make test`` (about a minute for this file, deterministic), and
``SYMGRAD_FUZZ_EXAMPLES`` examples per property when set (``make fuzz`` sets 2000; random seeds, the
example database replays failures). A failure prints the expression as Python source, the traced SymPy
form, the input point, target and dtype, got / want / tolerance, the derived formula at fault, whether the
derivation itself (the kernel IR evaluated at 40 digits) or the target is wrong, and the generated code.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import mpmath
import numpy as np
import pytest
import sympy
from fuzzing import budget
from hypothesis import assume, event, given, note, reject
from hypothesis import strategies as st

import symgrad as sg
from symgrad.compiler.primitives import _Primitive

HI_PREC = 136  # bits: ~40 decimal digits
DTYPE_BITS = {"float64": 53, "float32": 24}
EPS = {"float64": 2.0**-52, "float32": 2.0**-23}
TINY = {"float64": 1e-280, "float32": 1e-30}
MAX_NODE = mpmath.mpf(1e5)  # |node value| bound: float32 stays far from overflow
MAX_GRAD = mpmath.mpf(1e7)
ERR_FACTOR, REL_FACTOR, MARGIN_FACTOR = 16, 32, 64


# -- dual numbers over mpmath: the naive derivative of every node --------------------------------------------


class D:
    """Value and gradient (one entry per input) of a node, and the gradient's magnitude ``a``: the same
    chain rule over absolute values (the sum of |products| over all paths), so that a gradient that is
    0 by cancellation (d/dx of x/x) still gets a rounding tolerance proportional to its terms."""

    __slots__ = ("v", "d", "a")

    def __init__(self, v, d, a=None, exact: bool = False):
        if _PERTURB is not None and not exact:  # see _sensitivities: one operation's result, perturbed
            k = _PERTURB[3]
            _PERTURB[3] += 1
            if k == _PERTURB[0]:
                if _PERTURB[1] == "v":
                    v = v * (1 + _PERTURB[2])
                else:
                    d = tuple(x * (1 + _PERTURB[2]) for x in d)
        self.v, self.d = v, d
        self.a = tuple(abs(x) for x in d) if a is None else a


#: while _sensitivities runs: [index of the operation result to perturb, "v" or "d", relative h, results seen]
_PERTURB: list | None = None


class Singular(Exception):
    """The naive tree is not differentiable (or not finite) at this point."""


def _chk(v):
    if not isinstance(v, mpmath.mpf) or not mpmath.isfinite(v):
        raise Singular(repr(v))
    return v


def _val(v):
    """A node's (or an op's intermediate) value: finite and within range, else the point is not used."""
    _chk(v)
    if abs(v) > MAX_NODE:  # also keeps mpmath from exp(1e30) (minutes of argument reduction)
        raise Singular("value out of range")
    return v


def un(u: D, f: Callable, df: Callable, of_value: bool = False) -> D:
    """f(u) and its chain rule; ``of_value``: ``df`` takes f's value, as the targets compute it (tanh' as
    1 - tanh**2), so that a rounding error in the value reaches the derivative in the error estimate."""
    v = _val(f(u.v))
    if of_value:
        r = D(v, u.d, u.a)  # this operation's result (perturbed here by _sensitivities)
        s = df(r.v)
        return D(r.v, tuple(_chk(s * du) for du in r.d), tuple(abs(s) * m for m in u.a), exact=True)
    s = df(u.v)
    return D(v, tuple(_chk(s * du) for du in u.d), tuple(abs(s) * m for m in u.a))


def bi(a: D, b: D, f: Callable, da: Callable, db: Callable) -> D:
    v = _val(f(a.v, b.v))
    sa, sb = da(a.v, b.v), db(a.v, b.v)
    return D(
        v,
        tuple(_chk(sa * x + sb * y) for x, y in zip(a.d, b.d)),
        tuple(abs(sa) * x + abs(sb) * y for x, y in zip(a.a, b.a)),
    )


def const(c, n: int) -> D:
    return D(+c, (mpmath.mpf(0),) * n)  # unary plus rounds to the working precision


def sel(cond: bool, a: D, b: D) -> D:
    return a if cond else b


class Ctx:
    """Collects, during one evaluation, every branch-deciding quantity and every node value."""

    def __init__(self) -> None:
        self.margins: list = []
        self.values: list = []

    def m(self, *qs) -> None:
        self.margins.extend(qs)


mp = mpmath
ONE, HALF, TWO = mp.mpf(1), mp.mpf(0.5), mp.mpf(2)


def _sigmoid(x):
    return 1 / (1 + mp.exp(-x))


def _softplus(x):
    return mp.log1p(mp.exp(x))  # not log(1 + e): at 136 bits 1 + exp(-250) is 1, and logsigmoid(250) is not 0


def _sq(u, n):
    return bi(u, u, lambda a, b: a * b, lambda a, b: b, lambda a, b: a)


def _add(a, b):
    return bi(a, b, lambda x, y: x + y, lambda x, y: ONE, lambda x, y: ONE)


def _addc(a, c):
    return D(_val(a.v + c), a.d, a.a)


def _mul(a, b):
    return bi(a, b, lambda x, y: x * y, lambda x, y: y, lambda x, y: x)


def _div(a, b):
    if b.v == 0:
        raise Singular("division by zero")
    return bi(a, b, lambda x, y: x / y, lambda x, y: 1 / y, lambda x, y: -x / (y * y))


def _pow_int(u, k):
    return un(u, lambda x: x**k, lambda x: k * x ** (k - 1))


def _one_plus_sq(u):
    return _addc(_mul(u, u), ONE)


def _powg(a, b):
    return bi(
        a,
        b,
        lambda x, y: mp.power(x, y),
        lambda x, y: y * mp.power(x, y - 1),
        lambda x, y: mp.power(x, y) * mp.log(x),
    )


def _max(a, b, ctx):
    ctx.m(a.v - b.v)
    if a.v == b.v:
        return D(
            a.v, tuple((x + y) / 2 for x, y in zip(a.d, b.d)), tuple((x + y) / 2 for x, y in zip(a.a, b.a))
        )
    return a if a.v > b.v else b


def _min(a, b, ctx):
    ctx.m(a.v - b.v)
    if a.v == b.v:
        return D(
            a.v, tuple((x + y) / 2 for x, y in zip(a.d, b.d)), tuple((x + y) / 2 for x, y in zip(a.a, b.a))
        )
    return a if a.v < b.v else b


def _logaddexp(a, b):
    def f(x, y):
        return max(x, y) + mp.log1p(mp.exp(-abs(x - y)))

    return bi(a, b, f, lambda x, y: mp.exp(x - f(x, y)), lambda x, y: mp.exp(y - f(x, y)))


def _relu(u, ctx):
    ctx.m(u.v)
    return u if u.v > 0 else const(mp.mpf(0), len(u.d))


def _abs(u, ctx):
    ctx.m(u.v)
    return un(u, abs, lambda x: mp.sign(x))


def _floor(u, ctx):
    ctx.m(u.v - mp.nint(u.v))
    return D(_chk(mp.floor(u.v)), (mp.mpf(0),) * len(u.d))


def _sign(u, ctx):
    ctx.m(u.v)
    return D(mp.sign(u.v), (mp.mpf(0),) * len(u.d))


def _clamp(u, ctx, lo=-1, hi=1):
    ctx.m(u.v - lo, u.v - hi)
    if u.v < lo:
        return const(mp.mpf(lo), len(u.d))
    if u.v > hi:
        return const(mp.mpf(hi), len(u.d))
    return u


def _tan(u, ctx):
    ctx.m(mp.cos(u.v))
    return un(u, mp.tan, lambda x: 1 + mp.tan(x) ** 2)


def _sqrt(u):
    return un(u, mp.sqrt, lambda x: 1 / (2 * mp.sqrt(x)))


def _log(u):
    if u.v <= 0:
        raise Singular("log of non-positive")
    return un(u, mp.log, lambda x: 1 / x)


def _sqrt_relu(u, ctx):
    ctx.m(u.v)
    return _sqrt(u) if u.v > 0 else const(mp.mpf(0), len(u.d))


def _xlogx_guard(u, ctx):
    ctx.m(u.v)
    return _mul(u, _log(u)) if u.v > 0 else const(mp.mpf(0), len(u.d))


def _sinc(u, ctx):
    ctx.m(u.v)
    return _div(un(u, mp.sin, mp.cos), u) if u.v != 0 else const(ONE, len(u.d))


def _atan2(a, b, ctx):
    ctx.m(a.v, b.v)
    r2 = a.v * a.v + b.v * b.v
    if r2 == 0:
        raise Singular("atan2 at the origin")
    return bi(a, b, mp.atan2, lambda x, y: y / (x * x + y * y), lambda x, y: -x / (x * x + y * y))


def _hypot(a, b, ctx):
    ctx.m(a.v * a.v + b.v * b.v)
    if a.v == 0 and b.v == 0:
        raise Singular("hypot at the origin")
    return bi(a, b, mp.hypot, lambda x, y: x / mp.hypot(x, y), lambda x, y: y / mp.hypot(x, y))


def _xlogy(a, b, ctx):
    ctx.m(a.v)
    y = _one_plus_sq(b)
    if a.v == 0:
        return D(mp.mpf(0), tuple(x * 0 for x in a.d))
    return bi(a, y, lambda p, q: p * mp.log(q), lambda p, q: mp.log(q), lambda p, q: p / q)


def _where(cond: bool, a: D, b: D) -> D:
    return a if cond else b


@dataclass(frozen=True)
class Op:
    arity: int
    build: Callable  # SymPy children -> SymPy expression (what the user writes)
    source: str  # the same as Python source, {0}, {1}, ... for the children
    ev: Callable  # (ctx, *duals) -> dual


R = sympy.Rational
OPS: dict[str, Op] = {
    # arithmetic and powers
    "neg": Op(1, lambda a: -a, "-({0})", lambda c, a: un(a, lambda x: -x, lambda x: -ONE)),
    "sq": Op(1, lambda a: a**2, "({0})**2", lambda c, a: _pow_int(a, 2)),
    "cube": Op(1, lambda a: a**3, "({0})**3", lambda c, a: _pow_int(a, 3)),
    "pow5": Op(1, lambda a: a**5, "({0})**5", lambda c, a: _pow_int(a, 5)),
    "inv1p": Op(
        1,
        lambda a: 1 / (1 + a**2),
        "1/(1 + ({0})**2)",
        lambda c, a: _div(const(ONE, len(a.d)), _one_plus_sq(a)),
    ),
    "sqrt1p": Op(
        1, lambda a: sg.sqrt(1 + a**2), "sg.sqrt(1 + ({0})**2)", lambda c, a: _sqrt(_one_plus_sq(a))
    ),
    "rpow32": Op(
        1,
        lambda a: (1 + a**2) ** R(-3, 2),
        "(1 + ({0})**2)**sympy.Rational(-3, 2)",
        lambda c, a: _powg(_one_plus_sq(a), const(mp.mpf(-1.5), len(a.d))),
    ),
    "pow13": Op(
        1,
        lambda a: (1 + a**2) ** R(1, 3),
        "(1 + ({0})**2)**sympy.Rational(1, 3)",
        lambda c, a: _powg(_one_plus_sq(a), const(ONE / 3, len(a.d))),
    ),
    "add": Op(2, lambda a, b: a + b, "({0}) + ({1})", lambda c, a, b: _add(a, b)),
    "sub": Op(
        2, lambda a, b: a - b, "({0}) - ({1})", lambda c, a, b: _add(a, un(b, lambda x: -x, lambda x: -ONE))
    ),
    "mul": Op(2, lambda a, b: a * b, "({0}) * ({1})", lambda c, a, b: _mul(a, b)),
    "div_safe": Op(
        2, lambda a, b: a / (1 + b**2), "({0}) / (1 + ({1})**2)", lambda c, a, b: _div(a, _one_plus_sq(b))
    ),
    "div": Op(2, lambda a, b: a / b, "({0}) / ({1})", lambda c, a, b: (c.m(b.v), _div(a, b))[1]),
    "powg": Op(
        2, lambda a, b: (1 + a**2) ** b, "(1 + ({0})**2)**({1})", lambda c, a, b: _powg(_one_plus_sq(a), b)
    ),
    # exp / log family and the naive patterns the rewrite pass must recognize
    "exp": Op(1, sg.exp, "sg.exp({0})", lambda c, a: un(a, mp.exp, mp.exp)),
    "gauss": Op(
        1,
        lambda a: sg.exp(-(a**2)),
        "sg.exp(-({0})**2)",
        lambda c, a: un(_mul(a, a), lambda x: mp.exp(-x), lambda x: -mp.exp(-x)),
    ),
    "log1p_sq": Op(1, lambda a: sg.log(1 + a**2), "sg.log(1 + ({0})**2)", lambda c, a: _log(_one_plus_sq(a))),
    "log_abs": Op(
        1,
        lambda a: sg.log(1 + sg.Abs(a)),
        "sg.log(1 + sg.Abs({0}))",
        lambda c, a: _log(_addc(_abs(a, c), ONE)),
    ),
    "log_half": Op(
        1,
        lambda a: sg.log(a**2 + R(1, 2)),
        "sg.log(({0})**2 + sympy.Rational(1, 2))",
        lambda c, a: _log(_addc(_mul(a, a), HALF)),
    ),
    "softplus": Op(1, sg.softplus, "sg.softplus({0})", lambda c, a: un(a, _softplus, _sigmoid)),
    # the naive spellings' references are the exact mathematical values (the same as the stable forms):
    # evaluated literally, 1 + exp(-250) is 1 even at 136 bits, and the reference would claim an exact 0
    "softplus_naive": Op(
        1, lambda a: sg.log(1 + sg.exp(a)), "sg.log(1 + sg.exp({0}))", lambda c, a: un(a, _softplus, _sigmoid)
    ),
    "sigmoid": Op(
        1, sg.sigmoid, "sg.sigmoid({0})", lambda c, a: un(a, _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x))
    ),
    "sigmoid_naive": Op(
        1,
        lambda a: 1 / (1 + sg.exp(-a)),
        "1/(1 + sg.exp(-({0})))",
        lambda c, a: _div(
            const(ONE, len(a.d)), _addc(un(a, lambda x: mp.exp(-x), lambda x: -mp.exp(-x)), ONE)
        ),
    ),
    "logsigmoid": Op(
        1,
        sg.logsigmoid,
        "sg.logsigmoid({0})",
        lambda c, a: un(a, lambda x: -_softplus(-x), lambda x: _sigmoid(-x)),
    ),
    "logsigmoid_naive": Op(
        1,
        lambda a: sg.log(1 / (1 + sg.exp(-a))),
        "sg.log(1/(1 + sg.exp(-({0}))))",
        lambda c, a: un(a, lambda x: -_softplus(-x), lambda x: _sigmoid(-x)),
    ),
    "expm1": Op(1, sg.expm1, "sg.expm1({0})", lambda c, a: un(a, mp.expm1, mp.exp)),
    "expm1_naive": Op(1, lambda a: sg.exp(a) - 1, "sg.exp({0}) - 1", lambda c, a: un(a, mp.expm1, mp.exp)),
    "log1p_exp": Op(
        1,
        lambda a: sg.log1p(sg.exp(a)),
        "sg.log1p(sg.exp({0}))",
        lambda c, a: un(un(a, mp.exp, mp.exp), mp.log1p, lambda x: 1 / (1 + x)),
    ),
    "logaddexp": Op(2, sg.logaddexp, "sg.logaddexp({0}, {1})", lambda c, a, b: _logaddexp(a, b)),
    "logaddexp_naive": Op(
        2,
        lambda a, b: sg.log(sg.exp(a) + sg.exp(b)),
        "sg.log(sg.exp({0}) + sg.exp({1}))",
        lambda c, a, b: _log(_add(un(a, mp.exp, mp.exp), un(b, mp.exp, mp.exp))),
    ),
    "logsumexp3": Op(
        3, sg.logsumexp, "sg.logsumexp({0}, {1}, {2})", lambda c, a, b, d: _logaddexp(_logaddexp(a, b), d)
    ),
    "xlogy": Op(
        2, lambda a, b: sg.xlogy(a, 1 + b**2), "sg.xlogy({0}, 1 + ({1})**2)", lambda c, a, b: _xlogy(a, b, c)
    ),
    # trigonometric and hyperbolic
    "sin": Op(1, sg.sin, "sg.sin({0})", lambda c, a: un(a, mp.sin, mp.cos)),
    "cos": Op(1, sg.cos, "sg.cos({0})", lambda c, a: un(a, mp.cos, lambda x: -mp.sin(x))),
    "tan": Op(1, sg.tan, "sg.tan({0})", lambda c, a: _tan(a, c)),
    "tanh": Op(1, sg.tanh, "sg.tanh({0})", lambda c, a: un(a, mp.tanh, lambda t: 1 - t * t, of_value=True)),
    "sinh": Op(1, sg.sinh, "sg.sinh({0})", lambda c, a: un(a, mp.sinh, mp.cosh)),
    "cosh": Op(1, sg.cosh, "sg.cosh({0})", lambda c, a: un(a, mp.cosh, mp.sinh)),
    "atan": Op(1, sg.atan, "sg.atan({0})", lambda c, a: un(a, mp.atan, lambda x: 1 / (1 + x * x))),
    "asinh": Op(1, sg.asinh, "sg.asinh({0})", lambda c, a: un(a, mp.asinh, lambda x: 1 / mp.sqrt(1 + x * x))),
    "asin_tanh": Op(
        1,
        lambda a: sg.asin(sg.tanh(a)),
        "sg.asin(sg.tanh({0}))",
        lambda c, a: un(
            un(a, mp.tanh, lambda x: 1 - mp.tanh(x) ** 2), mp.asin, lambda x: 1 / mp.sqrt(1 - x * x)
        ),
    ),
    "acos_tanh": Op(
        1,
        lambda a: sg.acos(sg.tanh(a)),
        "sg.acos(sg.tanh({0}))",
        lambda c, a: un(
            un(a, mp.tanh, lambda x: 1 - mp.tanh(x) ** 2), mp.acos, lambda x: -1 / mp.sqrt(1 - x * x)
        ),
    ),
    "atanh_half": Op(
        1,
        lambda a: sg.atanh(sg.tanh(a) / 2),
        "sg.atanh(sg.tanh({0}) / 2)",
        lambda c, a: un(
            un(a, lambda x: mp.tanh(x) / 2, lambda x: (1 - mp.tanh(x) ** 2) / 2),
            mp.atanh,
            lambda x: 1 / (1 - x * x),
        ),
    ),
    "acosh2": Op(
        1,
        lambda a: sg.acosh(2 + a**2),
        "sg.acosh(2 + ({0})**2)",
        lambda c, a: un(_addc(_mul(a, a), TWO), mp.acosh, lambda x: 1 / mp.sqrt(x * x - 1)),
    ),
    "atan2": Op(2, sg.atan2, "sg.atan2({0}, {1})", lambda c, a, b: _atan2(a, b, c)),
    "hypot": Op(2, sg.hypot, "sg.hypot({0}, {1})", lambda c, a, b: _hypot(a, b, c)),
    "erf": Op(
        1, sg.erf, "sg.erf({0})", lambda c, a: un(a, mp.erf, lambda x: 2 / mp.sqrt(mp.pi) * mp.exp(-x * x))
    ),
    "erfc": Op(
        1,
        sg.erfc,
        "sg.erfc({0})",
        lambda c, a: un(a, mp.erfc, lambda x: -2 / mp.sqrt(mp.pi) * mp.exp(-x * x)),
    ),
    # kinks and discontinuities
    "abs": Op(1, sg.Abs, "sg.Abs({0})", lambda c, a: _abs(a, c)),
    "relu": Op(1, sg.relu, "sg.relu({0})", lambda c, a: _relu(a, c)),
    "clamp": Op(1, lambda a: sg.clamp(a, -1, 1), "sg.clamp({0}, -1, 1)", lambda c, a: _clamp(a, c)),
    "relu6": Op(
        1,
        lambda a: sg.Min(sg.Max(a, 0), 6),
        "sg.Min(sg.Max({0}, 0), 6)",
        lambda c, a: _min(_max(a, const(mp.mpf(0), len(a.d)), c), const(mp.mpf(6), len(a.d)), c),
    ),
    "floor": Op(1, sg.floor, "sg.floor({0})", lambda c, a: _floor(a, c)),
    "sign": Op(1, sg.sign, "sg.sign({0})", lambda c, a: _sign(a, c)),
    "max": Op(2, sg.Max, "sg.Max({0}, {1})", lambda c, a, b: _max(a, b, c)),
    "min": Op(2, sg.Min, "sg.Min({0}, {1})", lambda c, a, b: _min(a, b, c)),
    "maximum": Op(2, sg.maximum, "sg.maximum({0}, {1})", lambda c, a, b: _max(a, b, c)),
    "minimum": Op(2, sg.minimum, "sg.minimum({0}, {1})", lambda c, a, b: _min(a, b, c)),
    "max3": Op(3, sg.Max, "sg.Max({0}, {1}, {2})", lambda c, a, b, d: _max(_max(a, b, c), d, c)),
    # piecewise
    "where_gt": Op(
        4,
        lambda a, b, t, f: sg.where(a > b, t, f),
        "sg.where(({0}) > ({1}), {2}, {3})",
        lambda c, a, b, t, f: (c.m(a.v - b.v), _where(a.v > b.v, t, f))[1],
    ),
    "where_ge0": Op(
        3,
        lambda a, t, f: sg.where(a >= 0, t, f),
        "sg.where(({0}) >= 0, {1}, {2})",
        lambda c, a, t, f: (c.m(a.v), _where(a.v >= 0, t, f))[1],
    ),
    "where_and": Op(
        4,
        lambda a, b, t, f: sg.where(sg.And(a > 0, b < 1), t, f),
        "sg.where(sg.And(({0}) > 0, ({1}) < 1), {2}, {3})",
        lambda c, a, b, t, f: (c.m(a.v, b.v - 1), _where(a.v > 0 and b.v < 1, t, f))[1],
    ),
    "sqrt_relu": Op(
        1,
        lambda a: sg.where(a > 0, sg.sqrt(a), 0),
        "sg.where(({0}) > 0, sg.sqrt({0}), 0)",
        lambda c, a: _sqrt_relu(a, c),
    ),
    "xlogx_guard": Op(
        1,
        lambda a: sg.where(a > 0, a * sg.log(a), 0),
        "sg.where(({0}) > 0, ({0}) * sg.log({0}), 0)",
        lambda c, a: _xlogx_guard(a, c),
    ),
    "sinc": Op(
        1,
        lambda a: sg.where(sg.Ne(a, 0), sg.sin(a) / a, 1),
        "sg.where(sg.Ne({0}, 0), sg.sin({0}) / ({0}), 1)",
        lambda c, a: _sinc(a, c),
    ),
}
CONSTANTS = {
    "2": (2, "2"),
    "-1": (-1, "-1"),
    "1/2": (R(1, 2), "sympy.Rational(1, 2)"),
    "0.3": (0.3, "0.3"),
    "-1.7": (-1.7, "-1.7"),
    "pi": (sympy.pi, "sg.pi"),
    "3": (3, "3"),
}
NAMES = ("x", "y", "z")


def _const_value(key: str):
    value = CONSTANTS[key][0]
    return (
        mp.pi
        if value is sympy.pi
        else (mp.mpf(value.p) / value.q if isinstance(value, sympy.Rational) else mp.mpf(value))
    )


# -- trees ---------------------------------------------------------------------------------------------------


@st.composite
def trees(draw, n_inputs: int, depth: int = 6, budget: int = 40):
    """A tree as nested tuples: ('var', i), ('const', key) or (op, *children); at most ``budget`` nodes."""
    left = [budget]

    def node(d: int):
        left[0] -= 1
        if d == 0 or left[0] <= 1 or draw(st.integers(0, 9)) < 2:
            if draw(st.integers(0, 5)) == 0:
                return ("const", draw(st.sampled_from(sorted(CONSTANTS))))
            return ("var", draw(st.integers(0, n_inputs - 1)))
        name = draw(st.sampled_from(sorted(OPS)))
        if OPS[name].arity > left[0]:
            name = draw(st.sampled_from(["sin", "exp", "sq", "tanh", "abs"]))
        return (name, *(node(d - 1) for _ in range(OPS[name].arity)))

    return node(depth)


def to_sympy(tree, args):
    kind = tree[0]
    if kind == "var":
        return args[tree[1]]
    if kind == "const":
        return sympy.sympify(CONSTANTS[tree[1]][0])
    return OPS[kind].build(*(to_sympy(c, args) for c in tree[1:]))


def to_source(tree) -> str:
    kind = tree[0]
    if kind == "var":
        return NAMES[tree[1]]
    if kind == "const":
        return CONSTANTS[tree[1]][1]
    return OPS[kind].source.format(*(to_source(c) for c in tree[1:]))


def evaluate(tree, point, prec: int) -> tuple[D, Ctx]:
    """Value and naive gradient of ``tree`` at ``point`` with ``prec`` bits, and the branch quantities."""
    n = len(point)
    ctx = Ctx()

    def go(t):
        kind = t[0]
        if kind == "var":
            i = t[1]
            r = D(point[i], tuple(mp.mpf(int(j == i)) for j in range(n)), exact=True)  # inputs are exact
        elif kind == "const":
            r = const(_const_value(t[1]), n)
        else:
            r = OPS[kind].ev(ctx, *(go(c) for c in t[1:]))
        _val(r.v)
        ctx.values.append(r.v)
        return r

    with mp.workprec(prec):
        try:
            return go(tree), ctx
        except (ZeroDivisionError, ValueError, TypeError, OverflowError) as exc:
            raise Singular(str(exc)) from None


def make_function(tree, n_inputs: int) -> sg.SymbolicFunction:
    """The tree (or a tuple of trees: one output each) as an @sg.function of 1-3 scalar arguments
    (a closure: compiled by traced content)."""

    def body(args):
        if isinstance(tree, list):
            return tuple(to_sympy(t, args) for t in tree)
        return to_sympy(tree, args)

    if n_inputs == 1:

        def prop(x):
            return body((x,))
    elif n_inputs == 2:

        def prop(x, y):
            return body((x, y))
    else:

        def prop(x, y, z):
            return body((x, y, z))

    fn = sg.function(prop)
    try:
        fn.trace()
    except sg.ModelError as exc:
        # SymPy itself cannot build some trees: it folds an always-true condition (cosh(x) > 1/2) and leaves
        # an unreachable zoo branch, and then comparing that expression raises "Invalid NaN comparison" in
        # the tree's own code (symgrad reports it as a ModelError naming the line): not a symgrad case
        if "Invalid NaN comparison" in str(exc):
            reject()
        raise
    return fn


def elementary(expr: sympy.Expr) -> sympy.Expr:
    """symgrad's primitives written out in exp/log/Max/Piecewise (to a fixed point), for mpmath."""
    for _ in range(20):
        if not expr.find(lambda e: isinstance(e, _Primitive)):
            break
        expr = expr.replace(lambda e: isinstance(e, _Primitive), lambda e: e._elementary())
    return expr


# -- references per point ------------------------------------------------------------------------------------


@dataclass
class Reference:
    point: tuple[float, ...]
    value: float
    grad: tuple[float, ...]
    err_value: dict[str, float] = field(default_factory=dict)  # dtype -> rounding estimate
    err_grad: dict[str, tuple[float, ...]] = field(default_factory=dict)
    robust: dict[str, bool] = field(default_factory=dict)  # dtype -> usable for checks


def reference(tree, point: tuple[float, ...]) -> Reference | None:
    """The 40-digit value and gradient, rounding-error estimates and robustness per dtype; None if
    singular."""
    mpt = tuple(mp.mpf(p) for p in point)
    try:
        hi, ctx = evaluate(tree, mpt, HI_PREC)
    except Singular:
        return None
    if any(abs(v) > MAX_NODE for v in ctx.values) or any(abs(g) > MAX_GRAD for g in hi.d):
        return None
    ref = Reference(point, float(hi.v), tuple(float(g) for g in hi.d))
    sens_v, sens_g = _sensitivities(tree, mpt, hi)
    for dtype, bits in DTYPE_BITS.items():
        err_v, err_g, err_m, ok = 0.0, [0.0] * len(point), [0.0] * len(ctx.margins), True
        for prec in (bits, bits - 2):
            try:
                lo, lctx = evaluate(tree, mpt, prec)
            except Singular:
                ok = False
                break
            if len(lctx.margins) != len(ctx.margins):  # a branch went the other way at low precision
                ok = False
                break
            err_v = max(err_v, float(abs(lo.v - hi.v)))
            err_g = [max(e, float(abs(a - b))) for e, a, b in zip(err_g, lo.d, hi.d)]
            err_m = [max(e, float(abs(a - b))) for e, a, b in zip(err_m, lctx.margins, ctx.margins)]
        if ok:
            ok = all(abs(q) > MARGIN_FACTOR * e + 16 * EPS[dtype] for q, e in zip(ctx.margins, err_m))
        ref.robust[dtype] = ok
        # floors: half an ulp of error at every node, propagated to the result (a sampled rounding can be
        # lucky: libm's errors are not), and for gradients their terms' magnitude over all paths
        ref.err_value[dtype] = max(err_v, sens_v * EPS[dtype] / 2)
        ref.err_grad[dtype] = tuple(
            max(e, s * EPS[dtype] / 2, 2 * EPS[dtype] * float(m)) for e, s, m in zip(err_g, sens_g, hi.a)
        )
    return ref


PERTURB = mp.mpf(2) ** -80  # relative: far below float64's rounding, far above HI_PREC's


def _sensitivities(tree, point: tuple, hi: D) -> tuple[float, list[float]]:
    """How much a relative error of 1 in each operation's result (its value, and separately its gradient)
    moves the value and each gradient entry, summed over the operations: the evaluation's first-order
    condition, to which libm's few ulp per call contribute (a sampled rounding, at one precision, can be
    lucky and miss it)."""
    global _PERTURB
    sens_v, sens_g = mp.mpf(0), [mp.mpf(0)] * len(point)
    try:
        _PERTURB = [-1, "v", PERTURB, 0]  # counts the operations' results, perturbs none
        evaluate(tree, point, HI_PREC)
        for k in range(_PERTURB[3]):
            for part in ("v", "d"):
                _PERTURB = [k, part, PERTURB, 0]
                try:
                    p, _ = evaluate(tree, point, HI_PREC)
                except Singular:  # the perturbation left the domain: no first-order estimate
                    continue
                with mp.workprec(HI_PREC):
                    sens_v += abs(p.v - hi.v) / PERTURB
                    sens_g = [s + abs(a - b) / PERTURB for s, a, b in zip(sens_g, p.d, hi.d)]
    finally:
        _PERTURB = None
    return float(sens_v), [float(s) for s in sens_g]


def tolerance(want: float, err: float, dtype: str) -> float:
    return ERR_FACTOR * err + REL_FACTOR * EPS[dtype] * abs(want) + TINY[dtype]


FIXED_POINTS = [
    (0.71875, -1.3125, 0.40625),
    (-0.34375, 0.90625, 1.59375),
    (1.21875, 0.28125, -0.78125),
    (-1.65625, -0.53125, 0.15625),
]
coordinate = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, -2.0, 3.0]),
    st.floats(-4, 4, allow_nan=False, width=32),
    st.floats(-40, 40, allow_nan=False, width=32),
)


@st.composite
def cases(draw):
    """(number of inputs, tree, drawn points)."""
    n = draw(st.integers(1, 3))
    tree = draw(trees(n))
    points = draw(st.lists(st.tuples(*[coordinate] * n), min_size=1, max_size=4))
    return n, tree, points


# -- running and reporting -----------------------------------------------------------------------------------


def describe(tree, fn, spec_text: str, point, what: str, got, want, tol, extra: str = "") -> str:
    inputs = ", ".join(f"{name}={value!r}" for name, value in zip(NAMES, point))
    lines = [
        f"{what} at {inputs}: got {got!r}, want {want!r} "
        f"(|diff| {abs(float(got) - want):.3g} > tol {tol:.3g})",
        f"  expression: {to_source(tree)}",
        f"  traced:     {spec_text}",
    ]
    compiled = fn.compiled()
    for name, text in compiled.formulas.items():
        lines.append(f"  formula    {name} = {text}")
    for name, text in compiled.derivatives.items():
        lines.append(f"  derivative vjp {name}: {text or '(no closed form: see the program)'}")
    if extra:
        lines.append(extra)
    return "\n".join(lines)


def ir_diagnosis(fn, point, ref: Reference) -> str:
    """Evaluate the kernel IR (value_and_vjp) at 40 digits: tells a wrong derivation from a wrong target."""
    from symgrad.compiler import compile_spec

    try:
        kernel = compile_spec(fn.trace())
        program = kernel.program("value_and_vjp")
        env: dict = {}
        with mp.workdps(40):
            for slot in program.inputs:
                for s in slot.symbols:
                    env[s] = (
                        mp.mpf(1)
                        if slot.role == "cotangent"
                        else mp.mpf(point[[a.name for a in kernel.args].index(slot.name)])
                    )
            for a in program.body:
                f = sympy.lambdify(list(env), elementary(a.expr), modules="mpmath")
                env[a.target] = f(*env.values())
        outs = [float(env[s]) for slot in program.outputs for s in slot.symbols]
        want = [ref.value, *ref.grad]
        bad = [
            f"{slot.name}: IR {o!r} vs {w!r}"
            for slot, o, w in zip(program.outputs, outs, want)
            if not math.isclose(o, w, rel_tol=1e-9, abs_tol=1e-12)
        ]
        verdict = (
            "  diagnosis: the DERIVATION is wrong (kernel IR at 40 digits: " + "; ".join(bad) + ")"
            if bad
            else "  diagnosis: the kernel IR is right at 40 digits: the TARGET (emitter/backend) is wrong"
        )
        return (
            verdict + "\n  program:\n" + "\n".join("    " + line for line in str(program).splitlines()[:60])
        )
    except Exception as exc:  # a diagnosis must never hide the failure itself
        return f"  diagnosis failed: {type(exc).__name__}: {exc}"


def run_all(fn, refs: list[Reference], backend: str, dtype: str) -> dict[str, tuple]:
    """Every program of the compiled function on ``backend``/``dtype`` at the reference points."""
    compiled = fn.compiled()
    n = len(refs[0].point)
    cols = [np.array([r.point[i] for r in refs], dtype=dtype) for i in range(n)]
    ones = np.ones(len(refs), dtype=dtype)
    tangent = [np.full(len(refs), t, dtype=dtype) for t in (1.0, 0.5, -0.25)[:n]]
    previous = sg.get_backend()
    sg.set_backend(backend)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an untaken branch never warns, on any target
            out, grads = compiled.value_and_vjp(*cols, ones)
            results = {
                "value_and_vjp": (out, grads),
                "forward": (compiled(*cols), None),
                "vjp": (None, compiled.vjp(*cols, ones)),
                "jvp": compiled.jvp(tuple(cols), tuple(tangent)),
                "value_and_jacobian": compiled.value_and_jacobian(*cols),
            }
    finally:
        sg.set_backend(previous)
    for name, pair in results.items():
        for arr in pair:
            for a in arr if isinstance(arr, tuple) else (arr,):
                if a is not None:
                    assert a.dtype == np.dtype(dtype), (
                        f"{name} on {backend}: result dtype {a.dtype}, not {dtype}"
                    )
    return results


def check_against_reference(tree, fn, spec_text, refs, backend, dtype) -> list[str]:
    usable = [k for k, r in enumerate(refs) if r.robust[dtype]]
    if not usable:
        return []
    results = run_all(fn, refs, backend, dtype)
    names = fn.compiled().arg_names
    n = len(names)
    failures = []

    def check(what, got_array, k, want, err):
        got = got_array[k]
        tol = tolerance(want, err, dtype)
        if not (abs(float(got) - want) <= tol):
            failures.append((what, k, got, want, tol))

    tangent = (1.0, 0.5, -0.25)[:n]
    for k in usable:
        r = refs[k]
        ev, eg = r.err_value[dtype], r.err_grad[dtype]
        where = f"[{backend} {dtype}]"
        check(f"{where} value_and_vjp value", results["value_and_vjp"][0], k, r.value, ev)
        check(f"{where} forward value", results["forward"][0], k, r.value, ev)
        check(f"{where} jvp value", results["jvp"][0], k, r.value, ev)
        check(f"{where} value_and_jacobian value", results["value_and_jacobian"][0], k, r.value, ev)
        for i, name in enumerate(names):
            check(f"{where} value_and_vjp grad_{name}", results["value_and_vjp"][1][i], k, r.grad[i], eg[i])
            check(f"{where} vjp grad_{name}", results["vjp"][1][i], k, r.grad[i], eg[i])
            check(
                f"{where} jacobian[0, {i}] (d/d{name})",
                results["value_and_jacobian"][1][..., 0, i],
                k,
                r.grad[i],
                eg[i],
            )
        want = sum(t * g for t, g in zip(tangent, r.grad))
        err = (
            sum(abs(t) * e for t, e in zip(tangent, eg))
            + sum(abs(t * g) for t, g in zip(tangent, r.grad)) * EPS[dtype]
        )
        check(f"{where} jvp tangent (t = {tangent})", results["jvp"][1], k, want, err)
    messages = []
    for what, k, got, want, tol in failures[:3]:
        extra = ir_diagnosis(fn, refs[k].point, refs[k]) if not messages else ""
        if not messages:
            extra += "\n  generated numpy:\n" + "\n".join(
                "    " + line for line in fn.compiled().source("numpy").split("\n\n\n")[0].splitlines()[:40]
            )
        messages.append(describe(tree, fn, spec_text, refs[k].point, what, got, want, tol, extra))
    if len(failures) > 3:
        messages.append(f"... and {len(failures) - 3} more mismatches")
    return messages


# -- the properties ------------------------------------------------------------------------------------------

BACKENDS = sorted(sg.available_backends(), key=lambda b: b != "numpy")  # numpy first: no C build to shrink
DTYPES = ("float64", "float32")


def _references(tree, points) -> list[Reference]:
    seen, refs = set(), []
    for p in list(points) + FIXED_POINTS:
        p = tuple(float(v) for v in p[: len(points[0])])
        if p in seen:
            continue
        seen.add(p)
        r = reference(tree, p)
        if r is not None and (r.robust["float64"] or r.robust["float32"]):
            refs.append(r)
    return refs


def _sympy_value_check(tree, fn, refs: list[Reference]) -> str:
    """The test's own evaluator must agree with SymPy's evaluation of the traced expression (40 digits)."""
    spec = fn.trace()
    # SymPy writes 1/0 in an untaken branch as zoo, which the mpmath printer cannot print; the lowering
    # turns it into nan too
    expr = elementary(spec.outputs[0].exprs[0]).xreplace({sympy.zoo: sympy.nan})
    symbols = [a.symbols[0] for a in spec.args]
    f = sympy.lambdify(symbols, expr, modules="mpmath")
    with mp.workdps(40):
        for r in refs:
            got = f(*[mp.mpf(p) for p in r.point])
            got = mp.mpf(got) if not isinstance(got, mp.mpf) else got
            if not mp.almosteq(got, mp.mpf(r.value), rel_eps=1e-12, abs_eps=1e-12):
                return (
                    f"SymPy evaluates {to_source(tree)} to {got} at {r.point}, the tree evaluator to "
                    f"{r.value} (traced: {expr})"
                )
    return ""


@budget(10)
@given(cases())
def test_values_and_gradients_match_high_precision(case):
    """Every program (forward, vjp, value_and_vjp, jvp, value_and_jacobian) on every backend and dtype agrees
    with 40-digit SymPy values and naive-tree derivatives, within the rounding estimate of the point."""
    n, tree, points = case
    note(f"expression: {to_source(tree)}")
    refs = _references(tree, points)
    assume(refs)
    fn = make_function(tree, n)
    spec_text = str(fn.trace()).replace("\n", " ")
    note(f"traced: {spec_text}")
    mismatch = _sympy_value_check(tree, fn, refs)
    assert not mismatch, mismatch
    event(f"usable points: {len(refs)}")
    messages = []
    for backend in BACKENDS:
        for dtype in DTYPES:
            messages += check_against_reference(tree, fn, spec_text, refs, backend, dtype)
            if messages:
                break
        if messages:
            break
    assert not messages, "\n\n".join(messages)


KINK_VALUES = (0.0, 1.0, -1.0, 6.0)


@budget(8)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(st.just(n), trees(n))))
def test_kinks_ties_and_integers_give_finite_results(case):
    """Exactly at 0, at ties (x == y), at clamp/relu6 boundaries and at integers: wherever the naive tree is
    finite and (one-sidedly) differentiable, every target returns finite values and gradients, and the
    targets agree on the value."""
    n, tree = case
    note(f"expression: {to_source(tree)}")
    points = sorted(
        {(a,) * n for a in KINK_VALUES} | {(a, b, 0.0)[:n] for a in KINK_VALUES for b in (0.0, 1.0)}
    )
    regular = []
    for p in points:
        try:
            hi, ctx = evaluate(tree, tuple(mp.mpf(v) for v in p), HI_PREC)
        except Singular:
            continue
        if all(abs(v) <= MAX_NODE for v in ctx.values) and all(abs(g) <= MAX_GRAD for g in hi.d):
            regular.append(p)
    assume(regular)
    fn = make_function(tree, n)
    compiled = fn.compiled()
    for dtype in DTYPES:
        cols = [np.array([p[i] for p in regular], dtype=dtype) for i in range(n)]
        values = {}
        for backend in BACKENDS:
            previous = sg.get_backend()
            sg.set_backend(backend)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    out, grads = compiled.value_and_vjp(*cols, np.ones(len(regular), dtype))
            finally:
                sg.set_backend(previous)
            bad = [
                k
                for k in range(len(regular))
                if not np.isfinite(out[k]) or not all(np.isfinite(g[k]) for g in grads)
            ]
            assert not bad, (
                f"[{backend} {dtype}] non-finite result at a regular kink point "
                f"{dict(zip(NAMES, regular[bad[0]]))}: value {out[bad[0]]!r}, "
                f"grads {[g[bad[0]] for g in grads]}\n  expression: {to_source(tree)}\n"
                f"  derivatives: {compiled.derivatives}"
            )
            values[backend] = out
        if len(values) == 2:
            a, b = values.values()
            scale = np.maximum(1.0, np.abs(a))
            # exact ties decide identical branches on both targets as long as the arithmetic before them
            # agrees
            close = np.abs(a - b) <= 1e-3 * scale if dtype == "float32" else np.abs(a - b) <= 1e-9 * scale
            assert close.sum() >= len(regular) // 2, (
                f"[{dtype}] numpy and C disagree at most kink points: "
                f"{a} vs {b}\n  expression: {to_source(tree)}"
            )


def _mp_logaddexp(a, b):
    if a == b:
        return a + mp.log(2)
    return max(a, b) + mp.log1p(mp.exp(-abs(a - b)))


#: symgrad's primitives as mpmath functions, for lambdify: no SymPy rewriting (which can turn an untaken
#: branch such as sqrt(logsigmoid(x)) into complex values) between the expression and its number
MP_FUNCTIONS = {
    "sigmoid": _sigmoid,
    "softplus": lambda x: _mp_logaddexp(mp.mpf(0), x),
    "logsigmoid": lambda x: -_mp_logaddexp(mp.mpf(0), -x),
    "logaddexp": _mp_logaddexp,
    "xlogy": lambda x, y: mp.mpf(0) if x == 0 else x * mp.log(y),
    "maximum": max,
    "minimum": min,
    "amax": max,
    "amin": min,
    "log1p": mp.log1p,
    "expm1": mp.expm1,
}


def mp_value(symbols, expr, args):
    value = sympy.lambdify(symbols, expr, modules=[MP_FUNCTIONS, "mpmath"])(*args)
    return mp.mpf(value) if isinstance(value, (int, float)) else value


@budget(60)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(st.just(n), trees(n), st.tuples(*[coordinate] * n))))
def test_rewrite_pass_preserves_values(case):
    """``stabilize`` (log(1+exp) -> softplus, Max -> maximum, ...) never changes a value (40 digits)."""
    from symgrad.compiler.rewrite import stabilize

    n, tree, point = case
    note(f"expression: {to_source(tree)}")
    symbols = [sympy.Symbol(name, real=True) for name in NAMES[:n]]
    expr = to_sympy(tree, symbols)
    assume(isinstance(expr, sympy.Expr) and not expr.has(sympy.zoo, sympy.nan))
    stable = stabilize(expr)
    with mp.workdps(40):
        args = [mp.mpf(p) for p in point]
        try:
            before = mp_value(symbols, expr, args)
        except (ZeroDivisionError, ValueError, TypeError, OverflowError):
            before = None
        assume(isinstance(before, mp.mpf) and mp.isfinite(before) and abs(before) < 1e12)
        after = mp_value(symbols, stable, args)
        ok = isinstance(after, mp.mpf) and mp.almosteq(after, before, rel_eps=1e-25, abs_eps=1e-25)
        diff = mp.nstr(after - before, 5) if isinstance(after, mp.mpf) else "-"
    assert ok, (
        f"stabilize changed the value at {dict(zip(NAMES, point))}: {before} -> {after} ({diff})\n"
        f"  expression: {to_source(tree)}\n  before: {expr}\n  after:  {stable}"
    )


@budget(6)
@given(
    st.integers(1, 3).flatmap(
        lambda n: st.tuples(
            st.just(n),
            trees(n, budget=16),
            trees(n, budget=16),
            st.lists(st.tuples(*[coordinate] * n), max_size=2),
        )
    )
)
def test_multi_output_jacobian_vjp_and_jvp_agree(case):
    """A function returning two trees: every Jacobian row, the vjp of a mixed cotangent and the jvp of a
    mixed tangent match the per-output references, on every backend and dtype (the Jacobian program runs
    one reverse pass per output over the same forward program)."""
    n, tree0, tree1, points = case
    note(f"expressions: ({to_source(tree0)}, {to_source(tree1)})")
    pairs = []
    for p in points + [q[:n] for q in FIXED_POINTS]:
        p = tuple(float(v) for v in p)
        r0, r1 = reference(tree0, p), reference(tree1, p)
        if r0 is not None and r1 is not None and r0.robust["float64"] and r1.robust["float64"]:
            pairs.append((r0, r1))
    assume(pairs)
    fn = make_function([tree0, tree1], n)
    compiled = fn.compiled()
    names = compiled.arg_names
    cot, tan = (1.0, -0.5), (1.0, 0.5, -0.25)[:n]
    for backend in BACKENDS:
        for dtype in DTYPES:
            use = [k for k, (r0, r1) in enumerate(pairs) if r0.robust[dtype] and r1.robust[dtype]]
            if not use:
                continue
            cols = [np.array([pairs[k][0].point[i] for k in use], dtype=dtype) for i in range(n)]
            ones = np.ones(len(use), dtype)
            previous = sg.get_backend()
            sg.set_backend(backend)
            try:
                outs, jac = compiled.value_and_jacobian(*cols)
                grads = compiled.vjp(*cols, cot[0] * ones, cot[1] * ones)
                _, tangents = compiled.jvp(tuple(cols), tuple(t * ones for t in tan))
            finally:
                sg.set_backend(previous)
            failures = []
            for j, k in enumerate(use):
                refs = pairs[k]

                def check(what, got, want, err):
                    tol = tolerance(want, err, dtype)
                    if not abs(float(got) - want) <= tol:
                        failures.append(
                            f"[{backend} {dtype}] {what} at {dict(zip(NAMES, refs[0].point))}: "
                            f"got {float(got)!r}, want {want!r} (tol {tol:.3g})"
                        )

                for o, r in enumerate(refs):
                    check(f"output {o}", outs[o][j], r.value, r.err_value[dtype])
                    check(
                        f"jvp tangent of output {o}",
                        tangents[o][j],
                        sum(t * g for t, g in zip(tan, r.grad)),
                        sum(abs(t) * e for t, e in zip(tan, r.err_grad[dtype])),
                    )
                    for i, name in enumerate(names):
                        check(
                            f"jacobian[{o}, {i}] (d out{o}/d{name})",
                            jac[j, o, i],
                            r.grad[i],
                            r.err_grad[dtype][i],
                        )
                for i, name in enumerate(names):
                    check(
                        f"vjp grad_{name} for cotangents {cot}",
                        grads[i][j],
                        sum(c * r.grad[i] for c, r in zip(cot, refs)),
                        sum(abs(c) * r.err_grad[dtype][i] for c, r in zip(cot, refs)),
                    )
            assert not failures, "\n".join(failures[:6]) + (
                f"\n  expressions: ({to_source(tree0)}, {to_source(tree1)})\n  traced: {fn.trace()}\n"
                f"  derivatives: {compiled.derivatives}"
            )


@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_estimate_admits_libm_error_but_not_a_wrong_formula(dtype):
    """Pins the tolerance where ``make fuzz`` failed before every operation's error was propagated
    (``_sensitivities``): glibc's vector tanh is ~2 ulp, and acos (|acos'| = 9.46 at tanh(2.9375)) or the
    cancelling 1 - tanh**2 amplify it. Measured (mpmath, 2 ulp of tanh): acos(tanh(2.9375)) and its gradient
    move by 9.5 eps (2.1e-15 in float64), tanh' near 7 by 2 eps (4.4e-16). The tolerance must admit twice
    that (4 ulp: 20 and 4 eps; it is 80 eps, and 16-30 eps for tanh') and stay below 450 eps (1e-13 in
    float64): a formula off by 1e-12 relative, or float32's estimate used for float64, must still fail.
    Sampled rounding alone gave 6.8 eps (1.5e-15) at acos(tanh(2.9375)) and 0.3 eps (6.7e-17) at
    tanh'(7.46875) in float64 (6.98, the point noted with the failure, was sampled adequately: 30 eps)."""
    acos_tanh, tanh = ("acos_tanh", ("var", 0)), ("tanh", ("var", 0))
    for tree, x, part, lo in (
        (acos_tanh, 2.9375, "value", 20),
        (acos_tanh, 2.9375, "grad", 20),
        (tanh, 6.98, "grad", 4),
        (tanh, 7.46875, "grad", 4),
    ):
        r = reference(tree, (x,))
        assert r is not None and r.robust[dtype], f"{to_source(tree)} at x={x} is not checked in {dtype}"
        want, err = (r.value, r.err_value[dtype]) if part == "value" else (r.grad[0], r.err_grad[dtype][0])
        tol = tolerance(want, err, dtype)
        assert lo * EPS[dtype] <= tol <= 450 * EPS[dtype], (
            f"{to_source(tree)} {part} at x={x} [{dtype}]: tolerance {tol:.3g} ({tol / EPS[dtype]:.1f} eps, "
            f"estimate {err:.3g}) outside [{lo}, 450] eps"
        )
