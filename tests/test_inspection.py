"""Looking at what symgrad made: the CLI's manners, `show --program`, DOT graphs of programs and tapes, and
the public namespaces as help() and dir() show them."""

from __future__ import annotations

import argparse
import os
import pydoc
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sympy
from cli_runner import ROOT, run_symgrad

import symgrad as sg
from symgrad import cli
from symgrad.compiler import compile_spec
from symgrad.compiler import functions as math_names


@pytest.fixture
def model(tmp_path):
    shutil.copy(ROOT / "examples" / "model.py", tmp_path / "model.py")
    return tmp_path


def dot_graph(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str]]]:
    """The nodes (id -> attributes) and edges of DOT text as symgrad writes it (one statement a line)."""
    nodes, edges = {}, []
    for line in text.splitlines():
        if m := re.fullmatch(r"\s*(n\d+) -> (n\d+);", line):
            edges.append(m.groups())
        elif m := re.fullmatch(r"\s*(n\d+) \[(.*)\];", line):
            nodes[m[1]] = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,\s]+)', m[2]))
            nodes[m[1]] = {k: v.strip('"') for k, v in nodes[m[1]].items()}
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    assert {n for e in edges for n in e} <= nodes.keys()
    return nodes, edges


# -- the command ---------------------------------------------------------------------------------------
def test_version(model):
    r = run_symgrad("--version", cwd=model)
    assert r.returncode == 0 and r.stdout.strip() == f"symgrad {sg.__version__}"


def test_every_argument_is_described_with_its_default_and_an_example():
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"compile", "show", "check", "plot", "cache"}
    for name, p in sub.choices.items():
        assert p.epilog.startswith("examples:\n  symgrad " + name), name
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.dest)
            if action.option_strings or action.nargs in ("?", "*"):
                assert "default:" in action.help, (name, action.dest)
            if action.choices is None and action.nargs != 0:
                assert "e.g." in action.help, (name, action.dest)


def test_check_takes_several_functions(model):
    r = run_symgrad("check", "model.py", "softplus", "square", cwd=model)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "ok   softplus: every gradient matches finite differences",
        "ok   square: every gradient matches finite differences",
    ]
    r = run_symgrad("check", "model.py", "blend", "nope", cwd=model)
    assert r.returncode == 1 and "no function 'nope'; available: square, neo_relu" in r.stderr


def test_closed_pipe_exits_quietly(model):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    assert run_symgrad("compile", "model.py", cwd=model).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "symgrad", "show", "model.py", "--format", "c"],
        cwd=model,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.read(100)  # `| head -c 100`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


def test_show_selects_one_program(model):
    r = run_symgrad("show", "model.py", "blend", "--program", "vjp", cwd=model)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# blend  [model.py:29]\nout = ")
    assert re.findall(r"^def (\w+)\(", r.stdout, re.M) == ["blend__vjp"]
    r = run_symgrad("show", "model.py", "blend", "--program", "jacobian", "--format", "c", cwd=model)
    names = set(re.findall(r"\b(\w*blend__\w+)\(", r.stdout))
    assert names == {
        f"{pre}blend__value_and_jacobian_{t}{post}"
        for pre, post in (("sg_rows_", ""), ("", ""), ("", "__ptrs"))
        for t in ("f64", "f32")
    }
    r = run_symgrad("show", "model.py", "square", "--program", "forward", "--format", "ir", cwd=model)
    assert r.stdout.strip() == "program forward(x) -> (out):\n    out = x**2    # out = x**2"
    r = run_symgrad("show", "model.py", "--program", "vjp", "--format", "yaml", cwd=model)
    assert r.returncode == 1 and "the yaml manifest has none" in r.stderr


# -- graphs ----------------------------------------------------------------------------------------------
def test_show_dot_is_the_dataflow_of_the_derivative_program(model):
    r = run_symgrad("show", "model.py", "blend", "--format", "dot", cwd=model)
    assert r.returncode == 0, r.stderr
    nodes, edges = dot_graph(r.stdout)
    label = {n: a["label"].split(" = ")[0] for n, a in nodes.items()}
    by = {v: k for k, v in label.items()}
    assert {"x", "y", "grad", "out", "grad_x", "grad_y"} <= by.keys()
    assert [nodes[by[s]]["shape"] for s in ("x", "y", "grad")] == ["ellipse"] * 3
    assert [nodes[by[s]].get("peripheries") for s in ("out", "grad_x", "grad_y", "x_y")] == [
        "2",
        "2",
        "2",
        None,
    ]
    forward, backward = (nodes[by[s]]["fillcolor"] for s in ("out", "grad_x"))
    assert forward != backward and nodes[by["grad_y"]]["fillcolor"] == backward
    temporaries = [n for n in nodes if label[n] not in {"x", "y", "grad", "out", "grad_x", "grad_y"}]
    seeded = {by["grad"]}  # what depends on the seed: the backward part
    while {b for a, b in edges if a in seeded} - seeded:
        seeded |= {b for a, b in edges if a in seeded}
    assert {n for n in temporaries if nodes[n]["fillcolor"] == forward} == set(temporaries) - seeded
    assert (by["grad"], by["grad_x"]) in edges and (by["grad"], by["out"]) not in edges
    assert nodes[by["x_y"]]["label"] == "x_y = x*y" and (by["y"], by["x_y"]) in edges
    # every assignment's uses are edges: each temporary feeds something
    assert all(any(e[0] == n for e in edges) for n in temporaries)


def test_dot_quotes_names_and_selects_programs():
    from emitters.dot import program_graph

    @sg.function
    def weird(x, y):
        return sg.exp(x) * y

    kernel = compile_spec(weird.trace())
    kernel = kernel.__class__(**{**kernel.__dict__, "public_name": 'a "quoted" \\ name\n'})
    text = program_graph(kernel, "jvp")
    assert text.splitlines()[0] == r'digraph "a \"quoted\" \\ name.jvp" {'
    nodes, edges = dot_graph(text)
    label = {n: a["label"] for n, a in nodes.items()}
    by = {v.split(" = ")[0]: k for k, v in label.items()}
    assert sorted(by) == ["exp_x", "jvp_out", "out", "tangent_x", "tangent_y", "x", "y"]
    assert label[by["jvp_out"]] == "jvp_out = out*tangent_x + exp_x*tangent_y"
    assert {a for a, b in edges if b == by["jvp_out"]} == {
        by[s] for s in ("out", "exp_x", "tangent_x", "tangent_y")
    }
    with pytest.raises(KeyError, match="no program 'hessian'"):
        program_graph(kernel, "hessian")


def test_tape_graph():
    x = sg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = sg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    loss = (sg.exp(x * w) + x).sum()
    text = sg.viz.graph(loss, params={"x": x, "w": w})
    nodes, edges = dot_graph(text)
    label = {n: a["label"] for n, a in nodes.items()}
    by = {v.split("\\n")[0]: k for k, v in label.items()}
    assert label[by["x"]] == "x\\n(3,)" and label[by["w"]] == "w\\n(3,)"
    assert label[by["SumBackward"]] == "SumBackward\\n()" and label[by["output 0"]] == "output 0\\n()"
    # saved: the kernel's local Jacobian (one array, a column per input), then the inputs (for a second
    # differentiation)
    assert label[by["MulBackward"]] == "MulBackward\\n(3,)\\nsaved (3, 1, 2) (3,) (3,)"
    expected = {
        ("x", "MulBackward"),
        ("w", "MulBackward"),
        ("MulBackward", "ExpBackward"),
        ("ExpBackward", "AddBackward"),
        ("x", "AddBackward"),
        ("AddBackward", "SumBackward"),
        ("SumBackward", "output 0"),
    }
    assert {(label[a].split("\\n")[0], label[b].split("\\n")[0]) for a, b in edges} == expected
    assert len(nodes) == 7 and len(edges) == 7


def test_tape_graph_of_a_compiled_function_and_its_render_error(monkeypatch, tmp_path):
    @sg.function
    def softplus(x):
        return sg.log(1 + sg.exp(x))

    x = sg.tensor(np.linspace(-1, 1, 4), requires_grad=True)
    nodes, edges = dot_graph(sg.viz.graph(softplus(x)))
    assert sorted(a["label"] for a in nodes.values()) == [
        "(4,)",
        "SoftplusBackward\\n(4,)\\nsaved (4, 1, 1) (4,)",
        "output 0\\n(4,)",
    ]
    assert len(edges) == 2
    with pytest.raises(TypeError, match="sg.viz.graph takes Tensors; got ndarray"):
        sg.viz.graph(np.ones(2))
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(ImportError, match=r"pip install 'symgrad\[viz\]' \(the graphviz package\)"):
        sg.viz.graph(softplus(x)).render(tmp_path / "g.svg")


def test_tape_graph_renders_with_graphviz(tmp_path):
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    path = sg.viz.graph((x * x).sum()).render(tmp_path / "tape.svg")
    assert path == tmp_path / "tape.svg" and "<svg" in path.read_text() and "MulBackward" in path.read_text()


# -- namespaces --------------------------------------------------------------------------------------------
def test_help_documents_symgrads_api_and_lists_the_math_names():
    text = pydoc.render_doc(sg, renderer=pydoc.plaintext)
    assert len(text.splitlines()) < 3000
    for sympy_class in ("Piecewise", "And", "Or", "Not", "Eq", "Ne"):
        assert f"class {sympy_class}(" not in text
    assert "class Tensor(" in text and "function(" in text
    listed = re.search(r"is these names:\n\n(.*?)\n\n", sg.__doc__, re.S)
    assert sorted(re.findall(r"\w+", listed[1])) == sorted(math_names.__all__)  # each once
    # the math names stay what models and tensors use
    assert str(sg.exp(sympy.Symbol("x"))) == "exp(x)"
    assert np.allclose(sg.exp(np.array([0.0, 1.0])), [1.0, np.e])


@pytest.mark.parametrize(
    "name", ["symgrad", "symgrad.nn", "symgrad.optim", "symgrad.nn.functional", "symgrad.viz"]
)
def test_public_namespaces_hold_public_names_only(name):
    module = sys.modules.get(name) or __import__(name, fromlist=["_"])
    public = {n for n in dir(module) if not n.startswith("_")}
    assert not public & {
        "np",
        "Any",
        "annotations",
        "importlib",
        "Path",
        "Node",
        "Tensor" * (name != "symgrad"),
    }
    extra = set(math_names.__all__) if name == "symgrad" else set()
    assert public == set(module.__all__) | extra
    for n in public:
        getattr(module, n)


# -- plots -------------------------------------------------------------------------------------------------
@sg.function
def kinky(x):
    return sg.where(x > 0, x**2, -x) + sg.clamp(x, -1, 2)


def _lines(fig) -> dict:
    return {line.get_label(): line for line in fig.axes[0].lines}


def test_plot_draws_value_derivative_finite_differences_and_branch_switches():
    pytest.importorskip("matplotlib")
    fig = kinky.plot((-3, 3), points=600)
    lines = _lines(fig)
    x = np.linspace(-3, 3, 600)
    value = np.where(x > 0, x**2, -x) + np.clip(x, -1, 2)
    slope = np.where(x > 0, 2 * x, -1.0) + ((x >= -1) & (x <= 2))
    assert np.array_equal(lines["kinky(x)"].get_xdata(), x)
    np.testing.assert_allclose(lines["kinky(x)"].get_ydata(), value, rtol=1e-12)
    np.testing.assert_allclose(lines["d/dx"].get_ydata(), slope, rtol=1e-12)
    fd = lines["finite differences"]
    xs = fd.get_xdata()
    assert 15 <= len(xs) <= 25 and min(abs(xs - k).min() for k in (-1, 0, 2)) > 1e-4
    np.testing.assert_allclose(fd.get_ydata(), np.interp(xs, x, slope), rtol=1e-6, atol=1e-6)
    switches = sorted(ln.get_xdata()[0] for ln in fig.axes[0].lines if ln.get_linestyle() == ":")
    np.testing.assert_allclose(switches, [-1, 0, 2], atol=1e-12)
    assert "branch switch" in lines and not fig.axes[0].patches  # nothing non-finite


def test_plot_shades_nan_and_inf_and_holds_other_arguments(tmp_path):
    pytest.importorskip("matplotlib")

    @sg.function
    def g(x, y):
        return sg.log(x) * y

    fig = g.plot((-2, 2), wrt="x", at={"y": 3.0}, points=401, path=tmp_path / "g.svg")
    lines = _lines(fig)
    x = np.linspace(-2, 2, 401)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(lines["d/dx"].get_ydata(), 3 / x, rtol=1e-12)
    (shade,) = fig.axes[0].patches
    step = 4 / 400
    assert shade.get_label() == "NaN or inf"
    np.testing.assert_allclose([shade.get_x(), shade.get_x() + shade.get_width()], [-2 - step / 2, step / 2])
    assert (tmp_path / "g.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(sg.ModelError, match="no argument 'z'; arguments: x, y"):
        g.plot(at={"z": 1.0})


def test_plot_order_2_draws_the_second_derivative_over_differences_of_the_first(model):
    pytest.importorskip("matplotlib")

    @sg.function
    def wave(x, a):
        return sg.sin(a * x) * x

    fig = wave.plot((-2, 2), wrt="x", at={"a": 1.5}, points=201, order=2)
    lines, x = _lines(fig), np.linspace(-2, 2, 201)
    second = -(1.5**2) * x * np.sin(1.5 * x) + 3.0 * np.cos(1.5 * x)  # d2/dx2 of x sin(a x) at a = 1.5
    np.testing.assert_allclose(lines["d²/dx²"].get_ydata(), second, rtol=1e-12, atol=1e-12)  # float64
    fd = lines["finite differences of d/dx"]
    np.testing.assert_allclose(fd.get_ydata(), np.interp(fd.get_xdata(), x, second), rtol=1e-3, atol=1e-3)
    assert "first and second derivatives" in fig.axes[0].get_title()
    with pytest.raises(sg.ModelError, match="order 2 draws a curve along one argument"):
        wave.plot(order=2)  # a heat map
    r = run_symgrad("plot", "model.py", "gelu_tanh", "--order", "2", "-o", "g.png", cwd=model)
    assert r.returncode == 0 and (model / "g.png").stat().st_size > 1000, r.stderr


def test_plot_command_writes_the_image(model, monkeypatch):
    pytest.importorskip("matplotlib")
    r = run_symgrad("plot", "model.py", "blend", "--wrt", "y", "--at", "x=0.5", "-o", "b.png", cwd=model)
    assert r.returncode == 0 and r.stdout == "wrote b.png\n", r.stderr
    assert (model / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run_symgrad("plot", "model.py", "neo_relu", cwd=model)
    assert r.returncode == 0 and (model / "neo_relu.png").stat().st_size > 1000
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"plotting needs matplotlib: pip install 'symgrad\[plot\]'"):
        kinky.plot()


# -- errors that teach -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, advice",
    [
        (
            "if x > 0:\n        return x\n    return -x",
            "Python's if/and/or cannot branch on a symbol; use sg.where(",
        ),
        ("return x if x > 0 else -x", "Python's if/and/or cannot branch on a symbol; use sg.where("),
        ("return max(x, 0)", "use sg.maximum(a, b) (Python's max() compares)"),
        ("return min(x, 1)", "use sg.minimum(a, b) (Python's min() compares)"),
        ("return np.exp(x)", "use sg.exp(...), not NumPy's, on symbols"),
        ("return np.where(x > 0, x, 0)", "use sg.where(condition, a, b)"),
        ("return math.log1p(x)", "use sg.log1p(...), not math.log1p, on symbols"),
    ],
)
def test_python_that_needs_numbers_says_what_to_write(tmp_path, line, advice):
    from symgrad.compiler.model import load_model

    path = tmp_path / "model.py"
    path.write_text(
        f"import math\nimport numpy as np\nimport symgrad as sg\n\n@sg.function\ndef f(x):\n    {line}\n"
    )
    (fn,) = load_model(path)
    with pytest.raises(sg.ModelError) as info:
        fn.trace()
    message = str(info.value)
    assert "\n" not in message and message.startswith("model.py:5: f (line 7): TypeError: ")
    assert ("; " + advice) in message, message


def test_a_python_bool_condition_names_the_line(tmp_path):
    from symgrad.compiler.model import load_model

    path = tmp_path / "model.py"
    path.write_text(
        "import symgrad as sg\n\n@sg.function\ndef f(x):\n    y = 2 * x\n    return sg.where(x != 0, y, 1)\n"
    )
    (fn,) = load_model(path)
    with pytest.raises(sg.ModelError) as info:
        fn.trace()
    message = str(info.value)
    assert "\n" not in message and message.startswith(
        "model.py:3: f (line 6): sg.where: the condition is the "
    )
    assert message.endswith("use sg.Ne(x, y) / sg.Eq(x, y).")


def test_a_function_from_a_notebook_cell_is_named_after_the_cell_not_ipykernels_file():
    """In Jupyter a function's origin read ``878109654.py:6`` (the hashed file IPython gives a cell)."""
    namespace: dict = {}
    code = compile("def bump(x):\n    return x * 2\n", "/tmp/ipykernel_4242/878109654.py", "exec")
    exec(code, namespace)
    f = sg.function(namespace["bump"])
    assert f.origin == "cell:1"
    assert "878109654" not in repr(f)
