"""The fixed C text of the C target: dtypes, libm names, the stable-primitive helpers, loop macros, the
``declare simd`` block for libmvec, and which identifiers are unsafe in C (macros, called functions).

Only constants and text templates: nothing here depends on a model; ``printer`` and ``module`` fill them in.
"""

from __future__ import annotations

from dataclasses import dataclass

from symgrad import abi

from .special import SPECIAL_HELPERS


@dataclass(frozen=True)
class DType:
    """How one float type is spelled in C."""

    suffix: str  # function-name suffix: 'f64' / 'f32'
    ctype: str  # 'double' / 'float'
    libm: str  # libm name suffix: '' / 'f' (expf)
    literal: str  # literal suffix: '' / 'F'


_SPELLING = {"f64": ("", ""), "f32": ("f", "F")}  # (libm suffix, literal suffix)
DTYPES = tuple(DType(suffix, ctype, *_SPELLING[suffix]) for suffix, ctype in abi.C_TYPES.items())

#: SymPy function class name -> libm name (double version; the float one adds 'f').
LIBM = {
    "exp": "exp",
    "log": "log",
    "sin": "sin",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "atan2": "atan2",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "erf": "erf",
    "erfc": "erfc",
    "log1p": "log1p",
    "expm1": "expm1",
    "floor": "floor",
    "ceiling": "ceil",
    "Abs": "fabs",
    "exp2": "exp2",
    "log2": "log2",
    "log10": "log10",
    "cbrt": "cbrt",
    "loggamma": "lgamma",  # log|Gamma(x)|
    "gamma": "tgamma",
}
LIBMVEC_TIER = abi.LIBMVEC_TIER
_ARITY = {"atan2": 2, "pow": 2}

#: The primitives printed as calls, as helper templates: (libm functions they call, C text). The exp(-|u|)
#: family (sigmoid, softplus, logsigmoid, logaddexp) never reaches a printer: the lowering writes it out
#: (``symgrad.compiler.primitives.expand_shared_cores``). {T} type, {S} dtype suffix, {f} libm suffix,
#: {one}/{zero}/{half} typed literals.
HELPERS = {
    "xlogy": (
        ("log",),
        """\
/* xlogy(x, y) = x*log(y), and 0 where x == 0 */
static inline {T} sg_xlogy_{S}({T} x, {T} y)
{{
    return x == {zero} ? {zero} : x*log{f}(y);
}}""",
    ),
    "maximum": (
        (),
        """\
/* maximum(a, b), NaN if either is NaN (as torch.maximum; fmax would drop the NaN) */
static inline {T} sg_maximum_{S}({T} a, {T} b)
{{
    return (a > b || a != a) ? a : b;
}}""",
    ),
    "minimum": (
        (),
        """\
/* minimum(a, b), NaN if either is NaN */
static inline {T} sg_minimum_{S}({T} a, {T} b)
{{
    return (a < b || a != a) ? a : b;
}}""",
    ),
    "cos": (
        ("cos",),
        """\
/* cos(x) as cos(x + 0): otherwise gcc fuses sin(x) and cos(x) into sincos(), which has no vector version
   and stops the loop from vectorizing (x + 0 only turns -0 into +0, and cos is even) */
static inline {T} sg_cos_{S}({T} x)
{{
    return cos{f}(x + {zero});
}}""",
    ),
    "tanh": (
        ("expm1",),
        """\
/* tanh(x) = -expm1(-2|x|)/(2 + expm1(-2|x|)) with the sign of x: within 4 ulp (glibc's vector tanh: 2), and
   for double 1.45x faster (its vector expm1 takes half the time of its vector tanh); float keeps tanhf */
static inline {T} sg_tanh_{S}({T} x)
{{
    const {T} e = expm1{f}(-2*fabs{f}(x));
    return copysign{f}(-e/(2 + e), x);
}}""",
    ),
    "sign": (
        (),
        """\
/* sign(x): -1, 0 or 1; NaN for NaN (as numpy.sign) */
static inline {T} sg_sign_{S}({T} x)
{{
    return x > {zero} ? {one} : (x < {zero} ? -{one} : (x == x ? {zero} : x));
}}""",
    ),
    **SPECIAL_HELPERS,  # the special functions libm lacks (emitters/c/special.py)
}

#: The libm names this file calls: unsafe as identifiers too (see ``symgrad.abi.c_safe``).
_CALLED = frozenset(LIBM.values()) | frozenset(f + "f" for f in LIBM.values())


def c_safe(name: str) -> bool:
    """False for an identifier that could be a macro or a function this file calls."""
    return abi.c_safe(name, _CALLED)


def literal(value: float, dtype: DType) -> str:
    """A typed C literal that round-trips: 17-digit double, shortest float32 with an F suffix."""
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "-INFINITY"
    if dtype.literal:
        import numpy

        f32 = numpy.float32(value)
        if not numpy.isfinite(f32):
            return "INFINITY" if value > 0 else "-INFINITY"
        text = str(f32)
    else:
        text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + dtype.literal


LOOP_MACROS = """\
/* SG_SIMD: a vectorized loop (omp simd, honoured by -fopenmp-simd and ignored by a plain compile).
   SG_ROWS(min_n, rows, args...): rows(0, n, args...) on one thread, or with OpenMP (-fopenmp) from min_n
   rows on, split into one contiguous share per thread. The one-thread case stays outside OpenMP: a
   parallel region costs ~0.4 us even when its if() clause keeps it serial. */
#define SG_PRAGMA(x) _Pragma(#x)
#define SG_SIMD SG_PRAGMA(omp simd)
#if defined(__GNUC__)
#define SG_NOINLINE __attribute__((noinline))  /* one copy of each loop: compiled once, not per call site */
#else
#define SG_NOINLINE
#endif
#if defined(_OPENMP)
#include <omp.h>
static inline int64_t sg_share_lo(int64_t n)
{
    return n*omp_get_thread_num()/omp_get_num_threads();
}
static inline int64_t sg_share_hi(int64_t n)
{
    return n*(omp_get_thread_num() + 1)/omp_get_num_threads();
}
#define SG_ROWS(min_n, rows, ...) \\
    if (n >= (min_n)) { SG_PRAGMA(omp parallel) rows(sg_share_lo(n), sg_share_hi(n), __VA_ARGS__); } \\
    else rows(0, n, __VA_ARGS__)
#else
#define SG_ROWS(min_n, rows, ...) rows(0, n, __VA_ARGS__)
#endif"""


def vector_math_declarations(used: set[str]) -> str:
    """``declare simd`` prototypes for the used libm functions, active when the build defines SG_LIBMVEC."""
    lines = [
        "/* glibc's libmvec has SIMD versions of these; <math.h> declares them only under -ffast-math.",
        "   The build defines SG_LIBMVEC (1: glibc >= 2.22, 2: >= 2.35) when a test compile linked them. */",
    ]
    for tier in (1, 2):
        names = sorted(f for f in used if LIBMVEC_TIER.get(f) == tier)
        if not names:
            continue
        lines.append(f"#if defined(SG_LIBMVEC) && SG_LIBMVEC >= {tier}")
        for f in names:
            for dtype in DTYPES:
                args = ", ".join([dtype.ctype] * _ARITY.get(f, 1))
                lines += ["#pragma omp declare simd notinbranch", f"{dtype.ctype} {f}{dtype.libm}({args});"]
        lines.append("#endif")
    return "\n".join(lines)


def helper(name: str, dtype: DType) -> str:
    lit = {k: literal(v, dtype) for k, v in (("one", 1.0), ("zero", 0.0), ("half", 0.5))}
    return HELPERS[name][1].format(T=dtype.ctype, S=dtype.suffix, f=dtype.libm, **lit)
