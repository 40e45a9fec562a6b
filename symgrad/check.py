"""Gradient checking: every compiled gradient against central finite differences (and a hand-written vjp).

Points where two step sizes disagree with each other are at a kink or a discontinuity and are skipped
(a finite difference says nothing there); everywhere else the analytic vjp must agree within tolerance.
"""

from __future__ import annotations

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
