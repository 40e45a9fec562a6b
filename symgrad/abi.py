"""The ABI of generated code, shared by the emitters and the backends: symbol names, and for C
(``emitters/c/`` <-> ``symgrad/backends/c/``) the float types, prototypes, the pointer-array entries, the
section mark of ``kernels.c`` and which identifiers are unsafe.
No SymPy here: the runtime loads compiled packages through this module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

#: dtype suffix -> C type, in emission order.
C_TYPES = {"f64": "double", "f32": "float"}
#: The float dtypes symgrad computes in, and their suffixes.
FLOAT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
DTYPE_SUFFIX = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
#: The suffix of each kernel's entry that takes its arguments as an array of pointers, a uniform input as a
#: pointer to its value: ``void <kernel>__<program>_<dtype>__ptrs(int64_t n, void *const *p)``.
POINTERS_SUFFIX = "__ptrs"


def kernel_symbol(ident: str, program: str, suffix: str = "") -> str:
    """The generated function of one program: ``<ident>__<program>`` (NumPy), ``..._<f32|f64>`` (C)."""
    return f"{ident}__{program}_{suffix}" if suffix else f"{ident}__{program}"


def prototype(name: str, params: Sequence[str], lead: str = "void", first: str = "int64_t n") -> str:
    """``void name(int64_t n, params...)``, wrapped one parameter per line when long."""
    one_line = f"{lead} {name}({first}, {', '.join(params)})"
    if len(one_line) <= 110:
        return one_line
    indent = " " * (len(lead) + len(name) + 2)
    return f"{lead} {name}({first},\n" + ",\n".join(indent + p for p in params) + ")"


def pointer_entry(ident: str, program: str, suffix: str) -> str:
    """The symbol of a C kernel's pointer-array entry: ``<ident>__<program>_<suffix>__ptrs``."""
    return kernel_symbol(ident, program, suffix) + POINTERS_SUFFIX


def pointer_entries(manifest: dict) -> list[str]:
    """The pointer-array entry of every kernel of a compiled package (its manifest), sorted."""
    return sorted(
        pointer_entry(fn["ident"], program, suffix)
        for fn in manifest["functions"]
        for program in fn["programs"]
        for suffix in C_TYPES
    )


#: How each function's section of ``kernels.c`` begins, at the start of a line, after the file's shared
#: header. Sections refer to nothing in other sections, so the build may compile them as separate units.
SECTION_MARK = "/* ---- "


#: libm functions glibc's libmvec vectorizes, by tier: 1 since glibc 2.22, 2 since 2.35. The toolchain probe
#: finds the tier that links here; the C emitter declares ``simd`` variants of the functions up to it.
LIBMVEC_TIER = {
    **{f: 1 for f in "exp log sin cos pow".split()},
    **{
        f: 2 for f in "tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh erf erfc log1p expm1".split()
    },
}


#: Identifiers ``symgrad.compiler.naming.sanitize`` never hands out: C keywords, the libm functions and types
#: generated code uses, and names it defines.
C_RESERVED = frozenset(
    """
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Bool _Complex _Imaginary bool true false NULL main errno
exp expf log logf sin sinf cos cosf tan tanf sqrt sqrtf pow powf fabs fabsf floor ceil erf erfc tanh
asin acos atan atan2 sinh cosh asinh acosh atanh log1p expm1 fmax fmin copysign isnan isinf nan
int64_t int32_t size_t ptrdiff_t uint64_t
""".split()
)

#: Object-like macros that <math.h>, <stdint.h> or Python.h (cffi builds include it first) may define, and
#: the libm names C kernels call: an identifier equal to one of them gets a trailing '_' in C.
_C_MACROS = frozenset(
    """
INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL MATH_ERRNO MATH_ERREXCEPT math_errhandling DOMAIN SING OVERFLOW
UNDERFLOW TLOSS PLOSS X_TLOSS EOF BUFSIZ FILENAME_MAX FOPEN_MAX TMP_MAX L_tmpnam stdin stdout stderr SEEK_SET
SEEK_CUR SEEK_END EXIT_SUCCESS EXIT_FAILURE RAND_MAX MB_CUR_MAX NULL CHAR_BIT MB_LEN_MAX linux unix i386 i686
errno sqrt sqrtf pow powf fabs fabsf cbrt cbrtf cos cosf omp_get_thread_num omp_get_num_threads
""".split()
)
_C_MACRO_RE = re.compile(
    r"_[A-Z_].*|SG_.*|Py.*|PY_.*|HAVE_.*|SIZEOF_.*|ALIGNOF_.*|FP_[A-Z0-9_]+|E[A-Z0-9]{2,}"
    r"|M_(E|LOG2E|LOG10E|LN2|LN10|PI|PI_2|PI_4|1_PI|2_PI|2_SQRTPI|SQRT2|SQRT1_2)[a-z0-9]*"
    r"|(U?INT(8|16|32|64|MAX|PTR)?|U?INT_(LEAST|FAST)(8|16|32|64)|SIZE|PTRDIFF|WCHAR|WINT|SIG_ATOMIC|S?CHAR"
    r"|UCHAR|U?SHRT|U?LONG|U?LLONG|FLT|DBL|LDBL)_[A-Z0-9_]*"
)


def c_safe(name: str, called: frozenset[str] = frozenset()) -> bool:
    """False for an identifier that could be a macro, or a function in ``called`` (what the file calls)."""
    return name not in _C_MACROS and name not in called and not _C_MACRO_RE.fullmatch(name)
