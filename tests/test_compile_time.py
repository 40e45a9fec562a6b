"""Compile time that grows with the program, not faster: counted work (assumption queries, SymPy's quadratic
CSE steps), never wall time; and the large functions' gradients against finite differences."""

import random
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy

import emitters
import symgrad
from symgrad.compiler import cse, dag, derive, lower, opcount, passes
from symgrad.compiler.fastdiff import diff
from symgrad.compiler.local import local_derivative
from symgrad.compiler.primitives import sigmoid, softplus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import large_models  # noqa: E402

ASSUMPTIONS = sys.modules["sympy.core.assumptions"]


@pytest.fixture
def asks(monkeypatch):
    """The number of SymPy assumption queries (``sympy.core.assumptions._ask``) made so far."""
    calls = [0]
    ask = ASSUMPTIONS._ask

    def counting(fact, obj):
        calls[0] += 1
        return ask(fact, obj)

    monkeypatch.setattr(ASSUMPTIONS, "_ask", counting)
    return calls


def test_layer_derivatives_ask_few_assumption_queries(asks):
    """A tanh neuron of a 20-wide layer, differentiated with respect to each of its 20 inputs: its chain
    rule factor is built and asked about once, not once per input (471 queries before, 62 now)."""
    rng = random.Random(1)
    h = [sympy.Symbol(f"h{i}_ct'", real=True) for i in range(20)]
    expr = sympy.tanh(sum(rng.gauss(0, 1) * v for v in h) + 0.1)
    sym = sympy.Symbol("t_ct'", real=True)
    asks[0] = 0
    ds = [local_derivative(expr, sym, v, "test") for v in h]
    assert asks[0] <= 100, asks[0]
    assert all(d.has(sympy.tanh) for d in ds)


X, Y = sympy.symbols("x y", real=True)


@pytest.mark.parametrize(
    "expr",
    [
        sympy.tanh(X**2 + 3 * X * Y + 0.5),
        sympy.exp(-(X**2)) * sympy.sin(X * Y) / (1 + Y**2),
        (X**2 + Y**2) ** sympy.Rational(-3, 2) + (X - Y) ** -6,
        sympy.log(1 + sympy.cos(X) ** 2) * sympy.atan(X / Y),
        softplus(X * Y) + sigmoid(X - 2 * Y) ** 3,
        sympy.Abs(X - Y) * sympy.erf(X),
        sympy.Piecewise((X**2, X > Y), (sympy.sin(Y), True)) * X,
        sympy.Max(X, Y) + sympy.Min(X**2, 1),
    ],
)
def test_fastdiff_is_sympy_diff(expr):
    """The same expression as ``sympy.diff``, for each argument."""
    for wrt in (X, Y):
        assert diff(expr, wrt) == sympy.diff(expr, wrt)


def test_large_program_cse_skips_sympys_quadratic_steps(monkeypatch):
    """Past ``cse.LARGE_PROGRAM_NODES`` the joint CSE never runs ``opt_cse`` (pairwise matching of sums and
    products), and what it returns computes the same values."""
    cse_main = sys.modules["sympy.simplify.cse_main"]

    def refuse(*args, **kwargs):
        raise AssertionError("opt_cse ran on a large program")

    xs = sympy.symbols("a0:40", real=True)
    exprs = [sympy.sin(xs[i] + xs[i + 1]) * sympy.exp(xs[i] - xs[i + 1]) for i in range(39)]
    exprs += [e1 * e2 + sympy.sin(xs[i] + xs[i + 1]) for i, (e1, e2) in enumerate(zip(exprs, exprs[1:]))]
    monkeypatch.setattr(cse, "LARGE_PROGRAM_NODES", 100)
    monkeypatch.setattr(cse_main, "opt_cse", refuse)
    assigns, reduced = passes.straight_line(exprs, "_ct")
    assert len(assigns) >= 39  # each shared sin(a_i + a_i+1)*exp(...) is a temporary
    point = {x: 0.1 * k - 1.3 for k, x in enumerate(xs)}
    values = dict(point)
    for s, e in assigns:
        values[s] = e.xreplace(values).evalf()
    for e, r in zip(exprs, reduced):
        assert float(r.xreplace(values)) == pytest.approx(float(e.xreplace(point)), rel=1e-12)


def lennard_jones(n, tag=""):
    return large_models.lennard_jones(n, name=f"lj{n}_ct{tag}")


def tanh_net(layers, width, n_in, tag=""):
    return large_models.tanh_mlp(layers, width, n_in, name=f"net{layers}x{width}_ct{tag}")


def central_differences(f, x, h):
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape[1:]):
        step = np.zeros_like(x)
        step[(slice(None), *index)] = h
        grad[(slice(None), *index)] = (f(x + step) - f(x - step)) / (2 * h)
    return grad


@pytest.mark.parametrize("large_cse", [False, True], ids=["sympy-cse", "linear-cse"])
@pytest.mark.parametrize(
    "make, shape, spacing",
    [(lambda tag: lennard_jones(5, tag), (5, 3), 0.45), (lambda tag: tanh_net(4, 8, 6, tag), (6,), 0.1)],
    ids=["lj5", "tanh4x8"],
)
def test_large_function_gradients_match_finite_differences(
    backend, monkeypatch, large_cse, make, shape, spacing
):
    """float64: the vjp and the Jacobian within 1e-6 (relative to the gradient's size) of central
    differences, with SymPy's CSE and with the linear one every program past its threshold gets."""
    if large_cse:
        monkeypatch.setattr(cse, "LARGE_PROGRAM_NODES", 10)
    fn = make("_linear" if large_cse else "")  # its own name: its own cache entry
    rng = np.random.default_rng(3)
    x = np.arange(np.prod(shape), dtype=float).reshape(shape) * spacing + 0.05 * rng.normal(size=(4, *shape))
    (grad,) = fn.vjp(x, np.ones(4))
    expected = central_differences(lambda v: np.asarray(fn(v)), x, 1e-6)
    size = np.abs(expected).max()
    np.testing.assert_allclose(grad, expected, atol=1e-6 * size, rtol=1e-6)
    _, jac = fn.value_and_jacobian(x)
    np.testing.assert_allclose(jac.reshape(grad.shape), grad, atol=1e-12 * size, rtol=1e-12)


@pytest.fixture
def walked(monkeypatch):
    """The number of nodes the DAG walks of ``symgrad.compiler.dag`` have visited so far."""
    visits = [0]
    for name in ("nodes", "preorder", "_new_nodes"):
        walk = getattr(dag, name, None)
        if walk is None:
            continue

        def counting(*args, _walk=walk, **kwargs):
            for node in _walk(*args, **kwargs):
                visits[0] += 1
                yield node

        monkeypatch.setattr(dag, name, counting)
    return visits


def test_local_derivatives_walk_each_shared_node_once(walked):
    """Ten tanh neurons of a 20-wide layer, each differentiated with respect to its 20 inputs: the
    derivative rules' structural checks (saturate, cancel_reciprocals, hypot, check_supported) remember
    each sub-expression's facts, so the walks grow with the number of derivatives and distinct nodes, not
    with their product (107,200 nodes visited before, 5,265 now)."""
    rng = random.Random(2)
    h = [sympy.Symbol(f"h{i}_walk", real=True) for i in range(20)]
    neurons = [sympy.tanh(sum(rng.gauss(0, 1) * v for v in h) + 0.1) for _ in range(10)]
    walked[0] = 0
    for k, expr in enumerate(neurons):
        for v in h:
            d = local_derivative(expr, sympy.Symbol(f"t{k}_walk", real=True), v, "test")
            assert d.has(sympy.tanh)
    assert walked[0] <= 40 * len(neurons) * len(h), walked[0]


def test_renaming_again_rebuilds_nothing(monkeypatch):
    """``dag.renamed`` (how lowering renames each program's body) is ``xreplace``, and a sub-expression
    renamed again under the same names (the next program's copy of the forward pass) is taken from the
    memo: no node rebuilt, no Float hashed (``xreplace`` hashes each Float again for SymPy's cache), while
    one whose temporary is renamed differently is rebuilt."""
    a, b, t = (sympy.Symbol(n, real=True) for n in ("a_rn", "b_rn", "t_rn"))
    layer = [sympy.tanh(0.3 * a - 1.7 * b + 0.1 * k) for k in range(5)]
    exprs = [sum(layer) * t, sympy.exp(-(a**2)) * layer[0] + t**2]
    names = {a: sympy.Symbol("x_0", real=True), b: sympy.Symbol("x_1", real=True)}
    memo: dict = {}
    first = [dag.renamed(e, {**names, t: sympy.Symbol("u", real=True)}, memo) for e in exprs]
    assert first == [e.xreplace({**names, t: sympy.Symbol("u", real=True)}) for e in exprs]
    hashed = [0]
    original = sympy.Float.__hash__

    def counting(self):
        hashed[0] += 1
        return original(self)

    monkeypatch.setattr(sympy.Float, "__hash__", counting)
    assert [dag.renamed(e, {**names, t: sympy.Symbol("u", real=True)}, memo) for e in exprs] == first
    assert hashed[0] == 0
    other = {**names, t: sympy.Symbol("v", real=True)}
    assert [dag.renamed(e, other, memo) for e in exprs] == [e.xreplace(other) for e in exprs]


@pytest.mark.parametrize(
    "patterns",
    [(sympy.nan,), (sympy.zoo,), (sympy.I,), (sympy.Pow,), (sympy.exp, sympy.tanh), (sympy.Piecewise,), (X,)],
    ids=repr,
)
def test_remembered_has_is_sympys_has(patterns):
    """``dag.has``, answered from the classes remembered per node, is ``Basic.has`` (classes, singletons
    such as nan, and symbols), asked of expressions that share sub-expressions."""
    shared = sympy.tanh(X * Y + 1)
    exprs = [
        shared,
        shared**2 * sympy.exp(-X),
        sympy.Piecewise((shared, X > 0), (sympy.nan, True)),
        X + sympy.I * Y,
        1 / (1 + X**-2),
    ]
    for expr in exprs:
        assert dag.has(expr, *patterns) == expr.has(*patterns), expr


def _kernel_exprs(kernel):
    return [a.expr for p in kernel.programs for a in p.body]


W, Z = sympy.symbols("w z", real=True)
COUNT_OPS_EDGES = [
    -2.0 * X * Y,
    -X / Y,
    -sympy.Rational(3, 2) * X**2 / Y,
    -1.0 * X,
    sympy.Mul(-1.0, X, evaluate=False),
    sympy.Mul(-2, X + Y, evaluate=False),
    sympy.Mul(-2, X, 3, evaluate=False),
    -sympy.exp(-X) * Y + sympy.exp(-2 * X * Y),
    -(X**-2) - Y ** -sympy.Rational(1, 2),
    sympy.Abs(X) ** -2 * Y,
    3 / (X + Y) - sympy.Rational(1, 3),
    -X - Y - 2,
    sympy.Max(X, Y, W) - sympy.Min(X, 1),
    sympy.Piecewise((-X, X > Y), (Y**2 / Z, True)) * W,
    X**Y * sympy.E - sympy.exp(X) / sympy.tanh(W - Z),
    softplus(-X) * sigmoid(Y / Z) ** -3,
]


def test_op_counts_are_sympys_count_ops():
    """``opcount.count_ops`` (what ``Program.op_count`` and the C emitter's loop heuristics use) is
    ``sympy.count_ops`` for every assignment of two large functions' programs and for products SymPy would
    rebuild differently (negated, unevaluated, a denominator it evaluates again)."""
    exprs = COUNT_OPS_EDGES + _kernel_exprs(lower(derive(lennard_jones(3).trace())))
    exprs += _kernel_exprs(lower(derive(tanh_net(2, 4, 3).trace())))
    for e in exprs:
        assert opcount.count_ops(e) == int(sympy.count_ops(e)), e


def test_op_counts_and_printing_ask_few_assumptions(asks):
    """Counting a tanh net's programs' operations asks no assumption query, and printing them as C few:
    SymPy's count_ops negated and split every product (``fraction``), and the C printer negated every
    product with a negative coefficient, each a new product whose flatten asked about every factor (a
    5-layer 20-wide net: 275 of 680 s). Before: 4,322 queries counting and 26,913 printing; now 0 and
    4,773 (SymPy's ordering of sums)."""
    kernel = lower(derive(tanh_net(2, 12, 6, "_asks").trace()))
    info = emitters.ModelInfo(source="test", symgrad_version=symgrad.__version__)
    asks[0] = 0
    for program in kernel.programs:
        program.op_count()
    assert asks[0] <= 10, asks[0]
    emitters.get("c").emit_module([kernel], info)
    assert asks[0] <= 8000, asks[0]


def test_renaming_evaluates_no_function(asks):
    """``dag.renamed`` rebuilds a renamed function unevaluated: ``tanh(u)``'s ``eval`` asked whether the
    renamed argument is zero, a query that walks it (12 neurons: 1,527 queries before, 101 now, the sums'
    and products' canonical forms)."""
    h = [sympy.Symbol(f"h{i}_ev", real=True) for i in range(8)]
    rng = random.Random(4)
    neurons = [sympy.tanh(sum(rng.gauss(0, 1) * v for v in h) + 0.1) for _ in range(12)]
    rule = {v: sympy.Symbol(f"x_{i}", real=True) for i, v in enumerate(h)}
    asks[0] = 0
    renamed = [dag.renamed(e, rule, {}) for e in neurons]
    assert asks[0] <= 300, asks[0]
    assert renamed == [e.xreplace(rule) for e in neurons]


def test_renaming_and_large_cse_resort_without_queries(asks, monkeypatch):
    """``dag.renamed`` and the large-program ``cse`` rebuild a sum or product by sorting its new arguments
    as SymPy's flatten does (a one-to-one replacement merges nothing), not by evaluating it: each evaluation
    made a new Float coefficient and asked whether it is zero (about 40 us; 52,000 of them lowering a
    5-layer tanh net). Same expressions with the same argument order, and no query (12 neurons renamed: 101
    queries before)."""
    h = [sympy.Symbol(f"h{i}_rs", real=True) for i in range(8)]
    rng = random.Random(5)
    neurons = [
        rng.gauss(0, 1) * sympy.tanh(sum(rng.gauss(0, 1) * v for v in h) + 0.1) - h[0] * h[1] ** 3
        for _ in range(12)
    ]
    rule = {v: sympy.Symbol(f"y_{7 - i}", real=True) for i, v in enumerate(h)}  # reversed: re-sorted
    asks[0] = 0
    renamed = [dag.renamed(e, rule, {}) for e in neurons]
    assert asks[0] == 0, asks[0]
    assert [sympy.srepr(e) for e in renamed] == [sympy.srepr(e.xreplace(rule)) for e in neurons]
    exprs = neurons + [n * h[2] for n in neurons]
    fast = cse.cse(exprs, passes.fresh("_rs"))
    monkeypatch.setattr(dag, "resorted", lambda node, args: node.func(*args))
    assert sympy.srepr(cse.cse(exprs, passes.fresh("_rs"))) == sympy.srepr(fast)


def test_debug_stage_times_count_the_tracing_of_a_function_compiled_on_first_call(
    monkeypatch, tmp_path, capsys
):
    """``SYMGRAD_DEBUG=1``'s "trace" time of an ``@sg.function`` built on its first call is the tracing it
    did (it printed 0.000 s: the spec was traced before the timed stage)."""
    import re
    import time

    monkeypatch.setenv("SYMGRAD_DEBUG", "1")
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))

    @symgrad.function
    def slow_to_trace(x):
        time.sleep(0.2)  # runs once, while tracing
        return symgrad.sin(x) * x

    slow_to_trace(np.ones(3))
    seconds = re.search(r"slow_to_trace: trace ([0-9.]+) s", capsys.readouterr().err)
    assert seconds is not None and float(seconds.group(1)) >= 0.2


def test_a_long_sum_differentiates_with_respect_to_each_symbol_in_linear_work():
    """``fastdiff.diff`` of a sum with respect to each of its n symbols visited all n terms each time (n**2
    calls: lowering a 45-atom cluster, whose energy sums 990 pair terms, spent 28 s, 2.3x the pairs of 30
    atoms costing 3.9x the time); it now visits the terms that hold the symbol. Same derivatives."""
    n = 400
    t = sympy.symbols(f"t_lin0:{n}", real=True)
    total = sum((k % 7 + 1) * v**2 for k, v in enumerate(t))
    diff.cache_clear()
    got = [diff(total, v) for v in t]
    info = diff.cache_info()
    assert info.hits + info.misses <= 6 * n, info
    assert got == [2 * (k % 7 + 1) * v for k, v in enumerate(t)]
