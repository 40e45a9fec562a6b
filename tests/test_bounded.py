"""Tracing and compiling take time near-linear in the size of the expression's DAG, not of its tree
(issue 26, "tracing that never ends"): nested ``where``s, deep shared DAGs, and the size limit counting
distinct sub-expressions."""

import math
import re
import time

import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad.compiler import compile_spec
from symgrad.compiler.rewrite import stabilize


def _nested_where(n: int):
    def nested(x):
        y = x
        for i in range(n):
            y = sg.where(y > i * 0.1, sg.sin(y), y * 0.5 + 1)
        return y

    return nested


def _reference(x: float, n: int) -> tuple[float, float]:
    """The value and derivative of ``_nested_where(n)`` at ``x``, in plain Python."""
    y, dy = x, 1.0
    for i in range(n):
        y, dy = (math.sin(y), math.cos(y) * dy) if y > i * 0.1 else (y * 0.5 + 1, 0.5 * dy)
    return y, dy


@pytest.mark.parametrize("n", [14, pytest.param(30, marks=pytest.mark.slow)])
def test_nested_where_compiles_in_seconds_and_right(n):
    # before: 14 nested where ran for minutes in piecewise.operands (cond.replace), 30 never ended
    f = sg.function(_nested_where(n))
    start = time.perf_counter()
    kernel = compile_spec(f.trace())
    assert time.perf_counter() - start < 15, f"{n} nested where took {time.perf_counter() - start:.0f} s"
    assert kernel.op_counts
    x = np.linspace(-2.0, 3.0, 41)
    value, (grad,) = f.value_and_vjp(x, np.ones_like(x))
    expected = np.array([_reference(v, n) for v in x])
    np.testing.assert_allclose(value, expected[:, 0], rtol=1e-12, atol=1e-12)  # float64
    np.testing.assert_allclose(grad, expected[:, 1], rtol=1e-12, atol=1e-12)


def _deep_dag(depth: int):
    def dag(x):
        e = x
        for _ in range(depth):
            e = sg.sin(e) + sg.cos(e)
        return e

    return dag


def test_stabilize_is_linear_in_the_dag():
    # before: SymPy's bottom_up walked the 2**21-node tree, about 7 s at depth 20 (exponential in the depth)
    x = sympy.Symbol("x", real=True)
    e = _deep_dag(20)(x)
    start = time.perf_counter()
    assert stabilize(e) == e
    assert time.perf_counter() - start < 1


def test_deep_dag_compiles_in_seconds_and_right():
    # before: 70 s at depth 20 (tree walks in the size check, check_supported, count_ops and formulas)
    f = sg.function(_deep_dag(20))
    start = time.perf_counter()
    kernel = compile_spec(f.trace())
    assert time.perf_counter() - start < 10
    assert "too long to show" in dict(kernel.formulas)["out"]
    x = np.linspace(-1.0, 1.0, 9)
    value, (grad,) = f.value_and_vjp(x, np.ones_like(x))
    y, dy = x.copy(), np.ones_like(x)
    for _ in range(20):
        y, dy = np.sin(y) + np.cos(y), (np.cos(y) - np.sin(y)) * dy
    np.testing.assert_allclose(value, y, rtol=1e-12)  # float64
    np.testing.assert_allclose(grad, dy, rtol=1e-10)


@pytest.mark.slow
def test_size_limit_counts_the_dag_not_the_tree(monkeypatch):
    # before: a 3-layer, 60-wide net (tree of millions of nodes, DAG of thousands) was ExpressionTooLarge
    rng = np.random.default_rng(0)
    weights = [
        rng.uniform(-1, 1, size=(60, 2)),
        rng.uniform(-1, 1, size=(60, 60)),
        rng.uniform(-1, 1, (60, 60)),
    ]

    @sg.function
    def net(x: sg.Vector(2)):
        h = list(x)
        for w in weights:
            h = [sg.tanh(sum(float(w[i, j]) * h[j] for j in range(len(h)))) for i in range(w.shape[0])]
        return sum(h)

    start = time.perf_counter()
    spec = net.trace()
    assert time.perf_counter() - start < 15
    assert spec.outputs[0].exprs[0].has(sympy.tanh)
    # ... while a DAG of more distinct nodes than the limit is still refused
    monkeypatch.setenv("SYMGRAD_MAX_OPS", "1000")
    with pytest.raises(sg.ExpressionTooLarge, match=r"net: the traced expression has more than 1000 nodes"):
        net.trace()


# -- a long compile says so (on stderr only) -----------------------------------------------------------------

SLOW_MODEL = (
    "import time\nimport symgrad as sg\n\n@sg.function\ndef slow(x):\n    time.sleep({})\n    return x * 3\n"
)


@pytest.fixture
def quick_notice(monkeypatch):
    """Notices after 0.3 s instead of 2 s, so that a model sleeping 1 s while it is traced is 'long'."""
    from symgrad.build import progress

    monkeypatch.setattr(progress, "NOTICE_AFTER", 0.3)
    monkeypatch.delenv("SYMGRAD_QUIET", raising=False)


def test_long_sg_compile_prints_one_line_on_stderr_only(tmp_path, capsys, quick_notice):
    model = tmp_path / "slow_model.py"
    model.write_text(SLOW_MODEL.format(1.0))
    sg.compile(model, force=True)
    out, err = capsys.readouterr()
    assert out == "" and err == "symgrad: compiling slow_model.py...\n"
    sg.compile(model, force=True, quiet=True)
    assert capsys.readouterr() == ("", "")


def test_long_first_call_prints_one_line_unless_quiet(tmp_path, capsys, quick_notice, monkeypatch):
    def slow_first(x):
        time.sleep(1.0)
        return x * 5

    f = sg.function(slow_first)
    np.testing.assert_array_equal(f(np.array([1.0])), [5.0])
    out, err = capsys.readouterr()
    assert out == "" and err == "symgrad: compiling test_bounded.py:slow_first...\n"
    monkeypatch.setenv("SYMGRAD_QUIET", "1")
    np.testing.assert_array_equal(sg.function(slow_first)(np.array([2.0])), [10.0])
    assert capsys.readouterr() == ("", "")


def test_threads_waiting_on_one_first_call_print_one_line(capsys, quick_notice):
    """Eight threads making the same first call each printed "compiling ...": the ones that wait on the
    build stay quiet."""
    import threading

    def slow_same(x):
        time.sleep(1.0)
        return x * 7

    f = sg.function(slow_same)
    results = []
    threads = [threading.Thread(target=lambda: results.append(f(np.array([1.0])))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r[0] == 7.0 for r in results)
    out, err = capsys.readouterr()
    assert out == "" and err == "symgrad: compiling test_bounded.py:slow_same...\n"


def test_short_builds_print_nothing(tmp_path, capsys, monkeypatch):
    from symgrad.build import progress

    monkeypatch.setattr(progress, "NOTICE_AFTER", 60.0)
    model = tmp_path / "quick_model.py"
    model.write_text(SLOW_MODEL.format(0))
    sg.compile(model, force=True).slow(np.array([1.0]))
    assert capsys.readouterr() == ("", "")


@pytest.mark.skipif("c" not in sg.available_backends(), reason="needs a C compiler")
def test_long_c_build_on_first_call_says_so_unless_quiet(tmp_path, capsys, monkeypatch):
    from symgrad.build import progress

    monkeypatch.setattr(progress, "NOTICE_AFTER", 0.01)  # a gcc run takes longer
    monkeypatch.delenv("SYMGRAD_QUIET", raising=False)
    # a cache of its own: `make test` keeps one across runs, where a second run found these builds done
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path / "cache"))
    previous = sg.get_backend()
    sg.set_backend("c")
    try:
        for quiet, scale in ((None, 1.25), (True, 1.5)):  # distinct C sources: both are built
            model = tmp_path / f"c_model_{quiet}.py"
            model.write_text(SLOW_MODEL.format(0).replace("x * 3", f"x * 3 + sg.sin(x) * {scale}"))
            np.testing.assert_allclose(
                sg.compile(model, quiet=quiet).slow(np.array([1.0])), [3 + np.sin(1.0) * scale], rtol=1e-15
            )
            out, err = capsys.readouterr()
            expected = "".join(
                f"symgrad: compiling {model.name}{what}...\n" for what in ("", ":slow (c build)")
            )
            assert out == "" and err == ("" if quiet else expected)
    finally:
        sg.set_backend(previous)


def test_cli_compile_reports_each_function_with_its_time_and_a_summary(tmp_path):
    from cli_runner import run_symgrad

    (tmp_path / "two.py").write_text(
        "import symgrad as sg\n\n@sg.function\ndef a(x):\n    return x * x\n\n"
        "@sg.function\ndef b(x, y):\n    return sg.exp(x) * y\n"
    )
    for extra in ([], ["--timeout", "120"]):
        r = run_symgrad("compile", "two.py", "--force", *extra, cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stderr
        assert re.fullmatch(r"\[1/2\] a \(\d+\.\d\d s\)\n\[2/2\] b \(\d+\.\d\d s\)\n", r.stderr), r.stderr
        assert re.search(r"^wrote 2 functions to two_symgrad \(\d+\.\d\d s\)$", r.stdout, re.M), r.stdout
