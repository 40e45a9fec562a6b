"""The special functions' accuracy table (docs/numerics.md): per function, dtype and target, the largest
error in ulp of the value and of the gradient against 50-digit mpmath, over ``--points`` ordinary points and
the hard ones, with the measure and references of tests/special_reference.py.

    python bench/accuracy_special.py                 # 1000 points per function and dtype (~2 minutes)
    python bench/accuracy_special.py --points 100 digamma erfinv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from special_reference import CASES, reference, sample, ulp_errors  # noqa: E402

import symgrad as sg  # noqa: E402

COLUMNS = ("function", "dtype", "target", "value: max ulp", "gradient: max ulp", "points measured")
COLUMNS += ("worst gradient at",)
HEADER = "| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|"


def _row(fn, name: str, dtype: str, backend: str, points: list, refs: list) -> str:
    cols = [np.array([p[i] for p in points], dtype=dtype) for i in range(len(points[0]))]
    sg.set_backend(backend)
    with np.errstate(all="ignore"):
        out, grads = fn.value_and_vjp(*cols, np.ones(len(points), dtype=dtype))
    grads = [g for g in grads if g is not None]  # a nondiff argument's (zeta's s)
    value = ulp_errors(out, [r[0] for r in refs], dtype)
    grad = np.vstack([ulp_errors(g, [r[1 + i] for r in refs], dtype) for i, g in enumerate(grads)])
    grad = np.where(np.all(np.isnan(grad), axis=0), np.nan, np.nanmax(np.nan_to_num(grad, nan=-1.0), axis=0))
    worst = ", ".join(f"{v:.6g}" for v in points[int(np.nanargmax(grad))])
    target = {"numpy": "NumPy", "c": "C"}[backend]
    cells = (name, dtype, target, f"{np.nanmax(value):.2f}", f"{np.nanmax(grad):.2f}")
    return "| " + " | ".join(cells) + f" | {np.count_nonzero(~np.isnan(value))} | ({worst}) |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("names", nargs="*", help="functions of tests/models/special.py (default: all)")
    args = parser.parse_args()
    compiled = sg.compile(ROOT / "tests" / "models" / "special.py")
    print(HEADER)
    for name in args.names or [n for n in CASES if n != "lgamma"]:  # lgamma: the same function as loggamma
        for dtype in ("float64", "float32"):
            cols = list(zip(*sample(name, dtype, args.points)))
            points = list(
                zip(*[np.array(c, dtype=dtype).astype(np.float64) for c in cols])
            )  # as the dtype holds
            refs = [reference(name, p) for p in points]
            for backend in ("numpy", "c"):
                print(_row(getattr(compiled, name), name, dtype, backend, points, refs), flush=True)


if __name__ == "__main__":
    main()
