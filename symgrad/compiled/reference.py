"""Pickling compiled functions as small references, never as loaded libraries (Dask, multiprocessing).

A ``CompiledFunction`` pickles as a ``Reference``: its name, its package's content hash and directory, and,
for a package compiled from a model file, the model's text and that of the local modules it imported (a
few kB). Unpickling returns, in order: the function this process already has for that hash and name; the
function loaded from the package directory when it is there with the same hash (a worker on the same
machine, or one sharing the cache); else the model compiled once per process from the shipped text into a
private temporary directory (a worker on another machine). An ``@sg.function`` defined at the top level of
an importable module pickles as that module and name (and its package, loaded without tracing when it is
there); any other pickles as its compiled function. No SymPy here.

A package loaded from its directory may vanish before its kernels are loaded (``symgrad cache clear``): its
files, read when it was found intact, are then written into a private directory (the same build, checked
against the same digests); without them the shipped text is compiled again.
"""

from __future__ import annotations

import copyreg
import hashlib
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from symgrad.build.cache import private_dir
from symgrad.build.compile import compile_model
from symgrad.build.package import Package, intact_manifest
from symgrad.compiled.function import CompiledFunction
from symgrad.errors import PackageError

#: (package hash, function name) -> the function this process holds for it
_functions: dict[tuple[str, str], CompiledFunction] = {}
#: package hash -> the package this process unpickled functions of (one load of its kernels for them all)
_packages: dict[str, Package] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Reference:
    """What a pickled ``CompiledFunction`` holds."""

    name: str
    package_hash: str
    path: str
    #: the model file's name and text, then the local modules it imported (relative paths); empty for the
    #: package of a traced ``@sg.function``
    files: tuple[tuple[str, bytes], ...] = ()


def reference(fn: CompiledFunction) -> Reference:
    """The reference that ``fn`` pickles as (and remembers ``fn`` for this process under it)."""
    manifest = fn.package.manifest
    package_hash = manifest.get("package_hash", "")
    with _lock:
        _functions.setdefault((package_hash, fn.name), fn)
    return Reference(fn.name, package_hash, str(fn.package.path), _model_files(fn.package.path, manifest))


def _model_files(path: Path, manifest: dict) -> tuple[tuple[str, bytes], ...]:
    """The model's name and text and its local modules', when they are still what the package was compiled
    from (else none: the package then travels by its directory only)."""
    if "model" not in manifest:
        return ()
    model = (path / manifest["model"]).resolve()
    try:
        files = [(model.name, model.read_bytes())]
        files += [(name, (model.parent / name).read_bytes()) for name in manifest.get("dependencies", {})]
    except OSError:
        return ()
    if hashlib.sha256(files[0][1]).hexdigest() != manifest.get("model_sha256"):
        return ()
    return tuple(files)


def reduce_compiled(fn: CompiledFunction) -> tuple:
    """How ``CompiledFunction`` pickles (registered with ``copyreg`` when this module loads)."""
    return (restore, (reference(fn),))


copyreg.pickle(CompiledFunction, reduce_compiled)


def restore(ref: Reference) -> CompiledFunction:
    """The function ``ref`` names: this process's, the package directory's, or compiled from the text."""
    key = (ref.package_hash, ref.name)
    with _lock:
        fn = _functions.get(key)
        if fn is None:
            package = _packages.get(ref.package_hash) or _local_package(ref) or _shipped_package(ref)
            _packages[ref.package_hash] = package
            fn = _functions[key] = _function(package, ref.name)
    return fn


def _local_package(ref: Reference) -> Package | None:
    """The package at ``ref.path`` when it is intact with ``ref``'s hash, able to rebuild itself."""
    path = Path(ref.path)
    manifest = intact_manifest(path)
    if manifest is None or manifest.get("package_hash") != ref.package_hash:
        return None
    try:  # what was just found intact; read again, checked again when used
        files = {f.name: f.read_bytes() for f in path.iterdir() if f.is_file()}
    except OSError:
        files = {}
    return Package(path, rebuild=_rebuilder(ref, files))


def _rebuilder(ref: Reference, files: dict[str, bytes]) -> Callable[[], Path]:
    """``Package.rebuild`` for a package whose directory may vanish: writes ``files`` (its files as they
    were) into a private directory, else compiles the text ``ref`` carries; once per package."""
    built: list[Path] = []
    lock = threading.Lock()

    def rebuild() -> Path:
        with lock:
            if not built:
                folder = private_dir("symgrad-restored-") if files else None
                for name, data in files.items():
                    (folder / name).write_bytes(data)
                if folder is None or _hash_of(folder) != ref.package_hash:
                    folder = _shipped_package(ref).path
                built.append(folder)
        return built[0]

    return rebuild


def _hash_of(path: Path) -> str | None:
    manifest = intact_manifest(path)
    return None if manifest is None else manifest.get("package_hash")


def _shipped_package(ref: Reference) -> Package:
    """The model compiled from the text ``ref`` carries, into a directory of this process's own."""
    if not ref.files:
        raise PackageError(
            f"cannot unpickle the compiled function {ref.name!r}: its package {ref.path} is not here (with "
            "its content hash) and it was not compiled from a model file whose text could travel; pickle "
            "the @sg.function from an importable module, or compile a model file with sg.compile"
        )
    folder = private_dir("symgrad-shipped-")
    for name, text in ref.files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(text)
    return Package(compile_model(folder / ref.files[0][0], folder / "package").path)


def _function(package: Package, name: str) -> CompiledFunction:
    for entry in package.manifest["functions"]:
        if entry["name"] == name:
            return CompiledFunction(package, entry)
    raise PackageError(f"{package.path} has no function {name!r}")


def _lookup(module: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        module = getattr(module, part, None)
    return module


def reduce_symbolic(f: Any) -> tuple:
    """``SymbolicFunction.__reduce__``: by module and name when that finds ``f`` again, else as its
    compiled function."""
    module, qualname = f.fn.__module__, f.fn.__qualname__
    importable = module != "__main__" and "<locals>" not in qualname
    if importable and _lookup(importlib.import_module(module), qualname) is f:
        compiled = f._compiled
        return (restore_symbolic, (module, qualname, None if compiled is None else reference(compiled)))
    return reduce_compiled(f.compiled())


def restore_symbolic(module: str, qualname: str, ref: Reference | None) -> Any:
    """The ``@sg.function`` ``module.qualname``, given its compiled package when that is here (no tracing)."""
    f = _lookup(importlib.import_module(module), qualname)
    if ref is not None and f._compiled is None:
        with _lock:
            fn = _functions.get((ref.package_hash, ref.name))
            package = None if fn is not None else _packages.get(ref.package_hash) or _local_package(ref)
            if package is not None:
                _packages[ref.package_hash] = package
                fn = _functions[(ref.package_hash, ref.name)] = _function(package, ref.name)
        if fn is not None:
            f._compiled = fn
    return f
