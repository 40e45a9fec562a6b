"""A model file: imported as a fresh module, its ``@sg.function``s found in definition order, and the local
modules it imported (their text is part of what a compiled package is keyed on)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

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


_SYMGRAD = Path(__file__).resolve().parents[1]  # symgrad's own models (runtime, optim) live inside it


@dataclass(frozen=True)
class Model:
    functions: list[ForwardFunction]  # in definition order
    dependencies: tuple[Path, ...]  # local modules (beside the model, or below its folder) it imported


def load_model(path: Path) -> list[ForwardFunction]:
    """Import ``path`` as a fresh module and return its ``@sg.function``s in definition order."""
    return read_model(path).functions


def read_model(path: Path) -> Model:
    """Import ``path`` as a fresh module: its ``@sg.function``s and the local modules it imported."""
    name = f"_symgrad_model_{hashlib.sha256(os.fsencode(path.resolve())).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = path.parent.resolve()
    # local modules imported earlier in this process are imported afresh, as a new process would (their
    # text may have changed since), and handed back to the process afterwards
    earlier = {n: m for n, m in list(sys.modules.items()) if _local_file(m, folder, path) is not None}
    for name in earlier:
        del sys.modules[name]
    before = set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    except ModelError as exc:
        raise ModelError(f"{path.name}: {exc}") from None
    except Exception as exc:  # the user's code: report it as one line naming file and line
        raise _model_error(path, exc) from None
    finally:
        sys.path.pop(0)
        imported = {n: sys.modules[n] for n in set(sys.modules) - before}
        sys.modules.update(earlier)
    found: dict[int, ForwardFunction] = {}
    for value in vars(module).values():
        if isinstance(value, ForwardFunction):
            found.setdefault(id(value), value)
    if not found:
        raise ModelError(f"{path.name}: defines no @sg.function")
    files = {_local_file(m, folder, path) for m in imported.values()} - {None}
    return Model(list(found.values()), tuple(sorted(files)))


def _local_file(module: ModuleType | None, folder: Path, model: Path) -> Path | None:
    """The source file of ``module`` when it lies below the model's folder (not the model itself, symgrad,
    or a compiled package beside it), else None."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    file = Path(file).resolve()
    if folder not in file.parents or file == model.resolve() or _SYMGRAD in file.parents:
        return None
    if any(part.endswith("_symgrad") for part in file.relative_to(folder).parts):
        return None
    return file
