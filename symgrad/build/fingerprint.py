"""Content hashes that key compiled packages: the model's text plus the source of everything that shapes
what a package holds (the compiler, the emitters, the package writer and the ABI), never a version
number bumped by hand."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import emitters
from symgrad import __version__

_SYMGRAD = Path(__file__).resolve().parents[1]
#: What a compiled package's files are a function of, besides the model.
SOURCES = (_SYMGRAD / "compiler", _SYMGRAD / "build", _SYMGRAD / "abi.py", Path(emitters.__file__).parent)


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """Hash of the source files in ``SOURCES``: any change to them invalidates old builds."""
    h = hashlib.sha256(f"symgrad {__version__}".encode())
    for root in SOURCES:
        for file in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            h.update(file.relative_to(_SYMGRAD.parent).as_posix().encode())
            h.update(file.read_bytes())
    return h.hexdigest()


def source_hash(text: bytes) -> str:
    """The key of a package built from ``text`` (a model file, or a traced function's description)."""
    h = hashlib.sha256(text)
    h.update(compiler_fingerprint().encode())
    return h.hexdigest()
