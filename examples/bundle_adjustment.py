"""ADBench bundle adjustment: objective and sparse Jacobian from the symbolic model in ``ba_model.py``.

    reproj_err, w_err = ba_objective(cams, X, w, feats, obs)
    reproj_err, w_err, J = ba_jacobian(cams, X, w, feats, obs)      # J: BASparseMat (CSR)

``cams`` (n, 11), ``X`` (m, 3), ``w`` (p,), ``feats`` (p, 2), ``obs`` (p, 2) integer (camera, point) pairs.
The residual is F = [reproj_err (2p) ; w_err (p)]. Its Jacobian J is 3p x (11n + 3m + p): rows 2i, 2i+1 hold
observation i's 15 nonzeros [11 camera | 3 point | 1 weight] in ascending column order, rows 2p.. hold
d w_err_i / d w_i = -2 w_i. One call of the compiled function's fused ``value_and_jacobian`` computes every
observation's residual and 2 x 15 block in a single pass (cameras and points gathered per observation; the
feature is declared ``nondiff``, so it has no columns) and writes the blocks straight into the CSR values
(``out=``); the CSR structure is built with vectorised NumPy once per problem (``problem_structure``).

    python examples/bundle_adjustment.py                  # a small perturbed instance, timings
    python examples/bundle_adjustment.py data/ba/ba1_n49_m7776_p31843.txt    # an ADBench file
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

MODEL = Path(__file__).resolve().parent / "ba_model.py"
N_CAM, N_PT = 11, 3
BLOCK = N_CAM + N_PT + 1  # nonzeros of one reprojection row

_model = None


def model(force: bool = False):
    """The compiled ``ba_model.py`` (compiled into the cache on first use)."""
    global _model
    if _model is None or force:
        _model = sg.compile(MODEL, force=force)
    return _model


# -- the sparse Jacobian --------------------------------------------------------------------------------


@dataclass
class BASparseMat:
    """ADBench's BA Jacobian in CSR form (``rows`` of ADBench's BASparseMat is ``indptr`` here)."""

    indptr: np.ndarray  # (nrows + 1,)
    indices: np.ndarray  # (nnz,) column of each value, ascending within a row
    data: np.ndarray  # (nnz,) values, row-major
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.data.size)

    def to_dense(self) -> np.ndarray:
        dense = np.zeros(self.shape, dtype=self.data.dtype)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        dense[rows, self.indices] = self.data
        return dense

    def to_scipy(self):
        """The same matrix as ``scipy.sparse.csr_matrix`` (no copy of the arrays)."""
        from scipy.sparse import csr_matrix

        return csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def _index_dtype(*sizes: int):
    return np.int32 if max(sizes) < np.iinfo(np.int32).max else np.int64


def ba_structure(n: int, m: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(indptr, indices, shape) of the Jacobian for ``n`` cameras, ``m`` points and observations ``obs``.

    Observation i's 15 columns are one row gathered from a camera column table plus one from a point
    column table (row copies, no per-element index arithmetic), written to both of its rows."""
    obs = np.asarray(obs)
    p = obs.shape[0]
    shape = (3 * p, N_CAM * n + N_PT * m + p)
    itype = _index_dtype(shape[1], 31 * p)
    w0 = N_CAM * n + N_PT * m  # first weight column
    table = np.zeros((n + m, BLOCK), itype)  # camera rows, then point rows
    table[:n, :N_CAM] = np.arange(N_CAM * n, dtype=itype).reshape(n, N_CAM)
    table[n:, N_CAM : N_CAM + N_PT] = np.arange(N_CAM * n, w0, dtype=itype).reshape(m, N_PT)
    cols = np.take(table, obs[:, 0], axis=0)
    cols += np.take(table, obs[:, 1] + n, axis=0)
    indices = np.empty(31 * p, itype)
    weight_rows = indices[30 * p :]
    weight_rows[:] = np.arange(w0, w0 + p, dtype=itype)
    cols[:, -1] = weight_rows
    indices[: 30 * p].reshape(p, 2, BLOCK)[:] = cols[:, None, :]
    indptr = np.empty(3 * p + 1, itype)
    indptr[: 2 * p + 1] = np.arange(0, 30 * p + 1, BLOCK, dtype=itype)
    indptr[2 * p + 1 :] = np.arange(30 * p + 1, 31 * p + 1, dtype=itype)
    return indptr, indices, shape


_last_structure: list = []  # [(n, m, a copy of obs, (indptr, indices, shape))]: the last problem's


def problem_structure(n: int, m: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """``ba_structure(n, m, obs)``, built once per problem: while ``n``, ``m`` and every observation pair
    equal the last call's (one comparison of ``obs``, ~1/30 of a build), its arrays are returned again,
    read-only (the values of each Jacobian are new; its index arrays are shared)."""
    obs = np.asarray(obs)
    if _last_structure:
        n0, m0, obs0, built = _last_structure[0]
        if (n0, m0) == (n, m) and obs0.shape == obs.shape and np.array_equal(obs0, obs):
            return built
    built = ba_structure(n, m, obs)
    for a in built[:2]:
        a.flags.writeable = False
    _last_structure[:] = [(n, m, obs.copy(), built)]
    return built


# -- objective and Jacobian -------------------------------------------------------------------------------


def _gather(cams, X, obs):
    obs = np.asarray(obs)
    return np.take(cams, obs[:, 0], axis=0), np.take(X, obs[:, 1], axis=0)


def ba_objective(cams, X, w, feats, obs) -> tuple[np.ndarray, np.ndarray]:
    """(reproj_err (p, 2), w_err (p,)) of ADBench's BA problem."""
    m = model()
    cam_o, X_o = _gather(cams, X, obs)
    return m.ba_residual(cam_o, X_o, w, feats), m.ba_weight_error(w)


def ba_residual_blocks(cam_o, X_o, w, feats, out=None) -> tuple[np.ndarray, np.ndarray]:
    """(reproj_err (p, 2), blocks (p, 2, 15)) for already gathered per-observation cameras and points;
    ``out``: (reproj_err, blocks) arrays to write into."""
    return model().ba_residual.value_and_jacobian(cam_o, X_o, w, feats, out=out)


def ba_jacobian(cams, X, w, feats, obs, structure=None) -> tuple[np.ndarray, np.ndarray, BASparseMat]:
    """(reproj_err (p, 2), w_err (p,), J) with J the 3p x (11n + 3m + p) CSR Jacobian.

    The sparsity depends only on (n, m, obs): it is built on the first call for a problem and reused while
    (n, m, obs) stay the same (``problem_structure``); ``structure=(J.indptr, J.indices)`` from an earlier
    call skips even the comparison of ``obs``."""
    cams, X, w, feats = np.asarray(cams), np.asarray(X), np.asarray(w), np.asarray(feats)
    p = w.shape[0]
    cam_o, X_o = _gather(cams, X, obs)
    dtype = np.result_type(cam_o, X_o, w, feats)
    w = w.astype(dtype, copy=False)  # the weight term's buffers have the common dtype too
    data = np.empty(31 * p, dtype)
    reproj_err = np.empty((p, 2), dtype)
    ba_residual_blocks(cam_o, X_o, w, feats, out=(reproj_err, data[: 30 * p].reshape(p, 2, BLOCK)))
    w_err, _ = model().ba_weight_error.value_and_jacobian(
        w, out=(np.empty(p, dtype), data[30 * p :].reshape(p, 1, 1))
    )
    shape = (3 * p, N_CAM * cams.shape[0] + N_PT * X.shape[0] + p)
    if structure is None:
        indptr, indices, shape = problem_structure(cams.shape[0], X.shape[0], obs)
    else:
        indptr, indices = structure
    return reproj_err, w_err, BASparseMat(indptr, indices, data, shape)


# -- data: ADBench's file format and perturbed instances -------------------------------------------------


def read_ba_instance(path: str | Path):
    """Load an ADBench BA file: (cams (n,11), X (m,3), w (p,), feats (p,2), obs (p,2)).

    The file holds 'n m p' and ONE camera, point, weight and feature; like every ADBench loader, they are
    replicated and observation i is (camera i mod n, point i mod m)."""
    tokens = Path(path).read_text().split()
    n, m, p = (int(t) for t in tokens[:3])
    values = np.array(tokens[3 : 3 + N_CAM + N_PT + 1 + 2], dtype=np.float64)
    cam, pt, weight, feat = values[:11], values[11:14], values[14], values[15:17]
    return replicated_instance(n, m, p, cam, pt, weight, feat)


def replicated_instance(n: int, m: int, p: int, cam, pt, weight, feat):
    """ADBench's replication of one camera / point / weight / feature to an (n, m, p) problem."""
    i = np.arange(p)
    cams = np.tile(np.asarray(cam, np.float64), (n, 1))
    X = np.tile(np.asarray(pt, np.float64), (m, 1))
    w = np.full(p, float(weight))
    feats = np.tile(np.asarray(feat, np.float64), (p, 1))
    obs = np.stack([i % n, i % m], axis=1)
    return cams, X, w, feats, obs


#: A plausible ADBench-style camera/point/weight/feature (BAL-like magnitudes) for generated instances.
BASE_CAMERA = np.array([0.0157, -0.0128, -0.0044, -0.034, -0.108, 1.12, 399.75, 0.3, -0.2, -3.2e-7, 5.9e-13])
BASE_POINT = np.array([-0.612, 0.572, -1.847])
BASE_WEIGHT = 0.8
BASE_FEATURE = np.array([-332.65, 262.09])


def make_instance(n: int, m: int, p: int, seed: int = 0, jitter: float = 0.1):
    """A perturbed instance with ADBench's shape and sparsity: every camera, point, weight and feature is
    jittered separately (so a wrong index shows up in the values), obs i -> (i mod n, i mod m)."""
    rng = np.random.default_rng(seed)
    cams, X, w, feats, obs = replicated_instance(n, m, p, BASE_CAMERA, BASE_POINT, BASE_WEIGHT, BASE_FEATURE)
    cams = cams.copy()
    cams[:, :3] += jitter * rng.normal(size=(n, 3))  # rotations
    cams[:, 3:6] += jitter * rng.normal(size=(n, 3))  # centres
    cams[:, 6] *= 1 + jitter * rng.normal(size=n)  # focal length
    cams[:, 7:9] += jitter * rng.normal(size=(n, 2))  # principal point
    cams[:, 9] += 1e-2 * jitter * rng.normal(size=n)  # k1 (keep the distortion moderate)
    cams[:, 10] += 1e-3 * jitter * rng.normal(size=n)  # k2
    X = X + jitter * rng.normal(size=X.shape)
    w = w + jitter * rng.normal(size=p)
    feats = feats + 10 * jitter * rng.normal(size=feats.shape)
    return cams, X, w, feats, obs


# -- demo ------------------------------------------------------------------------------------------------


def _best(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", help="an ADBench BA file (default: a generated instance)")
    parser.add_argument("--size", default="20,400,2000", help="n,m,p of the generated instance")
    parser.add_argument("--backend", choices=("c", "numpy"), default=None)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    if args.backend:
        sg.set_backend(args.backend)
    if args.file:
        data = read_ba_instance(args.file)
        label = Path(args.file).name
    else:
        n, m, p = (int(v) for v in args.size.split(","))
        data = make_instance(n, m, p)
        label = f"generated n={n} m={m} p={p}"
    t0 = time.perf_counter()
    model()
    print(f"{label}: model loaded in {time.perf_counter() - t0:.2f} s, backend {sg.get_backend()}")
    reproj_err, w_err = ba_objective(*data)
    _, _, J = ba_jacobian(*data)
    t_obj = _best(lambda: ba_objective(*data), args.repeat)
    t_jac = _best(lambda: ba_jacobian(*data), args.repeat)
    print(f"  residual norm  {np.sqrt((reproj_err**2).sum() + (w_err**2).sum()):.6g}")
    print(f"  Jacobian       {J.shape[0]} x {J.shape[1]}, nnz {J.nnz}")
    print(f"  objective      {t_obj * 1e3:8.3f} ms")
    print(f"  Jacobian       {t_jac * 1e3:8.3f} ms   (Jacobian / objective = {t_jac / t_obj:.2f})")


if __name__ == "__main__":
    main()
