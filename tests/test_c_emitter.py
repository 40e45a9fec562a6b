"""The C emitter: printer cases as inline strings, whole files that compile, and kernels that agree with a
NumPy evaluation of the same IR (values, gradients, NaN/inf at the edges) in float64 and float32."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import sympy
from sympy import Piecewise

import emitters
import symgrad
import symgrad as fe
import symgrad.compiler.functions as sg
from emitters.c import DTYPES, CEmitter, SymgradCPrinter, c_safe
from emitters.c.strides import hidden_widths
from symgrad import abi
from symgrad.backends import npfuncs
from symgrad.backends.c import cffi_build as build_c
from symgrad.backends.c import entries
from symgrad.compiler import compile_spec
from symgrad.compiler.primitives import logaddexp, maximum, minimum, sigmoid, softplus, xlogy
from symgrad.errors import CompilerUnavailable

F64, F32 = DTYPES
x, y = sympy.symbols("x y", real=True)
GCC = shutil.which("gcc") or shutil.which("cc")


def c64(expr) -> str:
    return SymgradCPrinter(F64).doprint(expr)


def c32(expr) -> str:
    return SymgradCPrinter(F32).doprint(expr)


# -- printer ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, f64, f32",
    [
        (sympy.exp(x), "exp(x)", "expf(x)"),
        (sympy.sin(x) * sympy.cos(x), "sin(x)*sg_cos_f64(x)", "sinf(x)*sg_cos_f32(x)"),
        (sympy.log(x) + sympy.tanh(y), "log(x) + sg_tanh_f64(y)", "logf(x) + tanhf(y)"),
        (sympy.atan2(y, x), "atan2(y, x)", "atan2f(y, x)"),
        (sympy.Abs(x), "fabs(x)", "fabsf(x)"),
        (sympy.floor(x), "floor(x)", "floorf(x)"),
        (sympy.ceiling(x), "ceil(x)", "ceilf(x)"),
        (sympy.erf(x), "erf(x)", "erff(x)"),
        (x**2, "x*x", "x*x"),
        (x**3, "x*x*x", "x*x*x"),
        (x**-1, "1.0/x", "1.0F/x"),
        (x**-2, "1.0/(x*x)", "1.0F/(x*x)"),
        (y / x**3, "y/(x*x*x)", "y/(x*x*x)"),
        (-2 * y / x**3, "-2.0*y/(x*x*x)", "-2.0F*y/(x*x*x)"),
        (-(x**2), "-(x*x)", "-(x*x)"),
        ((x + 1) ** 2, "(1.0 + x)*(1.0 + x)", "(1.0F + x)*(1.0F + x)"),
        (sympy.sqrt(x), "sqrt(x)", "sqrtf(x)"),
        (1 / sympy.sqrt(x), "1.0/sqrt(x)", "1.0F/sqrtf(x)"),
        (y / x ** sympy.Rational(3, 2), "y/(x*sqrt(x))", "y/(x*sqrtf(x))"),
        (x**7, "pow(x, 7.0)", "powf(x, 7.0F)"),
        (x**y, "pow(x, y)", "powf(x, y)"),
        (x / 2, "0.5*x", "0.5F*x"),
        (x / 3, "0.3333333333333333*x", "0.33333334F*x"),
        (sympy.Float(0.1) * x, "0.1*x", "0.1F*x"),
        (sympy.pi * x, "3.141592653589793*x", "3.1415927F*x"),
        (sympy.E + x, "2.718281828459045 + x", "2.7182817F + x"),
        (sympy.sqrt(2) * x, "sqrt(2.0)*x", "sqrtf(2.0F)*x"),
        (sg.where(x > 0, x, -sympy.oo), "(x > 0.0 ? x : -INFINITY)", "(x > 0.0F ? x : -INFINITY)"),
        (maximum(x, 0), "sg_maximum_f64(x, 0.0)", "sg_maximum_f32(x, 0.0F)"),
        (xlogy(x, y), "sg_xlogy_f64(x, y)", "sg_xlogy_f32(x, y)"),
        (sympy.Max(x, y), "sg_maximum_f64(x, y)", "sg_maximum_f32(x, y)"),
        (minimum(x, 1), "sg_minimum_f64(x, 1.0)", "sg_minimum_f32(x, 1.0F)"),
        (sympy.sign(x), "sg_sign_f64(x)", "sg_sign_f32(x)"),
        (sg.where(x > 0, sympy.sqrt(x), 0), "(x > 0.0 ? sqrt(x) : 0.0)", "(x > 0.0F ? sqrtf(x) : 0.0F)"),
        (
            Piecewise((x, x < 0), (y, x <= 1)),
            "(x < 0.0 ? x : (x <= 1.0 ? y : NAN))",
            "(x < 0.0F ? x : (x <= 1.0F ? y : NAN))",
        ),
        (
            Piecewise((1, sympy.And(x > 0, sympy.Or(y < 1, sympy.Not(sympy.Eq(x, y))))), (0, True)),
            "((x > 0.0) && ((y < 1.0) || (x != y)) ? 1.0 : 0.0)",
            None,
        ),
    ],
)
def test_printer(expr, f64, f32):
    assert c64(expr) == f64
    if f32 is not None:
        assert c32(expr) == f32


def test_float32_literals_all_carry_F():
    expr = sympy.Rational(1, 7) * x + sympy.Float("1e-3") * sympy.exp(-(x**2) / 2) + sympy.pi
    text = c32(expr)
    literals = re.findall(r"\d+\.\d*(?:e[-+]?\d+)?F?", text)
    assert literals and all(lit.endswith("F") for lit in literals), text
    assert "expf(" in text and "M_" not in text


def test_no_math_macros():
    assert "M_" not in c64(sympy.pi / 2 + sympy.sqrt(2) + 1 / sympy.pi + sympy.E)


@pytest.mark.parametrize("expr", [sigmoid(x), softplus(-x), logaddexp(x, y)])
def test_exp_family_primitives_never_reach_the_printer(expr):
    """The lowering writes them out over a shared exp(-|u|); an IR that still has one is an error, not a call
    of a helper that recomputes the exponential."""
    with pytest.raises(Exception, match="cannot print"):
        c64(expr)


def test_unsupported_function_is_an_error():
    with pytest.raises(Exception, match="zeta"):
        c64(sympy.zeta(x))


def test_c_safe_names():
    for bad in (
        "NAN",
        "INFINITY",
        "linux",
        "unix",
        "stderr",
        "M_PI",
        "EOF",
        "exp",
        "expf",
        "tanhf",
        "SG_LOOP",
        "_Bool_",
        "INT64_MAX",
        "EDOM",
        "HUGE_VAL",
        "Py_None",
    ):
        assert not c_safe(bad), bad
    for good in ("x", "W", "X_0_1", "M_0_0", "cam_3", "grad_x", "t0", "E", "Ex"):
        assert c_safe(good), good


# -- whole files ------------------------------------------------------------------------------------------


def kernels_of(*fns):
    return [compile_spec(fe.function(f).trace()) for f in fns]


def f_keywords(int, double, NAN, linux, exp, stderr, M_PI, EOF, float_):  # noqa: A002 (names under test)
    return int * double + NAN * linux + sg.exp(exp) + sg.sqrt(stderr**2 + M_PI**2) * EOF + float_


def softplus_fn(x):
    return sg.softplus(x)


def blend(x, y):
    return sg.sin(x) * sg.exp(-(y**2)) + sg.log(1 + x**2 * y**2)


def gelu_tanh(x):
    return 0.5 * x * (1 + sg.tanh(sympy.sqrt(2 / sympy.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x):
    return 0.5 * x * (1 + sg.erf(x / sympy.sqrt(2)))


def sqrt_relu(x):
    return sg.where(x > 0, sg.sqrt(x), 0)


def neo_relu(x):
    return sg.where(x > 0, x, -0.1)


def lse(a, b):
    return sg.logaddexp(a, b)


def kinks(x, y):
    return sg.maximum(x, y) + sg.relu(x) + sg.clamp(y, -1, 2) + sg.abs(x - y)


def xlog(x, y):
    return sg.xlogy(x, y) + sg.logsigmoid(y)


def rational(x, y):
    return x / y**3 + y**-2 + sg.sigmoid(x - y)


def angles(x, y):
    return sg.atan2(y, x) + sg.hypot(x, y)


def norm3(p: fe.Vector(3), s):
    return sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2) * s


def det2(A: fe.Matrix(2, 2)):
    return A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]


def scale3(p: fe.Vector(3), s):
    return [p[0] * s, p[1] * s, sg.tanh(p[2] * s)]


def two_outputs(x, y):
    return x * y, sg.log1p(x * x) - sg.expm1(-y * y)


def big(x, y):
    """A 20+-operation formula."""
    a = sg.tanh(x * y + 1) * sg.exp(-(x**2) / 4)
    b = sg.log1p(sg.exp(-sg.abs(y))) + sg.sigmoid(x - y) * sg.cos(x + y)
    return a * b + sg.sqrt(1 + a**2) - sg.logaddexp(x, 2 * y) / (1 + b**2) + sg.atan(x * b)


ALL = (
    softplus_fn,
    blend,
    gelu_tanh,
    gelu_erf,
    sqrt_relu,
    neo_relu,
    lse,
    kinks,
    xlog,
    rational,
    angles,
    norm3,
    det2,
    scale3,
    two_outputs,
    big,
)


@pytest.fixture(scope="module")
def all_kernels():
    return kernels_of(*ALL)


@pytest.fixture(scope="module")
def module_text(all_kernels):
    return CEmitter().emit_module(all_kernels, emitters.ModelInfo("test_model.py", "test"))


def test_registered():
    assert emitters.get("c").filename == "kernels.c"
    assert "c" in emitters.names()


def test_module_layout(all_kernels, module_text):
    for k in all_kernels:
        for p in k.programs:
            for d in ("f64", "f32"):
                assert f"void {k.name}__{p.name}_{d}(int64_t n" in module_text
    assert "static inline double sg_xlogy_f64(double x, double y)" in module_text
    assert "static inline float sg_xlogy_f32(float x, float y)" in module_text
    assert "#pragma omp declare simd notinbranch\nfloat expf(float);" in module_text
    assert "p[i*3 + 2]" in module_text and "A[i*4 + 3]" in module_text
    assert "/* out = softplus(x) */" in module_text


def test_parallel_threshold_follows_the_work_per_row(all_kernels):
    """A loop runs on all threads from fewer rows when its rows cost more: math calls weigh CALL_COST, and
    a float64 row twice a float32 one; always within [PARALLEL_MIN_ROWS_FLOOR, PARALLEL_MIN_ROWS]."""
    from emitters.c import loops as ce

    by_name = {k.name: k for k in all_kernels}
    f64, f32 = DTYPES
    rows = {
        name: ce._parallel_min_rows(by_name[name].program("value_and_vjp"), f64)
        for name in ("neo_relu", "kinks", "blend", "big")
    }
    assert rows["neo_relu"] == ce.PARALLEL_MIN_ROWS  # two selects and a multiply
    assert ce.PARALLEL_MIN_ROWS_FLOOR < rows["big"] < rows["blend"] < rows["kinks"] < rows["neo_relu"]
    kinks = by_name["kinks"].program("value_and_vjp")
    assert ce._row_cost(kinks) == kinks.op_count()  # maximum, relu, clamp, abs: no calls
    big = by_name["big"].program("value_and_vjp")
    assert ce._row_cost(big) >= big.op_count() + (ce.CALL_COST - 1) * 8  # tanh exp log1p sigmoid cos ...
    assert abs(ce._parallel_min_rows(big, f32) - min(2 * rows["big"], ce.PARALLEL_MIN_ROWS)) <= 1
    text = CEmitter().emit_program(by_name["big"], big, f64)
    assert f"SG_ROWS({rows['big']}, sg_rows_big__value_and_vjp_f64" in text


@pytest.mark.parametrize("name", ["softplus_fn", "lse", "xlog"])
def test_value_and_gradient_share_one_exponential(all_kernels, name):
    """softplus and its gradient sigmoid, logaddexp and its two sigmoid gradients, logsigmoid: one exp(-|u|)
    per element in the fused kernel (each used to call exp again in its own helper)."""
    k = next(k for k in all_kernels if k.name == name)
    text = CEmitter().emit_program(k, k.program("value_and_vjp"), F64)
    code = re.sub(r"/\*.*?\*/", "", text.split("{", 1)[1])
    assert len(re.findall(r"\bexp\(", code)) == 1, text
    assert "sg_softplus" not in code and "sg_sigmoid" not in code and "sg_logaddexp" not in code


def test_float32_functions_are_float32(all_kernels):
    emitter = CEmitter()
    for k in all_kernels:
        for p in k.programs:
            text = emitter.emit_program(k, p, F32)
            body = text.split("{", 1)[1]
            assert not re.search(r"\bdouble\b", body), text
            code = re.sub(r"/\*.*?\*/", "", body)
            assert not re.search(r"\d\.\d*(?:e[-+]?\d+)?(?![\dFe])", code), text
            for f in ("exp", "log", "tanh", "erf", "sqrt", "atan2", "log1p", "expm1", "cos", "sin", "atan"):
                assert not re.search(rf"\b{f}\(", code), (f, text)


def test_emit_function_and_pointer_entries(all_kernels):
    k = all_kernels[0]
    text = emitters.get("c").emit_function(k)
    lines = text.splitlines()
    exported = [line for line in lines if line.startswith("void softplus_fn__") and "__ptrs(" not in line]
    pointers = [line for line in lines if line.startswith("void softplus_fn__") and "__ptrs(" in line]
    rows = [line for line in lines if line.startswith("static SG_NOINLINE void sg_rows_softplus_fn__")]
    assert len(exported) == len(pointers) == len(rows) == 2 * len(k.programs)
    assert "void softplus_fn__value_and_vjp_f32__ptrs(int64_t n, void *const *p)" in pointers
    assert "void softplus_fn__value_and_vjp_f32(int64_t n," in exported


def test_manifest_entries_match_the_emitted_file(all_kernels, module_text):
    """The entries the C backend looks up (from the manifest) are exactly those the emitter defines."""
    from symgrad.build.package import kernel_manifest

    manifest = {"functions": [kernel_manifest(k, {}) for k in all_kernels]}
    defined = re.findall(r"^void (\w+__ptrs)\(int64_t n, void \*const \*p\)$", module_text, re.M)
    assert abi.pointer_entries(manifest) == sorted(defined)
    assert len(defined) == 2 * sum(len(k.programs) for k in all_kernels)


def test_notes_are_comment_safe():
    k = kernels_of(blend)[0]
    program = k.programs[0]
    evil = type(program.body[0])(program.body[0].target, program.body[0].expr, "a */ b /* c \\ d \u00e9")
    program = type(program)(program.name, program.inputs, program.outputs, (evil, *program.body[1:]))
    text = CEmitter().emit_program(k, program, F64)
    comment = text.splitlines()[
        text.splitlines().index(next(line for line in text.splitlines() if "a *" in line))
    ]
    assert comment.count("*/") == 1 and comment.count("/*") == 1


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="no C compiler")
@pytest.mark.parametrize("std", ["-std=c99", "-std=gnu11"])
@pytest.mark.parametrize("extra", [[], ["-fopenmp-simd", "-DSG_LIBMVEC=2", "-O2"], ["-fopenmp", "-O2"]])
def test_generated_c_compiles_cleanly(tmp_path, std, extra):
    kernels = kernels_of(f_keywords, *ALL)
    src = tmp_path / "kernels.c"
    src.write_text(CEmitter().emit_module(kernels, emitters.ModelInfo("m.py", "test")))
    flags = [std, "-pedantic", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-Wno-unused-parameter"]
    r = subprocess.run(
        [GCC, *flags, *extra, "-c", str(src), "-o", str(tmp_path / "k.o")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="no C compiler")
def test_every_loop_vectorizes(tmp_path, all_kernels, module_text):
    """With the build's flags (libmvec declarations on), gcc vectorizes every kernel loop: no control flow
    left by Piecewise or the primitives, no sincos fusion, no fmax."""
    tc = build_c.toolchain()
    if tc.libmvec < 2:
        pytest.skip("no libmvec (glibc >= 2.35) here")
    counts = _vectorized_lines(tc, module_text, tmp_path)
    lines = module_text.splitlines()
    # a program's loop is in its static sg_rows_... function
    vectorized: dict[str, int] = {}
    for i, line in enumerate(lines):
        found = re.match(r"(?:static SG_NOINLINE )?void (?:sg_rows_)?(\w+?)(?:__ptrs)?\(", line)
        if found:
            vectorized[found[1]] = vectorized.get(found[1], 0) + counts.get(i + 1, 0)
    assert len(vectorized) == 2 * sum(len(k.programs) for k in all_kernels)
    # rows wider than 4 values (a 3x4 Jacobian) are interleaved accesses gcc may leave to SLP: not checked
    wide = {
        f"{k.name}__{p.name}_"
        for k in all_kernels
        for p in k.programs
        if any(s.size > 4 for s in (*p.inputs, *p.outputs))
    }
    # a program of constants only (relu's Hessian) is a memset to gcc. Results with selects (blend's
    # Jacobian, logaddexp's Hessian with its tie guard) vectorize because a group's stores come after its
    # last value (emitters/c/module.py: gcc sinks earlier ones into the branches, as masked stores)
    wide |= {
        f"{k.name}__{p.name}_"
        for k in all_kernels
        for p in k.programs
        if all(a.expr.is_number for a in p.body)
    }
    missing = [name for name, k in vectorized.items() if k < 1 and not any(name.startswith(w) for w in wide)]
    assert not missing, f"loops not vectorized in {missing}"


def test_keyword_and_macro_names_are_renamed():
    k = kernels_of(f_keywords)[0]
    text = CEmitter().emit_program(k, k.program("forward"), F64)
    assert "const double *restrict int_," in text and "const double *restrict double_," in text
    assert "NAN_[i]" in text and "linux_[i]" in text and "exp_[i]" in text and "M_PI_[i]" in text


# -- agreement with a NumPy evaluation of the same IR ------------------------------------------------------

_NP = [
    {
        "xlogy": npfuncs.xlogy,
        "maximum": np.maximum,
        "minimum": np.minimum,
        "erf": npfuncs.erf,
        "erfc": npfuncs.erfc,
    },
    "numpy",
]


def reference(program, arrays):
    """Evaluate the program's assignments one by one with lambdify (float64)."""
    env = {}
    for slot, a in zip(program.inputs, arrays):
        a = np.asarray(a, np.float64).reshape(a.shape[0], -1)
        for k, s in enumerate(slot.symbols):
            env[s] = a[:, k]
    with np.errstate(all="ignore"):
        for assign in program.body:
            syms = sorted(assign.expr.free_symbols, key=str)
            f = sympy.lambdify(syms, assign.expr, modules=_NP)
            n = len(next(iter(env.values())))
            env[assign.target] = np.broadcast_to(np.asarray(f(*[env[s] for s in syms]), np.float64), (n,))
    return [
        np.stack([env[s] for s in slot.symbols], -1).reshape((-1, *slot.shape)) for slot in program.outputs
    ]


EDGES = np.array(
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        1e-300,
        -1e-300,
        30.0,
        -30.0,
        100.0,
        -100.0,
        800.0,
        -800.0,
        np.inf,
        -np.inf,
        np.nan,
    ]
)


def sample_inputs(program, n, dtype, rng):
    arrays = []
    for slot in program.inputs:
        shape = (n, *slot.shape)
        if slot.role == "arg":
            a = rng.normal(scale=3.0, size=shape)
            flat = a.reshape(n, -1)
            flat[: len(EDGES), 0] = EDGES
            flat[len(EDGES) : 2 * len(EDGES), -1] = EDGES  # pairs an edge with ordinary values
        else:
            a = rng.normal(size=shape)
        arrays.append(a.astype(dtype))
    return arrays


@pytest.fixture(scope="module")
def compiled(all_kernels, module_text):
    try:
        names = sorted(
            abi.pointer_entry(k.name, p.name, d.suffix)
            for k in all_kernels
            for p in k.programs
            for d in DTYPES
        )
        return build_c.load(module_text, entries.CDEF, label="test_c_emitter", glue=entries.glue(names))
    except CompilerUnavailable as exc:
        pytest.skip(f"no C toolchain: {exc}")


def call(module, kernel, program, dtype, arrays):
    from symgrad.backends.c import _cffi_run

    name = abi.pointer_entry(kernel.name, program.name, abi.DTYPE_SUFFIX[np.dtype(dtype)])
    address = int(module.ffi.cast("uintptr_t", module.lib.sg_entry(name.encode())))
    ins = [None if s.uniform else s.shape for s in program.inputs]
    run = _cffi_run(address, module.ffi, np.dtype(dtype), ins, [s.shape for s in program.outputs])
    return run(tuple(arrays), (arrays[0].shape[0],))


def assert_agree(got, want, rtol, atol, what):
    got64 = got.astype(np.float64)
    nan_got, nan_want = np.isnan(got64), np.isnan(want)
    assert np.array_equal(nan_got, nan_want), f"{what}: NaN at {np.flatnonzero(nan_got != nan_want)[:5]}"
    np.testing.assert_allclose(got64[~nan_got], want[~nan_want], rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_kernels_agree_with_reference(compiled, all_kernels, dtype):
    rng = np.random.default_rng(7)
    for k in all_kernels:
        for program in k.programs:
            arrays = sample_inputs(program, 257, dtype, rng)
            got = call(compiled, k, program, dtype, arrays)
            with np.errstate(all="ignore"):
                want = reference(program, arrays)
            for slot, g, w in zip(program.outputs, got, want):
                assert g.dtype == np.dtype(dtype) and g.shape == (257, *slot.shape)
                if dtype == "float64":
                    # second derivatives: 1e-12 of the block's scale (1 - tanh**2 near saturation: 1 ulp of 1)
                    scale = np.abs(w[np.isfinite(w)]).max(initial=1) if slot.role in ("hessian", "hvp") else 1
                    assert_agree(g, w, 1e-9, 1e-12 * scale, f"{k.name}.{program.name}.{slot.name}")
                else:  # float32 kernel vs float64 reference on the same (float32) inputs
                    finite = np.isfinite(w) & (np.abs(w) < 1e30)
                    # second derivatives: 1e-5 of the block's scale, as for float64 (gelu_tanh's hvp at
                    # x = -5.17: 1 - tanhf**2 is 0 or 1.2e-7 for the true 5.4e-8, one ulp of tanhf apart)
                    scale = np.abs(w[finite]).max(initial=1) if slot.role in ("hessian", "hvp") else 1
                    assert_agree(
                        np.where(finite, g, w), w, 2e-3, 1e-5 * scale, f"{k.name}.{program.name}.{slot.name}"
                    )


def test_two_row_loops_do_every_row(compiled, all_kernels):
    """A latency-bound loop does rows i and j = i + skip per iteration (an odd count does its middle row
    twice): every count, from none to a few vectors plus one, gives each row its own value."""
    from emitters.c import loops as ce

    k = next(k for k in all_kernels if k.name == "gelu_tanh")
    program = k.program("value_and_vjp")
    f64, f32 = DTYPES
    assert ce._two_rows(program, f32) and not ce._two_rows(program, f64)
    assert "const int64_t j = i + sg_skip;" in CEmitter().emit_program(k, program, f32)
    assert "sg_skip" not in CEmitter().emit_program(k, program, f64)
    rng = np.random.default_rng(3)
    for n in [*range(0, 40), 63, 64, 65, 257, 1000]:
        arrays = [rng.normal(scale=3.0, size=n).astype(np.float32) for _ in program.inputs]
        got = call(compiled, k, program, "float32", arrays)
        want = reference(program, arrays) if n else [np.zeros(0)] * len(got)
        for g, w in zip(got, want):
            assert g.shape == (n,)
            assert_agree(g, w, 2e-3, 1e-5, f"n={n}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_untaken_branch_never_leaks(compiled, all_kernels, dtype):
    k = next(k for k in all_kernels if k.name == "sqrt_relu")
    xs = np.array([-4.0, -1.0, -0.0, 0.0, 1e-30, 4.0], dtype)
    out, grad_x = call(compiled, k, k.program("value_and_vjp"), dtype, [xs, np.ones_like(xs)])
    np.testing.assert_array_equal(out, np.sqrt(np.maximum(xs, 0)))
    assert np.all(np.isfinite(grad_x)) and np.all(grad_x[:4] == 0)
    np.testing.assert_allclose(grad_x[-1], 0.25)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_stable_primitives_at_extremes(compiled, all_kernels, dtype):
    by = {k.name: k for k in all_kernels}
    big = np.array([-1e4, -800.0, -100.0, 0.0, 100.0, 800.0, 1e4, np.inf, -np.inf], dtype)
    out, grad = call(
        compiled,
        by["softplus_fn"],
        by["softplus_fn"].program("value_and_vjp"),
        dtype,
        [big, np.ones_like(big)],
    )
    assert np.all(np.isfinite(out[:7])) and out[7] == np.inf and out[8] == 0
    e100 = np.exp(np.array(-100.0, dtype))
    np.testing.assert_array_equal(grad, [0, 0, e100 / (1 + e100), 0.5, 1, 1, 1, 1, 0])
    ninf = np.array([-np.inf, -np.inf, 0.0, np.nan], dtype)
    out, ga, gb = call(
        compiled,
        by["lse"],
        by["lse"].program("value_and_vjp"),
        dtype,
        [ninf, np.array([-np.inf, 0.0, 0.0, 1.0], dtype), np.ones(4, dtype)],
    )
    assert out[0] == -np.inf and out[1] == 0 and np.isclose(out[2], np.log(2)) and np.isnan(out[3])
    assert ga[0] == 0.5 and gb[0] == 0.5 and ga[1] == 0 and gb[1] == 1


def test_maximum_propagates_nan(compiled, all_kernels):
    k = next(k for k in all_kernels if k.name == "kinks")
    a = np.array([np.nan, 1.0, 2.0])
    b = np.array([1.0, np.nan, 2.0])
    (out,) = call(compiled, k, k.program("forward"), "float64", [a, b])
    assert np.isnan(out[0]) and np.isnan(out[1]) and np.isfinite(out[2])


@pytest.fixture
def c_compiled():
    """Compiles a function for the C backend (skips without one); the previous backend is restored after."""
    previous = symgrad.get_backend()
    symgrad.set_backend("c")

    def compiled(function):
        fn = function.compiled()
        if fn.backend != "c":
            pytest.skip("no C backend")
        return fn

    yield compiled
    symgrad.set_backend(previous)


@symgrad.function
def loop_names(lo, hi, p, sg_lo, sg_rows_loop_names__forward_f64):
    return sg.sin(lo) * hi + p * sg_lo - sg_rows_loop_names__forward_f64


def test_arguments_named_like_the_loop_machinery(c_compiled):
    """Arguments named lo, hi, p or after the generated row loops still build and compute (the loops' own
    names carry the sg_ prefix, which no sanitized user name keeps)."""
    fn = c_compiled(loop_names)
    args = [np.linspace(-1, 1, 7) * (k + 1) for k in range(5)]
    value, grads = fn.value_and_vjp(*args, np.ones(7))
    np.testing.assert_allclose(value, np.sin(args[0]) * args[1] + args[2] * args[3] - args[4], rtol=1e-14)
    np.testing.assert_allclose(grads[0], np.cos(args[0]) * args[1], rtol=1e-14)
    np.testing.assert_array_equal(grads[4], -np.ones(7))


@symgrad.function
def two_row_names(i, j, n, t0_b, sg_skip):
    return sg.sin(sg.sin(sg.sin(i * j + t0_b) + n)) * sg_skip


@symgrad.function(uniform=("rate",))
def two_row_vector(p: fe.Vector(3), rate):
    return [sg.sin(sg.sin(p[0] * rate) * p[1]), sg.exp(p[2] * rate) * p[0]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_arguments_named_like_the_two_row_loop(c_compiled, dtype):
    """A two-row loop's second row index j, its skip and its locals (t0 -> t0_b) do not clash with arguments
    of those names (three nested calls: two rows in float64 too)."""
    fn = c_compiled(two_row_names)
    suffix = "f32" if dtype == "float32" else "f64"
    assert (
        "sg_skip"
        in fn.source("c").split(f"sg_rows_two_row_names__value_and_vjp_{suffix}(", 1)[1].split("}")[0]
    )
    args = [np.linspace(-1, 1, 9, dtype=dtype) * (k + 1) for k in range(5)]
    u = args[0] * args[1] + args[3]
    t = np.sin(np.sin(u) + args[2])
    value, grads = fn.value_and_vjp(*args, np.ones(9, dtype))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-13)
    np.testing.assert_allclose(value, np.sin(t) * args[4], **tol)
    np.testing.assert_allclose(grads[2], np.cos(t) * np.cos(np.sin(u) + args[2]) * args[4], **tol)
    np.testing.assert_allclose(grads[3], grads[2] * np.cos(u), **tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_row_loops_with_vector_rows_and_a_uniform(c_compiled, dtype):
    """Two rows of a Vector(3) argument (their loads grouped per row) and a number passed by value."""
    fn = c_compiled(two_row_vector)
    f32 = fn.source("c").split("sg_rows_two_row_vector__value_and_vjp_f32(", 1)[1].split("}")[0]
    assert "sg_skip" in f32 and "p[j*3 + 0]" in f32
    rng = np.random.default_rng(4)
    for n in (1, 2, 7, 64, 101):
        p, g = rng.normal(size=(n, 3)).astype(dtype), rng.normal(size=(n, 2)).astype(dtype)
        rate = 0.7
        value, (gp, grate) = fn.value_and_vjp(p, rate, g)
        s = np.sin(p[:, 0] * rate)
        e = np.exp(p[:, 2] * rate)
        want = np.stack([np.sin(s * p[:, 1]), e * p[:, 0]], -1)
        c1 = np.cos(s * p[:, 1]) * g[:, 0]
        want_gp = np.stack(
            [
                c1 * p[:, 1] * np.cos(p[:, 0] * rate) * rate + e * g[:, 1],
                c1 * s,
                e * p[:, 0] * rate * g[:, 1],
            ],
            -1,
        )
        want_rate = np.sum(c1 * p[:, 1] * np.cos(p[:, 0] * rate) * p[:, 0] + e * p[:, 0] * p[:, 2] * g[:, 1])
        tol = dict(rtol=2e-5, atol=2e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(value, want, **tol)
        np.testing.assert_allclose(gp, want_gp, **tol)
        np.testing.assert_allclose(grate, want_rate, **tol)


@symgrad.function
def tanh_fn(x):
    return sg.tanh(x)


@pytest.mark.parametrize("dtype, max_ulp", [("float64", 5), ("float32", 3)])
def test_tanh_is_accurate_at_every_magnitude(c_compiled, dtype, max_ulp):
    """double prints tanh through expm1 (sg_tanh_f64: 3.4 ulp measured against tanhl, glibc's vector tanh
    1.2), float calls tanhf: both within a few ulp of NumPy's tanh (for float32, the float64 tanh of the same
    inputs, rounded) at every magnitude, the gradient is 1 - tanh**2, and signed zeros, infinities, NaN and
    subnormals come out as libm's tanh."""
    fn = c_compiled(tanh_fn)
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(scale=s, size=4000) for s in (1e-30, 1e-8, 1e-3, 0.1, 1, 4, 30)])
    x = x.astype(dtype)
    value, (grad,) = fn.value_and_vjp(x, np.ones_like(x))
    want = np.tanh(x.astype(np.float64)).astype(dtype)  # correctly rounded to ~0.5 ulp for float32
    ulp = np.abs(value.astype(np.float64) - want) / np.spacing(np.abs(want)).astype(np.float64)
    assert ulp.max() <= max_ulp, (ulp.max(), x[np.argmax(ulp)])
    eps = np.finfo(dtype).eps  # 1 - tanh**2 cancels near |tanh| = 1: an absolute bound
    np.testing.assert_allclose(grad, 1 - want.astype(np.float64) ** 2, rtol=8 * eps, atol=8 * eps)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310 if dtype == "float64" else 1e-40], dtype)
    value, (grad,) = fn.value_and_vjp(special, np.ones_like(special))
    np.testing.assert_array_equal(value, np.tanh(special))
    assert np.signbit(value[1]) and not np.signbit(value[0])
    np.testing.assert_array_equal(grad[:4], [1, 1, 0, 0])
    assert np.isnan(grad[4])


# -- rows of a width gcc does not vectorize as a group (emitters/c/strides.py) ------------------------------


def importlib_ba_model():
    """examples/ba_model.py, imported from its path."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "ba_model.py"
    spec = importlib.util.spec_from_file_location("_sg_test_ba_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ba_residual_kernel():
    """examples/ba_model.py's residual: 11-value cameras and a 2 x 15 Jacobian block per row."""
    return compile_spec(importlib_ba_model().ba_residual.trace())


def rational5(p: fe.Vector(5), q: fe.Vector(5)):
    """Arithmetic only (no math call: vector and scalar code round alike), rows of 5 values."""
    return sum((p[k] * q[m] - p[m]) / (1 + p[m] ** 2 + q[k] ** 2) for k in range(5) for m in range(5))


@pytest.fixture(scope="module")
def strided_kernels():
    return [ba_residual_kernel(), *kernels_of(rational5)]


def _vectorized_lines(tc, text, tmp_path) -> dict[int, int]:
    """Loops gcc vectorized in each function of C ``text``, by the line of the function's definition, with the
    build's flags (-fno-ipa-icf: gcc would otherwise fold a program identical to another, gelu's jvp and
    value_and_vjp, into a tail call, whose own loop is then never analyzed)."""
    src = tmp_path / "kernels.c"
    src.write_text(text)
    flags = [f for f in tc.flags if f not in ("-fopenmp", "-fPIC")] + ["-fno-ipa-icf"]
    r = subprocess.run(
        [*tc.cc, *flags, "-fopt-info-vec-all", "-c", str(src), "-o", str(tmp_path / "k.o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    found = re.findall(r"kernels\.c:(\d+):\d+: note: vectorized (\d+) loops in function", r.stderr)
    return {int(line): int(k) for line, k in found}


def _vectorized_functions(tc, text, tmp_path) -> dict[str, int]:
    """Loops gcc vectorized in each program's rows function of ``text``."""
    lines = text.splitlines()
    return {
        re.match(r"static SG_NOINLINE void sg_rows_(\w+)\(", lines[line - 1])[1]: k
        for line, k in _vectorized_lines(tc, text, tmp_path).items()
        if lines[line - 1].startswith("static SG_NOINLINE void sg_rows_")
    }


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="no C compiler")
def test_vector_argument_loops_vectorize(tmp_path, strided_kernels):
    """The BA residual's loops (rows of 11 and 30 values, which gcc gave up on as interleaved groups: "no
    vectype") vectorize in both dtypes once their widths are hidden from it; a light row keeps its widths."""
    tc = build_c.toolchain()
    if tc.libmvec < 2:
        pytest.skip("no libmvec (glibc >= 2.35) here: sin and cos keep the loop scalar")
    ba = strided_kernels[0]
    assert hidden_widths(ba.program("value_and_jacobian")) == {11, 30}
    text = CEmitter().emit_module([ba], emitters.ModelInfo("ba_model.py", "test"))
    assert "double cam_0 = cam[i*sg_width11 + 0];" in text and "jacobian[i*sg_width30 + 29] = " in text
    vectorized = _vectorized_functions(tc, text, tmp_path)
    for dtype in DTYPES:
        for program in ba.programs:
            assert vectorized.get(f"ba_residual__{program.name}_{dtype.suffix}", 0) >= 1, program.name
    light = kernels_of(scale3)[0].program("value_and_jacobian")  # rows of 3 and 3 x 4: 9 ops for 15 values
    assert hidden_widths(light) == set()
    assert "SG_OPAQUE" not in CEmitter().emit_program(kernels_of(scale3)[0], light, F64)


def _vector_and_scalar_libs(tc, text, tmp_path) -> dict:
    """C ``text`` built with the build's flags (strict warnings on) and without optimization, loaded."""
    import ctypes

    src = tmp_path / "k.c"
    src.write_text(text)
    strict = [
        "-std=c99",
        "-pedantic",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-unknown-pragmas",
        "-Wno-unused-parameter",
    ]
    builds = {"vector": [*tc.flags, *strict], "scalar": ["-O0", "-ffp-contract=off"]}
    libs = {}
    for name, flags in builds.items():
        so = tmp_path / f"{name}.so"
        r = subprocess.run(
            [*tc.cc, *flags, "-fPIC", "-shared", "-o", str(so), str(src), *tc.libs], capture_output=True
        )
        assert r.returncode == 0, r.stderr
        libs[name] = ctypes.CDLL(str(so))
    return libs


def _assert_rounds_as_the_scalar_loop(libs, kernel, program, make_inputs) -> None:
    """Every dtype and row count around the vector length (the scalar tail): the vectorized kernel's
    results are bit for bit the unoptimized build's (``make_inputs(n, dtype)``: the input arrays)."""
    import ctypes

    for dtype in DTYPES:
        np_dtype = np.float64 if dtype.suffix == "f64" else np.float32
        for n in (1, 3, 4, 7, 8, 9, 17, 33, 257):
            ins = make_inputs(n, np_dtype)
            results = {}
            for name, lib in libs.items():
                outs = [np.full((n, *s.shape), np.nan, np_dtype) for s in program.outputs]
                arrays = [*ins, *outs]
                pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
                getattr(lib, abi.pointer_entry(kernel.name, program.name, dtype.suffix))(
                    ctypes.c_int64(n), pointers
                )
                results[name] = outs
            for v, s in zip(results["vector"], results["scalar"]):
                assert np.isfinite(v).all() and v.tobytes() == s.tobytes(), (dtype.suffix, n)


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="no C compiler")
def test_hidden_widths_round_as_the_scalar_loop(tmp_path, strided_kernels):
    """Vectorizing over rows reorders no arithmetic (no -ffast-math, no contraction): the vectorized
    kernel's results are bit for bit those of the same C built without optimization."""
    tc = build_c.toolchain()
    kernel = strided_kernels[1]
    program = kernel.program("value_and_jacobian")
    assert hidden_widths(program) == {5, 10}  # rows p and q, and the 1 x 10 Jacobian
    text = CEmitter().emit_module([kernel], emitters.ModelInfo("m.py", "test"))
    libs = _vector_and_scalar_libs(tc, text, tmp_path)
    assert _vectorized_functions(tc, text, tmp_path)["rational5__value_and_jacobian_f64"] >= 1
    rng = np.random.default_rng(11)
    _assert_rounds_as_the_scalar_loop(
        libs, kernel, program, lambda n, dt: [rng.normal(size=(n, 5)).astype(dt) for _ in range(2)]
    )


def spring2d(x: fe.Vector(4), rest, k):
    """A 2-D spring's energy (bench_hessian.py's): a 4 x 4 Hessian per row, entries behind selects."""
    return k / 2 * (fe.sqrt((x[2] - x[0]) ** 2 + (x[3] - x[1]) ** 2) - rest) ** 2


@pytest.mark.slow
@pytest.mark.skipif(GCC is None, reason="no C compiler")
def test_four_by_four_hessian_loop_vectorizes(tmp_path):
    """A 4 x 4 Hessian (rows of 16 values, a width gcc vectorizes as a group) is stored after its last value
    is computed: stored as computed, gcc sank the stores into the guard's branches as masked stores and left
    the loop scalar ("not consecutive access .MASK_STORE"), 2x slower (docs/performance.md). Vectorized, it
    rounds as the scalar loop, the guarded rows (zero length) included."""
    tc = build_c.toolchain()
    if tc.libmvec < 2:
        pytest.skip("no libmvec (glibc >= 2.35) here")
    kernel = compile_spec(fe.function(nondiff=("rest", "k"), uniform=("k",))(spring2d).trace())
    program = kernel.program("value_jacobian_hessian")
    assert [s.size for s in program.outputs] == [1, 4, 16] and hidden_widths(program) == set()
    body = CEmitter().emit_program(kernel, program, F64).split("SG_SIMD", 1)[1].split("\n    }\n")[0]
    lines = [line.strip() for line in body.splitlines()]
    stores = [k for k, line in enumerate(lines) if re.fullmatch(r"hessian\[i\*16 \+ \d+\] = \w+;", line)]
    assert len(stores) == 16 and min(stores) > max(k for k, t in enumerate(lines) if t.startswith("const "))
    text = CEmitter().emit_module([kernel], emitters.ModelInfo("m.py", "test"))
    vectorized = _vectorized_functions(tc, text, tmp_path)
    for dtype in DTYPES:
        assert vectorized.get(f"spring2d__value_jacobian_hessian_{dtype.suffix}", 0) >= 1, dtype.suffix
    rng = np.random.default_rng(12)

    def inputs(n, dt):
        x = rng.normal(size=(n, 4))
        x[::3, 2:] = x[::3, :2]  # zero length: the guarded branch
        return [x.astype(dt), rng.uniform(0.5, 1.5, n).astype(dt), np.array(50.0, dt)]

    _assert_rounds_as_the_scalar_loop(_vector_and_scalar_libs(tc, text, tmp_path), kernel, program, inputs)


def _ba_rows(n, rng, dtype):
    cam = rng.normal(0, 0.3, (n, 11))
    cam[:, 6] += 500
    cam[::7, :3] = 0  # the guarded branch at zero rotation
    X = rng.normal(0, 1, (n, 3)) + [0, 0, 8]
    return [a.astype(dtype) for a in (cam, X, rng.random(n), rng.random((n, 2)))]


@pytest.mark.parametrize(("dtype", "rtol"), [("float64", 1e-12), ("float32", 2e-4)])
def test_vector_argument_jacobians_match_numpy(dtype, rtol):
    """The BA residual's value and Jacobian from the C backend (vectorized, hidden widths) against the
    NumPy backend's, with a broadcast camera and into out= buffers; float32 against the float64 result
    (libmvec's sin/cos: within 4 ulp; float32 rounding of 500-scale projections)."""
    f = importlib_ba_model().ba_residual
    rng = np.random.default_rng(4)
    n = 45
    cam, X, w, feat = _ba_rows(n, rng, dtype)
    previous = symgrad.get_backend()
    try:
        symgrad.set_backend("numpy")
        want = [
            f.value_and_jacobian(c, X.astype(np.float64), w.astype(np.float64), feat.astype(np.float64))
            for c in (cam.astype(np.float64), cam[:1].astype(np.float64))
        ]
        symgrad.set_backend("c")
        for k, c in enumerate((cam, cam[:1])):  # every row's own camera, then one camera for all rows
            out = (np.empty((n, 2), dtype), np.empty((n, 2, 15), dtype))
            got = f.value_and_jacobian(c, X, w, feat, out=out)
            assert got[0] is out[0] and got[1] is out[1]
            for g, r in zip(got, want[k]):
                # relative to each entry's largest magnitude over the rows (entries near 0 cancel)
                scale = np.maximum(np.abs(r).max(axis=0, keepdims=True), np.finfo(np.float64).tiny)
                err = np.abs(g.astype(np.float64) - r) / scale
                assert err.max() <= rtol, (k, float(err.max()))
    finally:
        symgrad.set_backend(previous)


def test_vector_argument_rows_split_between_threads():
    """The BA residual past its OpenMP threshold (~5,000 rows in float64): each share of rows runs the
    hidden-width loop from its own first row; the same results as one thread, up to the few rows each share
    leaves to the vector loop's scalar tail (libm's sin/cos rather than libmvec's, ulps apart)."""
    from symgrad.backends import c

    kernel = ba_residual_kernel()
    text = CEmitter().emit_function(kernel)
    threshold = int(re.search(r"SG_ROWS\((\d+), sg_rows_ba_residual__value_and_jacobian_f64", text)[1])
    module = importlib_ba_model()
    rng = np.random.default_rng(8)
    args = _ba_rows(4 * threshold + 1, rng, np.float64)
    previous, before = symgrad.get_backend(), c.get_num_threads()
    try:
        symgrad.set_backend("c")
        c.set_num_threads(1)
        one = module.ba_residual.value_and_jacobian(*args)
        c.set_num_threads(2)
        two = module.ba_residual.value_and_jacobian(*args)
    finally:
        c.set_num_threads(before)
        symgrad.set_backend(previous)
    for a, b in zip(one, two):
        scale = np.maximum(np.abs(a).max(axis=0, keepdims=True), np.finfo(np.float64).tiny)
        assert (np.abs(a - b) / scale).max() <= 1e-12
