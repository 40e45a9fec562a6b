"""Build ``docs/tour.ipynb``, a walk through symgrad in a notebook: compile, show, plot, check, train.

    python docs/build_tour.py          # writes docs/tour.ipynb (unexecuted; tests/test_notebook.py runs it)

The notebook is generated so that its text lives in one reviewable place; edit the cells here.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

CELLS = [
    (
        "md",
        "# A tour of symgrad\n\nWrite a forward function with `sg.` math; symgrad derives its gradient "
        "symbolically and compiles forward, vjp, jvp, Jacobian and Hessian kernels (NumPy and C).",
    ),
    ("md", "## Compile\n\nAn `@sg.function` compiles itself on first use (cached on disk)."),
    (
        "code",
        "import numpy as np\n\nimport symgrad as sg\n\n\n"
        "@sg.function\n"
        "def bump(x, y):\n"
        "    return sg.exp(-(x**2)) * sg.sin(y) + sg.where(x > y, x - y, 0)\n\n\n"
        "bump(np.array([0.5, 2.0]), np.array([1.0, 1.0]))",
    ),
    (
        "md",
        "## Show\n\nDisplayed in a notebook, a function shows its formulas and their derivatives as LaTeX "
        "(`vjp x` is the gradient of the output with respect to `x` times the cotangent `grad`), the "
        "number of operations of each compiled program and, collapsed, the generated source.",
    ),
    ("code", "bump"),
    ("code", "bump.derivatives"),
    (
        "md",
        "## Plot\n\nAlong one argument: the function, its derivative from the compiled vjp, finite "
        "differences over it and the branch switches of `where` (dotted). Over two: heat maps of the value "
        "and of the gradient norm.",
    ),
    ("code", '%matplotlib inline\nbump.plot((-3, 3), wrt="x", at={"y": 0.5})'),
    ("code", "bump.plot((-2, 2), points=121)"),
    (
        "md",
        "## Check\n\nEvery gradient against central finite differences at random points (float64): an "
        "empty list means they all match.",
    ),
    (
        "code",
        "from symgrad.check import check_function\n\n"
        "mismatches = check_function(bump.compiled(), n=64)\n"
        'print("gradient check:", "ok" if not mismatches else mismatches)',
    ),
    (
        "md",
        "## Train\n\nA compiled function is one node of symgrad's tape: fit the two parameters of a "
        "softplus ramp to noisy data with `sg.optim.Adam`.",
    ),
    (
        "code",
        "@sg.function\n"
        "def ramp(x, a, b):\n"
        "    return a * sg.log1p(sg.exp(b * x))\n\n\n"
        "rng = np.random.default_rng(0)\n"
        "x = sg.tensor(np.linspace(-3, 3, 200))\n"
        "target = sg.tensor(2.0 * np.log1p(np.exp(1.5 * x.numpy())) + rng.normal(0, 0.05, 200))\n"
        "a = sg.tensor(1.0, requires_grad=True)\n"
        "b = sg.tensor(1.0, requires_grad=True)\n"
        "opt = sg.optim.Adam([a, b], lr=0.05)\n"
        "for step in range(300):\n"
        "    opt.zero_grad()\n"
        "    loss = ((ramp(x, a, b) - target) ** 2).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        'print(f"a = {a.item():.3f}, b = {b.item():.3f}, loss = {loss.item():.5f}")',
    ),
]


def build() -> nbformat.NotebookNode:
    """The tour notebook (outputs empty)."""
    nb = new_notebook()
    nb.cells = [new_markdown_cell(text) if kind == "md" else new_code_cell(text) for kind, text in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def main() -> None:
    nbformat.write(build(), HERE / "tour.ipynb")


if __name__ == "__main__":
    main()
