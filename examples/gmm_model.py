"""Symbolic kernels of ADBench's GMM objective (used by ``examples/gmm.py``).

The data term is  sum_i logsumexp_k [ c_k - 1/2 ||z_ik||^2 ],  z_ik = Q_k (x_i - mu_k),
c_k = alpha_k + sum_j q_kj.
``examples/gmm.py`` computes every z_ik with one matrix product and hands the per-(point, component) part
to the kernel below; its vjp and the chain rule through the products and reductions (in NumPy) give the
exact gradient. The kernel depends on d, so it is made per d and compiled on first use:

    component_logit(d)      per (point, component):  a_ik = c_k - 1/2 ||z_ik||^2

The log-sum-exp over components stays in NumPy (max-shifted): a symbolic chain of K - 1 pairwise
``logaddexp`` measured 2-4x slower than NumPy's vectorised exp for K = 5..25, and its vjp is the softmax,
which NumPy gets from the same exponentials. ``gmm_logit_d2`` makes ``symgrad show examples/gmm_model.py``
work.
"""

import functools  # (no `from __future__ import annotations`: the Vector sizes are closure variables)

import symgrad as sg


@functools.cache
def component_logit(d: int):
    """``gmm_logit_d{d}(z: Vector(d), c) = c - 1/2 z.z`` (one (point, component) pair)."""

    def gmm_logit(z: sg.Vector(d), c):
        return c - sum(z[j] ** 2 for j in range(d)) / 2

    gmm_logit.__name__ = gmm_logit.__qualname__ = f"gmm_logit_d{d}"
    return sg.function(gmm_logit)


gmm_logit_d2 = component_logit(2)
