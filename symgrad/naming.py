"""Identifier hygiene: every name in generated code is a valid, unique, non-reserved identifier in every target.

User names are kept where possible (``x``, ``cam_3``); anything else is sanitized: characters outside
``[A-Za-z0-9_]`` become ``_``, a leading digit gets ``_``, and C/Python keywords, libm and generated-code
names get a trailing ``_``. Nothing a user writes can reach generated code except through ``sanitize``.
"""
from __future__ import annotations

import keyword
import re

C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Bool _Complex _Imaginary bool true false NULL main errno
exp expf log logf sin sinf cos cosf tan tanf sqrt sqrtf pow powf fabs fabsf floor ceil erf erfc tanh
asin acos atan atan2 sinh cosh asinh acosh atanh log1p expm1 fmax fmin copysign isnan isinf nan
int64_t int32_t size_t ptrdiff_t uint64_t
""".split())
PY_RESERVED = frozenset(keyword.kwlist) | {"numpy", "math", "_sg", "None", "True", "False"}
#: Names the emitters use for their own locals (loop index, count, strides).
GENERATED = frozenset({"i", "n", "k", "stride"})
RESERVED = C_RESERVED | PY_RESERVED | GENERATED


def sanitize(name: str) -> str:
    """A safe identifier derived from ``name``."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name.encode("ascii", "replace").decode("ascii")) or "_"
    if clean[0].isdigit():
        clean = "_" + clean
    if clean in RESERVED or clean.startswith("sg_") or clean.startswith("__"):
        clean = clean + "_"
    return clean


class Namer:
    """Hands out unique sanitized names; the first request for a name gets it verbatim."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def __call__(self, wanted: str) -> str:
        base = sanitize(wanted)
        name, k = base, 1
        while name in self._used:
            name = f"{base}_{k}"
            k += 1
        self._used.add(name)
        return name
