"""Identifier hygiene: every name in generated code is a valid, unique, non-reserved identifier in every
target.

User names are kept where possible (``x``, ``cam_3``); anything else is sanitized: characters outside
``[A-Za-z0-9_]`` become ``_`` (after transliterating letters: ``α`` -> ``alpha``), a leading digit gets ``_``,
names reserved in C (``_X``, ``__x``) get a leading ``v``, and C/Python keywords, libm and generated-code
names get a trailing ``_``. Nothing a user writes can reach generated code except through ``sanitize``.
"""

from __future__ import annotations

import keyword
import re
import unicodedata

import sympy
from sympy.core.cache import cacheit

from symgrad.abi import C_RESERVED

PY_RESERVED = frozenset(keyword.kwlist) | {"numpy", "math", "_sg", "None", "True", "False"}
#: Names the emitters use for their own locals (row indices, count, strides, the NumPy kernels' dtype).
GENERATED = frozenset({"i", "j", "n", "k", "stride", "dtype"})
RESERVED = C_RESERVED | PY_RESERVED | GENERATED


def _transliterate(name: str) -> str:
    """ASCII for a (Python) identifier: accents dropped (é -> e), other letters by their Unicode name
    (α -> alpha, Δ -> Delta, πr -> pi_r), anything else as ``uXXXX``, so distinct names stay distinct."""
    if name.isascii():
        return name
    out, after_word = "", False
    for ch in unicodedata.normalize("NFKD", name):
        if unicodedata.combining(ch):
            continue
        if ch.isascii():
            if after_word and ch.isalnum():
                out += "_"
            out, after_word = out + ch, False
            continue
        uname = unicodedata.name(ch, "")
        if " LETTER " in uname:
            word = "_".join(uname.split(" LETTER ", 1)[1].lower().split())
            word = word.capitalize() if " CAPITAL " in uname else word
        else:
            word = f"u{ord(ch):04x}"
        if out and out[-1].isalnum():
            out += "_"
        out, after_word = out + word, True
    return out


def sanitize(name: str) -> str:
    """A safe identifier derived from ``name``."""
    clean = (
        re.sub(r"[^A-Za-z0-9_]", "_", _transliterate(name).encode("ascii", "replace").decode("ascii")) or "_"
    )
    if clean[0].isdigit():
        clean = "_" + clean
    if re.match(r"_[A-Z_]", clean):  # reserved for the implementation in C (and dunder in Python)
        clean = "v" + clean
    if clean in RESERVED or clean.startswith("sg_"):
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
            name = sanitize(f"{base}_{k}")  # '_' + '_1' would be the reserved '__1'
            k += 1
        self._used.add(name)
        return name

    def copy(self) -> Namer:
        """A namer that knows the names handed out so far and hands out more on its own."""
        other = Namer()
        other._used = set(self._used)
        return other


#: The longest readable temporary name; a longer one falls back to ``t<k>``.
MAX_NAME = 24
_FUNCTION_WORDS = {"Abs": "abs", "maximum": "max", "minimum": "min", "Max": "max", "Min": "min"}
_POWERS = {2: "{}_sq", 3: "{}_cube", -1: "inv_{}", -2: "inv_{}_sq"}
_COEFFICIENTS = {2: "twice_{}", -1: "neg_{}", -2: "neg_twice_{}"}


def _word(expr: sympy.Basic) -> str | None:
    """A short name for ``expr`` from its structure (``sin_x``, ``exp_neg_abs_x``, ``x_sq``), or None."""
    if isinstance(expr, sympy.Symbol):
        return expr.name
    if expr.is_Integer and 0 <= int(expr) <= 9:
        return str(expr)
    if expr == sympy.S.Half:
        return "half"
    if isinstance(expr, sympy.Pow):
        e = expr.exp
        if e.is_Integer and int(e) in _POWERS:
            return _join(_POWERS[int(e)], expr.base)
        return {sympy.S.Half: _join("sqrt_{}", expr.base), -sympy.S.Half: _join("rsqrt_{}", expr.base)}.get(e)
    if isinstance(expr, sympy.Mul):
        c, rest = expr.as_coeff_Mul()
        if c.is_Integer and int(c) in _COEFFICIENTS:
            return _join(_COEFFICIENTS[int(c)], rest)
        if c == sympy.S.Half:
            return _join("half_{}", rest)
        if c is sympy.S.One and all(f.is_Pow and f.exp.is_negative for f in expr.args):
            return _join("inv_{}", 1 / expr)  # 1/(x*y): inv_x_y
        return _joined(expr.args, "_") if c is sympy.S.One else None
    if isinstance(expr, sympy.Add) and len(expr.args) == 2:
        numbers = [a for a in expr.args if a.is_Number]  # constants last: x_plus_1, not 1_plus_x
        a, b = [a for a in expr.args if not a.is_Number] + numbers
        if isinstance(b, sympy.Mul) and b.as_coeff_Mul()[0] == -1:
            return _joined((a, -b), "_minus_")
        return _joined((a, b), "_plus_")
    if isinstance(expr, sympy.Function) and not expr.is_Piecewise:
        name = type(expr).__name__
        return _joined(expr.args, "_", _FUNCTION_WORDS.get(name, name.lower()))
    return None


def _join(template: str, operand: sympy.Basic) -> str | None:
    word = _word(operand)
    return None if word is None else template.format(word)


def _joined(operands, sep: str, head: str = "") -> str | None:
    words = [_word(a) for a in operands]
    if any(w is None for w in words):
        return None
    return "_".join(filter(None, [head, sep.join(words)]))  # type: ignore[arg-type]


def readable(expr: sympy.Basic) -> str | None:
    """A short, safe-to-sanitize name for the value of ``expr`` (its symbols already readable), or None when
    its structure has none of at most ``MAX_NAME`` characters."""
    word = _word(expr)
    if word is None or len(word) > MAX_NAME or isinstance(expr, sympy.Symbol):
        return None
    return word


class Temporary(sympy.Symbol):
    """A program's temporary: printed as ``name`` (readable: ``sin_x``), ordered, hashed and compared as
    ``key`` (its number, then NUL and its name: ``t3\\0sin_x``). SymPy orders the operands of a sum or product
    by their symbols' names, and that order is the order of the floating-point operations; keyed by its number
    (the NUL sorts the key as the number alone), a temporary keeps the order, and so every result, that it had
    before it was given a readable name; with the name in the key, SymPy's cache never hands one program's
    temporary to another. (The class is named ``Symbol``, as SymPy compares class names first.)"""

    __slots__ = ("key",)

    def __new__(cls, key: str, name: str, **assumptions) -> Temporary:
        obj = sympy.Symbol.__xnew__(cls, key, **assumptions)
        obj.key, obj.name = key, name
        return obj

    def __getnewargs_ex__(self):
        return (self.key, self.name), self._assumptions_orig

    def _hashable_content(self):
        return (self.key, *self._assumptions0)

    @cacheit
    def sort_key(self, order=None):
        return self.class_key(), (1, (self.key,)), sympy.S.One.sort_key(), sympy.S.One


Temporary.__name__ = "Symbol"
