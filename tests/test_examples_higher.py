"""The second-order examples (examples/newton.py, examples/neo_hookean.py), run small, and the claims they
print: Newton converges in a few iterations to SciPy's optimum; the Neo-Hookean block's energy never
increases under Newton steps, which converge; gradient and Hessian match central differences; the element
Hessian matches JAX's and PyTorch's.

Tolerances (float64): central differences with step 1e-6 of functions of size ~1 are good to ~1e-9
(truncation h^2 ~ 1e-12, rounding eps/h ~ 1e-10): asserted at 1e-6. BFGS (gtol 1e-9) against Newton
(decrement 1e-12): parameters to 1e-5, objectives to 1e-8 of their size. Frameworks: rtol 1e-9 in
float64; float32 against the float64 Hessian: 2e-3 of the largest entry (a few hundred roundings)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import neo_hookean  # noqa: E402
import newton  # noqa: E402

import symgrad as sg  # noqa: E402


def test_newton_converges_in_a_few_iterations_to_scipys_optimum():
    result = newton.main(rows=2000, check_rows=5, verbose=False)
    assert result["median_iterations"] <= 6 and result["iterations"] <= 15, result
    assert result["max_grad_norm"] < 1e-6, result  # |g| of objectives of size ~1e4
    assert result["theta_vs_scipy"] < 1e-5, result
    assert abs(result["nll_minus_scipy"]) < 1e-8 * 1e4, result


def test_newton_step_is_shifted_where_the_hessian_is_indefinite():
    hess = np.array([np.diag([2.0, 1.0, 3.0]), np.diag([2.0, -1.0, 3.0])])
    grad = np.ones((2, 3))
    step = newton.newton_step(grad, hess)
    np.testing.assert_allclose(step[0], [-0.5, -1.0, -1 / 3], rtol=1e-12)
    assert step[1] @ grad[1] < 0  # still a descent direction


def test_neo_hookean_block_energy_decreases_and_newton_converges():
    result = neo_hookean.main(cells=(4, 2, 2), verbose=False)
    energies, norms = np.array(result["energies"]), np.array(result["grad_norms"])
    assert energies[1] < energies[0] - 1e-3  # the first Newton step from the rest shape
    assert np.all(np.diff(energies) <= 1e-12 * np.abs(energies).max())
    assert norms[-1] < 1e-7 * norms[0] and len(norms) <= 8, norms
    assert result["sag"] > 1e-3
    for key in ("element_grad", "element_hessian", "directional"):
        assert result[key] < 1e-6, (key, result[key])


def _elements(n: int = 6) -> tuple:
    mesh = neo_hookean.block_mesh((2, 1, 1))
    rng = np.random.default_rng(3)
    x = mesh.rest.ravel() + 0.05 * rng.normal(size=mesh.rest.size)
    return x[mesh.dofs[:n]], mesh.dm_inv[:n], mesh.vol[:n]


def test_neo_hookean_element_hessian_matches_jax_and_torch(backend, dtype):
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    jax.config.update("jax_enable_x64", True)
    x, dm_inv, vol = _elements()
    mu, lam = neo_hookean.MU, neo_hookean.LAM

    def jax_energy(xe, d, v):
        return neo_hookean.neo_hookean(xe, d, v, mu, lam, jax.numpy.log)

    expected = np.asarray(jax.vmap(jax.hessian(jax_energy))(x, dm_inv, vol))
    by_torch = np.stack(
        [
            torch.func.hessian(lambda z: neo_hookean.neo_hookean(z, torch.tensor(d), v, mu, lam, torch.log))(
                torch.tensor(xe)
            ).numpy()
            for xe, d, v in zip(x, dm_inv, vol)
        ]
    )
    np.testing.assert_allclose(by_torch, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
    args = (a.astype(dtype) for a in (x, dm_inv, vol))
    value, jac, hess = neo_hookean.tet_energy.value_jacobian_hessian(*args, mu, lam)
    assert hess.shape == (6, 12, 12) and hess.dtype == dtype
    np.testing.assert_array_equal(hess, np.swapaxes(hess, 1, 2))
    scale = np.abs(expected).max()
    rtol, atol = (1e-9, 1e-9 * scale) if dtype == "float64" else (2e-3, 2e-3 * scale)
    np.testing.assert_allclose(hess, expected, rtol=rtol, atol=atol)
    grad = np.asarray(jax.vmap(jax.grad(jax_energy))(x, dm_inv, vol))
    np.testing.assert_allclose(jac[:, 0], grad, rtol=rtol, atol=rtol * np.abs(grad).max())


def test_neo_hookean_hessian_program_is_built_and_fused():
    from symgrad.compiler.derive import HESSIAN_MAX_WORK, derive, hessian_fits

    d = derive(neo_hookean.tet_energy.trace())
    assert hessian_fits(d)  # within HESSIAN_MAX_WORK: 12 x the Jacobian program's assignments
    assert len(d.symbols["wrt"]) == 12 and 12 * len(d.body("jacobian")) <= HESSIAN_MAX_WORK
    ops = dict(neo_hookean.tet_energy.compiled().op_counts)
    assert ops["hvp"] <= 4 * ops["vjp"], ops


@sg.function(nondiff=("rest",))
def spring(x: sg.Vector(4), rest):
    """The 2-D spring of bench/bench_hessian.py (stiffness 50)."""
    return 25.0 * (sg.sqrt((x[2] - x[0]) ** 2 + (x[3] - x[1]) ** 2) - rest) ** 2


def test_axis_aligned_spring_hessian_is_not_zeroed(backend):
    """sqrt(dx**2 + dy**2) becomes hypot, whose derivative selects 0 at the origin; selecting on dx == 0
    instead made the Hessian's xx block 0 for a vertical spring (true: k (1 - rest/|dy|) = 25)."""
    torch = pytest.importorskip("torch")
    x = np.array([[0.0, 0.0, 0.0, 2.0], [0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 1.0, 1.0]])

    def reference(z):
        return 25.0 * (torch.sqrt((z[2] - z[0]) ** 2 + (z[3] - z[1]) ** 2) - 1.0) ** 2

    expected = np.stack([torch.func.hessian(reference)(torch.tensor(row)).numpy() for row in x])
    np.testing.assert_allclose(spring.hessian(x, np.ones(3)), expected, rtol=1e-12, atol=1e-12)
    grad = spring.jacobian(np.zeros((1, 4)), np.ones(1))  # both ends at one point: gradient 0, not NaN
    np.testing.assert_array_equal(grad, 0)
