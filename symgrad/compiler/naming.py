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
