"""ADBench's Gaussian mixture objective with a Wishart prior, and its exact gradient.

    f = gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m)
    f, grad = gmm_gradient(alphas, means, icf, x, wishart_gamma, wishart_m)   # grad: [alphas | means | icf]

alphas (K,), means (K, d), icf (K, d(d+1)/2), x (n, d). Per component Q_k = diag(exp q_k) + L_k with
q_k = icf[k, :d] and the strictly lower L_k filled column by column from icf[k, d:]; then

    f = -(nd/2) ln 2pi + sum_i lse_k[alpha_k + sum_j q_kj - 1/2 ||Q_k (x_i - mu_k)||^2] - n lse(alpha)
        + sum_k [1/2 gamma^2 (||exp q_k||^2 + ||l_k||^2) - m sum_j q_kj] - K C(d, gamma, m)

How it is computed: every z_ik = Q_k (x_i - mu_k) comes out of ONE matrix product x_aug @ B with
x_aug = [x | 1] (n, d+1) and B = [Q_k^T ; -(Q_k mu_k)^T]_k (d+1, K d). The per-(point, component) logit
a_ik = c_k - 1/2 ||z_ik||^2 is the symbolic kernel ``gmm_model.component_logit(d)``; the log-sum-exp over
components is a max-shifted NumPy reduction. The gradient is the kernel's vjp with the posteriors
P = softmax_k(a) as cotangent (dz = -P z, dc = sum_i P), one more product dB = x_aug^T dz, and the chain rule
from B back to (q, l, mu) written out below.

    python examples/gmm.py --d 10 --K 25 --n 10000      # value, gradient check, timings
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gmm_model  # noqa: E402

import symgrad as sg  # noqa: E402


def log_gamma_distrib(a: float, d: int) -> float:
    """ln Gamma_d(a), the multivariate log-gamma function."""
    return 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(a + 0.5 * (1 - j)) for j in range(1, d + 1)
    )


def wishart_constant(d: int, gamma: float, m: float) -> float:
    """C = n_w d (ln gamma - 1/2 ln 2) - ln Gamma_d(n_w / 2), n_w = d+m+1 (subtracted once per component)."""
    n_w = d + m + 1
    return n_w * d * (math.log(gamma) - 0.5 * math.log(2)) - log_gamma_distrib(0.5 * n_w, d)


def _lse(a: np.ndarray) -> np.ndarray:
    """Stable log-sum-exp over the last axis."""
    mx = a.max(axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    return (mx + np.log(np.exp(a - mx).sum(axis=-1, keepdims=True)))[..., 0]


def tri_indices(d: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of the strictly lower entries in ADBench's order: column by column."""
    cols, rows = np.triu_indices(d, 1)
    return rows, cols


class _Parts:
    """What the objective computes and the gradient reuses."""

    def __init__(self, alphas, means, icf, x):
        self.alphas = alphas = np.asarray(alphas, np.float64)
        self.means = means = np.asarray(means, np.float64)
        self.icf = icf = np.asarray(icf, np.float64)
        self.x = x = np.asarray(x, np.float64)
        n, d = x.shape
        K = alphas.shape[0]
        self.n, self.d, self.K = n, d, K
        self.q = icf[:, :d]
        self.l = icf[:, d:]
        self.rows, self.cols = tri_indices(d)
        self.exp_q = np.exp(self.q)
        Q = np.zeros((K, d, d))
        diag = np.arange(d)
        Q[:, diag, diag] = self.exp_q
        Q[:, self.rows, self.cols] = self.l
        self.Q = Q
        # B[c, k*d + r] = Q_k[r, c];  B[d, k*d + r] = -(Q_k mu_k)_r
        B = np.empty((d + 1, K * d))
        B[:d] = Q.transpose(2, 0, 1).reshape(d, K * d)
        B[d] = -np.einsum("krc,kc->kr", Q, means).reshape(K * d)
        self.x_aug = np.empty((n, d + 1))
        self.x_aug[:, :d] = x
        self.x_aug[:, d] = 1.0
        self.z = (self.x_aug @ B).reshape(n, K, d)  # z[i, k] = Q_k (x_i - mu_k)
        self.c = alphas + self.q.sum(axis=1)
        self.kernel = gmm_model.component_logit(d).compiled()
        self.logits = self.kernel(self.z, self.c)  # (n, K)

    def value(self, gamma: float, m: float) -> float:
        n, d, K = self.n, self.d, self.K
        self.lse = _lse(self.logits)  # (n,)
        prior = (
            0.5 * gamma**2 * ((self.exp_q**2).sum() + (self.l**2).sum())
            - m * self.q.sum()
            - K * wishart_constant(d, gamma, m)
        )
        return float(-0.5 * n * d * math.log(2 * math.pi) + self.lse.sum() - n * _lse(self.alphas) + prior)

    def gradient(self, gamma: float, m: float) -> np.ndarray:
        n, d, K = self.n, self.d, self.K
        P = np.exp(self.logits - self.lse[:, None])  # posteriors: d f / d a_ik
        dz, dc = self.kernel.vjp(self.z, self.c, P)  # dz = -P z (n, K, d); dc = sum_i P_ik (K,)
        dB = self.x_aug.T @ dz.reshape(n, K * d)  # (d + 1, K d)
        dQ = dB[:d].reshape(d, K, d).transpose(1, 2, 0).copy()  # dQ[k, r, c] = dB[c, k*d + r]
        dv = -dB[d].reshape(K, d)  # v_k = Q_k mu_k
        dQ += dv[:, :, None] * self.means[:, None, :]
        d_means = np.einsum("krc,kr->kc", self.Q, dv)  # Q_k^T dv_k
        diag = np.arange(d)
        d_q = dQ[:, diag, diag] * self.exp_q + dc[:, None] + gamma**2 * self.exp_q**2 - m
        d_l = dQ[:, self.rows, self.cols] + gamma**2 * self.l
        softmax_alpha = np.exp(self.alphas - _lse(self.alphas))
        d_alphas = dc - n * softmax_alpha
        return np.concatenate([d_alphas, d_means.reshape(-1), np.concatenate([d_q, d_l], axis=1).reshape(-1)])


def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m) -> float:
    """ADBench's GMM objective (log-likelihood with Wishart prior terms)."""
    return _Parts(alphas, means, icf, x).value(float(wishart_gamma), float(wishart_m))


def gmm_gradient(alphas, means, icf, x, wishart_gamma, wishart_m) -> tuple[float, np.ndarray]:
    """(value, gradient) with the gradient ordered [alphas (K) | means row-major | icf row-major]."""
    parts = _Parts(alphas, means, icf, x)
    value = parts.value(float(wishart_gamma), float(wishart_m))
    return value, parts.gradient(float(wishart_gamma), float(wishart_m))


def make_instance(d: int, K: int, n: int, seed: int = 0):
    """ADBench's data distribution: alpha ~ N(0,1), mu ~ U(0,1), icf ~ N(0,1), x ~ N(0,1), gamma=1, m=0."""
    rng = np.random.default_rng(seed)
    alphas = rng.normal(size=K)
    means = rng.random((K, d))
    icf = rng.normal(size=(K, d * (d + 1) // 2))
    x = rng.normal(size=(n, d))
    return alphas, means, icf, x, 1.0, 0.0


def split_gradient(grad: np.ndarray, d: int, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flat gradient as (d_alphas (K,), d_means (K, d), d_icf (K, d(d+1)/2))."""
    T = d * (d + 1) // 2
    return grad[:K], grad[K : K + K * d].reshape(K, d), grad[K + K * d :].reshape(K, T)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ADBench GMM objective and gradient with symgrad kernels")
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--K", type=int, default=25)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--backend", choices=("c", "numpy"), default=None)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    if args.backend:
        sg.set_backend(args.backend)
    data = make_instance(args.d, args.K, args.n)
    t0 = time.perf_counter()
    value = gmm_objective(*data)
    print(
        f"GMM d={args.d} K={args.K} n={args.n}: objective {value:.10g} "
        f"(first call, incl. compiling the kernel: {time.perf_counter() - t0:.2f} s, "
        f"backend {sg.get_backend()})"
    )

    def best(fn):
        fn()
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    t_obj = best(lambda: gmm_objective(*data))
    t_grad = best(lambda: gmm_gradient(*data))
    print(
        f"  best wall time: objective {t_obj * 1e3:8.2f} ms   gradient {t_grad * 1e3:8.2f} ms   "
        f"ratio {t_grad / t_obj:.2f}"
    )


if __name__ == "__main__":
    main()
