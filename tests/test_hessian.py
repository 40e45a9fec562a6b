"""Second order: ``hessian``, ``value_jacobian_hessian`` and ``hvp`` (forward over reverse on the derivative
programs, one fused kernel each), against torch.func.hessian, jax.hessian and finite differences of the
gradient, on both targets and dtypes.

Tolerances: float64 rtol 1e-10 (atol 1e-12) against the frameworks, 1e-6 against central differences of the
compiled Jacobian (step 1e-6); float32 rtol 2e-4 (atol 2e-4 times the largest entry) against the float64
reference, the float32 rounding of a few dozen operations."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.compiler import compile_spec
from symgrad.errors import ArgumentError

RNG = np.random.default_rng(21)
TOL = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-4)}


@sg.function
def mixed(x, y):
    return sg.sin(x) * y**3 + sg.exp(x * y) - sg.log(1 + x**2) / (2 + sg.cos(y))


@sg.function
def energy(p: sg.Vector(3), k):
    """A spring from the origin to p of stiffness k and rest length 1, plus a softplus barrier on p[2]."""
    length = sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2)
    return k * (length - 1) ** 2 / 2 + sg.softplus(-p[2]) + sg.tanh(p[0] * p[1])


@sg.function
def polar_map(r, theta):
    """Two outputs: the Hessian has one block per output."""
    return r * sg.cos(theta), r * sg.sin(theta) * sg.sigmoid(r)


@sg.function(nondiff=("w",))
def weighted(x: sg.Vector(2), w):
    return w * sg.exp(-x[0] * x[1]) + x[0] ** 4


def _torch_mixed(z):
    import torch

    x, y = z[0], z[1]
    return torch.sin(x) * y**3 + torch.exp(x * y) - torch.log(1 + x**2) / (2 + torch.cos(y))


def _torch_energy(z):
    import torch

    p, k = z[:3], z[3]
    length = torch.sqrt((p**2).sum())
    return k * (length - 1) ** 2 / 2 + torch.nn.functional.softplus(-p[2]) + torch.tanh(p[0] * p[1])


def _torch_polar(z):
    import torch

    r, theta = z[0], z[1]
    return torch.stack([r * torch.cos(theta), r * torch.sin(theta) * torch.sigmoid(r)])


def _points(n: int = 6) -> dict:
    return {
        "mixed": (RNG.uniform(-1, 1, n), RNG.uniform(-1, 1, n)),
        "energy": (RNG.normal(size=(n, 3)), RNG.uniform(0.5, 2, n)),
        "polar_map": (RNG.uniform(0.1, 2, n), RNG.uniform(-3, 3, n)),
    }


CASES = [(mixed, _torch_mixed), (energy, _torch_energy), (polar_map, _torch_polar)]


def _flat(args: tuple) -> np.ndarray:
    """The differentiable arguments of each row, flattened in order (the Jacobian's columns)."""
    return np.concatenate([np.reshape(a, (a.shape[0], -1)) for a in args], axis=1)


@pytest.mark.parametrize("fn, reference", CASES, ids=[f.name for f, _ in CASES])
def test_hessian_matches_torch_func_hessian(backend, dtype, fn, reference):
    torch = pytest.importorskip("torch")
    args = _points()[fn.name]
    expected = torch.func.vmap(torch.func.hessian(reference))(torch.tensor(_flat(args))).numpy()
    outs, jac, hess = fn.value_jacobian_hessian(*(a.astype(dtype) for a in args))
    assert hess.dtype == dtype and hess.shape == expected.shape
    scale = np.abs(expected).max()
    tol = TOL[dtype]
    np.testing.assert_allclose(hess, expected, rtol=tol["rtol"], atol=tol["atol"] * scale)
    np.testing.assert_array_equal(hess, np.swapaxes(hess, -1, -2))  # one triangle, mirrored: exact
    ref_outs, ref_jac = fn.value_and_jacobian(*(a.astype(dtype) for a in args))
    np.testing.assert_allclose(jac, ref_jac, rtol=tol["rtol"], atol=tol["atol"] * np.abs(ref_jac).max())
    for o, r in zip(
        outs if isinstance(outs, tuple) else (outs,), ref_outs if isinstance(outs, tuple) else (ref_outs,)
    ):
        np.testing.assert_allclose(o, r, rtol=tol["rtol"], atol=tol["atol"])


def test_hessian_matches_jax_hessian(backend):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def reference(z):
        x, y = z[0], z[1]
        return jnp.sin(x) * y**3 + jnp.exp(x * y) - jnp.log(1 + x**2) / (2 + jnp.cos(y))

    args = _points()["mixed"]
    expected = np.asarray(jax.vmap(jax.hessian(reference))(jnp.asarray(_flat(args))))
    np.testing.assert_allclose(mixed.hessian(*args), expected, **TOL["float64"])


def test_hessian_matches_differences_of_the_jacobian(backend):
    p, k = _points(4)["energy"]
    h = 1e-6
    hess = energy.hessian(p, k)
    columns = []
    for c in range(4):
        step = np.zeros(4)
        step[c] = h
        plus = energy.jacobian(p + step[:3], k + step[3])[:, 0, :]
        minus = energy.jacobian(p - step[:3], k - step[3])[:, 0, :]
        columns.append((plus - minus) / (2 * h))
    np.testing.assert_allclose(hess, np.stack(columns, axis=-1), rtol=1e-6, atol=1e-6)


def test_nondiff_argument_has_no_hessian_columns_and_out_buffers(backend):
    x, w = RNG.normal(size=(5, 2)), RNG.uniform(1, 2, 5)
    hess = weighted.hessian(x, w)
    assert hess.shape == (5, 2, 2)
    e = np.exp(-x[:, 0] * x[:, 1])
    expected = np.empty((5, 2, 2))
    expected[:, 0, 0] = w * x[:, 1] ** 2 * e + 12 * x[:, 0] ** 2
    expected[:, 1, 1] = w * x[:, 0] ** 2 * e
    expected[:, 0, 1] = expected[:, 1, 0] = w * (x[:, 0] * x[:, 1] - 1) * e
    np.testing.assert_allclose(hess, expected, rtol=1e-12)
    buffers = (np.empty(5), np.empty((5, 1, 2)), np.empty((5, 2, 2)))
    result = weighted.value_jacobian_hessian(x, w, out=buffers)
    assert all(r is b for r, b in zip(result, buffers))
    np.testing.assert_allclose(buffers[2], expected, rtol=1e-12)


def test_hvp_is_the_hessian_times_the_tangent(backend, dtype):
    p, k = (a.astype(dtype) for a in _points()["energy"])
    tp, tk = RNG.normal(size=p.shape).astype(dtype), RNG.normal(size=k.shape).astype(dtype)
    hvp_p, hvp_k = energy.hvp((p, k), (tp, tk))
    assert hvp_p.shape == p.shape and hvp_k.shape == k.shape and hvp_p.dtype == dtype
    expected = np.einsum("nij,nj->ni", energy.hessian(p, k).astype(np.float64), _flat((tp, tk[:, None])))
    tol = TOL[dtype]
    atol = tol["atol"] * np.abs(expected).max()
    np.testing.assert_allclose(hvp_p, expected[:, :3], rtol=tol["rtol"], atol=atol)
    np.testing.assert_allclose(hvp_k, expected[:, 3], rtol=tol["rtol"], atol=atol)


def test_hvp_weights_outputs_by_the_cotangent_and_skips_nondiff(backend):
    r, theta = _points()["polar_map"]
    cot = (RNG.normal(size=r.shape), RNG.normal(size=r.shape))
    tangent = (RNG.normal(size=r.shape), RNG.normal(size=r.shape))
    got = polar_map.hvp((r, theta), tangent, cot)
    weighted_h = np.einsum("no,noij->nij", np.stack(cot, -1), polar_map.hessian(r, theta))
    expected = np.einsum("nij,nj->ni", weighted_h, np.stack(tangent, -1))
    np.testing.assert_allclose(np.stack(got, -1), expected, rtol=1e-10, atol=1e-12)
    x, w = RNG.normal(size=(4, 2)), RNG.uniform(1, 2, 4)
    hvp_x, hvp_w = weighted.hvp((x, w), (np.ones((4, 2)), None))
    assert hvp_w is None
    np.testing.assert_allclose(hvp_x, weighted.hessian(x, w).sum(-1), rtol=1e-12)
    with pytest.raises(ArgumentError, match="pass None as its tangent"):
        weighted.hvp((x, w), (np.ones((4, 2)), np.ones(4)))


def test_hvp_of_a_broadcast_argument_is_summed_back(backend):
    x = RNG.normal(size=5)
    (hvp_x, hvp_y) = mixed.hvp((x, 0.5), (np.ones(5), 1.0))
    full = mixed.hvp((x, np.full(5, 0.5)), (np.ones(5), np.ones(5)))
    assert np.shape(hvp_y) == ()
    np.testing.assert_allclose(hvp_y, full[1].sum(), rtol=1e-12)
    np.testing.assert_allclose(hvp_x, full[0], rtol=1e-12)


@sg.function
def relu_sq(x):
    return sg.relu(x) + sg.relu(x) ** 2 / 2


@sg.function
def sqrt_where(x):
    return sg.where(x > 0, sg.sqrt(x), 0)


@sg.function
def soft(x):
    return sg.softplus(x)


@sg.function
def xlogx(x):
    return sg.where(x > 0, x * sg.log(x), 0)


def test_second_derivatives_at_kinks_follow_the_first_derivative_conventions(backend, dtype):
    x = np.array([-1000.0, -1.0, 0.0, 1.0, 4.0, 1000.0], dtype)  # Hessians: batch + (1, 1)
    np.testing.assert_array_equal(
        relu_sq.hessian(x)[:, 0, 0], [0, 0, 0, 1, 1, 1]
    )  # relu'' = 0, (relu**2/2)'' = step
    np.testing.assert_allclose(
        sqrt_where.hessian(x)[:, 0, 0], [0, 0, 0, -0.25, -1 / 32, -0.25 * 1000**-1.5], rtol=1e-6
    )
    np.testing.assert_allclose(
        soft.hessian(x)[:, 0, 0],
        [0, 0.19661193324148185, 0.25, 0.19661193324148185, 0.017662706213291118, 0],
        rtol=1e-6,
    )
    np.testing.assert_allclose(xlogx.hessian(x)[:, 0, 0], [0, 0, 0, 1, 0.25, 1e-3], rtol=1e-6)
    for f in (relu_sq, sqrt_where, soft, xlogx):
        assert np.isfinite(f.hvp((x,), (np.ones_like(x),))[0]).all(), f.name


def test_programs_are_fused_and_cheap():
    kernel = compile_spec(energy.trace())
    ops = dict(kernel.op_counts)
    assert {"value_jacobian_hessian", "hvp"} <= set(ops)
    assert ops["hvp"] <= 4 * ops["vjp"], ops  # forward over reverse: a small multiple of the vjp
    program = kernel.program("value_jacobian_hessian")
    assert [s.role for s in program.outputs] == ["output", "jacobian", "hessian"]
    # the lower triangle is the same value as the upper one
    value = {a.target.name: str(a.expr) for a in program.body}
    assert value["hessian_1_0"] == value["hessian_0_1"] and value["hessian_2_3"] == value["hessian_3_2"]


@sg.function
def wide(v: sg.Vector(60)):
    return sum(v[i] ** 2 for i in range(60))


def test_too_large_a_hessian_is_not_compiled_and_says_so():
    assert "hvp" in wide.compiled().programs
    with pytest.raises(ArgumentError, match="no value_jacobian_hessian program"):
        wide.hessian(np.ones(60))
    np.testing.assert_allclose(wide.hvp((np.ones(60),), (np.arange(60.0),))[0], 2 * np.arange(60.0))


@sg.function
def cube(x):
    return x**3


def test_func_grad_composes_to_any_order(backend):
    second = sg.func.grad(sg.func.grad(cube))
    assert second(3.0) == 18.0
    np.testing.assert_array_equal(sg.func.grad(second)(np.array([1.0, 2.0])), [6.0, 6.0])
    assert second.compiled().derivatives == {"x": "6*grad"}
    p, k = _points(3)["energy"]
    grad_p, grad_k = sg.func.grad(energy, (0, 1))(p, k)
    jac = energy.jacobian(p, k)[:, 0, :]
    np.testing.assert_allclose(grad_p, jac[:, :3], rtol=1e-12)
    np.testing.assert_allclose(grad_k, jac[:, 3], rtol=1e-12)
    np.testing.assert_allclose(
        sg.func.grad(sg.func.grad(soft))(np.array([-1000.0, 0.0, 1000.0])), [0, 0.25, 0]
    )
    with pytest.raises(sg.ModelError, match="one scalar output"):
        sg.func.grad(polar_map)(1.0, 2.0)
    with pytest.raises(sg.ModelError, match="not a differentiable argument"):
        sg.func.grad(weighted, 1)


@sg.function
def neo_hookean(x: sg.Vector(12)):
    """Neo-Hookean energy of one tetrahedron (4 vertices x 3 coordinates; rest shape the unit corner)."""
    F = [[x[3 * (v + 1) + r] - x[r] for v in range(3)] for r in range(3)]
    J = (
        F[0][0] * (F[1][1] * F[2][2] - F[1][2] * F[2][1])
        - F[0][1] * (F[1][0] * F[2][2] - F[1][2] * F[2][0])
        + F[0][2] * (F[1][0] * F[2][1] - F[1][1] * F[2][0])
    )
    log_j = sg.log(J)
    return (sum(F[r][c] ** 2 for r in range(3) for c in range(3)) - 3) / 2 - log_j + 5 * log_j**2


def test_twelve_input_element_hessian_matches_torch(backend, dtype):
    torch = pytest.importorskip("torch")

    def reference(x):
        F = torch.stack([x[3 * (v + 1) : 3 * (v + 2)] - x[:3] for v in range(3)], dim=1)
        log_j = torch.log(torch.linalg.det(F))
        return ((F**2).sum() - 3) / 2 - log_j + 5 * log_j**2

    rest = np.array([0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1], float)
    x = rest + 0.1 * RNG.normal(size=(8, 12))
    # row by row: torch.func.vmap of this hessian (through linalg.det) gives wrong rows in torch 2.13
    expected = np.stack([torch.func.hessian(reference)(torch.tensor(row)).numpy() for row in x])
    hess = neo_hookean.hessian(x.astype(dtype))
    assert hess.shape == (8, 12, 12)
    tol = TOL[dtype]
    np.testing.assert_allclose(
        hess, expected, rtol=tol["rtol"] * 100, atol=tol["atol"] * np.abs(expected).max()
    )
    ops = neo_hookean.compiled().op_counts
    assert ops["value_jacobian_hessian"] <= 12 * ops["value_and_jacobian"], ops
