"""Model file or traced function -> kernels -> a package directory, rebuilt only when its content hash
changed.

SymPy and the compiler are imported only when something is actually (re)built.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from symgrad.build.cache import in_cache
from symgrad.build.fingerprint import source_hash
from symgrad.build.package import intact_manifest, write_package
from symgrad.build.progress import notice
from symgrad.debug import debug, say
from symgrad.errors import ModelError

if TYPE_CHECKING:
    from symgrad.compiler.ir import Kernel
    from symgrad.compiler.trace import Spec

#: ``progress(i, total, name)``: function ``i`` of ``total`` starts; ``progress(total, total, "")``: all are
#: traced and derived (what remains is emitting and writing the package).
Progress = Callable[[int, int, str], None]


@dataclass
class BuildResult:
    path: Path
    rebuilt: bool
    kernels: list[Kernel] = field(default_factory=list)


def compile_model(
    path: str | Path,
    out_dir: str | Path | None = None,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> BuildResult:
    """Compile every ``@sg.function`` of ``path`` into a package (default ``<stem>_symgrad/`` beside it)."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the model file ({exc.strerror})") from None
    dest = package_dir(path, out_dir)
    src_hash = source_hash(text)
    if not force and up_to_date(path, dest, src_hash):
        return BuildResult(dest, rebuilt=False)
    from symgrad.compiler.model import read_model

    model = read_model(path)
    functions = model.functions
    _check_unique_names(path, functions)
    kernels = []
    for i, fn in enumerate(functions):
        if progress:
            progress(i, len(functions), fn.name)
        kernels.append(_kernel(fn.trace))
    if progress:
        progress(len(functions), len(functions), "")
    kernels = _unique_idents(kernels)
    try:
        write_package(kernels, dest, path.name, src_hash, provenance(path, dest, model.dependencies))
    except OSError as exc:  # keeps errno: a full cache directory makes sg.compile fall back (cache.in_cache)
        raise OSError(
            exc.errno, f"cannot write the compiled package {dest} ({exc.strerror or exc})"
        ) from None
    return BuildResult(dest, rebuilt=True, kernels=kernels)


def up_to_date(model: Path, dest: Path, src_hash: str | None = None) -> bool:
    """Whether the package at ``dest`` is intact and compiled from ``model`` as it is now (its text, hashed
    as ``src_hash`` when given, and the local modules it imported); no SymPy."""
    old = intact_manifest(dest)
    if old is None:
        return False
    if src_hash is None:
        try:
            src_hash = source_hash(model.read_bytes())
        except OSError:
            return False
    return old["source_hash"] == src_hash and _same_dependencies(model, old)


def package_dir(model: Path, out_dir: str | Path | None = None) -> Path:
    """Where ``symgrad compile`` writes the package of ``model``: ``out_dir``, else ``<stem>_symgrad/``
    beside it."""
    return Path(out_dir) if out_dir else model.parent / f"{model.stem}_symgrad"


def provenance(model: Path, dest: Path, files: tuple[Path, ...]) -> dict:
    """What a package was compiled from, for the manifest: the model file (its path relative to the package
    and its digest) and the local modules it imported (paths relative to the model's folder, digests)."""
    folder = model.resolve().parent
    return {
        "model": os.path.relpath(model.resolve(), dest.resolve()),
        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        "dependencies": {f.relative_to(folder).as_posix(): _digest(f) for f in files},
    }


def _digest(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _same_dependencies(model: Path, manifest: dict) -> bool:
    """Whether every local module the package's model imported is unchanged (missing: changed)."""
    folder = model.resolve().parent
    recorded = manifest.get("dependencies", {})
    try:
        return all(_digest(folder / f) == d for f, d in recorded.items())
    except OSError:
        return False


def _check_unique_names(path: Path, functions: list) -> None:
    """Two ``@sg.function``s of one name would shadow each other in the compiled module."""
    seen: dict[str, str] = {}
    for fn in functions:
        if fn.name in seen:
            raise ModelError(
                f"{path.name}: two functions are named {fn.name!r} ({seen[fn.name]} and {fn.origin}); "
                "give each @sg.function its own name"
            )
        seen[fn.name] = fn.origin


def _unique_idents(kernels: list[Kernel]) -> list[Kernel]:
    """Distinct names whose identifiers sanitize alike (``alpha`` and ``α``, ``exp`` and ``exp_``) get
    distinct identifiers, in model order (the first keeps its own)."""
    import dataclasses

    from symgrad.compiler.naming import Namer

    namer = Namer()
    unique = []
    for kernel in kernels:
        ident = namer(kernel.name)
        unique.append(kernel if ident == kernel.name else dataclasses.replace(kernel, name=ident))
    return unique


def _kernel(trace: Callable[[], Spec], traced_before: float = 0.0) -> Kernel:
    """Trace, derive and lower one function; ``SYMGRAD_DEBUG=1`` prints its IR and each stage's time
    (``traced_before``: seconds of tracing already done by the caller, for a ``trace`` that returns a spec
    traced before)."""
    from symgrad.compiler import derive, lower

    started = time.perf_counter()
    spec = trace()
    traced = time.perf_counter()
    derivation = derive(spec)
    derived = time.perf_counter()
    kernel = lower(derivation)
    if debug(1):
        say(
            f"{spec.name}: trace {traced_before + traced - started:.3f} s, "
            f"forward program {derived - traced:.3f} s, "
            f"derivatives and layout {time.perf_counter() - derived:.3f} s\n{kernel}"
        )
    return kernel


def compile_traced(spec: Spec, traced_in: float = 0.0) -> Path:
    """The package of one traced function in the cache, keyed by what tracing produced (so closures over
    constants are respected); built on a miss. ``traced_in``: the seconds tracing took (``SYMGRAD_DEBUG``)."""
    from symgrad.compiler.dag import serialize  # linear in the DAG, where srepr writes the whole tree

    key = source_hash(
        repr(
            (
                spec.name,
                spec.origin,
                spec.doc,
                [(a.name, a.shape, a.diff, a.uniform) for a in spec.args],
                [(o.shape, [serialize(e) for e in o.exprs]) for o in spec.outputs],
                spec.returns_tuple,
                [(serialize(e), name) for e, name in spec.names],  # readable temporaries' names
            )
        ).encode()
    )
    kernels: list[Kernel] = []

    def build(root: Path) -> Path:
        dest = root / "jit" / f"{path_token(spec.name)}-{key[:16]}"
        with _building(dest):
            if intact_manifest(dest) is None:
                kernels[:] = kernels or [_kernel(lambda: spec, traced_in)]
                write_package(kernels, dest, spec.origin, key)
        return dest

    return in_cache(build)


_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _building(dest: Path) -> threading.Lock:
    """The lock that makes threads of this process build the package at ``dest`` one at a time (the
    cache's atomic publication already serializes processes)."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(dest, threading.Lock())


def path_token(name: str) -> str:
    """``name`` as one bounded path component: letters, digits and ``_`` only (a function's ``__name__`` can
    be anything, ``../x`` or thousands of characters); the content hash beside it keeps entries apart."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)[:40] or "_"


def model_key(path: Path) -> str:
    """Which cache entry holds the model at ``path`` (its resolved location, hashed)."""
    return hashlib.sha256(os.fsencode(path.resolve())).hexdigest()[:12]


def compile_model_in_cache(
    path: str | Path, *, force: bool = False, timeout: float | None = None, quiet: bool | None = None
) -> Path:
    """``compile_model`` into the cache directory (one entry per model path); returns the package path.

    ``timeout``: seconds before the build gives up (ModelError), in a child process that is killed then
    (``build.child``), which also stops a model looping in C or catching ``Exception``. A build that takes
    more than two seconds says so on stderr unless ``quiet`` (None: ``SYMGRAD_QUIET``)."""
    path = Path(path).resolve()

    def build(root: Path) -> Path:
        dest = root / "models" / f"{path_token(path.stem)}-{model_key(path)}"
        with _building(dest), notice(path.name, quiet):
            if timeout is None:
                compile_model(path, dest, force=force)
            elif force or not up_to_date(path, dest):  # a child process only to build
                from symgrad.build.child import compile_model_bounded

                compile_model_bounded(path, dest, timeout=timeout, force=force)
        return dest

    return in_cache(build)
