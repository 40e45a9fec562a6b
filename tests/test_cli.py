"""The symgrad command as a user runs it."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_runner import run_symgrad

ROOT = Path(__file__).parent.parent


symgrad = run_symgrad


@pytest.fixture
def model(tmp_path):
    shutil.copy(ROOT / "examples" / "model.py", tmp_path / "model.py")
    return tmp_path


def test_compile_then_up_to_date_then_import(model):
    r = symgrad("compile", "model.py", cwd=model)
    assert r.returncode == 0, r.stderr
    assert "[1/6] square" in r.stderr and "wrote 6 functions to model_symgrad" in r.stdout
    assert "forward" in r.stdout and "vjp" in r.stdout
    assert (model / "model_symgrad" / "derivatives.yaml").exists()
    r = symgrad("compile", "model.py", cwd=model)
    assert r.returncode == 0 and "up to date" in r.stdout
    # the warm import stays light: no SymPy, no cffi parser (the C module is prebuilt), no tape runtime
    code = (
        "import sys, numpy as np, model_symgrad as m; "
        "print(m.softplus.value_and_vjp(np.array([0.0]), np.array([1.0])), m.softplus(np.ones(2))); "
        "print('heavy:', [k for k in ('sympy', 'cffi', 'symgrad.runtime') if k in sys.modules])"
    )
    # the first import builds the C module into the (test session's) cache; the second one is warm
    env = {
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
        "SYMGRAD_CACHE_DIR": os.environ["SYMGRAD_CACHE_DIR"],
    }
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], cwd=model, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
    assert "0.69314718" in r.stdout and "0.5" in r.stdout
    assert "heavy: []" in r.stdout


def test_output_directory_option(model):
    r = symgrad("compile", "model.py", "-o", "elsewhere", cwd=model)
    assert r.returncode == 0 and (model / "elsewhere" / "manifest.json").exists()


def test_show_formats(model):
    r = symgrad("show", "model.py", "softplus", cwd=model)
    assert (
        r.returncode == 0
        and "vjp x: grad*sigmoid(x)" in r.stdout
        and "def softplus__value_and_vjp" in r.stdout
    )
    r = symgrad("show", "model.py", "--format", "yaml", cwd=model)
    assert '- name: "softplus(Tensor x) -> Tensor"' in r.stdout and '  x: "grad*sigmoid(x)"' in r.stdout
    r = symgrad("show", "model.py", "blend", "--format", "ir", cwd=model)
    assert "program value_and_vjp(x, y, grad) -> (out, grad_x, grad_y)" in r.stdout


def test_check_passes_and_catches_a_wrong_hand_written_backward(model):
    r = symgrad("check", "model.py", cwd=model)
    assert r.returncode == 0 and r.stdout.count("ok ") == 6, r.stdout
    (model / "hand.py").write_text(
        textwrap.dedent("""
        import numpy as np
        def neo_relu_backward(x, grad_output):      # the article's mistake: 1 instead of grad_output
            return np.where(x > 0, 1.0, 0.0)
        def neo_relu_backward_right(x, grad_output):
            return np.where(x > 0, grad_output, 0.0)
    """)
    )
    r = symgrad("check", "model.py", "neo_relu", "--against", "hand.py:neo_relu_backward", cwd=model)
    assert r.returncode == 1 and "FAIL neo_relu" in r.stdout
    # what was compared is the vjp with a random cotangent, which the line shows (it said "d/dx")
    line = next(t for t in r.stdout.splitlines() if "vjp for x[0]" in t)
    assert "(the gradient of <outputs, cotangent> at x=[" in line and "cotangent=[[" in line
    assert "hand-written" in line and "d/dx" not in r.stdout
    r = symgrad("check", "model.py", "neo_relu", "--against", "hand.py:neo_relu_backward_right", cwd=model)
    assert r.returncode == 0, r.stdout


def test_errors_are_one_line_with_exit_code_1(tmp_path):
    (tmp_path / "bad.py").write_text("import symgrad as sg\n@sg.function\ndef f(x):\n    return x + nope\n")
    r = symgrad("compile", "bad.py", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 1  # the progress line, then the error line
    assert r.stderr.strip().splitlines()[-1].startswith("symgrad: error: bad.py:")
    r = symgrad("compile", "bad.py", cwd=tmp_path, env_extra={"SYMGRAD_DEBUG": "1"})
    assert "Traceback" in r.stderr


def test_usage_error_exit_code_2_and_help(tmp_path):
    assert symgrad("frobnicate", cwd=tmp_path).returncode == 2
    for cmd in ("compile", "show", "check", "cache"):
        r = symgrad(cmd, "--help", cwd=tmp_path)
        assert r.returncode == 0 and "usage: symgrad" in r.stdout


def test_timeout_on_a_model_that_loops_forever(tmp_path):
    (tmp_path / "loop.py").write_text("while True:\n    pass\n")
    r = symgrad("compile", "loop.py", "--timeout", "1", cwd=tmp_path)
    assert r.returncode == 1 and "gave up after 1 s" in r.stderr


def test_cache_list_and_clear(model, tmp_path):
    env = {"SYMGRAD_CACHE_DIR": str(tmp_path / "cache")}
    symgrad("check", "model.py", "square", cwd=model, env_extra=env)
    r = symgrad("cache", "list", cwd=model, env_extra=env)
    assert r.returncode == 0 and "models" in r.stdout
    r = symgrad("cache", "clear", cwd=model, env_extra=env)
    assert r.returncode == 0 and "removed" in r.stdout
    assert "0 entries" in symgrad("cache", "list", cwd=model, env_extra=env).stdout


def test_debug_prints_the_ir_then_also_the_generated_source(model):
    """SYMGRAD_DEBUG=1: each function's kernel IR and stage times; =2: also its generated source."""
    r = symgrad("compile", "model.py", "--force", cwd=model, env_extra={"SYMGRAD_DEBUG": "1"})
    assert r.returncode == 0, r.stderr
    assert "symgrad: softplus: trace " in r.stderr and "derivatives and layout" in r.stderr
    assert "program value_and_vjp(x, grad) -> (out, grad_x):" in r.stderr
    assert "emit c " in r.stderr
    assert "def softplus__forward(" not in r.stderr
    r = symgrad("compile", "model.py", "--force", cwd=model, env_extra={"SYMGRAD_DEBUG": "2"})
    assert r.returncode == 0, r.stderr
    assert "program value_and_vjp(x, grad) -> (out, grad_x):" in r.stderr
    assert "def softplus__forward(" in r.stderr and "void softplus__forward_f64(" in r.stderr


def test_help_says_that_compiling_runs_the_model(tmp_path):
    for command in ("compile", "show", "check"):
        r = symgrad(command, "--help", cwd=tmp_path)
        assert r.returncode == 0 and "its code runs" in " ".join(r.stdout.split()), command
    assert "that runs its code" in " ".join(symgrad("--help", cwd=tmp_path).stdout.split())


def test_importing_a_package_whose_model_changed_warns(model):
    """After editing model.py, ``import model_symgrad`` ran the old code with no word."""
    r = symgrad("compile", "model.py", cwd=model)
    assert r.returncode == 0, r.stderr
    code = "import numpy as np, model_symgrad as m; print(m.softplus(np.zeros(1)))"
    env = {
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
        "SYMGRAD_CACHE_DIR": os.environ["SYMGRAD_CACHE_DIR"],
    }
    r = subprocess.run([sys.executable, "-c", code], cwd=model, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "StalePackageWarning" not in r.stderr, r.stderr
    (model / "model.py").write_text((model / "model.py").read_text() + "\n# edited\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=model, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "StalePackageWarning: model.py changed since model_symgrad was compiled" in r.stderr
    assert "rerun `symgrad compile model.py`" in r.stderr


def test_check_handles_uniform_arguments(tmp_path):
    """``symgrad check`` crashed on any function with a ``uniform=`` argument (it sampled it per row)."""
    (tmp_path / "uni.py").write_text(
        "import symgrad as sg\n\n@sg.function(uniform=('rate',))\ndef decay(x, rate):\n"
        "    return x * sg.exp(-rate * x)\n"
    )
    r = symgrad("check", "uni.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ok   decay: every gradient matches finite differences" in r.stdout
    import numpy as np

    import symgrad as sg
    from symgrad.check import check_function

    decay = sg.compile(tmp_path / "uni.py").decay
    wrong = check_function(decay, against=lambda x, rate, g: (g * np.exp(-rate * x) * (1 - rate * x), 0.0))
    assert [m.argument for m in wrong] == ["rate"]


def test_sg_compile_of_an_unchanged_model_needs_no_sympy(model):
    """``sg.compile`` lived beside ``@sg.function``, whose module imports SymPy: 0.3 s on every warm call."""
    code = (
        "import sys, numpy as np, symgrad as sg; m = sg.compile('model.py'); print(m.softplus(np.zeros(1))); "
        "print('heavy:', [k for k in ('sympy', 'symgrad.runtime') if k in sys.modules])"
    )
    env = dict(PYTHONPATH=str(ROOT), PATH="/usr/bin:/bin", SYMGRAD_CACHE_DIR=os.environ["SYMGRAD_CACHE_DIR"])
    for _ in range(2):  # the first one compiles (and imports SymPy); the second one finds it in the cache
        r = subprocess.run([sys.executable, "-c", code], cwd=model, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
    assert "0.69314718" in r.stdout and "heavy: []" in r.stdout
