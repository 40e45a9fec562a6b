"""Bad models and bad arguments give one clear line naming file, function, argument and cause."""

import textwrap

import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad.build.compile import compile_model


def write(tmp_path, body: str):
    path = tmp_path / "model.py"
    path.write_text("import symgrad as sg\n" + textwrap.dedent(body))
    return path


@pytest.mark.parametrize(
    "body, pattern",
    [
        (
            "@sg.function\ndef f(x):\n    return x + undefined_name\n",
            r"model.py:\d+: f \(line 4\): NameError: .*undefined_name",
        ),
        ("@sg.function\ndef f(x):\n    return 'text'\n", r"f: returned a str, expected a SymPy expression"),
        ("import math\n@sg.function\ndef f(x):\n    return math.exp(x)\n", r"f \(line 5\): TypeError"),
        (
            "@sg.function\ndef f(x):\n    return __import__('sympy').airyai(x)\n",
            r"f: unsupported function airyai in airyai\(x\)",
        ),
        ("@sg.function\ndef f(x)\n    return x\n", r"model.py:3: syntax error"),
        ("raise RuntimeError('boom')\n", r"model.py:2: RuntimeError while importing the model: boom"),
        ("x = 1\n", r"defines no @sg.function"),
        ("@sg.function\ndef f(x):\n    return x > 0\n", r"f: returned a boolean"),
        (
            "import sympy\n@sg.function\ndef f(x):\n    return x + sympy.Symbol('a')\n",
            r"f: the result uses symbol\(s\) a",
        ),
        (
            "import sympy\n@sg.function\ndef f(x):\n    return sympy.Function('F')(x)\n",
            r"unsupported function F in F\(x\)",
        ),
        ("@sg.function\ndef f(x, *rest):\n    return x\n", r"only plain positional arguments"),
    ],
)
def test_model_errors_are_one_clear_line(tmp_path, body, pattern):
    with pytest.raises(sg.SymgradError, match=pattern) as info:
        compile_model(write(tmp_path, body))
    assert "\n" not in str(info.value)


def test_unprintable_derivative_names_function_and_subexpression(tmp_path):
    body = "import sympy\n@sg.function\ndef f(x):\n    return sympy.polygamma(4, x)\n"
    with pytest.raises(sg.UnsupportedError, match=r"f: derivative of .*polygamma of order 5 in polygamma\(5"):
        compile_model(write(tmp_path, body))


def test_size_limit(monkeypatch):
    monkeypatch.setenv("SYMGRAD_MAX_OPS", "50")

    @sg.function
    def big(x):
        e = x
        for k in range(40):
            e = sg.sin(e + k)
        return e

    with pytest.raises(sg.ExpressionTooLarge, match="big: the traced expression has more than 50 nodes"):
        big.trace()


@sg.function
def two(x, y):
    return x * y


@sg.function
def rowdot(a: sg.Vector(3), b: sg.Vector(3)):
    return a.dot(b)


@pytest.mark.parametrize(
    "args, pattern",
    [
        ((np.arange(3), np.ones(3)), r"two: argument 'x' has dtype int64; expected float32 or float64"),
        ((np.ones(3, complex), np.ones(3)), r"two: argument 'x' has dtype complex128"),
        ((np.ones(3), np.array(["a"], dtype=object)), r"two: argument 'y' has dtype object"),
        ((np.ones(3), np.ones(4)), r"two: argument batch shapes do not broadcast: 'x' \(3,\), 'y' \(4,\)"),
        ((np.ones(3),), r"two\(\) takes 2 argument\(s\) \(x, y\); got 1"),
    ],
)
def test_argument_errors_name_function_and_argument(backend, args, pattern):
    with pytest.raises(sg.ArgumentError, match=pattern):
        two(*args)


def test_vector_argument_shape_error(backend):
    with pytest.raises(sg.ArgumentError, match=r"rowdot: argument 'b' must have trailing shape \(3,\)"):
        rowdot(np.ones((5, 3)), np.ones((5, 4)))


def test_vjp_arity_error(backend):
    with pytest.raises(sg.ArgumentError, match=r"two.vjp takes 3 arrays \(2 arguments, then one cotangent\)"):
        two.vjp(np.ones(2), np.ones(2))


def test_symbolic_call_composes():
    x = sympy.Symbol("x", real=True)
    assert two(x, 2) == 2 * x
