"""The small error hierarchy of symgrad; every message names the user's function, argument or file."""

from __future__ import annotations


class SymgradError(Exception):
    """Base class of every error symgrad raises on purpose."""


class ModelError(SymgradError):
    """A model file or an ``@sg.function`` body is wrong (syntax, undefined name, bad return value)."""


class UnsupportedError(SymgradError):
    """A SymPy construct that symgrad cannot differentiate or print; names function and sub-expression."""


class ArgumentError(SymgradError, TypeError):
    """A call received an argument of the wrong dtype or shape; names function and argument."""


class CompileError(SymgradError):
    """The C compiler failed; carries the compiler's message and the path of the generated file."""


class ExpressionTooLarge(SymgradError):
    """A traced function exceeds the size limit (``SYMGRAD_MAX_OPS``) before derivation starts."""


class PackageError(SymgradError):
    """A compiled package is damaged (a file truncated or edited) or was written by an older symgrad."""


class BackendUnavailable(SymgradError):
    """A backend cannot work on this machine (raised by its ``load``; symgrad falls back to NumPy)."""


class CompilerUnavailable(BackendUnavailable):
    """No working C compiler (or no Python headers) here: the C backend cannot build anything."""


class StalePackageWarning(UserWarning):
    """A compiled package was loaded whose model (or a local module it imports) changed since it was built."""
