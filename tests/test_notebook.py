"""Notebooks: ``_repr_html_`` / ``_repr_latex_`` of ``@sg.function`` and compiled functions (formulas as
LaTeX, op counts per program, the generated source collapsed and highlighted, everything HTML-escaped), and
``docs/tour.ipynb`` (built by ``docs/build_tour.py``) executed with nbclient on this interpreter."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
import types

import nbformat
import pytest
from nbclient import NotebookClient

import symgrad as sg
from symgrad.build.compile import compile_model
from symgrad.compiled import display
from symgrad.compiler import latex
from tests.cli_runner import ROOT


@sg.function
def polar(r, theta):
    return r * sg.cos(theta), r * sg.sin(theta)


@sg.function
def shadows(E, gamma):  # names SymPy would read as Euler's number and the gamma function
    return E * sg.where(gamma > 0, gamma, 0)


def test_function_html_has_latex_formulas_op_counts_and_highlighted_source():
    page = polar._repr_html_()
    assert r"\(r \cos{\left(\theta \right)}\)" in page
    assert r"\(grad_{out0} \cos{\left(\theta \right)} + grad_{out1} \sin{\left(\theta \right)}\)" in page
    compiled = polar.compiled()
    counts = re.search(r"operations per program:</p><table><tr>(.*?)</tr><tr>(.*?)</tr>", page)
    programs = re.findall(r"<th>(\w+)</th>", counts[1])
    assert programs == list(compiled.op_counts) and "vjp" in programs
    assert re.findall(r"<td>(\d+)</td>", counts[2]) == [str(n) for n in compiled.op_counts.values()]
    source = page[page.index("<details><summary>generated NumPy source</summary>") :]
    assert "<span" in source and "polar__value_and_vjp" in source and source.endswith("</details></div>")
    assert page.startswith("<div class='symgrad-function'><p><b>polar(r, theta) -&gt; (scalar, scalar)</b>")


def test_function_latex_keeps_argument_names_symbols():
    tex = shadows._repr_latex_()
    assert tex.startswith(r"$\displaystyle \begin{aligned} out &= E \operatorname{where}{\left(\gamma > 0")
    assert r"\operatorname{vjp}_{\gamma} &= E grad \operatorname{where}{\left(\gamma > 0,1,0 \right)}" in tex
    assert latex.formula_latex("derived program of 61 ops (see symgrad show --program vjp)") is None
    assert latex.formula_latex("x + " * latex.MAX_CHARS + "x") is None
    (_, (_, _, word)) = latex.rows([("out", "x*y")], [("y", "non_differentiable")])
    assert word is None  # a nondiff argument's keyword is no symbol


def test_compiled_package_shows_latex_formulas_without_sympy(tmp_path):
    """A package loaded in a fresh process typesets its formulas from the LaTeX compiled into its manifest
    (the runtime never imports SymPy)."""
    (tmp_path / "model.py").write_text(
        "import symgrad as sg\n\n\n@sg.function\n"
        "def polar(r, theta):\n    return r * sg.cos(theta), r * sg.sin(theta)\n"
    )
    compile_model(tmp_path / "model.py", tmp_path / "pkg")
    script = textwrap.dedent(
        f"""
        import sys
        from symgrad.compiled import load_package
        polar = load_package({str(tmp_path / "pkg")!r})["polar"]
        print(polar._repr_latex_())
        print(polar._repr_html_())
        print("sympy loaded:", "sympy" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert r"\operatorname{vjp}_{\theta} &= - grad_{out0} r \sin{\left(\theta \right)}" in out
    assert r"<td>vjp r</td><td style='text-align:left'>\(grad_{out0} \cos{\left(\theta \right)}" in out
    assert "texttt" not in out and "sympy loaded: False" in out


def test_a_package_without_latex_shows_formulas_as_text():
    compiled = polar.compiled()
    older = types.SimpleNamespace(**{k: getattr(compiled, k) for k in _SHOWN}, formulas_latex=[])
    assert "<code>grad_out0*cos(theta) + grad_out1*sin(theta)</code>" in display.html(older)
    assert r"\texttt{vjp r} &= \texttt{grad\_out0*cos(theta) + grad\_out1*sin(theta)}" in display.latex(older)
    assert display.latex_text(r"a_b^{c}~\%#$&") == r"\texttt{a\_b\^{}\{c\}\~{}\textbackslash{}\%\#\$\&}"


_SHOWN = ("name", "arg_names", "arg_shapes", "out_shapes", "returns_tuple", "origin", "formulas")
_SHOWN += ("derivatives", "op_counts", "source")


def _hostile() -> types.SimpleNamespace:
    """A stand-in with every shown field hostile to HTML."""
    bad = "<script>alert('x')</script>&"
    return types.SimpleNamespace(
        name=bad,
        arg_names=(bad,),
        arg_shapes=((2,),),
        out_shapes=((),),
        returns_tuple=False,
        origin=f"/tmp/{bad}.py:1",
        formulas={bad: f"where({bad} < 1, 0, 1)"},
        derivatives={bad: ""},
        op_counts={bad: 3},
        source=lambda target: f"def f():\n    return '{bad}'\n",
    )


@pytest.mark.parametrize("pygments", [True, False])
def test_html_escapes_every_name(monkeypatch, pygments):
    if not pygments:
        monkeypatch.setitem(sys.modules, "pygments", None)
    page = display.html(_hostile())
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "(derived program only: see the source)" in page
    assert ("<span" in page) == pygments and ("<pre>def f():" in page) == (not pygments)


def test_tour_notebook_is_built_from_its_script_and_runs(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_tour", ROOT / "docs" / "build_tour.py")
    build_tour = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_tour)
    nb = build_tour.build()
    on_disk = nbformat.read(ROOT / "docs" / "tour.ipynb", as_version=4)
    assert [c.source for c in on_disk.cells] == [c.source for c in nb.cells], "run docs/build_tour.py"
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel runs this interpreter on this checkout
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    data = [o.get("data", {}) for o in outputs]
    (page,) = [d["text/html"] for d in data if "text/html" in d]
    assert (
        r"\(\operatorname{where}{\left(x &gt; y,x - y,0 \right)} + e^{- x^{2}} \sin{\left(y \right)}\)"
        in page
    )
    assert r"\(grad \left(- 2 x e^{- x^{2}} \sin{\left(y \right)} + \operatorname{where}" in page
    assert "operations per program" in page and "generated NumPy source" in page
    assert sum("image/png" in d for d in data) == 2  # the curve and the heat map
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "gradient check: ok" in text
    fit = re.search(r"a = ([\d.]+), b = ([\d.]+)", text)
    assert abs(float(fit[1]) - 2.0) < 0.1 and abs(float(fit[2]) - 1.5) < 0.1
