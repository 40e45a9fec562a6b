"""Bad input never crashes the interpreter or loses work, on every backend and dtype.

Arguments: NaN/inf propagate like NumPy; empty arrays; zero-strided (``np.broadcast_to``), sliced and
transposed views; wrong dtypes and shapes raise ``ArgumentError`` naming function and argument; read-only
inputs work and results are fresh, writable arrays. Models: one that raises, one that loops forever at
import (``symgrad compile --timeout``), one with 500 functions (timed), huge expressions
(``SYMGRAD_MAX_OPS``), parameter names that are C or Python keywords or generated-code names, unicode
identifiers, function names that clash with libm. Nothing a user writes (names, docstrings, constants, file
names) can inject code into the generated C or Python.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_symgrad

import symgrad as sg
from symgrad.build.compile import compile_model

ROOT = Path(__file__).parent.parent


@sg.function
def mix(x, y):
    return sg.sin(x) * sg.exp(y) + x**2 / (1 + y**2)


@sg.function
def softplus(x):
    return sg.log(1 + sg.exp(x))


@sg.function
def relu(x):
    return sg.relu(x)


@sg.function
def rowdot(a: sg.Vector(3), b: sg.Vector(3)):
    return a.dot(b)


def numpy_mix(x, y):
    with np.errstate(all="ignore"):
        return np.sin(x) * np.exp(y) + x**2 / (1 + y**2)


# -- NaN and inf --------------------------------------------------------------------------------------------

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0])


def test_nan_and_inf_propagate_like_numpy(backend, dtype):
    x, y = np.meshgrid(SPECIALS, SPECIALS)
    x, y = x.ravel().astype(dtype), y.ravel().astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = mix(x, y)
    want = numpy_mix(x, y)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"NaN pattern, x={x}, y={y}")
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(out[finite], want[finite], rtol=1e-5)


def test_nan_and_inf_through_stable_primitives(backend, dtype):
    x = np.array([np.nan, np.inf, -np.inf, 0.0], dtype=dtype)
    out, (g,) = softplus.value_and_vjp(x, np.ones_like(x))
    np.testing.assert_array_equal(
        out,
        [np.nan, np.inf, 0.0, np.log(2)]
        if dtype == "float64"
        else np.array([np.nan, np.inf, 0.0, np.log(2)], np.float32),
    )
    np.testing.assert_array_equal(g, np.array([np.nan, 1.0, 0.0, 0.5], dtype))
    out, (g,) = relu.value_and_vjp(x, np.ones_like(x))
    np.testing.assert_array_equal(out, np.array([np.nan, np.inf, 0.0, 0.0], dtype))  # relu(NaN) = NaN (torch)
    assert g[1] == 1 and g[2] == 0 and g[3] == 0


def test_nan_cotangent_propagates(backend, dtype):
    x = np.array([1.0, 2.0], dtype)
    (g,) = softplus.vjp(x, np.array([np.nan, 1.0], dtype))
    assert np.isnan(g[0]) and np.isfinite(g[1])


# -- shapes, views, memory -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0), (2, 0, 5)])
def test_empty_arrays(backend, dtype, shape):
    x, y = np.zeros(shape, dtype), np.zeros(shape, dtype)
    out, (gx, gy) = mix.value_and_vjp(x, y, np.ones(shape, dtype))
    assert out.shape == shape and gx.shape == shape and gy.shape == shape
    assert out.dtype == gx.dtype == np.dtype(dtype)
    assert mix(x, 1.0).shape == shape
    out, (ga, gb) = rowdot.value_and_vjp(
        np.zeros(shape + (3,), dtype), np.zeros((3,), dtype), np.ones(shape, dtype)
    )
    assert out.shape == shape and ga.shape == shape + (3,) and gb.shape == (3,)


def test_empty_broadcast_against_nonempty(backend, dtype):
    out, (gx, gy) = mix.value_and_vjp(np.zeros((0, 1), dtype), np.ones((1, 4), dtype), np.ones((0, 4), dtype))
    assert out.shape == (0, 4) and gx.shape == (0, 1) and gy.shape == (1, 4)
    np.testing.assert_array_equal(gy, 0)  # a sum over nothing


def _views(dtype):
    rng = np.random.default_rng(0)
    base = rng.uniform(-2, 2, (6, 8)).astype(dtype)
    other = rng.uniform(-2, 2, (8, 6)).astype(dtype)
    return {
        "zero-strided row": (np.broadcast_to(base[0], (6, 8)), base),
        "zero-strided scalar": (np.broadcast_to(dtype_scalar(dtype, 0.7), (6, 8)), base),
        "every other column": (base[:, ::2], base[:, 1::2]),
        "reversed": (base[::-1, ::-1], base),
        "transposed": (other.T, base),
        "fortran": (np.asfortranarray(base), np.asfortranarray(base * 0.5)),
        "column slice": (base[:, 3], base[:, 4]),
    }


def dtype_scalar(dtype, value):
    return np.array(value, dtype=dtype)


@pytest.mark.parametrize(
    "kind",
    [
        "zero-strided row",
        "zero-strided scalar",
        "every other column",
        "reversed",
        "transposed",
        "fortran",
        "column slice",
    ],
)
def test_strided_and_broadcast_views_match_contiguous_copies(backend, dtype, kind):
    x, y = _views(dtype)[kind]
    x_before, y_before = x.copy(), y.copy()
    cot = np.ones(np.broadcast_shapes(x.shape, y.shape), dtype)
    out, (gx, gy) = mix.value_and_vjp(x, y, cot)
    want, (wx, wy) = mix.value_and_vjp(np.ascontiguousarray(x), np.ascontiguousarray(y), cot)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(gx, wx)
    np.testing.assert_array_equal(gy, wy)
    assert gx.shape == x.shape and gy.shape == y.shape
    np.testing.assert_array_equal(x, x_before)  # inputs untouched
    np.testing.assert_array_equal(y, y_before)


def test_vector_argument_views(backend, dtype):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 6)).astype(dtype)[:, ::2]  # (5, 3), non-contiguous rows
    b = np.broadcast_to(rng.normal(size=3).astype(dtype), (5, 3))
    out, (ga, gb) = rowdot.value_and_vjp(a, b, np.ones(5, dtype))
    np.testing.assert_allclose(out, (a * b).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(ga, b, rtol=1e-6)
    np.testing.assert_allclose(gb, a, rtol=1e-6)


def test_read_only_inputs_and_writable_fresh_results(backend, dtype):
    x = np.linspace(-1, 1, 7).astype(dtype)
    y = np.linspace(0, 2, 7).astype(dtype)
    cot = np.ones(7, dtype)
    for a in (x, y, cot):
        a.setflags(write=False)
    out, (gx, gy) = mix.value_and_vjp(x, y, cot)
    for r in (out, gx, gy, mix(x, y), *mix.vjp(x, y, cot)):
        assert r.flags.writeable and r.flags.owndata or r.base is not None and r.flags.writeable
        assert not any(np.shares_memory(r, a) for a in (x, y, cot))
        r[...] = 0  # and writing to it is fine
    ro = np.frombuffer(np.linspace(-1, 1, 4).astype(dtype).tobytes(), dtype=dtype)  # a read-only buffer
    assert not ro.flags.writeable
    np.testing.assert_allclose(softplus(ro), np.log1p(np.exp(ro)), rtol=1e-5)


def test_identity_result_does_not_alias_its_input(backend, dtype):
    @sg.function
    def ident(x):
        return x

    x = np.arange(4, dtype=dtype)
    out, (g,) = ident.value_and_vjp(x, np.ones(4, dtype))
    assert not np.shares_memory(out, x)
    out[0] = 99
    assert x[0] == 0
    np.testing.assert_array_equal(g, 1)


# -- wrong arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, kind",
    [
        (np.arange(3), "int64"),
        (np.arange(3, dtype=np.int32), "int32"),
        (np.ones(3, np.float16), "float16"),
        (np.ones(3, complex), "complex128"),
        (np.ones(3, np.complex64), "complex64"),
        (np.ones(3, bool), "bool"),
        (np.array([1.0, "a", None], dtype=object), "object"),
        (np.array(["a", "b", "c"]), "<U1"),
        ([1, 2, 3], "int64"),
        (True, "bool"),
    ],
)
def test_wrong_dtype_names_the_argument(backend, bad, kind):
    with pytest.raises(sg.ArgumentError, match=rf"mix: argument 'y' has dtype {kind}"):
        mix(np.ones(3), bad)
    with pytest.raises(sg.ArgumentError, match=rf"mix: argument 'x' has dtype {kind}"):
        mix.vjp(bad, np.ones(3), np.ones(3))


def test_wrong_cotangent_dtype_and_shape_name_it(backend):
    with pytest.raises(sg.ArgumentError, match=r"mix: argument 'grad_out' has dtype int64"):
        mix.vjp(np.ones(3), np.ones(3), np.ones(3, dtype=np.int64))
    with pytest.raises(sg.ArgumentError, match=r"'grad_out' \(4,\)"):
        mix.vjp(np.ones(3), np.ones(3), np.ones(4))


@pytest.mark.parametrize(
    "a, b, pattern",
    [
        (np.ones((5, 3)), np.ones((5, 4)), r"rowdot: argument 'b' must have trailing shape \(3,\)"),
        (np.ones((2, 3, 1)), np.ones(3), r"rowdot: argument 'a' must have trailing shape \(3,\)"),
        (
            np.ones((4, 3)),
            np.ones((5, 3)),
            r"rowdot: argument batch shapes do not broadcast: 'a' \(4,\), 'b' \(5,\)",
        ),
        (np.float64(1.0), np.ones(3), r"rowdot: argument 'a' must have trailing shape \(3,\)"),
        (1.0, np.ones(3), r"rowdot: argument 'a' must have trailing shape \(3,\), got a Python number"),
    ],
)
def test_wrong_shapes_name_the_argument(backend, a, b, pattern):
    with pytest.raises(sg.ArgumentError, match=pattern):
        rowdot(a, b)


def test_python_numbers_and_0d_arrays(backend, dtype):
    assert mix(0.5, 1.0).shape == () and mix(0.5, 1.0).dtype == np.float64
    out = mix(np.float32(0.5) if dtype == "float32" else 0.5, np.ones(3, dtype))
    assert out.dtype == np.dtype(dtype) and out.shape == (3,)  # Python scalars are weak


# -- models that misbehave -----------------------------------------------------------------------------------


symgrad_cli = run_symgrad


def test_model_that_raises_at_import_is_one_line(tmp_path):
    (tmp_path / "boom.py").write_text("import symgrad as sg\n\nraise ValueError('boom at import')\n")
    r = symgrad_cli("compile", "boom.py", cwd=tmp_path)
    assert r.returncode == 1
    assert (
        r.stderr.strip() == "symgrad: error: boom.py:3: ValueError while importing the model: boom at import"
    )
    assert not (tmp_path / "boom_symgrad").exists()


def test_model_that_raises_inside_a_function_keeps_the_previous_package(tmp_path):
    model = tmp_path / "m.py"
    model.write_text("import symgrad as sg\n@sg.function\ndef f(x):\n    return x * 2\n")
    assert symgrad_cli("compile", "m.py", cwd=tmp_path).returncode == 0
    before = (tmp_path / "m_symgrad" / "manifest.json").read_text()
    model.write_text(
        "import symgrad as sg\n@sg.function\ndef f(x):\n    return x * 2\n"
        "@sg.function\ndef g(x):\n    return 1 / 0\n"
    )
    r = symgrad_cli("compile", "m.py", cwd=tmp_path)
    assert r.returncode == 1 and "g (line 7): ZeroDivisionError" in r.stderr
    assert (tmp_path / "m_symgrad" / "manifest.json").read_text() == before  # no work lost


def test_model_that_loops_forever_at_import_times_out(tmp_path):
    (tmp_path / "spin.py").write_text("import symgrad as sg\nwhile True:\n    pass\n")
    start = time.perf_counter()
    r = symgrad_cli("compile", "spin.py", "--timeout", "2", cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and "gave up after 2 s (--timeout)" in r.stderr
    assert time.perf_counter() - start < 30
    assert not (tmp_path / "spin_symgrad").exists()


def test_function_that_loops_forever_while_tracing_times_out(tmp_path):
    (tmp_path / "spin2.py").write_text(
        "import symgrad as sg\n@sg.function\ndef f(x):\n    while True:\n        x = x + 0\n"
    )
    r = symgrad_cli("compile", "spin2.py", "--timeout", "2", cwd=tmp_path, timeout=60)
    assert r.returncode == 1 and "gave up after 2 s" in r.stderr, r.stderr


N_FUNCTIONS = 500


@pytest.fixture(scope="module")
def many_functions(tmp_path_factory):
    """A model of 500 small functions, compiled once for every backend's test: (build result, seconds)."""
    where = tmp_path_factory.mktemp("many")
    body = ["import symgrad as sg"]
    for k in range(N_FUNCTIONS):
        body.append(
            f"@sg.function\ndef f{k}(x, y):\n    return sg.sin(x * {k + 1}) * y + sg.exp(-y**2) * {k}"
        )
    (where / "many.py").write_text("\n".join(body) + "\n")
    start = time.perf_counter()
    result = compile_model(where / "many.py")
    return result, time.perf_counter() - start


@pytest.mark.slow
def test_model_with_500_functions_compiles_in_reasonable_time(many_functions, backend):
    """500 small functions: the package (numpy + C source) and the C build, each timed."""
    result, compile_s = many_functions
    assert len(result.kernels) == N_FUNCTIONS
    module = sg.load_package(result.path)
    start = time.perf_counter()
    x = np.array([0.25, 0.5])
    out, (gx, gy) = module["f499"].value_and_vjp(x, x, np.ones(2))  # loads (and for C, builds) all 500
    load_s = time.perf_counter() - start
    np.testing.assert_allclose(out, np.sin(x * 500) * x + np.exp(-(x**2)) * 499)
    np.testing.assert_allclose(gx, 500 * np.cos(x * 500) * x)
    np.testing.assert_allclose(gy, np.sin(x * 500) - 2 * x * np.exp(-(x**2)) * 499)
    np.testing.assert_allclose(module["f0"](x, x), np.sin(x) * x)
    print(f"\n500 functions: compile {compile_s:.1f} s, first call on {backend} {load_s:.1f} s")
    assert compile_s < 240, f"compiling 500 functions took {compile_s:.0f} s"
    assert load_s < 300, f"loading 500 functions on {backend} took {load_s:.0f} s"


def test_huge_expression_hits_the_size_limit_quickly(monkeypatch):
    @sg.function
    def dag(x):
        e = x
        for _ in range(60):  # a DAG with 2**60 tree nodes: must not be walked; the limit counts the DAG
            e = sg.sin(e) + sg.cos(e)
        return e

    start = time.perf_counter()
    dag.trace()
    monkeypatch.setenv("SYMGRAD_MAX_OPS", "100")
    with pytest.raises(
        sg.ExpressionTooLarge,
        match=r"dag: the traced expression has more than 100 nodes \(distinct sub-expressions\); "
        r".*raise SYMGRAD_MAX_OPS",
    ):
        dag.trace()
    assert time.perf_counter() - start < 20


def test_size_limit_from_the_environment_through_the_cli(tmp_path):
    (tmp_path / "big.py").write_text(
        textwrap.dedent("""\
        import symgrad as sg
        @sg.function
        def big(x):
            return sum(sg.sin(x * k) for k in range(1, 200))
    """)
    )
    r = symgrad_cli("compile", "big.py", cwd=tmp_path, env_extra={"SYMGRAD_MAX_OPS": "100"})
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith("symgrad: error: big.py:2: big: the traced expression has more than 100 nodes")
    )


# -- names ---------------------------------------------------------------------------------------------------

NAMES_MODEL = '''\
import symgrad as sg

@sg.function
def keywords(int, float, restrict, double, char):
    """Parameters named like C types and qualifiers."""
    return int * float + restrict - double * char


@sg.function
def generated(n, i, out, grad, k, stride):
    """Parameters named like the generated code's own locals and slots."""
    return n * i + out * grad + k - stride


@sg.function
def pythonic(lambda_, None_, numpy, math, _sg, self, True_):
    return lambda_ + None_ * numpy + math * _sg + self - True_


@sg.function
def reserved_c(_X, __y, main, errno, NULL, INFINITY, M_PI):
    return _X * __y + main - errno + NULL * INFINITY + M_PI


@sg.function
def unicode(α, β, x_β, πr):
    return sg.sin(α) * β + x_β * πr


@sg.function
def tanh(x):
    return sg.tanh(x) * 2


@sg.function
def exp(x):
    return sg.exp(x) + 1


@sg.function
def sqrt(x):
    return sg.sqrt(1 + x**2)


@sg.function
def main(x):
    return x + 1


@sg.function
def sigmoid(x):
    return sg.sigmoid(x) * x
'''

NAMES_REFERENCE = {
    "keywords": (5, lambda a: a[0] * a[1] + a[2] - a[3] * a[4]),
    "generated": (6, lambda a: a[0] * a[1] + a[2] * a[3] + a[4] - a[5]),
    "pythonic": (7, lambda a: a[0] + a[1] * a[2] + a[3] * a[4] + a[5] - a[6]),
    "reserved_c": (7, lambda a: a[0] * a[1] + a[2] - a[3] + a[4] * a[5] + a[6]),
    "unicode": (4, lambda a: np.sin(a[0]) * a[1] + a[2] * a[3]),
    "tanh": (1, lambda a: np.tanh(a[0]) * 2),
    "exp": (1, lambda a: np.exp(a[0]) + 1),
    "sqrt": (1, lambda a: np.sqrt(1 + a[0] ** 2)),
    "main": (1, lambda a: a[0] + 1),
    "sigmoid": (1, lambda a: a[0] / (1 + np.exp(-a[0]))),
}


@pytest.fixture(scope="module")
def names_module(tmp_path_factory):
    path = tmp_path_factory.mktemp("names") / "names_model.py"
    path.write_text(NAMES_MODEL)
    return sg.compile(path)


@pytest.mark.parametrize("name", sorted(NAMES_REFERENCE))
def test_awkward_names_compile_and_run(names_module, backend, dtype, name):
    n, reference = NAMES_REFERENCE[name]
    fn = getattr(names_module, name)
    rng = np.random.default_rng(len(name))
    args = [rng.uniform(0.5, 1.5, 4).astype(dtype) for _ in range(n)]
    out, grads = fn.value_and_vjp(*args, np.ones(4, dtype))
    np.testing.assert_allclose(out, reference(args), rtol=1e-5)
    h = 1e-3 if dtype == "float32" else 1e-6
    for i, g in enumerate(grads):
        up = [a + h * (j == i) for j, a in enumerate(args)]
        down = [a - h * (j == i) for j, a in enumerate(args)]
        fd = (
            reference([a.astype(np.float64) for a in up]) - reference([a.astype(np.float64) for a in down])
        ) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-3, atol=1e-3, err_msg=f"{name}: gradient {i}")
    assert fn.name == name


def test_awkward_names_give_valid_generated_code(names_module):
    for name in NAMES_REFERENCE:
        fn = getattr(names_module, name)
        ast.parse(fn.source("numpy"))  # importable Python
        assert "(int64_t n," in fn.source("c")


def test_unicode_argument_names_stay_distinct_and_readable(names_module):
    fn = names_module.unicode
    assert len(set(fn.arg_names)) == 4
    for user, shown in zip(("α", "β", "x_β", "πr"), fn.arg_names):
        assert shown.isidentifier() and shown.isascii(), shown
    with pytest.raises(sg.ArgumentError) as info:
        fn(np.ones(2), np.ones(2, int), np.ones(2), np.ones(2))
    assert "'beta'" in str(info.value) or "'β'" in str(info.value), str(info.value)


def test_parameters_named_like_c_macro_families(tmp_path):
    """Parameters named like reserved macro families compile and compute the right values and gradients in C
    (in a subprocess: an earlier renaming loop hung on them)."""
    names = ["FLT_MAX", "Py_x", "SG_y", "HAVE_z", "INT64_C", "SIZEOF_T"]
    (tmp_path / "macro.py").write_text(
        f"import symgrad as sg\n@sg.function\ndef f({', '.join(names)}):\n    return {' * '.join(names)}\n"
    )
    use = (
        "import numpy as np, symgrad as sg\nsg.set_backend('c')\nm = sg.compile('macro.py')\n"
        "x = [np.array([k + 2.0]) for k in range(6)]\nout, g = m.f.value_and_vjp(*x, np.ones(1))\n"
        "assert m.f.backend == 'c'\nprint(float(out[0]), [float(v[0]) for v in g])\n"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", use],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("compiling parameters named like C macros hangs")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "5040.0"  # 2*3*4*5*6*7
    assert r.stdout.split(" ", 1)[1].strip() == str([5040.0 / (k + 2) for k in range(6)])


def test_lambda_cannot_be_a_parameter(tmp_path):
    (tmp_path / "bad.py").write_text("import symgrad as sg\n@sg.function\ndef f(lambda):\n    return 1\n")
    with pytest.raises(sg.ModelError, match=r"bad.py:3: syntax error"):
        compile_model(tmp_path / "bad.py")


# -- injection -----------------------------------------------------------------------------------------------

EVIL = '*/ system("rm -rf /"); /* """ \'\'\' \\ \n#include <stdlib.h>\n__import__("builtins").SG_PWNED = 1 # '
EVIL_FILE_NAMES = [
    "evil.py",
    'we"""ird.py',
    "new\nline.py",
    "back\\slash.py",
    "semi;colon'quote.py",
    "ünï cödé.py",
    "star*%2Fslash.py",
    "sg_pwned=1;#.py",
    "x*\\ int sg_pwned = 1; .py",  # a backslash after a star: was turned into "*/" closing the comment
]


def _evil_source() -> str:
    return textwrap.dedent(f"""\
        import symgrad as sg

        @sg.function
        def evil(x):
            {EVIL!r}
            return sg.where(x > 0, x * 0.5, sg.exp(x)) + 1e-300 * x

        @sg.function
        def evil2(x, y):
            "*/ int sg_pwned = 1; /*"
            return x * y
    """)


def _evil_model(tmp_path: Path, filename: str) -> Path:
    path = tmp_path / filename
    path.write_text(_evil_source(), encoding="utf-8")
    return path


def _check_generated(fn) -> None:
    tree = ast.parse(fn.source("numpy"))
    # nothing but function definitions with a docstring, a with-block of assignments and a return
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Delete)), ast.dump(node)
        if isinstance(node, ast.Call):
            assert ast.unparse(node.func).startswith(("numpy.", "_sg.")), ast.unparse(node)
    code = re.sub(r"/\*.*?\*/", "", fn.source("c"), flags=re.S)  # C outside comments
    assert "/*" not in code and "*/" not in code  # every comment closed, none nested
    for bad in ("system", "stdlib", "sg_pwned", "rm -rf", "SG_PWNED"):
        assert bad not in code, bad


def _check_runs(evil, evil2) -> None:
    assert evil.__doc__.startswith('*/ system("rm -rf /")')  # the docstring survives as data
    x = np.array([-1.0, 2.0])
    np.testing.assert_allclose(evil(x), np.where(x > 0, x * 0.5, np.exp(x)))
    np.testing.assert_allclose(evil2(x, x), x * x)
    assert not hasattr(builtins, "SG_PWNED")


@pytest.mark.parametrize("filename", EVIL_FILE_NAMES)
def test_nothing_in_docstrings_or_file_names_reaches_generated_code(tmp_path, filename, backend):
    module = sg.compile(_evil_model(tmp_path, filename))
    _check_runs(module.evil, module.evil2)
    for fn in (module.evil, module.evil2):
        _check_generated(fn)


@pytest.mark.parametrize(
    "co_filename",
    [
        'dir/evil */ int sg_pwned = 1; /* """\nimport os\n""".py',
        "x\n*/\nint sg_pwned;\n/*\\",
        '"""; SG_PWNED = 1; """',
    ],
)
def test_source_file_names_that_no_file_system_allows(co_filename, backend):
    """``@sg.function`` on code compiled under any file name (exec, notebooks): the origin goes into comments
    and docstrings of both targets, and stays inert there."""
    namespace: dict = {}
    exec(compile(_evil_source(), co_filename, "exec"), namespace)
    _check_runs(namespace["evil"], namespace["evil2"])
    for fn in (namespace["evil"], namespace["evil2"]):
        _check_generated(fn.compiled())


def test_injection_in_a_whole_package(tmp_path):
    """The whole generated package (not only one function's source) parses and contains no injected code."""
    result = compile_model(_evil_model(tmp_path, 'pkg"""name\n*%.py'), tmp_path / "out")
    ast.parse((result.path / "kernels_numpy.py").read_text())
    ast.parse((result.path / "__init__.py").read_text())
    code = re.sub(r"/\*.*?\*/", "", (result.path / "kernels.c").read_text(), flags=re.S)
    assert "/*" not in code and "*/" not in code
    for bad in ("system", "stdlib", "sg_pwned", "rm -rf"):
        assert bad not in code, bad
    import json

    json.loads((result.path / "manifest.json").read_text())
    yaml_lines = (result.path / "derivatives.yaml").read_text().splitlines()
    assert all(line.startswith(("#", "- name: ", "  ")) for line in yaml_lines), yaml_lines


def test_huge_and_special_constants(backend, dtype):
    @sg.function
    def consts(x):
        return x * 10**400 / 10**400 + x * sg.pi + sg.e - sg.e

    @sg.function
    def big(x):
        return sg.where(x > 0, x * 1e300 * 1e300, -x)

    x = np.array([0.5, -2.0], dtype)
    np.testing.assert_allclose(consts(x), x * (1 + np.pi), rtol=1e-6)

    @sg.function
    def huge(x):
        return x * 10**400

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(huge(x), np.array([np.inf, -np.inf], dtype))
    out = big(x)
    assert out[0] == np.inf and out[1] == 2.0


def test_huge_constant_terms_do_not_stall_printing():
    """A sum with a compound constant term: SymPy's printers order terms by evaluating them numerically,
    minutes for exp(exp(exp(40))) (found by make fuzz); symgrad's printers keep SymPy's canonical order.
    (SymPy's own diff of such a constant is still slow: a known limit.)"""
    import sympy

    from emitters.c import SymgradCPrinter
    from emitters.numpy import SymgradNumPyPrinter
    from symgrad.compiler.display import formula

    x = sympy.Symbol("x", real=True)
    e = x + sympy.sqrt(2) + sympy.exp(sympy.exp(sympy.exp(40))) * sympy.sin(x)
    start = time.perf_counter()
    texts = [formula(e), SymgradCPrinter().doprint(e), SymgradNumPyPrinter().doprint(e)]
    assert time.perf_counter() - start < 5, "printing stalled on a huge constant"
    assert all(re.search(r"exp\((numpy\.)?exp\((numpy\.)?exp\(40", t) for t in texts), texts


def test_function_names_never_leave_the_cache_directory(tmp_path, monkeypatch):
    """A function's ``__name__`` is data: ``../`` in it stays inside the cache, and a very long one works
    (it named the package directory, which escaped the cache or failed with errno 36)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(cache))

    def double(x):
        return x * 2

    def triple(x):
        return x * 3

    double.__name__ = "../../escaped"
    triple.__name__ = "t" * 300
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(sg.function(double)(x), 2 * x)
    np.testing.assert_allclose(sg.function(triple)(x), 3 * x)
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*") if cache not in p.parents)
    packages = [p for p in (cache / "jit").iterdir() if not p.name.startswith(".")]
    assert len(packages) == 2 and all(len(p.name) < 64 for p in packages)


def test_element_symbols_never_meet_another_argument(backend):
    """``v[0]`` and an argument ``v_0`` are two variables (they were one SymPy symbol: 110 read 1100)."""

    @sg.function
    def vec(v: sg.Vector(2), v_0):
        return v[0] * 10 + v_0 * v[1]

    @sg.function
    def mat(m: sg.Matrix(2, 2), m_0_1):
        return m[0, 1] * 10 + m_0_1

    v, v_0 = np.array([[1.0, 3.0]]), np.array([100.0])
    np.testing.assert_allclose(vec(v, v_0), [10 + 300])
    gv, gv_0 = vec.vjp(v, v_0, np.ones(1))
    np.testing.assert_allclose(gv, [[10.0, 100.0]])
    np.testing.assert_allclose(gv_0, [3.0])
    m, m_0_1 = np.array([[[1.0, 2.0], [3.0, 4.0]]]), np.array([7.0])
    np.testing.assert_allclose(mat(m, m_0_1), [27.0])
    gm, gm_0_1 = mat.vjp(m, m_0_1, np.ones(1))
    np.testing.assert_allclose(gm, [[[0.0, 10.0], [0.0, 0.0]]])
    np.testing.assert_allclose(gm_0_1, [1.0])


def test_arguments_named_like_internal_symbols(backend):
    """Arguments named as symgrad's own temporaries and seeds were once those very symbols (an IR error or
    a wrong gradient); every made-up symbol is apart from every argument."""

    @sg.function
    def clash(_t0, _cot0, _out0, _grad0, _tan_in0, _jac0_0, _c0):
        return sg.sin(_t0) * _cot0 + _out0 * _grad0 + sg.exp(_tan_in0) * _jac0_0 - _c0**2

    args = [np.array([v]) for v in (0.5, 2.0, 3.0, 4.0, 0.25, 5.0, 1.5)]
    t0, cot0, out0, grad0, tan0, jac0, c0 = (a[0] for a in args)
    want = np.sin(t0) * cot0 + out0 * grad0 + np.exp(tan0) * jac0 - c0**2
    np.testing.assert_allclose(clash(*args), [want])
    grads = clash.vjp(*args, np.ones(1))
    expected = [np.cos(t0) * cot0, np.sin(t0), grad0, out0, np.exp(tan0) * jac0, np.exp(tan0), -2 * c0]
    np.testing.assert_allclose([g[0] for g in grads], expected)
    _, jvp_out = clash.jvp(tuple(args), tuple(np.ones(1) for _ in args))
    np.testing.assert_allclose(jvp_out, [sum(expected)])


def test_functions_whose_names_sanitize_alike_stay_apart(tmp_path, backend):
    """``alpha``/``α`` and ``exp``/``exp_`` made one identifier: the NumPy backend ran the other function and
    the C build failed for every function. Each keeps its own kernels now."""
    (tmp_path / "alike.py").write_text(
        textwrap.dedent("""\
            import symgrad as sg

            @sg.function
            def alpha(x):
                return x * 2

            @sg.function
            def α(x):
                return x * 3

            @sg.function
            def exp(x):
                return x * 5

            @sg.function
            def exp_(x):
                return x * 7
        """)
    )
    module = sg.compile(tmp_path / "alike.py")
    x = np.array([1.0, 2.0])
    for name, factor in (("alpha", 2), ("α", 3), ("exp", 5), ("exp_", 7)):
        np.testing.assert_allclose(getattr(module, name)(x), factor * x, err_msg=name)
        np.testing.assert_allclose(getattr(module, name).vjp(x, np.ones(2))[0], factor, err_msg=name)


def test_two_functions_of_one_name_are_an_error(tmp_path):
    (tmp_path / "twice.py").write_text(
        textwrap.dedent("""\
            import symgrad as sg

            def make(k):
                @sg.function
                def scale(x):
                    return x * k
                return scale

            double = make(2)
            triple = make(3)
        """)
    )
    with pytest.raises(sg.ModelError, match=r"two functions are named .scale. \(twice.py:4 and twice.py:4\)"):
        compile_model(tmp_path / "twice.py")


def test_a_package_that_cannot_be_replaced_is_an_error_not_a_success(tmp_path, monkeypatch):
    """``symgrad compile -o DIR`` onto a directory that cannot be moved aside (a mount point, an immutable
    directory) reported success and left the old package in place."""
    import errno

    import symgrad.build.cache as cache

    (tmp_path / "m.py").write_text("import symgrad as sg\n@sg.function\ndef f(x):\n    return x * 2\n")
    old = compile_model(tmp_path / "m.py", tmp_path / "out")
    (tmp_path / "m.py").write_text("import symgrad as sg\n@sg.function\ndef f(x):\n    return x * 3\n")
    replace = os.replace

    def pinned(src, dst):
        if str(src) == str(old.path):  # the old package stays where it is
            raise OSError(errno.EBUSY, "Device or resource busy")
        return replace(src, dst)

    monkeypatch.setattr(cache.os, "replace", pinned)
    with pytest.raises(OSError, match="cannot"):
        compile_model(tmp_path / "m.py", tmp_path / "out")
    monkeypatch.setattr(cache.os, "replace", replace)
    with pytest.warns(sg.StalePackageWarning, match="m.py changed since out was compiled"):
        old_package = sg.load_package(tmp_path / "out")
    assert old_package["f"](np.array([1.0])) == 2.0  # the old one, intact


def test_unusable_arguments_and_settings_get_clear_errors(backend, monkeypatch):
    """Each of these raised something else (OverflowError, NumPy's ValueError, a dtype error that named a
    float64 array's own dtype, one out= message for every property, a bare int() error)."""

    @sg.function
    def f(x, y):
        return x * y + sg.exp(x)

    x = np.ones(3)
    with pytest.raises(
        sg.ArgumentError, match="argument 'x' is an integer of 401 digits, too large for float64"
    ):
        f(10**400, x)
    with pytest.raises(sg.ArgumentError, match="argument 'x' is not a rectangular array of numbers"):
        f([[1.0, 2.0], [3.0]], 1.0)
    with pytest.raises(sg.ArgumentError, match=r"float64 in non-native byte order \(>f8\); convert it with"):
        f(np.ones(3, dtype=">f8"), x)
    for out, problem in [
        (np.empty(3, np.float32), "its dtype is float32, not float64"),
        (np.empty(4), r"its shape is \(4,\), not \(3,\)"),
        (np.empty(6)[::2], "it is not C-contiguous"),
        (np.frombuffer(bytes(24)), "it is read-only"),
        ((1.0,), "it is a float, not a NumPy array"),
    ]:
        with pytest.raises(sg.ArgumentError, match=r"out\[0\] must be .*; " + problem):
            f(x, x, out=out)
    monkeypatch.setenv("SYMGRAD_MAX_OPS", "abc")
    with pytest.raises(sg.ModelError, match="SYMGRAD_MAX_OPS must be a whole number of nodes, got 'abc'"):
        sg.function(lambda z: z * 3).trace()
