"""Per-row Newton's method with ``value_jacobian_hessian``: a maximum-likelihood fit per pixel.

Each row is one pixel of a decay experiment (fluorescence lifetime, MRI relaxometry): photon counts
y_t ~ Poisson(mu_t) at T fixed times t, with mu_t = A exp(-r t) + B. The three parameters are fitted in
log form, theta = (log A, log r, log B), by minimising the negative log-likelihood
sum_t mu_t - y_t log mu_t, plus a weak normal prior on log B (sd 3) that keeps a pixel whose best
background is 0 at a finite optimum (a MAP fit; elsewhere in effect the MLE). One fused kernel gives every
row's objective, gradient (3) and Hessian (3 x 3); the Newton step of all rows is one batched
``np.linalg.solve``, with the Hessian shifted where it is not positive definite and a backtracking
(Armijo) line search per row. A row stops once its Newton decrement g' H^-1 g / 2 is below 1e-12. A few
rows are fitted again with ``scipy.optimize.minimize`` (BFGS on a hand-written NumPy objective and
gradient) to show the same optimum.

    python examples/newton.py               # 100,000 pixels
    python examples/newton.py --rows 10000
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import symgrad as sg  # noqa: E402

T = 16
TIMES = np.linspace(0.0, 7.5, T)  # the sampling times, constants of the trace
DECREMENT_TOL = 1e-12  # a row has converged when g' H^-1 g / 2 is below this (NLL units)
FULL_STEP = 1e-6  # below this decrement, the full Newton step (the NLL's rounding would fool a line search)
PRIOR_LOG_B, PRIOR_SD = float(np.log(10.0)), 3.0  # weak normal prior on log B


@sg.function(nondiff=("y",))
def nll(theta: sg.Vector(3), y: sg.Vector(T)):
    """Poisson negative log-likelihood (without the constant log y!) of one pixel's counts ``y``."""
    total = 0
    for k, t in enumerate(TIMES):
        log_mu = sg.logaddexp(theta[0] - sg.exp(theta[1]) * float(t), theta[2])  # log(A e^-rt + B)
        total += sg.exp(log_mu) - y[k] * log_mu
    return total + ((theta[2] - PRIOR_LOG_B) / PRIOR_SD) ** 2 / 2


def simulate(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """True parameters (rows, 3) and Poisson counts (rows, T)."""
    truth = np.stack(
        [
            np.log(rng.uniform(200, 2000, rows)),
            np.log(rng.uniform(0.5, 2.0, rows)),
            np.log(rng.uniform(5, 50, rows)),
        ],
        axis=1,
    )
    mu = np.exp(truth[:, :1]) * np.exp(-np.exp(truth[:, 1:2]) * TIMES) + np.exp(truth[:, 2:])
    return truth, rng.poisson(mu).astype(np.float64)


def initial_guess(y: np.ndarray) -> np.ndarray:
    """From the data: background from the last samples, amplitude from the first, rate from the half-life."""
    background = np.maximum(y[:, -3:].mean(axis=1), 1.0)
    amplitude = np.maximum(y[:, 0] - background, 1.0)
    half = np.argmax(y - background[:, None] < amplitude[:, None] / 2, axis=1)
    rate = np.log(2) / np.maximum(TIMES[np.maximum(half, 1)], TIMES[1])
    return np.stack([np.log(amplitude), np.log(rate), np.log(background)], axis=1)


def newton_step(grad: np.ndarray, hess: np.ndarray) -> np.ndarray:
    """Solve (H + shift I) d = -g for every row; the shift makes each H positive definite."""
    low = np.linalg.eigvalsh(hess)[:, 0]
    scale = np.abs(hess).max(axis=(1, 2))
    shift = np.where(low > 1e-10 * scale, 0.0, 1e-6 * scale - low)
    return np.linalg.solve(hess + shift[:, None, None] * np.eye(3), -grad[..., None])[..., 0]


def line_search(theta, y, value, grad, step, max_halvings: int = 30) -> np.ndarray:
    """Per-row backtracking: the largest 2^-k step with sufficient decrease (Armijo, c = 1e-4); the full
    step where the predicted decrease is below ``FULL_STEP`` (the NLL's rounding would fool the test)."""
    alpha = np.ones(len(theta))
    slope = np.einsum("ni,ni->n", grad, step)
    pending = slope < -2 * FULL_STEP  # the others are in the quadratic region: full step
    for _ in range(max_halvings):
        trial = nll(theta[pending] + alpha[pending, None] * step[pending], y[pending])
        ok = np.isfinite(trial) & (trial <= value[pending] + 1e-4 * alpha[pending] * slope[pending])
        idx = np.flatnonzero(pending)
        pending[idx[ok]] = False
        alpha[idx[~ok]] /= 2
        if not pending.any():
            break
    alpha[pending] = 0.0  # no decrease found: stay
    return theta + alpha[:, None] * step


@dataclass
class Fit:
    theta: np.ndarray
    value: np.ndarray
    grad_norm: np.ndarray  # |g| per row at the end
    iterations: np.ndarray  # Newton iterations per row
    history: list  # (iteration, rows still active, their max |g|, mean NLL of all rows)


def fit(y: np.ndarray, theta: np.ndarray, max_iter: int = 50) -> Fit:
    """Damped Newton on every row at once; converged rows drop out of the work."""
    theta = theta.copy()
    active = np.arange(len(y))
    history = []
    value = grad = None
    row_iters = np.full(len(y), max_iter)
    for it in range(max_iter + 1):
        value_a, jac, hess = nll.value_jacobian_hessian(theta[active], y[active])
        grad_a = jac[:, 0, :]
        step = newton_step(grad_a, hess)
        decrement = -np.einsum("ni,ni->n", grad_a, step) / 2
        if value is None:
            value, grad = value_a, grad_a
        value[active], grad[active] = value_a, grad_a
        history.append((it, len(active), float(np.abs(grad_a).max()), float(value.mean())))
        keep = decrement > DECREMENT_TOL
        row_iters[active[~keep]] = it
        theta[active[~keep]] += step[~keep]  # converged: the last (full) Newton step is free
        if not keep.any() or it == max_iter:
            break
        active, step = active[keep], step[keep]
        theta[active] = line_search(theta[active], y[active], value_a[keep], grad_a[keep], step)
    value, jac = nll.value_and_jacobian(theta, y)
    return Fit(theta, value, np.linalg.norm(jac[:, 0, :], axis=1), row_iters, history)


def numpy_nll_and_grad(theta: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """The same objective (NLL and prior) and its gradient, written by hand in NumPy, for SciPy."""
    decay = np.exp(theta[0] - np.exp(theta[1]) * TIMES)
    mu = decay + np.exp(theta[2])
    weight = 1 - y / mu
    dmu = np.stack([decay, -decay * np.exp(theta[1]) * TIMES, np.full(T, np.exp(theta[2]))])
    prior = (theta[2] - PRIOR_LOG_B) / PRIOR_SD
    value = np.sum(mu - y * np.log(mu)) + prior**2 / 2
    return float(value), dmu @ weight + np.array([0.0, 0.0, prior / PRIOR_SD])


def scipy_fit(y: np.ndarray, theta0: np.ndarray) -> np.ndarray:
    from scipy.optimize import minimize

    rows = []
    for yr, t0 in zip(y, theta0):
        res = minimize(numpy_nll_and_grad, t0, args=(yr,), jac=True, method="BFGS", options={"gtol": 1e-9})
        rows.append(res.x)
    return np.array(rows)


def main(rows: int = 100_000, check_rows: int = 20, seed: int = 0, verbose: bool = True) -> dict:
    """Fit ``rows`` pixels; return what the run shows (checked by tests/test_examples_higher.py)."""
    say = print if verbose else (lambda *a, **k: None)
    rng = np.random.default_rng(seed)
    truth, y = simulate(rows, rng)
    theta0 = initial_guess(y)
    nll.value_jacobian_hessian(theta0[:2], y[:2])  # compile (or load from the cache) outside the timing
    start = time.perf_counter()
    result = fit(y, theta0)
    elapsed = time.perf_counter() - start
    say(f"{rows} pixels, {T} samples each, 3 parameters (log A, log r, log B); damped Newton, all at once")
    say(f"{'iter':>4} {'active rows':>11} {'their max |grad|':>16} {'mean objective':>15}")
    for it, active, gmax, mean in result.history:
        say(f"{it:>4} {active:>11} {gmax:>16.3e} {mean:>15.6f}")
    iters = result.iterations
    say(
        f"all rows converged in {iters.max()} iterations (median {np.median(iters):.0f}, 99th percentile "
        f"{np.percentile(iters, 99):.0f}), {elapsed:.2f} s ({elapsed / rows * 1e6:.2f} us per pixel)"
    )
    say(
        f"largest final |grad|: {result.grad_norm.max():.2e}; median |theta - truth|: "
        f"{np.median(np.abs(result.theta - truth), axis=0).round(3)}"
    )
    idx = rng.choice(rows, size=min(check_rows, rows), replace=False)
    start = time.perf_counter()
    reference = scipy_fit(y[idx], theta0[idx])
    scipy_s = time.perf_counter() - start
    diff = np.abs(result.theta[idx] - reference).max()
    ref_values = np.array([numpy_nll_and_grad(t, yr)[0] for t, yr in zip(reference, y[idx])])
    value_gap = (result.value[idx] - ref_values).max()
    say(
        f"scipy.optimize.minimize (BFGS) on {len(idx)} rows: {scipy_s / len(idx) * 1e3:.2f} ms per row; "
        f"largest |theta - theta_scipy| {diff:.1e}, largest NLL - NLL_scipy {value_gap:.1e}"
    )
    return {
        "iterations": int(iters.max()),
        "median_iterations": float(np.median(iters)),
        "max_grad_norm": float(result.grad_norm.max()),
        "theta_vs_scipy": float(diff),
        "nll_minus_scipy": float(value_gap),
        "seconds": elapsed,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--check-rows", type=int, default=20)
    main(**vars(ap.parse_args()))
