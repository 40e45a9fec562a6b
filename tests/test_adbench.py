"""ADBench's BA and GMM problems (examples/bundle_adjustment.py, examples/gmm.py) against plain NumPy
references written here, central finite differences, and PyTorch / JAX when installed."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import bundle_adjustment as ba  # noqa: E402
import gmm  # noqa: E402

import symgrad as sg  # noqa: E402

# ---------------------------------------------------------------------------------------------------
# BA: a plain NumPy reference, one observation at a time, exactly as docs/adbench.md states it
# ---------------------------------------------------------------------------------------------------


def ref_rodrigues(r, Y):
    theta2 = float(r @ r)
    if theta2 != 0:
        theta = math.sqrt(theta2)
        v = r / theta
        return Y * math.cos(theta) + np.cross(v, Y) * math.sin(theta) + v * (v @ Y) * (1 - math.cos(theta))
    return Y + np.cross(r, Y)


def ref_project(cam, X):
    Xc = ref_rodrigues(cam[0:3], X - cam[3:6])
    u = Xc[:2] / Xc[2]
    s = u @ u
    return cam[6] * u * (1 + cam[9] * s + cam[10] * s * s) + cam[7:9]


def ref_ba(cams, X, w, feats, obs):
    reproj = np.array([w[i] * (ref_project(cams[c], X[j]) - feats[i]) for i, (c, j) in enumerate(obs)])
    return reproj, 1 - w**2


def ba_params(cams, X, w):
    return np.concatenate([cams.ravel(), X.ravel(), w])


def ba_unpack(theta, n, m):
    return (
        theta[: 11 * n].reshape(n, 11),
        theta[11 * n : 11 * n + 3 * m].reshape(m, 3),
        theta[11 * n + 3 * m :],
    )


def ba_residual_vector(theta, n, m, feats, obs, fn=None):
    cams, X, w = ba_unpack(theta, n, m)
    reproj, w_err = (fn or ba.ba_objective)(cams, X, w, feats, obs)
    return np.concatenate([np.asarray(reproj).ravel(), w_err])


def ba_fd_jacobian(cams, X, w, feats, obs, rel=1e-6):
    n, m = len(cams), len(X)
    theta = ba_params(cams, X, w)
    cols = []
    for a in range(theta.size):
        h = rel * max(1.0, abs(theta[a]))
        e = np.zeros_like(theta)
        e[a] = h
        cols.append(
            (
                ba_residual_vector(theta + e, n, m, feats, obs)
                - ba_residual_vector(theta - e, n, m, feats, obs)
            )
            / (2 * h)
        )
    return np.stack(cols, axis=1)


def assert_jacobian_close(J, J_fd, rtol=1e-5):
    """Column-scaled comparison (camera columns range over 1e-6 .. 1e6 in BAL-like data)."""
    scale = np.maximum(np.abs(J_fd).max(axis=0, keepdims=True), 1.0)
    np.testing.assert_allclose(J / scale, J_fd / scale, rtol=0, atol=rtol)


SMALL = dict(n=3, m=5, p=12)


@pytest.fixture
def small_ba():
    return ba.make_instance(SMALL["n"], SMALL["m"], SMALL["p"], seed=7)


def test_ba_objective_matches_reference(backend, small_ba):
    reproj, w_err = ba.ba_objective(*small_ba)
    ref_reproj, ref_w_err = ref_ba(*small_ba)
    assert reproj.shape == (SMALL["p"], 2) and w_err.shape == (SMALL["p"],)
    np.testing.assert_allclose(reproj, ref_reproj, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(w_err, ref_w_err, rtol=1e-14)


def test_ba_jacobian_values_match_objective(backend, small_ba):
    reproj, w_err, J = ba.ba_jacobian(*small_ba)
    ref_reproj, ref_w_err = ref_ba(*small_ba)
    np.testing.assert_allclose(reproj, ref_reproj, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(w_err, ref_w_err, rtol=1e-14)


def test_ba_jacobian_takes_lists_and_mixed_dtypes(backend, small_ba):
    """Array-likes and a float32 weight vector work as before out= buffers: same values, common dtype."""
    cams, X, w, feats, obs = small_ba
    _, _, J = ba.ba_jacobian(cams, X, w, feats, obs)
    _, w_err, J_mixed = ba.ba_jacobian(cams, X, w.astype(np.float32), feats.tolist(), obs)
    assert J_mixed.data.dtype == np.float64 and w_err.dtype == np.float64
    np.testing.assert_allclose(
        J_mixed.data,
        ba.ba_jacobian(cams, X, w.astype(np.float32).astype(np.float64), feats, obs)[2].data,
        rtol=1e-15,
    )
    np.testing.assert_allclose(J_mixed.data, J.data, rtol=1e-6, atol=1e-6 * np.abs(J.data).max())


def test_ba_csr_structure(backend, small_ba):
    cams, X, w, feats, obs = small_ba
    n, m, p = SMALL["n"], SMALL["m"], SMALL["p"]
    _, _, J = ba.ba_jacobian(*small_ba)
    assert J.shape == (3 * p, 11 * n + 3 * m + p)
    assert J.nnz == 31 * p == J.indices.size == J.data.size
    assert J.indptr.shape == (3 * p + 1,) and J.indptr[0] == 0 and J.indptr[-1] == 31 * p
    row_nnz = np.diff(J.indptr)
    assert (row_nnz[: 2 * p] == 15).all() and (row_nnz[2 * p :] == 1).all()
    for r in range(3 * p):
        cols = J.indices[J.indptr[r] : J.indptr[r + 1]]
        assert (np.diff(cols) > 0).all(), f"row {r}: columns not strictly ascending"
        if r < 2 * p:
            i = r // 2
            cam, pt = obs[i]
            expected = [
                *range(11 * cam, 11 * cam + 11),
                *range(11 * n + 3 * pt, 11 * n + 3 * pt + 3),
                11 * n + 3 * m + i,
            ]
        else:
            expected = [11 * n + 3 * m + (r - 2 * p)]
        assert cols.tolist() == expected
    # the weight rows hold -2w
    np.testing.assert_allclose(J.data[30 * p :], -2 * w, rtol=1e-15)
    # scipy agrees with to_dense (when installed)
    scipy_sparse = pytest.importorskip("scipy.sparse")
    S = J.to_scipy()
    assert isinstance(S, scipy_sparse.csr_matrix) and S.has_sorted_indices
    np.testing.assert_array_equal(S.toarray(), J.to_dense())


def test_ba_jacobian_matches_finite_differences(backend, small_ba):
    _, _, J = ba.ba_jacobian(*small_ba)
    assert_jacobian_close(J.to_dense(), ba_fd_jacobian(*small_ba))


def test_ba_rodrigues_guard_at_zero_rotation(backend, small_ba):
    cams, X, w, feats, obs = small_ba
    cams = cams.copy()
    cams[1, :3] = 0.0  # camera 1: sum(r^2) == 0 exactly -> the first-order branch
    data = (cams, X, w, feats, obs)
    reproj, w_err, J = ba.ba_jacobian(*data)
    assert np.isfinite(reproj).all() and np.isfinite(J.data).all()
    np.testing.assert_allclose(reproj, ref_ba(*data)[0], rtol=1e-12, atol=1e-9)
    assert_jacobian_close(J.to_dense(), ba_fd_jacobian(*data))


def test_ba_all_rotations_zero(backend):
    cams, X, w, feats, obs = ba.make_instance(2, 3, 6, seed=3)
    cams[:, :3] = 0.0
    _, _, J = ba.ba_jacobian(cams, X, w, feats, obs)
    assert np.isfinite(J.data).all()
    assert_jacobian_close(J.to_dense(), ba_fd_jacobian(cams, X, w, feats, obs))


def test_ba_perturbed_instance_blocks_differ(small_ba):
    """The jitter makes every observation's block different, so an index bug cannot hide."""
    _, _, J = ba.ba_jacobian(*small_ba)
    blocks = J.data[: 30 * SMALL["p"]].reshape(SMALL["p"], 30)
    assert len({tuple(np.round(b, 9)) for b in blocks}) == SMALL["p"]


def write_adbench_file(path, n, m, p, cam, pt, weight, feat):
    def fmt(values):
        return " ".join(repr(float(v)) for v in np.atleast_1d(values))

    lines = [f"{n} {m} {p}", fmt(cam), fmt(pt), fmt(weight), fmt(feat)]
    path.write_text("\n".join(lines) + "\n")


def test_ba_replicated_file_instance(backend, tmp_path):
    """ADBench's file format: one camera/point/weight/feature replicated, obs i -> (i mod n, i mod m).
    Shape, nnz and weight terms of ADBench's test.txt (n=2, m=10, p=10, w=0.417022): its unit test expects
    a 30 x 62 Jacobian with 310 values, w_err = 0.826092651516 and weight-row values -0.834044."""
    n, m, p = 2, 10, 10
    cam, pt, weight, feat = ba.BASE_CAMERA, ba.BASE_POINT, 0.417022, ba.BASE_FEATURE
    path = tmp_path / "test.txt"
    write_adbench_file(path, n, m, p, cam, pt, weight, feat)
    cams, X, w, feats, obs = ba.read_ba_instance(path)
    assert cams.shape == (n, 11) and X.shape == (m, 3) and w.shape == (p,) and feats.shape == (p, 2)
    np.testing.assert_array_equal(obs, np.stack([np.arange(p) % n, np.arange(p) % m], axis=1))
    reproj, w_err, J = ba.ba_jacobian(cams, X, w, feats, obs)
    assert J.shape == (30, 62) and J.nnz == 310 and J.indptr.size == 31
    np.testing.assert_allclose(w_err, np.full(p, 8.26092651515999976e-01), rtol=1e-12)
    np.testing.assert_allclose(J.data[300:], np.full(p, -8.34044e-01), rtol=1e-12)
    # replicated data: every observation has the same residual and the same 2 x 15 block, up to the few ulp
    # by which libmvec's vector sin/cos (the loop's body) and scalar libm (its tail rows) may differ
    np.testing.assert_allclose(reproj, np.tile(reproj[0], (p, 1)), rtol=1e-12)
    blocks = J.data[:300].reshape(p, 30)
    np.testing.assert_allclose(blocks, np.tile(blocks[0], (p, 1)), rtol=1e-12)
    np.testing.assert_allclose(reproj[0], ref_ba(cams, X, w, feats, obs)[0][0], rtol=1e-12)


def test_ba_structure_index_dtype():
    indptr, indices, shape = ba.ba_structure(4, 6, np.array([[0, 1], [3, 5], [2, 0]]))
    assert indptr.dtype == indices.dtype == np.int32
    assert shape == (9, 44 + 18 + 3)


def test_ba_structure_built_once_per_problem(backend, small_ba):
    """The CSR structure is built on a problem's first Jacobian and shared (read-only) by later ones while
    (n, m, obs) stay the same; a changed observation, even in place, gets a new, correct structure."""
    cams, X, w, feats, obs = small_ba
    obs = obs.copy()
    _, _, J1 = ba.ba_jacobian(cams, X, w, feats, obs)
    _, _, J2 = ba.ba_jacobian(cams, X, w, feats, obs.copy())
    assert J2.indices is J1.indices and J2.indptr is J1.indptr and J2.data is not J1.data
    assert not J1.indices.flags.writeable and not J1.indptr.flags.writeable
    with pytest.raises(ValueError):
        J1.indices[0] = 1
    obs[0] = (obs[0, 0] + 1) % len(cams), obs[0, 1]  # the same array object, one pair changed
    _, _, J3 = ba.ba_jacobian(cams, X, w, feats, obs)
    assert J3.indices is not J1.indices
    want = ba.ba_structure(len(cams), len(X), obs)
    np.testing.assert_array_equal(J3.indices, want[1])
    np.testing.assert_array_equal(J3.indptr, want[0])
    assert J3.indices[:11].tolist() == list(range(11 * obs[0, 0], 11 * obs[0, 0] + 11))


# -- the compiler itself on the BA model (see the helper's report) -------------------------------------


def test_fused_jacobian_kernel_matches_reverse_rows(backend):
    """Each row of the fused Jacobian equals a vjp with a unit cotangent (rows must not mix)."""
    f = ba.model().ba_residual
    cams, X, w, feats, obs = ba.make_instance(2, 3, 6, seed=1)
    cam_o, X_o = cams[obs[:, 0]], X[obs[:, 1]]
    _, J = f.value_and_jacobian(cam_o, X_o, w, feats)
    for row in range(2):
        seed = np.zeros_like(feats)
        seed[:, row] = 1
        g_cam, g_X, g_w, _ = f.vjp(cam_o, X_o, w, feats, seed)
        np.testing.assert_allclose(
            J[:, row, :15], np.concatenate([g_cam, g_X, g_w[:, None]], axis=1), rtol=1e-10, atol=1e-10
        )


@sg.function
def rodrigues_plain(r: sg.Vector(3), Y: sg.Vector(3)):
    """ADBench's Rodrigues rotation written with the single guard only (no inner double-where)."""
    theta2 = r.dot(r)
    theta = sg.sqrt(theta2)
    v = r / theta
    rot = Y * sg.cos(theta) + v.cross(Y) * sg.sin(theta) + v * v.dot(Y) * (1 - sg.cos(theta))
    small = Y + r.cross(Y)
    return [sg.where(sg.Ne(theta2, 0), rot[k], small[k]) for k in range(3)]


def test_plain_rodrigues_guard_gradient_finite(backend):
    r, Y = np.zeros((1, 3)), np.array([[1.0, 2.0, 3.0]])
    grads = rodrigues_plain.vjp(r, Y, np.ones((1, 3)))
    assert all(np.isfinite(g).all() for g in grads)
    # d(Y + r x Y)/dr . 1 = Y x 1
    np.testing.assert_allclose(grads[0][0], np.cross(Y[0], np.ones(3)), rtol=1e-14)
    J = rodrigues_plain.jacobian(r, Y)[0]
    skew_Y = np.array([[0, -Y[0, 2], Y[0, 1]], [Y[0, 2], 0, -Y[0, 0]], [-Y[0, 1], Y[0, 0], 0]])
    np.testing.assert_allclose(J, np.concatenate([-skew_Y, np.eye(3)], axis=1), rtol=1e-14, atol=1e-15)


# ---------------------------------------------------------------------------------------------------
# GMM: a direct NumPy / SciPy reference, one component at a time
# ---------------------------------------------------------------------------------------------------


def ref_gmm(alphas, means, icf, x, gamma, m):
    from scipy.special import logsumexp, multigammaln

    n, d = x.shape
    K = alphas.shape[0]
    A = np.zeros((n, K))
    for k in range(K):
        Q = np.diag(np.exp(icf[k, :d]))
        idx = d
        for c in range(d):  # strictly lower part, column by column
            for r in range(c + 1, d):
                Q[r, c] = icf[k, idx]
                idx += 1
        z = (x - means[k]) @ Q.T
        A[:, k] = alphas[k] + icf[k, :d].sum() - 0.5 * (z**2).sum(axis=1)
    n_w = d + m + 1
    C = n_w * d * (math.log(gamma) - 0.5 * math.log(2)) - multigammaln(0.5 * n_w, d)
    prior = (
        sum(
            0.5 * gamma**2 * ((np.exp(icf[k, :d]) ** 2).sum() + (icf[k, d:] ** 2).sum())
            - m * icf[k, :d].sum()
            for k in range(K)
        )
        - K * C
    )
    return -0.5 * n * d * math.log(2 * math.pi) + logsumexp(A, axis=1).sum() - n * logsumexp(alphas) + prior


def gmm_case(d, K, n=20, seed=0, gamma=1.3, m=0.7):
    alphas, means, icf, x, _, _ = gmm.make_instance(d, K, n, seed=seed)
    return alphas, means, icf, x, gamma, m


def gmm_flat(alphas, means, icf):
    return np.concatenate([alphas, means.ravel(), icf.ravel()])


@pytest.mark.parametrize("d,K", [(2, 2), (2, 3), (3, 3), (5, 4)])
def test_gmm_value_matches_reference(backend, d, K):
    case = gmm_case(d, K, seed=d * 10 + K)
    assert gmm.gmm_objective(*case) == pytest.approx(ref_gmm(*case), rel=1e-12, abs=1e-9)
    value, _ = gmm.gmm_gradient(*case)
    assert value == pytest.approx(ref_gmm(*case), rel=1e-12, abs=1e-9)


def test_gmm_value_adbench_defaults(backend):
    case = gmm.make_instance(4, 3, 50, seed=5)  # gamma = 1, m = 0 as ADBench generates them
    assert gmm.gmm_objective(*case) == pytest.approx(ref_gmm(*case), rel=1e-12)


def test_gmm_lgamma_and_constant():
    from scipy.special import multigammaln

    for a, d in [(1.5, 1), (2.5, 2), (7.0, 5), (35.0, 64)]:
        assert gmm.log_gamma_distrib(a, d) == pytest.approx(multigammaln(a, d), rel=1e-13)


@pytest.mark.parametrize("d,K", [(2, 2), (2, 3), (3, 2), (3, 3)])
def test_gmm_gradient_matches_finite_differences(backend, d, K):
    alphas, means, icf, x, gamma, m = gmm_case(d, K, n=20, seed=d + 7 * K)
    _, grad = gmm.gmm_gradient(alphas, means, icf, x, gamma, m)
    assert grad.shape == (K * (1 + d + d * (d + 1) // 2),)
    theta = gmm_flat(alphas, means, icf)

    def f(t):
        a, mu, ic = gmm.split_gradient(t, d, K)
        return gmm.gmm_objective(a, mu, ic, x, gamma, m)

    fd = np.empty_like(theta)
    for j in range(theta.size):
        h = 1e-5 * max(1.0, abs(theta[j]))
        e = np.zeros_like(theta)
        e[j] = h
        fd[j] = (f(theta + e) - f(theta - e)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(fd).max()))


def test_gmm_gradient_extreme_logits_stay_finite(backend):
    """Far-away points: every logit is hugely negative; the max-shifted log-sum-exp keeps value and
    gradient finite (a naive log(sum(exp)) gives -inf and NaN)."""
    alphas, means, icf, x, gamma, m = gmm_case(2, 3, n=10, seed=1)
    x = x + 1e4
    value, grad = gmm.gmm_gradient(alphas, means, icf, x, gamma, m)
    assert np.isfinite(value) and np.isfinite(grad).all()
    assert value == pytest.approx(ref_gmm(alphas, means, icf, x, gamma, m), rel=1e-10)


# ---------------------------------------------------------------------------------------------------
# PyTorch / JAX comparisons (skipped when not installed)
# ---------------------------------------------------------------------------------------------------


def torch_ba_residuals(torch, theta, n, m, feats, obs):
    cams = theta[: 11 * n].reshape(n, 11)
    X = theta[11 * n : 11 * n + 3 * m].reshape(m, 3)
    w = theta[11 * n + 3 * m :]
    c = cams[torch.as_tensor(obs[:, 0])]
    P = X[torch.as_tensor(obs[:, 1])]
    r, C = c[:, 0:3], c[:, 3:6]
    Y = P - C
    theta2 = (r * r).sum(1, keepdim=True)
    t = torch.sqrt(theta2)
    v = r / t
    rot = (
        Y * torch.cos(t)
        + torch.linalg.cross(v, Y) * torch.sin(t)
        + v * (v * Y).sum(1, keepdim=True) * (1 - torch.cos(t))
    )
    Xc = torch.where(theta2 != 0, rot, Y + torch.linalg.cross(r, Y))
    u = Xc[:, :2] / Xc[:, 2:3]
    s = (u * u).sum(1, keepdim=True)
    proj = c[:, 6:7] * u * (1 + c[:, 9:10] * s + c[:, 10:11] * s * s) + c[:, 7:9]
    reproj = w[:, None] * (proj - torch.as_tensor(feats))
    return torch.cat([reproj.reshape(-1), 1 - w * w])


def test_ba_against_pytorch(small_ba):
    torch = pytest.importorskip("torch")
    cams, X, w, feats, obs = small_ba
    n, m = len(cams), len(X)
    theta = torch.tensor(ba_params(cams, X, w), dtype=torch.float64)
    J_torch = torch.autograd.functional.jacobian(
        lambda t: torch_ba_residuals(torch, t, n, m, feats, obs), theta
    ).numpy()
    F_torch = torch_ba_residuals(torch, theta, n, m, feats, obs).numpy()
    reproj, w_err, J = ba.ba_jacobian(*small_ba)
    np.testing.assert_allclose(np.concatenate([reproj.ravel(), w_err]), F_torch, rtol=1e-12, atol=1e-9)
    assert_jacobian_close(J.to_dense(), J_torch, rtol=1e-10)


def torch_gmm(torch, alphas, means, icf, x, gamma, m):
    n, d = x.shape
    K = alphas.shape[0]
    q, low = icf[:, :d], icf[:, d:]
    rows, cols = gmm.tri_indices(d)
    Q = torch.diag_embed(torch.exp(q))
    L = torch.zeros(K, d, d, dtype=icf.dtype)
    L[:, rows, cols] = low
    Q = Q + L
    z = torch.einsum("krc,nkc->nkr", Q, x[:, None, :] - means[None])
    A = alphas + q.sum(1) - 0.5 * (z * z).sum(-1)
    C = gmm.wishart_constant(d, gamma, m)
    prior = 0.5 * gamma**2 * ((torch.exp(q) ** 2).sum() + (low**2).sum()) - m * q.sum() - K * C
    return (
        -0.5 * n * d * math.log(2 * math.pi)
        + torch.logsumexp(A, 1).sum()
        - n * torch.logsumexp(alphas, 0)
        + prior
    )


@pytest.mark.parametrize("d,K", [(2, 3), (4, 5)])
def test_gmm_against_pytorch(d, K):
    torch = pytest.importorskip("torch")
    alphas, means, icf, x, gamma, m = gmm_case(d, K, n=30, seed=3)
    params = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (alphas, means, icf)]
    value = torch_gmm(torch, *params, torch.tensor(x), gamma, m)
    value.backward()
    grad_torch = np.concatenate([p.grad.numpy().ravel() for p in params])
    ours_value, ours_grad = gmm.gmm_gradient(alphas, means, icf, x, gamma, m)
    assert ours_value == pytest.approx(value.item(), rel=1e-12)
    np.testing.assert_allclose(ours_grad, grad_torch, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("d,K", [(2, 3), (4, 5)])
def test_gmm_against_jax(d, K):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    from jax.scipy.special import logsumexp

    alphas, means, icf, x, gamma, m = gmm_case(d, K, n=30, seed=4)
    rows, cols = gmm.tri_indices(d)
    C = gmm.wishart_constant(d, gamma, m)

    def f(alphas, means, icf):
        q, low = icf[:, :d], icf[:, d:]
        Q = (
            jnp.zeros((K, d, d))
            .at[:, jnp.arange(d), jnp.arange(d)]
            .set(jnp.exp(q))
            .at[:, rows, cols]
            .set(low)
        )
        z = jnp.einsum("krc,nkc->nkr", Q, x[:, None, :] - means[None])
        A = alphas + q.sum(1) - 0.5 * (z * z).sum(-1)
        prior = 0.5 * gamma**2 * ((jnp.exp(q) ** 2).sum() + (low**2).sum()) - m * q.sum() - K * C
        n = x.shape[0]
        return -0.5 * n * d * math.log(2 * math.pi) + logsumexp(A, 1).sum() - n * logsumexp(alphas) + prior

    value, grads = jax.value_and_grad(f, argnums=(0, 1, 2))(
        jnp.asarray(alphas), jnp.asarray(means), jnp.asarray(icf)
    )
    ours_value, ours_grad = gmm.gmm_gradient(alphas, means, icf, x, gamma, m)
    assert ours_value == pytest.approx(float(value), rel=1e-12)
    np.testing.assert_allclose(
        ours_grad, np.concatenate([np.asarray(g).ravel() for g in grads]), rtol=1e-10, atol=1e-10
    )
