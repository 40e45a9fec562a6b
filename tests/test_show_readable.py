"""Readable `symgrad show` (issue 24): temporaries named after what they hold or after the user's own locals,
numbers as written, per-element formulas of vector functions, LaTeX, and second derivatives (issue 21)."""

from __future__ import annotations

import importlib
import re
import shutil

import numpy as np
import pytest
import sympy
from cli_runner import ROOT, run_symgrad

import symgrad as sg
from symgrad.build.package import write_package
from symgrad.compiled import load_package
from symgrad.compiler import compile_spec
from symgrad.compiler.naming import Temporary, readable

MODELS = ROOT / "tests" / "models"
lowering = importlib.import_module("symgrad.compiler.lower")  # the package exports the function `lower`


@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-sg.Abs(y)) + sg.cos(x) * sg.log(1 + x**2 * y**2)


@sg.function
def with_locals(x, y):
    decay = sg.exp(-sg.Abs(x))
    wave = sg.sin(x * y)
    return decay * wave + wave**2, decay * y


@sg.function
def clashing(x, y):
    i = sg.sin(x + y)
    n = sg.cos(x - y)
    _cot0 = sg.exp(x * y)
    t0 = sg.tanh(x + 2 * y)
    x_ = sg.sin(x) * sg.cos(y)  # the same value under two names: the first wins
    y_copy = x_
    grad = sg.atan(x * y + 1)  # the name of the cotangent slot
    αβ = sg.log1p(y * y)  # noqa: PLC2401
    return i * n + _cot0 * t0 + y_copy * grad + αβ * i + n * αβ + t0 * x_ + grad * _cot0


@sg.function
def scaled(r, theta):
    return r * sg.cos(theta) + r / 2, 1.0 * r * sg.sin(theta)


@sg.function
def loop_sums(x: sg.Vector(3)):
    s = 0
    for i in range(3):
        s = s + x[i] ** 2
    total = 0
    for i in range(3):
        total = total + x[i] * x[(i + 1) % 3]
    return sg.sqrt(s) * x[0], sg.exp(-total) * x[1] + sg.exp(-total) * x[2]


def _temporaries(kernel) -> set[str]:
    return {a.target.name for p in kernel.programs for a in p.body if isinstance(a.target, Temporary)}


def test_temporaries_are_named_after_what_they_hold():
    kernel = compile_spec(blend.trace())
    names = _temporaries(kernel)
    assert {"sin_x", "cos_x", "exp_neg_abs_y", "abs_x"} <= names, names
    for p in kernel.programs:  # a number only where the value has no short name (a select, a long sum)
        for a in p.body:
            if isinstance(a.target, Temporary) and re.fullmatch(r"t\d+", a.target.name):
                assert readable(a.expr) is None, (p.name, str(a))
    source = blend.compiled().source("numpy")
    assert "exp_neg_abs_y = numpy.exp(-abs_y)" in source


def test_structural_names_are_bounded_and_none_for_what_has_no_short_name():
    x, y = sympy.symbols("x y", real=True)
    assert readable(sympy.exp(-sympy.Abs(x))) == "exp_neg_abs_x"
    assert readable(1 / (x * y)) == "inv_x_y" and readable(2 * x) == "twice_x"
    assert readable(x + 1) == "x_plus_1" and readable(x - y) == "x_minus_y"
    assert readable(sympy.Float(0.3) * x) is None and readable(x) is None
    long = sympy.sin(sympy.cos(sympy.exp(sympy.tanh(x * y + 1) ** 2)))
    assert readable(long) is None  # over naming.MAX_NAME


def test_the_users_locals_name_temporaries():
    kernel = compile_spec(with_locals.trace())
    names = _temporaries(kernel)
    assert {"decay", "wave"} <= names, names
    forward = str(kernel.program("forward"))
    assert "decay = exp(-Abs(x))" in forward and "wave = sin(x*y)" in forward


def test_sums_built_in_loops_name_the_temporaries_they_are_an_operand_of():
    """A local summed in a loop (``s``) is no temporary of its own, but names those it is the one operand of
    (``sqrt_s``, ``exp_neg_total``: as ``-total``)."""
    kernel = compile_spec(loop_sums.trace())
    names = _temporaries(kernel)
    assert {"sqrt_s", "exp_neg_total"} <= names, names
    assert "exp_neg_total = exp(-x_0*x_1 - x_0*x_2 - x_1*x_2)" in str(kernel.program("forward"))
    x = np.array([[0.3, -1.2, 2.0], [1.5, 0.25, -0.5]])
    s, total = (x**2).sum(-1), (x * np.roll(x, -1, axis=-1)).sum(-1)
    out0, out1 = loop_sums.compiled()(x)
    np.testing.assert_allclose(out0, np.sqrt(s) * x[:, 0], rtol=1e-14)  # float64
    np.testing.assert_allclose(out1, np.exp(-total) * (x[:, 1] + x[:, 2]), rtol=1e-14)


def test_name_collisions_are_resolved(backend):
    spec = clashing.trace()
    user_names = [n for _, n in spec.names]
    assert "x_" in user_names and "y_copy" not in user_names
    kernel = compile_spec(spec)
    names = _temporaries(kernel)
    slots = {
        s.name for p in kernel.programs for slot in (*p.inputs, *p.outputs) for s in (slot, *slot.symbols)
    }
    assert {"i_", "n_", "_cot0", "t0", "x_", "grad_1", "alpha_beta"} <= names, names
    assert not names & slots and not names & {"i", "n", "j", "grad", "x", "y"}
    for p in kernel.programs:  # unique in each program, valid identifiers
        targets = [a.target.name for a in p.body]
        assert len(targets) == len(set(targets)) and all(t.isidentifier() and t.isascii() for t in targets)
    x, y = np.linspace(-2, 2, 11), np.linspace(0.5, 1.5, 11)
    i, n, c, t = np.sin(x + y), np.cos(x - y), np.exp(x * y), np.tanh(x + 2 * y)
    x_, g, ab = np.sin(x) * np.cos(y), np.arctan(x * y + 1), np.log1p(y * y)
    want = i * n + c * t + x_ * g + ab * i + n * ab + t * x_ + g * c
    np.testing.assert_allclose(clashing.compiled()(x, y), want, rtol=1e-13)  # float64


def _as_numbered(key: str, name: str, **assumptions) -> sympy.Symbol:
    """The temporaries as they were before they had readable names: plain symbols ``t<k>``."""
    return sympy.Symbol(key.split("\0")[0], **assumptions)


@pytest.mark.parametrize("function", [blend, with_locals, clashing, scaled, loop_sums])
def test_readable_names_leave_every_result_bit_for_bit_unchanged(function, monkeypatch, tmp_path, backend):
    """Readable names change only the text: every program's results, in both dtypes, are identical to the
    same kernel with numbered temporaries (``naming.Temporary`` keeps SymPy's operand order)."""
    spec = function.trace()
    readable_kernel = compile_spec(spec)
    with monkeypatch.context() as m:
        m.setattr(lowering, "Temporary", _as_numbered)
        numbered = compile_spec(spec)
    assert _temporaries(numbered) == set() and _temporaries(readable_kernel)
    results = []
    for kernel, name in ((readable_kernel, "readable"), (numbered, "numbered")):
        write_package([kernel], tmp_path / name, "test.py", name)
        results.append(load_package(tmp_path / name)[spec.name])
    rng = np.random.default_rng(0)
    for dtype in ("float64", "float32"):
        args = [rng.normal(size=(257, *a.shape)).astype(dtype) for a in spec.args]
        cot = [rng.normal(size=257).astype(dtype) for _ in spec.outputs]
        a, b = (fn.value_and_vjp(*args, *cot) for fn in results)
        for u, v in zip(
            a[0] if isinstance(a[0], tuple) else (a[0],), b[0] if isinstance(b[0], tuple) else (b[0],)
        ):
            assert np.array_equal(u, v, equal_nan=True) and u.dtype == v.dtype
        for u, v in zip(a[1], b[1]):
            assert np.array_equal(u, v, equal_nan=True) and u.dtype == v.dtype
        ja, jb = (fn.value_and_jacobian(*args)[1] for fn in results)
        assert np.array_equal(ja, jb, equal_nan=True)


def test_numbers_print_as_written():
    kernel = compile_spec(scaled.trace())
    assert dict(kernel.formulas) == {"out0": "r/2 + r*cos(theta)", "out1": "r*sin(theta)"}
    assert "1.0" not in str(kernel)
    numpy_source = scaled.compiled().source("numpy")
    assert "(0.5)" not in numpy_source and "0.5*r" in numpy_source


def test_vector_functions_have_per_element_formulas(tmp_path):
    shutil.copy(MODELS / "rotations.py", tmp_path / "rotations.py")
    from symgrad.compiler.model import load_model

    (quat,) = [f for f in load_model(tmp_path / "rotations.py") if f.name == "quat_rotate"]
    kernel = compile_spec(quat.trace())
    formulas, derivatives = dict(kernel.formulas), dict(kernel.derivatives)
    assert list(formulas) == ["out_0", "out_1", "out_2"]
    assert derivatives["q"].startswith("[") and derivatives["q"].count("grad_0") == 4
    q, v = sympy.symbols("q_0:4", real=True), sympy.symbols("v_0:3", real=True)
    g = sympy.symbols("grad_0:3", real=True)
    names = {s.name: s for s in (*q, *v, *g)}
    outs = [sympy.sympify(formulas[f"out_{k}"], locals=names) for k in range(3)]
    vjp_q = sympy.sympify(derivatives["q"], locals=names)
    for j in range(4):
        want = sum(g[k] * sympy.diff(outs[k], q[j]) for k in range(3))
        assert sympy.expand(vjp_q[j] - want) == 0
    r = run_symgrad("show", "rotations.py", "quat_rotate", "--format", "yaml", cwd=tmp_path)
    assert r.returncode == 0 and "see the generated program" not in r.stdout and '  q: "[' in r.stdout


def test_show_latex(model_dir):
    r = run_symgrad("show", "model.py", "scaled", "--format", "latex", cwd=model_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("% scaled")
    r_, theta = sympy.symbols("r theta", real=True)
    assert rf"out_{{1}} = {sympy.latex(r_ * sympy.sin(theta))}" in lines
    assert any(line.startswith(r"\operatorname{vjp}_{\theta} = ") for line in lines)


def test_second_derivatives_match_the_hessian(model_dir):
    r = run_symgrad("show", "model.py", "scaled", "--order", "2", "--program", "forward", cwd=model_dir)
    assert r.returncode == 0, r.stderr
    entries = dict(re.findall(r"^(d2\S+ d\S+) = (.*)$", r.stdout, re.M))
    assert list(entries) == [
        "d2out0/dr dr", "d2out0/dr dtheta", "d2out0/dtheta dtheta",
        "d2out1/dr dr", "d2out1/dr dtheta", "d2out1/dtheta dtheta",
    ]  # fmt: skip
    kernel = compile_spec(scaled.trace())
    assert dict(kernel.second_derivatives) == entries  # derivatives.yaml lists the same
    names = {n: sympy.Symbol(n, real=True) for n in ("r", "theta")}
    rv, tv = np.array([0.7, -1.3]), np.array([0.4, 2.1])
    _, _, hessian = scaled.compiled().value_jacobian_hessian(rv, tv)
    for key, text in entries.items():  # float64: the closed forms and the program agree to rounding
        out, wrt = key[2:].split("/")
        j, (a, b) = int(out[-1]), (["r", "theta"].index(w[1:]) for w in wrt.split())
        f = sympy.lambdify((names["r"], names["theta"]), sympy.sympify(text, locals=names))
        np.testing.assert_allclose(np.broadcast_to(f(rv, tv), rv.shape), hessian[:, j, a, b], rtol=1e-12)


def test_order_2_is_for_formulas(model_dir):
    r = run_symgrad("show", "model.py", "scaled", "--order", "2", "--format", "c", cwd=model_dir)
    assert r.returncode == 1 and "--order 2" in r.stderr


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "model.py").write_text(
        "import symgrad as sg\n\n\n@sg.function\ndef scaled(r, theta):\n"
        "    return r * sg.cos(theta) + r / 2, 1.0 * r * sg.sin(theta)\n"
    )
    return tmp_path
