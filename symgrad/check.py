"""Gradient checking: every compiled gradient against central finite differences (and a hand-written vjp).

Points where two step sizes disagree with each other are at a kink or a discontinuity and are skipped
(a finite difference says nothing there); everywhere else the analytic vjp must agree within tolerance.
``check_extremes`` samples extreme magnitudes (0, ±1e±30, ±1e±200, ±1e±300, alone and mixed with ordinary
values): a NaN or inf value or gradient is reported where the traced formula, evaluated with mpmath at 60
digits (its gradient by central differences there), is finite and representable in float64.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from symgrad.compiled.function import CompiledFunction


@dataclass(frozen=True)
class Mismatch:
    function: str
    argument: str
    element: int
    point: dict
    analytic: float
    numeric: float
    reference: str = "finite differences"

    def __str__(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.point.items())
        return (
            f"{self.function}: vjp for {self.argument}[{self.element}] (the gradient of <outputs, cotangent> "
            f"at {where}): symgrad {self.analytic:.10g}, {self.reference} {self.numeric:.10g}"
        )


def sample_inputs(fn: CompiledFunction, n: int, rng: np.random.Generator) -> list[np.ndarray | float]:
    """``n`` rows of each argument; one number for a ``uniform`` one."""
    return [
        float(rng.normal(0.0, 1.5)) if k in fn.uniform_at else rng.normal(0.0, 1.5, size=(n, *shape))
        for k, shape in enumerate(fn.arg_shapes)
    ]


def _scalar_objective(
    fn: CompiledFunction, seeds: list[np.ndarray]
) -> Callable[[list[np.ndarray]], np.ndarray]:
    """Per-row <outputs, seeds>: its gradient is exactly the vjp with those seeds."""

    def objective(args: list[np.ndarray]) -> np.ndarray:
        outs = fn.forward(*args)
        total = 0.0
        for o, s in zip(outs, seeds):
            total = total + (o * s).reshape(o.shape[0], -1).sum(axis=1)
        return total

    return objective


def finite_differences(
    fn: CompiledFunction, args: list[np.ndarray], seeds: list[np.ndarray], h: float
) -> list[np.ndarray]:
    objective = _scalar_objective(fn, seeds)
    grads = []
    for i, a in enumerate(args):
        if not fn.arg_diff[i]:  # nondiff: no gradient to compare
            grads.append(None)
            continue
        if i in fn.uniform_at:  # one number for every row: its gradient is the sum over the rows
            step = h * max(1.0, abs(a))
            plus, minus = list(args), list(args)
            plus[i], minus[i] = a + step, a - step
            grads.append(np.array([[(objective(plus).sum() - objective(minus).sum()) / (2 * step)]]))
            continue
        flat = a.reshape(a.shape[0], -1)
        g = np.empty_like(flat)
        for j in range(flat.shape[1]):
            step = h * np.maximum(1.0, np.abs(flat[:, j]))
            plus, minus = [np.copy(x) for x in args], [np.copy(x) for x in args]
            plus[i].reshape(flat.shape)[:, j] += step
            minus[i].reshape(flat.shape)[:, j] -= step
            g[:, j] = (objective(plus) - objective(minus)) / (2 * step)
        grads.append(g)
    return grads


def check_function(
    fn: CompiledFunction,
    n: int = 64,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    against: Callable | None = None,
) -> list[Mismatch]:
    """Compare ``fn.vjp`` (float64) with central differences, and with ``against(*args, *seeds)`` if given."""
    rng = np.random.default_rng(seed)
    args = sample_inputs(fn, n, rng)
    seeds = [rng.normal(size=(n, *shape)) for shape in fn.out_shapes]
    rows = [1 if k in fn.uniform_at else n for k in range(len(args))]
    analytic = [None if g is None else np.reshape(g, (r, -1)) for g, r in zip(fn.vjp(*args, *seeds), rows)]
    coarse = finite_differences(fn, args, seeds, 1e-5)
    fine = finite_differences(fn, args, seeds, 2e-6)
    smooth = [
        None if c is None else np.isclose(c, f, rtol=1e-4, atol=1e-6) & np.isfinite(c)
        for c, f in zip(coarse, fine)
    ]
    references = [("finite differences", fine, smooth)]
    if against is not None:
        result = against(*args, *seeds)
        result = result if isinstance(result, (tuple, list)) else (result,)
        # a None gradient means zero, as in a PyTorch backward
        hand = [
            np.broadcast_to(np.asarray(0.0 if r is None else r, dtype=float), np.shape(a)).reshape(k, -1)
            for r, a, k in zip(result, args, rows)
        ]
        references = [("hand-written", hand, [np.ones_like(h, dtype=bool) for h in hand])]
    mismatches = []
    for reference, numeric, valid in references:
        for name, a, num, ok in zip(fn.arg_names, analytic, numeric, valid):
            if a is None:  # a nondiff argument: no gradient to compare
                continue
            bad = ok & ~np.isclose(a, num, rtol=rtol, atol=atol)
            for row, col in zip(*np.nonzero(bad)):
                point = {
                    nm: round(x, 6) if np.ndim(x) == 0 else np.round(x.reshape(n, -1)[row], 6).tolist()
                    for nm, x in zip(fn.arg_names, args)
                }
                point["cotangent"] = [np.round(sd.reshape(n, -1)[row], 6).tolist() for sd in seeds]
                if np.ndim(args[fn.arg_names.index(name)]) == 0:  # uniform: its gradient sums every row
                    point = {"summed over rows": n, name: point[name]}
                mismatches.append(
                    Mismatch(
                        fn.name, name, int(col), point, float(a[row, col]), float(num[row, col]), reference
                    )
                )
    return mismatches


# -- extreme magnitudes: NaN or inf where the true value and gradient are finite ----------------------------

#: magnitudes sampled besides the random points (each with both signs, and 0): where float64's naive formulas
#: overflow, underflow or cancel; mixed with ordinary values for functions of several arguments
EXTREMES = (1e-300, 1e-200, 1e-30, 1e30, 1e200, 1e300)
ORDINARY = (1.0, -0.5)
#: the reference's precision (decimal digits), its finite differences' (more while the difference of the
#: outputs is below their rounding: a relative change of 1e-400 over the step at 1e200) and their step
REFERENCE_DPS = 60
DIFFERENCE_DPS = (60, 200, 700)
FD_STEP = 1e-25
#: |argument| above which an exponential is inf (or 0) in the reference, and a periodic function has no
#: reference: beyond every float's exponential, where mpmath's numbers become astronomically long
#: (exp(exp(1e300)), sin(exp(1e30)))
GROWTH_LIMIT = 1e310


@dataclass(frozen=True)
class NonFinite:
    """A NaN or inf from symgrad where the 60-digit reference is finite and representable in float64."""

    function: str
    output: str
    what: str  # "value" or "d/d<argument>"
    point: dict
    got: float
    reference: float

    def __str__(self) -> str:
        where = ", ".join(f"{k}={v:.6g}" for k, v in self.point.items())
        how = "value" if self.what == "value" else "finite differences"
        return (
            f"{self.function}: {self.what} of output {self.output} is {self.got} at {where}; mpmath "
            f"({REFERENCE_DPS} digits, {how}) gives {self.reference:.10g}"
        )


def extreme_points(n_args: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of argument values: each extreme magnitude (and 0) in every argument at once, then ``count``
    rows mixing extreme and ordinary values."""
    values = np.array([0.0, *EXTREMES, *(-v for v in EXTREMES)])
    diagonal = np.repeat(values[:, None], n_args, axis=1)
    mixed = rng.choice(np.concatenate([values, ORDINARY]), size=(count if n_args > 1 else 0, n_args))
    return np.unique(np.concatenate([diagonal, mixed]), axis=0)


def _guarded(f: Callable, above: float, below: float) -> Callable:
    def g(x):
        if x > GROWTH_LIMIT:
            return above
        return below if x < -GROWTH_LIMIT else f(x)

    return g


#: mpmath functions that run out of memory at arguments beyond 10**10000 (tanh of exp(1e150)): NaN there
BOUNDED = ("tanh", "erf", "erfc", "erfinv", "atan", "asinh", "acosh", "atanh", "loggamma", "gamma", "digamma")
BOUNDED += ("polygamma", "besselj", "besseli", "zeta")


def _bounded(f: Callable) -> Callable:
    import mpmath

    huge = mpmath.mpf(10) ** 10**4
    return lambda *args: mpmath.nan if any(abs(a) > huge for a in args) else f(*args)


def _mp_functions(spec) -> Callable | None:
    """The traced outputs as one mpmath function of the arguments (symgrad's primitives written out in
    elementary functions, exponentials guarded); None if an output is not one number."""
    import mpmath
    import sympy

    from symgrad.compiler.primitives import _Primitive

    if any(a.shape for a in spec.args) or any(o.shape for o in spec.outputs):
        return None
    exprs = [o.exprs[0] for o in spec.outputs]
    for _ in range(20):  # a primitive's elementary form may hold another primitive
        exprs = [e.replace(lambda p: isinstance(p, _Primitive), lambda p: p._elementary()) for e in exprs]
    inf = mpmath.inf
    table = {
        "exp": _guarded(mpmath.exp, inf, mpmath.mpf(0)),
        "expm1": _guarded(mpmath.expm1, inf, mpmath.mpf(-1)),
        "sinh": _guarded(mpmath.sinh, inf, -inf),
        "cosh": _guarded(mpmath.cosh, inf, inf),
        **{name: _guarded(getattr(mpmath, name), mpmath.nan, mpmath.nan) for name in ("sin", "cos", "tan")},
        **{name: _bounded(getattr(mpmath, name)) for name in BOUNDED},
    }
    symbols = [a.symbols[0] for a in spec.args]
    return sympy.lambdify(symbols, exprs, modules=[table, "mpmath"])


def _traced(fn: CompiledFunction):
    """The traced spec of ``fn``, from the model file its package was compiled from (None without one)."""
    from pathlib import Path

    model = fn.package.manifest.get("model")
    if not model:
        return None
    for f in _model_functions(
        str((Path(fn.package.path) / model).resolve()), fn.package.manifest.get("model_sha256", "")
    ):
        if f.name == fn.name:
            return f.trace()
    return None


@functools.lru_cache(maxsize=4)
def _model_functions(path: str, sha256: str) -> list:
    """The model's ``@sg.function``s, imported once per content (``sha256``) for all its functions."""
    from pathlib import Path

    from symgrad.compiler.model import load_model

    return load_model(Path(path))


class _Reference:
    """The outputs at 60 digits and their central differences, where finite and representable."""

    def __init__(self, f: Callable) -> None:
        import mpmath

        self.mp, self.f = mpmath, f

    def _output(self, point: list, k: int):
        """Output ``k`` at ``point`` (mpf arguments), or None where it is not a real number."""
        mp = self.mp
        try:
            v = self.f(*point)[k]
        except (ArithmeticError, ValueError, TypeError):
            return None
        return mp.mpf(v) if isinstance(v, (int, float, mp.mpf)) else None

    def _finite(self, v) -> bool:
        return v is not None and self.mp.isfinite(v) and abs(v) <= np.finfo(np.float64).max

    def value(self, row: np.ndarray, k: int) -> float | None:
        with self.mp.workdps(REFERENCE_DPS):
            v = self._output([self.mp.mpf(float(x)) for x in row], k)
            return float(v) if self._finite(v) else None

    def derivative(self, row: np.ndarray, k: int, i: int) -> float | None:
        """d output k / d argument i by central differences, with more digits while the difference is lost
        in the rounding of the outputs; None at a kink (the one-sided differences disagree) or where it is
        not finite and representable."""
        mp = self.mp
        for dps in DIFFERENCE_DPS:
            with mp.workdps(dps):
                point = [mp.mpf(float(x)) for x in row]
                h = mp.mpf(FD_STEP) * (abs(point[i]) or 1)
                f0 = self._output(point, k)
                fp = self._output(point[:i] + [point[i] + h] + point[i + 1 :], k)
                fm = self._output(point[:i] + [point[i] - h] + point[i + 1 :], k)
                if not all(v is not None and mp.isfinite(v) for v in (f0, fp, fm)):
                    return None
                ahead, behind, central = (fp - f0) / h, (f0 - fm) / h, (fp - fm) / (2 * h)
                noise = mp.mpf(10) ** (15 - dps) * abs(f0) / h
                if abs(central) <= noise and dps != DIFFERENCE_DPS[-1]:
                    continue
                if abs(ahead - behind) > mp.mpf(10) ** -8 * abs(central) + 4 * noise:
                    return None  # a kink or a jump: no derivative to compare
                return float(central) if self._finite(central) else None
        return None


def check_extremes(fn: CompiledFunction, count: int = 32, seed: int = 0, spec=None) -> list[NonFinite]:
    """NaN or inf values and gradients of ``fn`` (float64) at extreme magnitudes (``extreme_points``) where
    the 60-digit reference (value, central differences) is finite; ``spec``: the traced function (default:
    traced from the model file of ``fn``'s package). Only for functions of scalars (else: no points)."""
    spec = spec if spec is not None else _traced(fn)
    f = _mp_functions(spec) if spec is not None else None
    if f is None:
        return []
    reference = _Reference(f)
    outputs = (
        list(fn.formulas) if len(fn.formulas) == fn.n_outputs else [f"out{k}" for k in range(fn.n_outputs)]
    )
    diff = [i for i, d in enumerate(fn.arg_diff) if d]
    found = []
    for row in extreme_points(len(fn.arg_names), count, np.random.default_rng(seed)):
        args = [float(v) if k in fn.uniform_at else np.array([v]) for k, v in enumerate(row)]
        point = dict(zip(fn.arg_names, map(float, row)))
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            values, jac = fn.value_and_jacobian(*args)  # per output: no NaN of one leaks into another
        values = values if isinstance(values, tuple) else (values,)
        jac = np.reshape(jac, (fn.n_outputs, len(diff)))
        for k, name in enumerate(outputs):
            got = float(np.ravel(values[k])[0])
            if not np.isfinite(got) and (want := reference.value(row, k)) is not None:
                found.append(NonFinite(fn.name, name, "value", point, got, want))
            for col, i in enumerate(diff):
                if not np.isfinite(jac[k, col]) and (want := reference.derivative(row, k, i)) is not None:
                    found.append(
                        NonFinite(fn.name, name, f"d/d{fn.arg_names[i]}", point, float(jac[k, col]), want)
                    )
    return found


def extremes_report(found: list[NonFinite], limit: int = 5) -> list[str]:
    """One line per finding, the first ``limit`` of them, then how many more."""
    lines = [str(f) for f in found[:limit]]
    if len(found) > limit:
        lines.append(f"{found[0].function}: {len(found) - limit} more NaN/inf at extreme magnitudes")
    return lines
