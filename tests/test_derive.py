"""Derivation by reverse accumulation over the CSE'd program: no expression swell, cheap gradients,
and agreement with SymPy's tree derivative."""

import math
import re

import numpy as np
import sympy

import symgrad as sg
from symgrad.compiler import compile_spec

RNG = np.random.default_rng(0)
W = [RNG.normal(size=(8, 4)), RNG.normal(size=(8, 8)), RNG.normal(size=(1, 8))]


@sg.function
def mlp3(a, b, c, d):
    """A 3-layer, 8-wide tanh network with fixed weights: a classic expression-swell case for tree diff."""
    h = [a, b, c, d]
    for layer, w in enumerate(W):
        h = [sum(float(w[i, j]) * h[j] for j in range(len(h))) for i in range(w.shape[0])]
        if layer < len(W) - 1:
            h = [sg.tanh(v) for v in h]
    return h[0]


def test_cheap_gradient_principle():
    kernel = compile_spec(mlp3.trace())
    ops = dict(kernel.op_counts)
    assert ops["vjp"] <= 3 * ops["forward"], ops
    assert ops["value_and_vjp"] <= 4 * ops["forward"], ops


def test_program_matches_tree_derivative():
    spec = mlp3.trace()
    expr = spec.outputs[0].exprs[0]
    symbols = [a.symbols[0] for a in spec.args]
    point = RNG.normal(size=4)
    tree = [float(sympy.diff(expr, s).subs(dict(zip(symbols, point)))) for s in symbols]
    grads = mlp3.vjp(*point, 1.0)
    np.testing.assert_allclose([float(g) for g in grads], tree, rtol=1e-12)


def test_programs_validate_and_print():
    kernel = compile_spec(mlp3.trace())
    text = str(kernel)
    assert "program value_and_vjp(a, b, c, d, grad) -> (out, grad_a, grad_b, grad_c, grad_d)" in text
    for p in kernel.programs:
        p.validate()


def test_adjoint_guard_only_where_needed():
    @sg.function
    def guarded(x):
        r = sg.sqrt(x)  # used twice: CSE hoists it out of the branch
        return sg.where(x > 0, sg.sin(r) + sg.cos(r), 0)

    text = str(compile_spec(guarded.trace()).program("vjp"))
    assert "Eq(" in text  # the adjoint of the selected branch is guarded against 0 * inf
    grads = guarded.vjp(np.array([-1.0, 0.0, 4.0]), np.ones(3))[0]
    assert np.isfinite(grads[:2]).all() and (grads[:2] == 0).all()
    np.testing.assert_allclose(grads[2], (np.cos(2.0) - np.sin(2.0)) / 4.0)


def test_a_squared_call_is_computed_once():
    @sg.function
    def squashed(x):
        return sg.tanh(x) + sg.sin(x) ** 3 / 3 + sg.log(1 + (1 + sg.exp(x)) ** 2 + 1 / (2 + sg.cos(x)) ** 2)

    checked = 0
    for target in (
        "numpy",
        "c",
    ):  # the printers write t**2 as t*t: a call in a power's base must be a temporary
        for program in squashed.compiled().source(target).split("\n\n"):
            code = "\n".join(line.split("#")[0].split("/*")[0] for line in program.splitlines()[1:])
            # every program (in C: its rows loop; the exported function only calls it): tanh' = 1 - tanh^2,
            # (sin^3)' = 3 sin^2 cos, ...
            if "squashed__" in program and ("SG_SIMD" in program or target == "numpy"):
                checked += 1
                rows = 2 if "sg_skip" in code else 1  # a two-row loop has each statement twice
                for call in ("tanh", "sin", "exp", "cos"):
                    calls = len(re.findall(rf"\b{call}f?\(", code))  # not temporaries named tanh_x
                    assert calls <= rows, (call, code)
    assert checked == 7 + 7 * 2  # the 7 programs: once in NumPy, in float32 and float64 in C
    x = np.array([0.5])
    e, c = np.exp(0.5), np.cos(0.5)
    want = (
        1
        - np.tanh(0.5) ** 2
        + np.sin(0.5) ** 2 * c
        + (2 * (1 + e) * e + 2 * np.sin(0.5) / (2 + c) ** 3) / (1 + (1 + e) ** 2 + 1 / (2 + c) ** 2)
    )
    np.testing.assert_allclose(squashed.vjp(x, np.ones(1))[0], want, rtol=1e-12)


def test_conditions_never_hold_a_branch():
    """A stable form or a derivative rule compares its operands (logaddexp: a == b, a > b); when an operand
    is itself a Piecewise (a nested logaddexp, softplus, sigmoid or where), SymPy folds it into the
    condition through inequality solving, which took 15 s for the first function and minutes for the second.
    Such operands are temporaries of their own, so no condition of any program contains a Piecewise."""

    @sg.function
    def lse3(x):
        return sg.logsumexp(sg.sin(x), sg.cos(x), x)

    @sg.function
    def found_by_fuzzing(x):
        return sg.logsumexp(
            sg.sigmoid(sg.cos(sg.sqrt(1 + x**2))), sg.sigmoid(sg.floor(sg.erfc(x) ** 25)), sg.atan(x)
        )

    @sg.function
    def nested(x, y):
        return sg.softplus(sg.softplus(sg.sin(x)) - y) + sg.sigmoid(sg.where(x > y, sg.sigmoid(x), y) - 1)

    for fn in (lse3, found_by_fuzzing, nested):
        for program in compile_spec(fn.trace()).programs:
            for a in program.body:
                for node in sympy.preorder_traversal(a.expr):
                    if isinstance(node, sympy.logic.boolalg.Boolean) and not isinstance(node, sympy.Expr):
                        assert not node.has(sympy.Piecewise, sympy.ITE), (fn.name, program.name, node)
    x = np.linspace(-3, 3, 7)
    value, (grad,) = lse3.value_and_vjp(x, np.ones(7))
    terms = np.stack([np.sin(x), np.cos(x), x])
    np.testing.assert_allclose(value, np.log(np.exp(terms).sum(0)), rtol=1e-13)
    soft = np.exp(terms - value)
    np.testing.assert_allclose(grad, soft[0] * np.cos(x) - soft[1] * np.sin(x) + soft[2], rtol=1e-12)


def test_a_compared_branch_is_an_operand(backend):
    """SymPy folds a Piecewise inside a condition into nested ITE conditions, one per combination of
    branches (``where(clamp(...) > 0, ...)`` took 2-5 s to trace and lower with three clamps, and
    ``make fuzz`` found one past Python's recursion limit). The model's where/clamp hold such a Piecewise
    as an operand, so the trace has no ITE and every program compares plain temporaries; values and
    gradients still follow the model on both backends."""

    def c(u):
        return sg.clamp(u, -1, 1)

    @sg.function
    def compared_clamps(x, y, z):
        return sg.where(sg.And(c(c(x) * y) > 0, c(c(y) + z) < 1), sg.sin(x) * y, c(z) * x)

    @sg.function
    def compared_wheres(x, y, z):
        return sg.where(sg.where(x > y, c(x), z) > sg.where(y > 0, c(y + z), x), x * z, y)

    @sg.function
    def compared_steps(x, y, z):  # each Heaviside becomes a Piecewise in the rewrite pass: 3062 ops before
        h = sympy.Heaviside
        return sg.where(h(x - y) + h(y - z) + h(z - x) + h(x + y + z) > 1.5, x * y, z)

    @sg.function
    def found_by_fuzzing(x):  # raised "Invalid comparison of non-real" once the operand was held
        u = sg.cos(-1 + sg.where(sg.Ne(x, 0), sg.sin(x) / x, 1))
        return sg.where(u > 0, u * sg.log(u), 0)

    assert dict(compile_spec(compared_steps.trace()).op_counts)["value_and_vjp"] < 100
    for fn in (compared_clamps, compared_wheres, compared_steps, found_by_fuzzing):
        assert not fn.trace().outputs[0].exprs[0].has(sympy.ITE), fn.name
        for program in compile_spec(fn.trace()).programs:
            for a in program.body:
                for node in sympy.preorder_traversal(a.expr):
                    if isinstance(node, sympy.logic.boolalg.Boolean) and not isinstance(node, sympy.Expr):
                        assert not node.has(sympy.Piecewise, sympy.ITE), (fn.name, program.name, node)

    x, y, z = RNG.uniform(-2, 2, size=(3, 400))
    cl = lambda u: np.clip(u, -1, 1)  # noqa: E731
    taken = (cl(cl(x) * y) > 0) & (cl(cl(y) + z) < 1)
    value, (gx, gy, gz) = compared_clamps.value_and_vjp(x, y, z, np.ones(400))
    np.testing.assert_allclose(value, np.where(taken, np.sin(x) * y, cl(z) * x), rtol=1e-14)
    np.testing.assert_allclose(gx, np.where(taken, np.cos(x) * y, cl(z)), rtol=1e-14)
    np.testing.assert_allclose(gy, np.where(taken, np.sin(x), 0), rtol=1e-14)
    np.testing.assert_allclose(gz, np.where(taken, 0, np.where(np.abs(z) < 1, x, 0)), rtol=1e-14)

    taken = np.where(x > y, cl(x), z) > np.where(y > 0, cl(y + z), x)
    value, (gx, gy, gz) = compared_wheres.value_and_vjp(x, y, z, np.ones(400))
    np.testing.assert_allclose(value, np.where(taken, x * z, y), rtol=1e-14)
    np.testing.assert_array_equal(
        np.stack([gx, gy, gz]),
        np.stack([np.where(taken, z, 0), np.where(taken, 0, 1), np.where(taken, x, 0)]),
    )

    taken = (x > y) * 1.0 + (y > z) + (z > x) + (x + y + z > 0) > 1.5
    np.testing.assert_array_equal(compared_steps(x, y, z), np.where(taken, x * y, z))
    u = np.cos(np.sin(x) / x - 1)
    np.testing.assert_allclose(
        found_by_fuzzing(x), np.where(u > 0, u * np.log(u), 0), rtol=1e-12, atol=1e-15
    )  # u ~ 1 cancels


def test_a_comparison_sympy_cannot_canonicalize_still_builds(backend):
    """SymPy canonicalizes a Piecewise's conditions until nothing changes; for ``a > b`` below that form flips
    between two spellings forever, so the Piecewise was never built: the closed-form derivative of the first
    function (found by ``make fuzz``: Max(...) of three arguments) and the second one's ``where`` raised
    RecursionError. Such a comparison is built as ``a - b > 0``, the same test for finite sides."""
    half = sympy.Rational(1, 2)

    def a_and_b(x):
        return sg.Max(sg.softplus(sg.cos(half)), sg.expm1(sg.Max(sg.tan(x), sg.erf(x)))), 1 / (
            x**4 + 1
        ) - 0.892325633666869

    @sg.function
    def found_by_fuzzing(x):
        a, b = a_and_b(x)
        return sg.sqrt(x**2 + sg.log(sg.Max(b, a) ** 2 + half) ** 2)

    @sg.function
    def compares_them(x):
        a, b = a_and_b(x)
        return sg.where(a > b, x**2, x)

    x = np.linspace(-1.4, 1.4, 15)
    a = np.maximum(np.log1p(np.exp(np.cos(0.5))), np.expm1(np.maximum(np.tan(x), [math.erf(v) for v in x])))
    b = 1 / (x**4 + 1) - 0.892325633666869
    value, (grad,) = compares_them.value_and_vjp(x, np.ones(15))
    np.testing.assert_array_equal(value, np.where(a > b, x**2, x))
    np.testing.assert_array_equal(grad, np.where(a > b, 2 * x, 1))
    assert "x" in compares_them.derivatives["x"] and "x" in found_by_fuzzing.derivatives["x"]
    want = np.sqrt(x**2 + np.log(np.maximum(a, b) ** 2 + 0.5) ** 2)
    np.testing.assert_allclose(found_by_fuzzing(x), want, rtol=1e-13)


def test_a_distributed_power_is_raised_once(backend):
    """SymPy writes tanh(asinh(x))**125 as x**125*(x**2 + 1)**(-125/2) and (x/y)**7 as x**7/y**7, infinite
    over infinite in float32 (from x = 2, and x, y = 1e6); the base product is a temporary raised once, so
    float32 agrees with float64 wherever the true value is finite."""

    @sg.function
    def ratio_powers(x, y):
        return sg.tanh(sg.asinh(x)) ** 125 + (x / y) ** 7

    @sg.function
    def root_power(x, y):
        return (x * sg.sqrt(y)) ** 5 + x ** sympy.Rational(5, 3) * y**5  # left distributed: finite at 0

    value, grads = root_power.value_and_vjp(np.array([1.0, 2.0, 0.0]), np.zeros(3), np.ones(3))
    assert np.all(np.isfinite(value)) and all(np.array_equal(g, [0, 0, 0]) for g in grads), grads

    x = np.array([0.5, 2.0, 3.0, 10.0, 100.0, 1e6, -1e6])
    y = np.array([1.0, 2.0, -3.0, 9.0, 90.0, 2e6, 1e6])
    v64, g64 = ratio_powers.value_and_vjp(x, y, np.ones(7))
    v32, g32 = ratio_powers.value_and_vjp(*(a.astype(np.float32) for a in (x, y, np.ones(7))))
    np.testing.assert_allclose(v32, v64, rtol=2e-5, atol=1e-30)
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-30)
    np.testing.assert_allclose(v64, (x / np.sqrt(1 + x * x)) ** 125 + (x / y) ** 7, rtol=1e-12)
    code = "\n".join(
        f"{a.target} = {a.expr}" for p in compile_spec(ratio_powers.trace()).programs for a in p.body
    )
    assert "**125" in code and "**124" in code and "125/2" not in code and "x**7" not in code, code
