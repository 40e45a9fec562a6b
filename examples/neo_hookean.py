"""A hanging Neo-Hookean block: per-tetrahedron energy, gradient and Hessian from one fused kernel,
assembled into a ``scipy.sparse`` stiffness matrix, and static Newton steps solved with ``spsolve``.

The element energy is the compressible Neo-Hookean one, in the stable log-det form,

    W = vol * (mu/2 (tr F'F - 3) - mu log J + lam/2 (log J)^2),   F = Ds Dm^-1,  J = det F,

of the element's 12 vertex coordinates (the only differentiable argument), with the rest shape's inverse
edge matrix Dm^-1 and volume per element (``nondiff``) and the Lame parameters one number per call
(``uniform``, ``nondiff``). ``value_jacobian_hessian`` gives every element's W, gradient (12) and
Hessian (12 x 12) in one pass; the Hessians go into a COO matrix whose structure is built once, summed to
CSR. The block (a beam, clamped at x = 0) sags under gravity: each Newton step solves K d = -g on the
free degrees of freedom, with a backtracking line search that keeps every J > 0; the total energy
(elastic minus gravity's work) decreases at every step. The gradient and Hessian are checked against
central finite differences.

    python examples/neo_hookean.py                  # 12 x 3 x 3 cubes, 6 tetrahedra each
    python examples/neo_hookean.py --cells 24 6 6
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import symgrad as sg  # noqa: E402

MU, LAM = 1000.0, 4000.0  # Lame parameters (Young's modulus 2800, Poisson's ratio 0.4)
GRAVITY = 3.0  # body force per unit rest volume, -z


def neo_hookean(x, dm_inv, vol, mu, lam, log):
    """The element energy, written once for any array library: ``x[i]``, ``dm_inv[k, c]`` and ``log``
    (sg.log here; jax.numpy's and torch's in bench/bench_hessian.py)."""
    ds = [[x[3 * (v + 1) + r] - x[r] for v in range(3)] for r in range(3)]
    f = [[sum(ds[r][k] * dm_inv[k, c] for k in range(3)) for c in range(3)] for r in range(3)]
    det = (
        f[0][0] * (f[1][1] * f[2][2] - f[1][2] * f[2][1])
        - f[0][1] * (f[1][0] * f[2][2] - f[1][2] * f[2][0])
        + f[0][2] * (f[1][0] * f[2][1] - f[1][1] * f[2][0])
    )
    log_j = log(det)
    trace_c = sum(f[r][c] ** 2 for r in range(3) for c in range(3))
    return vol * (mu / 2 * (trace_c - 3) - mu * log_j + lam / 2 * log_j**2)


@sg.function(nondiff=("dm_inv", "vol", "mu", "lam"), uniform=("mu", "lam"))
def tet_energy(x: sg.Vector(12), dm_inv: sg.Matrix(3, 3), vol, mu, lam):
    """Neo-Hookean energy of one tetrahedron with vertices x[0:3], x[3:6], x[6:9], x[9:12]."""
    return neo_hookean(x, dm_inv, vol, mu, lam, sg.log)


@dataclass
class Mesh:
    rest: np.ndarray  # (n_vertices, 3)
    tets: np.ndarray  # (n_tets, 4) vertex indices
    dm_inv: np.ndarray  # (n_tets, 3, 3)
    vol: np.ndarray  # (n_tets,)
    dofs: np.ndarray  # (n_tets, 12) global coordinates of each element's 12 inputs
    free: np.ndarray  # (3 n_vertices,) bool: not clamped
    force: np.ndarray  # (3 n_vertices,) gravity, lumped to the vertices


def block_mesh(cells: tuple[int, int, int], size: float = 1 / 3) -> Mesh:
    """A box of ``cells`` cubes of side ``size``, each split into 6 tetrahedra (conforming: the same split
    in every cube), clamped at x = 0."""
    nx, ny, nz = cells
    grid = np.stack(np.meshgrid(*(np.arange(n + 1) for n in cells), indexing="ij"), -1).reshape(-1, 3)
    rest = grid * size
    index = np.arange(len(grid)).reshape(nx + 1, ny + 1, nz + 1)
    corner = index[:-1, :-1, :-1].ravel()
    offset = {bits: index[bits] - index[0, 0, 0] for bits in np.ndindex(2, 2, 2)}
    tets = []
    for order in permutations(range(3)):  # the path 0 -> e_a -> e_a + e_b -> (1, 1, 1) of each cube
        path, bits = [(0, 0, 0)], [0, 0, 0]
        for axis in order:
            bits[axis] = 1
            path.append(tuple(bits))
        tets.append(np.stack([corner + offset[b] for b in path], 1))
    tets = np.concatenate(tets)
    edges = rest[tets[:, 1:]] - rest[tets[:, :1]]  # (n_tets, 3 edges, 3 coordinates)
    dm = np.swapaxes(edges, 1, 2)  # columns are the edges
    vol = np.abs(np.linalg.det(dm)) / 6
    dofs = (3 * tets[:, :, None] + np.arange(3)).reshape(-1, 12)
    free = np.repeat(rest[:, 0] > 0, 3)
    force = np.zeros(rest.size)
    np.add.at(force, dofs[:, 2::3].ravel(), np.repeat(-GRAVITY * vol / 4, 4))
    return Mesh(rest, tets, np.linalg.inv(dm), vol, dofs, free, force)


def total_energy(mesh: Mesh, x: np.ndarray) -> float:
    """Elastic energy minus gravity's work from the rest shape; inf where an element is inverted (J <= 0)."""
    with np.errstate(invalid="ignore"):
        w = tet_energy(x[mesh.dofs], mesh.dm_inv, mesh.vol, MU, LAM)
    return float(w.sum() - mesh.force @ (x - mesh.rest.ravel())) if np.isfinite(w).all() else np.inf


def assemble(mesh: Mesh, x: np.ndarray) -> tuple[float, np.ndarray, sp.csr_matrix]:
    """Total energy, gradient and sparse Hessian: one fused kernel, then a COO sum to CSR."""
    w, jac, hess = tet_energy.value_jacobian_hessian(x[mesh.dofs], mesh.dm_inv, mesh.vol, MU, LAM)
    n = x.size
    grad = np.bincount(mesh.dofs.ravel(), weights=jac[:, 0, :].ravel(), minlength=n) - mesh.force
    rows = np.repeat(mesh.dofs, 12, axis=1).ravel()
    cols = np.tile(mesh.dofs, (1, 12)).ravel()
    matrix = sp.coo_matrix((hess.ravel(), (rows, cols)), shape=(n, n)).tocsr()
    return float(w.sum() - mesh.force @ (x - mesh.rest.ravel())), grad, matrix


def newton_step(mesh: Mesh, x: np.ndarray) -> tuple[np.ndarray, dict, sp.csr_matrix]:
    """One static Newton step on the free coordinates, halving it until the energy does not increase
    (the full step where the predicted decrease is below the energy's rounding); also the energy,
    |gradient| and step length (``info``) and the Hessian at ``x``."""
    energy, grad, matrix = assemble(mesh, x)
    free = mesh.free
    step = np.zeros_like(x)
    step[free] = spsolve(matrix[free][:, free].tocsc(), -grad[free])
    alpha = 1.0
    if -(grad @ step) / 2 > 1e-12 * max(1.0, abs(energy)):  # else the decrease is below the rounding
        while total_energy(mesh, x + alpha * step) > energy and alpha > 1e-8:
            alpha /= 2
    info = {"energy": energy, "grad_norm": float(np.linalg.norm(grad[free])), "alpha": alpha}
    return x + alpha * step, info, matrix


def finite_difference_errors(mesh: Mesh, x: np.ndarray, rng: np.random.Generator, n: int = 8) -> dict:
    """Relative errors of the element gradient and Hessian against central differences (step 1e-6) of
    the energy and of the gradient, and of the assembled gradient along a random direction, at ``x``
    (away from the equilibrium, where the gradient is rounding noise)."""
    pick = rng.choice(len(mesh.tets), size=min(n, len(mesh.tets)), replace=False)
    xe, args, h = x[mesh.dofs[pick]], (mesh.dm_inv[pick], mesh.vol[pick], MU, LAM), 1e-6
    _, jac, hess = tet_energy.value_jacobian_hessian(xe, *args)
    fd_grad, fd_hess = np.empty((len(pick), 12)), np.empty((len(pick), 12, 12))
    for c in range(12):
        e = np.zeros(12)
        e[c] = h
        fd_grad[:, c] = (tet_energy(xe + e, *args) - tet_energy(xe - e, *args)) / (2 * h)
        plus, minus = tet_energy.jacobian(xe + e, *args), tet_energy.jacobian(xe - e, *args)
        fd_hess[:, :, c] = (plus[:, 0] - minus[:, 0]) / (2 * h)
    direction = np.where(mesh.free, rng.normal(size=x.size), 0.0)
    _, grad, _ = assemble(mesh, x)
    t = 1e-6
    fd_dir = (total_energy(mesh, x + t * direction) - total_energy(mesh, x - t * direction)) / (2 * t)
    return {
        "element_grad": float(np.abs(jac[:, 0] - fd_grad).max() / np.abs(fd_grad).max()),
        "element_hessian": float(np.abs(hess - fd_hess).max() / np.abs(fd_hess).max()),
        "directional": float(abs(grad @ direction - fd_dir) / abs(fd_dir)),
    }


def main(
    cells: tuple[int, int, int] = (12, 3, 3), steps: int = 10, seed: int = 0, verbose: bool = True
) -> dict:
    """Sag the block with Newton steps until the free gradient is 1e-7 of the first (at most ``steps``);
    return what the run shows (checked by tests/test_examples_higher.py)."""
    say = print if verbose else (lambda *a, **k: None)
    mesh = block_mesh(tuple(cells))
    x = mesh.rest.ravel().copy()
    tet_energy.value_jacobian_hessian(x[mesh.dofs[:1]], mesh.dm_inv[:1], mesh.vol[:1], MU, LAM)  # compile
    say(
        f"{len(mesh.rest)} vertices, {len(mesh.tets)} tetrahedra, {int(mesh.free.sum())} free coordinates; "
        f"mu {MU:g}, lambda {LAM:g}, gravity {GRAVITY:g}"
    )
    say(f"{'step':>4} {'energy':>14} {'|grad| (free)':>14} {'alpha':>6} {'assemble+solve':>15}")
    energies, norms, matrix = [], [], None
    for k in range(steps):
        start = time.perf_counter()
        x_new, info, matrix = newton_step(mesh, x)
        seconds = time.perf_counter() - start
        energies.append(info["energy"])
        norms.append(info["grad_norm"])
        if k and info["grad_norm"] < 1e-7 * norms[0]:  # converged: x is the equilibrium
            say(f"{k:>4} {info['energy']:>14.8f} {info['grad_norm']:>14.3e}  (converged)")
            break
        row = f"{info['energy']:>14.8f} {info['grad_norm']:>14.3e} {info['alpha']:>6.3g}"
        say(f"{k:>4} {row} {seconds * 1e3:>12.1f} ms")
        x = x_new
    say(f"Hessian: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nonzeros (CSR)")
    drops = -np.diff(energies)
    rounding = 1e-12 * np.abs(energies).max()
    say(
        f"energy never increases (to 1e-12 of its size): {bool(np.all(drops >= -rounding))}; "
        f"the first Newton step lowers it by {drops[0]:.6f}"
    )
    tip = x.reshape(-1, 3)[:, 2] - mesh.rest[:, 2]
    say(f"tip sag at equilibrium: {-tip.min():.4f} (block length {mesh.rest[:, 0].max():g})")
    rng = np.random.default_rng(seed)
    errors = finite_difference_errors(mesh, x + 0.02 * rng.normal(size=x.size) * mesh.free, rng)
    say(
        "central differences (relative error): element gradient {element_grad:.1e}, element Hessian "
        "{element_hessian:.1e}, assembled gradient along a random direction {directional:.1e}".format(
            **errors
        )
    )
    return {"energies": energies, "grad_norms": norms, "sag": float(-tip.min()), **errors}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs=3, default=(12, 3, 3), help="cubes along x, y, z")
    ap.add_argument("--steps", type=int, default=10)
    main(**vars(ap.parse_args()))
