"""A model file: imported as a fresh module, its ``@sg.function``s found in definition order."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path

from symgrad.compiler.trace import ForwardFunction
from symgrad.errors import ModelError


def _model_error(path: Path, exc: BaseException) -> ModelError:
    if isinstance(exc, SyntaxError):
        return ModelError(f"{path.name}:{exc.lineno}: syntax error: {exc.msg}")
    line = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = f":{frame.lineno}"
    return ModelError(f"{path.name}{line}: {type(exc).__name__} while importing the model: {exc}")


def load_model(path: Path) -> list[ForwardFunction]:
    """Import ``path`` as a fresh module and return its ``@sg.function``s in definition order."""
    name = f"_symgrad_model_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except ModelError as exc:
        raise ModelError(f"{path.name}: {exc}") from None
    except Exception as exc:  # the user's code: report it as one line naming file and line
        raise _model_error(path, exc) from None
    finally:
        sys.path.pop(0)
    found: dict[int, ForwardFunction] = {}
    for value in vars(module).values():
        if isinstance(value, ForwardFunction):
            found.setdefault(id(value), value)
    if not found:
        raise ModelError(f"{path.name}: defines no @sg.function")
    return list(found.values())
