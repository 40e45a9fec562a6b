"""Property test at the ends of the float range (issue 20, part 3): random expressions over the functions
symgrad supports, at extreme points, on every backend and dtype, against 50-digit mpmath; and ``symgrad
check``'s sampling of extreme magnitudes.

Each example is a random tree (1-2 inputs, depth up to 4) over arithmetic, the exp/log family, symgrad's
stable primitives and the textbook spellings it rewrites, trigonometric and hyperbolic functions, kinks
(Abs, Max/Min, relu, ``where``) and special functions; it becomes an ``@sg.function`` compiled once and run
(``value_and_vjp``) on the numpy and C backends, in float64 and float32. Points mix, per coordinate, 0,
±{1, 1.5, 3}·1e±300 / 1e±200 / 1e±30 / 1e±8 / 1 (float64; to 1e±30 in float32), kinks and near-poles
(-1 ± 1e-9, 1 - 1e-9, 2).

References, per point and dtype (the point as the dtype holds it): the value and the gradient (SymPy's
derivative of the expression as written) evaluated by a small mpmath interpreter at 50 digits, which has
no overflow or underflow. Only results that mpmath says are finite and representable in the dtype are
checked; there the target's result must be finite and within ``16 * err + 32 * eps * |want| + 4 * tiny``,
``err`` the rounding-error estimate: the same evaluation at the dtype's precision and two bits below it
(intermediates below the smallest normal flushed to 0), and the change under a relative input perturbation
of ±4 eps (the condition number); a result whose estimate is not finite is not checked. Points at a kink
(the gradient moves under a perturbation of 1e-30 relative) are checked for finiteness only.

Scope: a point is used in a dtype only where every node of symgrad's own forward formula (the rewrite
pass's output) is representable (``formula_overflows``: ``x**6`` at 1e100 overflows as written).

Budget: a few deterministic examples in ``make test``; ``SYMGRAD_FUZZ_EXAMPLES`` under ``make fuzz``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import mpmath as mp
import numpy as np
import sympy
from cli_runner import run_symgrad
from fuzzing import budget
from hypothesis import assume, given, note, reject
from hypothesis import strategies as st

import symgrad as sg
from symgrad.compiler.primitives import _Primitive
from symgrad.compiler.rewrite import stabilize

HI_PREC = 170  # bits: 50 decimal digits
DTYPE_BITS = {"float64": 53, "float32": 24}
FINFO = {d: np.finfo(d) for d in DTYPE_BITS}
EXPONENTS = {"float64": (-300, -200, -30, -8, 0, 8, 30, 200, 300), "float32": (-30, -8, 0, 8, 30)}
SPECIAL = (0.0, -1.0 + 1e-9, -1.0 - 1e-9, 1.0 - 1e-9, 2.0)
ERR_FACTOR, REL_FACTOR = 16, 32
#: |argument| beyond which exp-like growth makes mpmath's numbers astronomically long (exp(exp(1e300))):
#: the value is inf (or 0), beyond every float anyway
GROWTH_LIMIT = mp.mpf(10) ** 310
R = sympy.Rational


# -- the expressions -----------------------------------------------------------------------------------------

OPS: dict[str, tuple[int, Callable]] = {
    "neg": (1, lambda a: -a),
    "sq": (1, lambda a: a**2),
    "cube": (1, lambda a: a**3),
    "recip": (1, lambda a: 1 / a),
    "sqrt_abs": (1, lambda a: sg.sqrt(sg.Abs(a))),
    "exp": (1, sg.exp),
    "exp_neg_sq": (1, lambda a: sg.exp(-(a**2))),
    "log_abs": (1, lambda a: sg.log(sg.Abs(a))),
    "log1p_abs": (1, lambda a: sg.log1p(sg.Abs(a))),
    "expm1": (1, sg.expm1),
    "sin": (1, sg.sin),
    "cos": (1, sg.cos),
    "tanh": (1, sg.tanh),
    "atan": (1, sg.atan),
    "asinh": (1, sg.asinh),
    "erf": (1, sg.erf),
    "erfc": (1, sg.erfc),
    "sigmoid": (1, sg.sigmoid),
    "sigmoid_naive": (1, lambda a: 1 / (1 + sg.exp(-a))),
    "softplus": (1, sg.softplus),
    "softplus_naive": (1, lambda a: sg.log(1 + sg.exp(a))),
    "logsigmoid": (1, sg.logsigmoid),
    "abs": (1, sg.Abs),
    "relu": (1, sg.relu),
    "sinc": (1, lambda a: sg.where(sg.Ne(a, 0), sg.sin(a) / a, 1)),
    "loggamma_abs": (1, lambda a: sg.loggamma(sg.Abs(a))),
    "cbrt": (1, sg.cbrt),
    "add": (2, lambda a, b: a + b),
    "sub": (2, lambda a, b: a - b),
    "mul": (2, lambda a, b: a * b),
    "div": (2, lambda a, b: a / b),
    "hypot": (2, sg.hypot),
    "atan2": (2, sg.atan2),
    "logaddexp": (2, sg.logaddexp),
    "max": (2, sg.Max),
    "min": (2, sg.Min),
    "softmax2": (2, lambda a, b: sg.exp(a) / (sg.exp(a) + sg.exp(b))),
    "where_gt": (2, lambda a, b: sg.where(a > b, a, b**2)),
}
DRAWN = sorted(OPS)


CONSTANTS = {"2": 2, "-1": -1, "1/2": R(1, 2), "3": 3}
NAMES = ("x", "y")


@st.composite
def trees(draw, n_inputs: int, depth: int = 4):
    """A tree as nested tuples: ('var', i), ('const', key) or (op, *children)."""

    def node(d: int):
        if d == 0 or draw(st.integers(0, 9)) < 2:
            if draw(st.integers(0, 6)) == 0:
                return ("const", draw(st.sampled_from(sorted(CONSTANTS))))
            return ("var", draw(st.integers(0, n_inputs - 1)))
        name = draw(st.sampled_from(DRAWN))
        return (name, *(node(d - 1) for _ in range(OPS[name][0])))

    return node(depth)


def to_sympy(tree, args):
    if tree[0] == "var":
        return args[tree[1]]
    if tree[0] == "const":
        return sympy.sympify(CONSTANTS[tree[1]])
    return OPS[tree[0]][1](*(to_sympy(c, args) for c in tree[1:]))


def to_source(tree) -> str:
    if tree[0] == "var":
        return NAMES[tree[1]]
    if tree[0] == "const":
        return str(CONSTANTS[tree[1]])
    return f"{tree[0]}({', '.join(to_source(c) for c in tree[1:])})"


def make_function(tree, n: int) -> sg.SymbolicFunction:
    if n == 1:

        def extreme(x):
            return to_sympy(tree, (x,))
    else:

        def extreme(x, y):
            return to_sympy(tree, (x, y))

    fn = sg.function(extreme)
    try:
        fn.trace()
    except sg.ModelError as exc:  # SymPy itself cannot compare an expression it folded to NaN
        if "NaN comparison" in str(exc):
            reject()
        raise
    return fn


# -- an mpmath interpreter: no overflow, guarded growth ------------------------------------------------------


def _exp(x):
    if x > GROWTH_LIMIT:
        return mp.inf
    return mp.mpf(0) if x < -GROWTH_LIMIT else mp.exp(x)


def _guarded(f: Callable) -> Callable:
    """``f`` where its argument is moderate; NaN (no reference) where mpmath would build a huge number."""
    return lambda x: f(x) if abs(x) <= GROWTH_LIMIT else mp.nan


def _heaviside(x, h0=R(1, 2)):
    return mp.mpf(1) if x > 0 else (mp.mpf(0) if x < 0 else mp.mpf(h0))


def _softplus(x):
    return x + mp.log1p(_exp(-x)) if x > 0 else mp.log1p(_exp(x))


FUNCTIONS: dict[str, Callable] = {
    "exp": _exp,
    "expm1": lambda x: mp.expm1(x) if x <= GROWTH_LIMIT else mp.inf,
    "sinh": _guarded(mp.sinh),
    "cosh": _guarded(mp.cosh),
    "gamma": _guarded(mp.gamma),
    "Abs": abs,
    "sign": mp.sign,
    "Heaviside": _heaviside,
    "DiracDelta": lambda x: mp.inf if x == 0 else mp.mpf(0),
    "Max": max,
    "Min": min,
    "maximum": max,
    "minimum": min,
    "sigmoid": lambda x: 1 / (1 + _exp(-x)),
    "softplus": _softplus,
    "logsigmoid": lambda x: -_softplus(-x),
    "logaddexp": lambda a, b: max(a, b) + _softplus(min(a, b) - max(a, b)),
    "xlogy": lambda x, y: mp.mpf(0) if x == 0 else x * mp.log(y),
    "hypot": mp.hypot,
    "atan2": mp.atan2,
    "loggamma": mp.loggamma,
    "polygamma": mp.polygamma,
    "sinc": lambda x: mp.sinc(x) if abs(x) < mp.mpf(10) ** 400 else mp.mpf(0),
    "cbrt": mp.cbrt,
}
TRIG = ("sin", "cos", "tan")


#: beyond it (an exponential of 1e150), mpmath's tanh, erf, loggamma, ... run out of memory: no reference
HUGE = mp.mpf(10) ** 10**4
#: what stays cheap at any magnitude
ANY_MAGNITUDE = {"Abs", "sign", "Heaviside", "Max", "Min", "maximum", "minimum", "log", "sqrt", "cbrt", "exp"}
ANY_MAGNITUDE |= {"expm1", "sigmoid", "softplus", "logsigmoid", "logaddexp", "xlogy"}


def _function(expr, args: list):
    name = type(expr).__name__
    if name not in ANY_MAGNITUDE and any(abs(a) > HUGE for a in args if isinstance(a, mp.mpf)):
        return mp.nan
    if name in FUNCTIONS:
        return FUNCTIONS[name](*args)
    if name in TRIG and any(abs(a) > mp.mpf(10) ** 400 for a in args):
        return mp.nan  # argument reduction of a number with hundreds of digits of exponent: no reference
    if name == "ImaginaryUnit":
        return mp.nan
    if hasattr(mp, name.lower()):
        return getattr(mp, name.lower())(*args)
    if isinstance(expr, _Primitive):
        return None  # evaluated through its elementary form
    raise NotImplementedError(f"no mpmath function for {name}")


def _truth(cond, env, memo) -> bool:
    if cond is sympy.true:
        return True
    if cond is sympy.false:
        return False
    if isinstance(cond, sympy.And):
        return all(_truth(c, env, memo) for c in cond.args)
    if isinstance(cond, sympy.Or):
        return any(_truth(c, env, memo) for c in cond.args)
    if isinstance(cond, sympy.Not):
        return not _truth(cond.args[0], env, memo)
    a, b = (mp_eval(s, env, memo) for s in cond.args)
    ops = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}
    return ops[cond.rel_op]


#: while set: the dtype's smallest normal, below which every intermediate flushes to 0 (the rounding
#: estimate sees underflow: loggamma(x**2) at 1e-300 is a pole in float64, 0 * inf a NaN)
FLUSH: list = [0]


def mp_eval(expr, env: dict, memo: dict):
    """``expr`` at ``env`` (symbol -> mpf) at the current precision; inf/nan where mpmath says so."""
    if expr in memo:
        return memo[expr]
    value = _mp_eval(expr, env, memo)
    if not isinstance(value, mp.mpf):
        value = mp.nan  # complex (an untaken SymPy branch)
    elif FLUSH[0] and abs(value) < FLUSH[0]:
        value = mp.mpf(0)
    memo[expr] = value
    return value


def _mp_eval(expr, env: dict, memo: dict):
    if expr.is_Symbol:
        value = env[expr]
    elif expr.is_Number or expr.is_NumberSymbol:
        value = mp.mpf(expr.p) / expr.q if expr.is_Rational else mp.mpf(sympy.Float(expr, 60))
    elif isinstance(expr, sympy.Add):
        value = mp.fsum(mp_eval(a, env, memo) for a in expr.args)
    elif isinstance(expr, sympy.Mul):
        value = mp.mpf(1)
        for a in expr.args:
            value *= mp_eval(a, env, memo)
    elif isinstance(expr, sympy.Pow):
        value = _power(mp_eval(expr.base, env, memo), mp_eval(expr.exp, env, memo))
    elif isinstance(expr, sympy.logic.boolalg.Boolean):  # a condition inside a function (ITE, Eq, ...)
        value = mp.mpf(_truth(expr, env, memo))
    elif hasattr(expr, "as_piecewise"):  # symgrad's Piecewise held inside a condition
        value = mp_eval(expr.as_piecewise(), env, memo)
    elif isinstance(expr, sympy.Piecewise):
        value = mp.nan
        for e, c in expr.args:
            if _truth(c, env, memo):
                value = mp_eval(e, env, memo)
                break
    else:
        value = _function(expr, [mp_eval(a, env, memo) for a in expr.args])
        if value is None:
            value = mp_eval(expr._elementary(), env, memo)
    return value


def _power(b, e):
    if mp.isnan(b) or mp.isnan(e):
        return mp.nan
    if b == 0:
        return mp.inf if e < 0 else (mp.mpf(1) if e == 0 else mp.mpf(0))
    if b < 0 and e != mp.floor(e):
        return mp.nan
    if mp.isinf(b) or mp.isinf(e) or abs(e * mp.log(abs(b))) > GROWTH_LIMIT:
        return mp.nan
    return b**e


# -- references ----------------------------------------------------------------------------------------------


def _evaluate(exprs, symbols, point, prec: int, flush=0, memo: dict | None = None) -> list:
    """Each expression at ``point`` with ``prec`` bits (NaN where mpmath fails: a pole, a complex value)."""
    memo = {} if memo is None else memo
    out = []
    with mp.workprec(prec):
        env = {s: mp.mpf(p) for s, p in zip(symbols, point)}
        FLUSH[0] = flush
        try:
            for e in exprs:
                try:
                    out.append(mp_eval(e, env, memo))
                except (ZeroDivisionError, ValueError, TypeError, OverflowError):
                    out.append(mp.nan)
        finally:
            FLUSH[0] = 0
    return out


def _representable(v, dtype: str) -> bool:
    return isinstance(v, mp.mpf) and mp.isfinite(v) and abs(v) <= FINFO[dtype].max


def _gap(v, h) -> float:
    return float(abs(v - h)) if mp.isfinite(v) and mp.isfinite(h) else np.inf


def formula_overflows(stable, symbols, point, dtype: str) -> bool:
    """Whether a node of symgrad's own forward formula (the rewrite pass's output) is not representable in
    the dtype at ``point``: the formula as written overflows there (log(1 + x**2) at 1e200), which symgrad
    does not rewrite; its derivative is then out of scope."""
    memo: dict = {}
    _evaluate([stable], symbols, point, HI_PREC, memo=memo)
    return not all(_representable(v, dtype) for v in memo.values())


def reference(exprs, symbols, point, dtype: str):
    """(want, err, smooth) for value and gradient at ``point`` in ``dtype``: want None where not checked
    (not representable, or not computable at the dtype's precision and range: err inf)."""
    hi = _evaluate(exprs, symbols, point, HI_PREC)
    bits, eps = DTYPE_BITS[dtype], float(FINFO[dtype].eps)
    err = [0.0] * len(exprs)
    for prec in (bits, bits - 2):
        low = _evaluate(exprs, symbols, point, prec, flush=mp.mpf(float(FINFO[dtype].tiny)))
        err = [max(e, _gap(v, h)) for e, v, h in zip(err, low, hi)]
    for rel in (4 * eps, -4 * eps):  # the condition number: a few eps of relative input error
        moved = _evaluate(exprs, symbols, [mp.mpf(p) * (1 + rel) for p in point], HI_PREC)
        err = [max(e, _gap(v, h)) for e, v, h in zip(err, moved, hi)]
    want = [float(v) if _representable(v, dtype) and e < np.inf else None for v, e in zip(hi, err)]
    # a kink or a branch switch: the gradient moves under a perturbation far below any rounding
    smooth = True
    for rel in (mp.mpf(10) ** -30, -(mp.mpf(10) ** -30)):
        moved = _evaluate(exprs, symbols, [mp.mpf(p) * (1 + rel) + rel for p in point], HI_PREC)
        for v, h in zip(moved[1:], hi[1:]):
            if not (mp.isfinite(v) and mp.isfinite(h)) or abs(v - h) > mp.mpf(10) ** -20 * (1 + abs(h)):
                smooth = False
    return want, err, smooth


def tolerance(want: float, err: float, dtype: str) -> float:
    eps, tiny = float(FINFO[dtype].eps), float(FINFO[dtype].tiny)
    return ERR_FACTOR * err + REL_FACTOR * eps * abs(want) + 4 * tiny


# -- points --------------------------------------------------------------------------------------------------


def coordinates(dtype: str):
    magnitude = st.builds(
        lambda s, e, m: s * m * 10.0**e,
        st.sampled_from((1.0, -1.0)),
        st.sampled_from(EXPONENTS[dtype]),
        st.sampled_from((1.0, 1.5, 3.0)),
    )
    return st.one_of(magnitude, st.sampled_from(SPECIAL))


@st.composite
def cases(draw):
    n = draw(st.integers(1, 2))
    tree = draw(trees(n))
    points = {
        dtype: draw(st.lists(st.tuples(*[coordinates(dtype)] * n), min_size=2, max_size=4))
        for dtype in DTYPE_BITS
    }
    return n, tree, points


BACKENDS = sorted(sg.available_backends(), key=lambda b: b != "numpy")


def _run(fn, backend: str, dtype: str, points: list) -> tuple[np.ndarray, list[np.ndarray]]:
    cols = [np.array([p[i] for p in points], dtype=dtype) for i in range(len(points[0]))]
    previous = sg.get_backend()
    sg.set_backend(backend)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, grads = fn.compiled().value_and_vjp(*cols, np.ones(len(points), dtype))
    finally:
        sg.set_backend(previous)
    return out, list(grads)


def compare(point, got: list, ref, backend: str, dtype: str) -> list[str]:
    """The failures of one backend's value and gradient at ``point`` against ``ref`` (from ``reference``)."""
    want, err, smooth = ref
    failures = []
    for k, (g, w, e) in enumerate(zip(got, want, err)):
        if w is None:
            continue
        what = "value" if k == 0 else f"d/d{NAMES[k - 1]}"
        if not np.isfinite(g):
            failures.append(f"[{backend} {dtype}] {what} at {point}: got {g!r}, mpmath {w!r}")
        elif smooth and abs(float(g) - w) > tolerance(w, e, dtype):
            failures.append(
                f"[{backend} {dtype}] {what} at {point}: got {float(g)!r}, mpmath {w!r} "
                f"(tol {tolerance(w, e, dtype):.3g}, rounding estimate {e:.3g})"
            )
    return failures


def run_case(n: int, tree, points: dict) -> tuple[list[str], int]:
    """Compile the tree, run it at the points on every backend and dtype: (failures, points checked)."""
    fn = make_function(tree, n)
    spec = fn.trace()
    expr = spec.outputs[0].exprs[0]
    symbols = [a.symbols[0] for a in spec.args]
    if expr.has(sympy.zoo, sympy.nan, sympy.oo):  # SymPy folded a branch to a non-number: not a case
        return [], 0
    stable = stabilize(expr)
    exprs = [expr, *(sympy.diff(expr, s) for s in symbols)]
    failures, checked = [], 0
    for dtype, drawn in points.items():
        drawn = sorted({tuple(float(np.asarray(v, dtype=dtype)) for v in p) for p in drawn})
        pts = [p for p in drawn if not formula_overflows(stable, symbols, p, dtype)]
        if not pts:
            continue
        refs = [reference(exprs, symbols, p, dtype) for p in pts]
        checked += len(pts)
        for backend in BACKENDS:
            out, grads = _run(fn, backend, dtype, pts)
            for j, (p, ref) in enumerate(zip(pts, refs)):
                failures += compare(p, [out[j], *(g[j] for g in grads)], ref, backend, dtype)
    if failures:
        failures.insert(0, f"{to_source(tree)}\n  traced: {expr}")
    return failures, checked


@budget(25)
@given(cases())
def test_extreme_points_finite_and_accurate(case):
    """Wherever 50-digit mpmath says the value or a gradient is finite and representable in the dtype,
    every backend's is finite and within the rounding estimate of the point (finite only at kinks)."""
    n, tree, points = case
    note(f"expression: {to_source(tree)}")
    failures, checked = run_case(n, tree, points)
    assume(checked)  # some point where the formula as written is representable
    assert not failures, "\n".join(failures[:7])


# -- symgrad check at extreme magnitudes ---------------------------------------------------------------------

UNSTABLE_MODEL = """
import symgrad as sg


@sg.function
def ratio(x):
    # not rewritten: at |x| = 1e200 both squares overflow, inf/inf, where the true value is 1 (gradient 0)
    return x**2 / (1 + x**2)


@sg.function
def pair(x, y):
    return sg.softplus(x) * y, x**2 / (1 + x**2) + y


@sg.function
def singular(x):
    # true singularities, nothing to report: an infinite slope at 0, a pole at 0, no real log below 0
    return sg.sqrt(sg.Abs(x)) + 1 / x + sg.log(x)
"""


def test_check_reports_nan_at_extreme_magnitudes_naming_output_and_point(tmp_path):
    """``symgrad check`` samples 0 and ±1e±30/200/300 too, and fails (exit status 1) where the value or
    gradient is NaN/inf but 60-digit mpmath (central differences for the gradient) is finite."""
    (tmp_path / "model.py").write_text(UNSTABLE_MODEL)
    r = run_symgrad("check", "model.py", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.count("ok ") == 1 and "ok   singular:" in r.stdout, r.stdout
    assert "FAIL ratio: " in r.stdout and "FAIL pair: " in r.stdout, r.stdout
    found = [line.strip() for line in r.stdout.splitlines() if line.startswith("  ")]
    assert "ratio: value of output out is nan at x=-1e+200; mpmath (60 digits, value) gives 1" in found, found
    assert any(
        line.startswith("ratio: d/dx of output out is nan at x=-1e+200; mpmath (60 digits, ")
        for line in found
    ), found
    # each output on its own: softplus(x)*y (out0) is finite, and x**2/(1+x**2) + y's NaN is out1's
    pair = [line for line in found if line.startswith("pair: ")]
    assert pair and all("output out1" in line for line in pair if "more NaN" not in line), pair


def test_check_passes_the_example_model_at_extreme_magnitudes():
    """examples/model.py's ``blend`` (log(1 + x**2*y**2), inf at 1e200 as written) and ``gelu_tanh`` (0*inf
    in its gradient at 1e200) are finite there now, so ``make demo``'s check passes with no finding."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "examples" / "model.py"
    r = run_symgrad("check", str(model), "blend", "gelu_tanh", cwd=model.parent)
    assert r.returncode == 0 and r.stdout.count("ok ") == 2, r.stdout + r.stderr
    assert "extreme magnitudes" not in r.stdout + r.stderr and "warning" not in r.stderr, r.stdout + r.stderr


def test_check_extremes_is_silent_where_symgrad_is_stable():
    from symgrad.check import check_extremes

    @sg.function
    def stable(x, y):
        return sg.softplus(x) - sg.logaddexp(x, y) + sg.sigmoid(y) * x

    assert check_extremes(stable.compiled(), spec=stable.trace()) == []


def test_check_extremes_finds_a_nan_gradient_of_a_finite_value():
    """The gradient alone: sinh(x)/cosh(x) is NaN at |x| >= 710 (inf/inf); the true tanh is ±1, slope 0."""
    from symgrad.check import check_extremes

    @sg.function
    def tanh_by_hand(x):
        return sg.sinh(x) / sg.cosh(x)

    found = check_extremes(tanh_by_hand.compiled(), spec=tanh_by_hand.trace())
    where = {(f.what, f.point["x"]) for f in found}
    assert {("value", 1e30), ("d/dx", 1e30), ("value", -1e300)} <= where, found
    assert all(f.reference in (1.0, -1.0, 0.0) for f in found), found
