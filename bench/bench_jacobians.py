"""Per-row Jacobians of vector-argument functions: ns per observation, one thread, in one run.

symgrad's fused ``value_and_jacobian`` (C backend) against JAX ``jit(vmap(jacfwd))`` and PyTorch
``vmap(jacrev)`` (value and Jacobian each), for the BA reprojection residual (``examples/ba_model.py``: 15
inputs, 2 x 15 block), a quaternion rotation (4 + 3 inputs, 3 x 7) and an LSTM cell with per-row weights
(hidden 2, input 2: 62 inputs, 4 x 62). ``--before PATH`` adds a column timed by the same script with
``PATH`` (another symgrad checkout) first on ``sys.path``: the speed of the C code before a change.

    python bench/bench_jacobians.py            # N = 32768 rows, float64 and float32
    python bench/bench_jacobians.py --quick    # fewer repeats
    python bench/bench_jacobians.py --before /path/to/old/checkout
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any OpenMP library loads: one thread throughout

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if os.environ.get("_SYMGRAD_BENCH_BEFORE"):  # the --before child: that checkout's symgrad and emitters,
    sys.path.insert(0, os.environ["_SYMGRAD_BENCH_BEFORE"])  # imported before common.py puts ROOT first
    import emitters  # noqa: F401
    import symgrad  # noqa: F401
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(1, str(ROOT / "bench"))

import numpy as np  # noqa: E402
from common import best_cpu_time, optional_jax, optional_torch  # noqa: E402

import symgrad as sg  # noqa: E402

N = 32768
HIDDEN, INPUT = 2, 2


@sg.function
def quat_rotate(q: sg.Vector(4), v: sg.Vector(3)):
    """``v`` rotated by the unit quaternion ``q`` = (w, x, y, z) (its rotation matrix times v)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    R = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return [R[r][0] * v[0] + R[r][1] * v[1] + R[r][2] * v[2] for r in range(3)]


def _lstm(x, h, c, W, b, sigmoid, tanh):
    """One LSTM step (gates i, f, g, o; W is 4H x (I + H)); the new (h, c) as one list."""
    xh = [*x, *h]
    z = [b[k] + sum(W[k, m] * xh[m] for m in range(INPUT + HIDDEN)) for k in range(4 * HIDDEN)]
    gates = [z[k * HIDDEN : (k + 1) * HIDDEN] for k in range(4)]
    i, f, o = ([sigmoid(u) for u in gates[k]] for k in (0, 1, 3))
    g = [tanh(u) for u in gates[2]]
    c_new = [f[k] * c[k] + i[k] * g[k] for k in range(HIDDEN)]
    return [o[k] * tanh(c_new[k]) for k in range(HIDDEN)] + c_new


@sg.function
def lstm_cell(
    x: sg.Vector(INPUT),
    h: sg.Vector(HIDDEN),
    c: sg.Vector(HIDDEN),
    W: sg.Matrix(4 * HIDDEN, INPUT + HIDDEN),
    b: sg.Vector(4 * HIDDEN),
):
    """An LSTM cell with its weights per row: (h', c')."""
    return _lstm(x, h, c, W, b, sg.sigmoid, sg.tanh)


def ba_inputs(n: int, rng) -> list[np.ndarray]:
    cam = rng.normal(0, 0.3, (n, 11))
    cam[:, 3:6] = rng.normal(0, 1, (n, 3))
    cam[:, 6] = 500 + rng.random(n)
    cam[:, 9:11] *= 1e-3
    X = rng.normal(0, 1, (n, 3)) + [0, 0, 8]
    return [cam, X, rng.random(n), rng.random((n, 2))]


def cases(rng) -> dict[str, tuple]:
    """name -> (symgrad function, inputs in float64)."""
    import ba_model

    q = rng.normal(size=(N, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    H, D = HIDDEN, INPUT
    lstm = [rng.normal(size=s) for s in ((N, D), (N, H), (N, H), (N, 4 * H, D + H), (N, 4 * H))]
    return {
        "BA residual": (ba_model.ba_residual, ba_inputs(N, rng)),
        "quaternion rotation": (quat_rotate, [q, rng.normal(size=(N, 3))]),
        "LSTM cell": (lstm_cell, lstm),
    }


def symgrad_times(repeats: int) -> dict[str, float]:
    """'case|dtype' -> ns per row of symgrad's value_and_jacobian into out= buffers (as a solver calls it)."""
    times = {}
    for name, (fn, args) in cases(np.random.default_rng(0)).items():
        for dtype in (np.float64, np.float32):
            typed = [a.astype(dtype) for a in args]
            out = tuple(np.empty_like(r) for r in fn.value_and_jacobian(*typed))
            t = best_cpu_time(lambda: fn.value_and_jacobian(*typed, out=out), repeats, batch=5)
            times[f"{name}|{np.dtype(dtype).name}"] = t / N * 1e9
    return times


def _ba(cam, X, w, feat, m):
    """The BA residual for an array library ``m`` (sqrt, cos, sin, where, cross), as bench_adbench's."""
    r, Y = cam[0:3], X - cam[3:6]
    th2 = (r * r).sum()
    nz = th2 != 0
    th = m.sqrt(m.where(nz, th2, 1.0))
    v = r / th
    rot = Y * m.cos(th) + m.cross(v, Y) * m.sin(th) + v * (v * Y).sum() * (1 - m.cos(th))
    Xc = m.where(nz, rot, Y + m.cross(r, Y))
    u = Xc[:2] / Xc[2]
    s = (u * u).sum()
    return w * (cam[6] * u * (1 + cam[9] * s + cam[10] * s * s) + cam[7:9] - feat)


def _residual_fns(m, sigmoid, stack) -> dict:
    """The three functions for an array library: each takes one row's arguments and returns a vector."""
    return {
        "BA residual": lambda cam, X, w, feat: _ba(cam, X, w, feat, m),
        "quaternion rotation": lambda q, v: stack(quat_rotate.fn(q, v)),
        "LSTM cell": lambda x, h, c, W, b: stack(_lstm(x, h, c, W, b, sigmoid, m.tanh)),
    }


def framework_times(repeats: int) -> dict[str, dict[str, float]]:
    """Per framework, 'case|dtype' -> ns per row of value + Jacobian (JAX jit(vmap(jacfwd)), torch
    vmap(jacrev))."""
    out: dict[str, dict[str, float]] = {}
    torch = optional_torch(threads=1)
    jax, jnp = optional_jax(x64=True)
    data = cases(np.random.default_rng(0))
    if jax is not None:
        fns = _residual_fns(jnp, jax.nn.sigmoid, jnp.stack)
        out["JAX"] = {}
        for name, (_, args) in data.items():
            f = fns[name]
            argnums = tuple(range(len(args) - (name == "BA residual")))  # (feat is data)
            both = jax.jit(jax.vmap(lambda *a, f=f, n=argnums: (f(*a), jax.jacfwd(f, argnums=n)(*a))))
            for dtype in (np.float64, np.float32):
                typed = [jnp.asarray(a.astype(dtype)) for a in args]
                t = best_cpu_time(lambda: jax.block_until_ready(both(*typed)), repeats, batch=5)
                out["JAX"][f"{name}|{np.dtype(dtype).name}"] = t / N * 1e9
    if torch is not None:
        import types

        from torch.func import jacrev, vmap

        ops = types.SimpleNamespace(
            sqrt=torch.sqrt,
            cos=torch.cos,
            sin=torch.sin,
            tanh=torch.tanh,
            where=torch.where,
            cross=torch.linalg.cross,
        )
        fns = _residual_fns(ops, torch.sigmoid, torch.stack)
        out["PyTorch"] = {}
        for name, (_, args) in data.items():
            f = fns[name]
            argnums = tuple(range(len(args) - (name == "BA residual")))
            both = vmap(lambda *a, f=f, n=argnums: (f(*a), jacrev(f, argnums=n)(*a)))
            for dtype in (np.float64, np.float32):
                typed = [torch.from_numpy(a.astype(dtype)) for a in args]
                t = best_cpu_time(lambda: both(*typed), repeats, batch=5)
                out["PyTorch"][f"{name}|{np.dtype(dtype).name}"] = t / N * 1e9
    return out


def before_times(path: str, quick: bool) -> dict[str, float]:
    """The symgrad column timed with the checkout at ``path``, in a child with a cache of its own."""
    import hashlib
    import tempfile

    cache = Path(tempfile.gettempdir()) / f"symgrad-bench-{hashlib.sha256(path.encode()).hexdigest()[:12]}"
    env = dict(os.environ, _SYMGRAD_BENCH_BEFORE=path, PYTHONPATH=path, SYMGRAD_CACHE_DIR=str(cache))
    argv = [sys.executable, __file__, "--symgrad-json", *(["--quick"] if quick else [])]
    return json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--before", help="another symgrad checkout, timed in a child process")
    parser.add_argument("--symgrad-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    if args.symgrad_json:
        print(json.dumps(symgrad_times(repeats)))
        return
    columns = {"symgrad": symgrad_times(repeats)}
    if args.before:
        columns = {"before": before_times(args.before, args.quick), **columns}
    columns.update(framework_times(repeats))
    print(f"ns per observation, value + Jacobian, N = {N}, one thread (best CPU time of {repeats} batches)")
    print(f"{'function':<22}{'dtype':<9}" + "".join(f"{c:>11}" for c in columns) + "  ratios")
    for key in columns["symgrad"]:
        name, dtype = key.split("|")
        cells = "".join(f"{col[key]:>11.1f}" for col in columns.values())
        ratios = ", ".join(
            f"{c}/symgrad {col[key] / columns['symgrad'][key]:.1f}x"
            for c, col in columns.items()
            if c != "symgrad"
        )
        print(f"{name:<22}{dtype:<9}{cells}  {ratios}")


if __name__ == "__main__":
    main()
