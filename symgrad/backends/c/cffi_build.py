"""Compile generated C into an importable cffi module, through a content-hashed, multi-process-safe cache.

No setuptools: cffi only writes its wrapper (``ffi.emit_c_code``), then we run the compiler ourselves with
exact flags. The cache entry ``<cache>/c/<key>/`` is built in a private temporary directory and renamed
into place, so concurrent builds of the same model all succeed and nobody imports half a file; an entry
that fails to import is deleted and rebuilt (its module under a new file name: dlopen would hand this process
the library it already loaded from the old path), and one that vanishes while it is loaded (``symgrad
cache clear`` elsewhere) is built again. The key covers everything that changes the binary: the C
text, the cdef, the compiler and its version, the flags, the CPU (``-march=native``), the Python ABI and
the cffi/numpy versions. ``load_extension`` builds a plain CPython extension (the backend's direct call,
``symgrad/backends/c/direct.py``) through the same cache.

The flags come from ``symgrad.backends.c.toolchain`` (probed once per machine); no compiler at all raises
``CompilerUnavailable`` so the caller can fall back to NumPy. ``SYMGRAD_SANITIZE=1`` builds every module
with AddressSanitizer and UBSan (run Python with libasan preloaded, see ``make sanitize``).

This module must not import SymPy: the runtime loads compiled packages with it.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import re
import secrets
import shlex
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

from symgrad.backends.c import commands
from symgrad.backends.c.toolchain import (
    EXT_SUFFIX,
    PYTHON_INCLUDE,
    Toolchain,
    forget_toolchain,
    run_command,
    toolchain,
)
from symgrad.build import cache
from symgrad.build.cache import cache_root, in_cache, remove_aside
from symgrad.debug import debug, say
from symgrad.errors import CompileError

__all__ = ["load", "load_extension", "list_entries", "clear", "build_key", "module_name", "toolchain"]

#: The build commands and module layout are these files and the toolchain probe: their text is in every key.
BUILD_SOURCE_DIGEST = hashlib.sha256(
    b"".join(
        Path(__file__).with_name(f).read_bytes() for f in ("cffi_build.py", "commands.py", "toolchain.py")
    )
).hexdigest()


def _versions() -> str:
    import _cffi_backend
    import numpy

    return f"cffi {_cffi_backend.__version__} numpy {numpy.__version__}"


def build_key(source: str, cdef: str, tc: Toolchain) -> str:
    h = hashlib.sha256()
    for part in (
        BUILD_SOURCE_DIGEST,
        source,
        cdef,
        commands.SUPPORT_SOURCE,
        tc.identity(),
        " ".join(commands.sanitize_flags()),
        str(commands.huge_section_bytes()),
        EXT_SUFFIX,
        PYTHON_INCLUDE,
        _versions(),
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def module_name(key: str) -> str:
    return f"_sg_{key[:16]}"


#: What a module's file name may be (``{}``: the module name).
_SO_PATTERN = "{}(?:_[0-9a-f]{{8}})?" + re.escape(EXT_SUFFIX)


def _so_name(key: str, fresh: bool = False) -> str:
    """The module's file name; ``fresh``: one no process has loaded yet (``build.json`` records which)."""
    return module_name(key) + (f"_{secrets.token_hex(4)}" if fresh else "") + EXT_SUFFIX


def _recorded_so(entry: Path, key: str) -> Path | None:
    """The module file that ``entry/build.json`` names, when both exist; None otherwise."""
    try:
        name = json.loads((entry / "build.json").read_text()).get("so", _so_name(key))
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(name, str) or not re.fullmatch(_SO_PATTERN.format(re.escape(module_name(key))), name):
        return None
    so = entry / name
    return so if so.exists() else None


def _import(name: str, path: Path) -> ModuleType:
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def load(source: str, cdef: str, label: str = "kernels.c", glue: str = "") -> ModuleType:
    """The cffi module (``.ffi``, ``.lib``) for ``source``, from the cache or freshly built.

    ``cdef`` declares what Python calls; ``glue`` is C compiled into cffi's wrapper beside it (the C
    backend's entry table). ``label`` names the model in messages. Raises ``CompilerUnavailable`` (no
    toolchain) or ``CompileError`` (the compiler rejected the generated code)."""
    tc = toolchain()
    key = build_key(source, cdef + "\n" + glue, tc)
    return _cached(
        key, label, tc, lambda tmp, so: commands.cffi_steps(tmp, source, cdef, glue, tc, module_name(key), so)
    )


def load_extension(source: str, label: str) -> ModuleType:
    """A plain CPython extension module compiled from C ``source``, through the same cache as ``load``.

    The source names its init function ``SG_CAT(PyInit_, SG_MODULE)`` and its module ``SG_STR(SG_MODULE)``:
    the build defines those macros and ``SG_MODULE`` (the module name, from the key)."""
    tc = toolchain()
    key = build_key(source, "<CPython extension>", tc)
    return _cached(
        key, label, tc, lambda tmp, so: commands.extension_steps(tmp, source, tc, module_name(key), so)
    )


def _cached(key: str, label: str, tc: Toolchain, prepare) -> ModuleType:
    name = module_name(key)
    if name in sys.modules:
        return sys.modules[name]
    return in_cache(lambda root: _load_from(root / "c", key, label, tc, prepare))


#: How many times one load builds an entry again that vanished before it was imported (``cache clear``).
_VANISHED_LIMIT = 5


def _load_from(cdir: Path, key: str, label: str, tc: Toolchain, prepare) -> ModuleType:
    """Import the entry ``cdir/key``, building it when missing. A broken entry is rebuilt once (under a fresh
    module file name when this process tried to import the broken one); an entry removed between this
    process's check and its import is built again."""
    cdir.mkdir(parents=True, exist_ok=True)
    name = module_name(key)
    entry = cdir / key
    broken = vanished = 0
    opened: set[Path] = set()  # modules whose import failed here: dlopen may keep handles of their paths
    while True:
        so = _recorded_so(entry, key)
        if so is None or so in opened:
            if entry.exists():  # without its module (deleted by hand, a crash), or it failed here
                remove_aside(entry)
            so = _build(key, cdir, label, tc, prepare, fresh=bool(opened))
        importing = False
        try:
            _verify(entry, so)  # dlopen of a truncated .so can crash the process (SIGBUS)
            importing = True
            return _import(name, so)
        except ImportError as exc:
            if not so.exists():  # removed meanwhile (cache clear): build it again
                vanished += 1
                if vanished < _VANISHED_LIMIT:
                    continue
                raise CompileError(
                    f"symgrad: the compiled module for {label} was removed from {cdir} each time it was "
                    "built; is something clearing the cache in a loop?"
                ) from None
            if broken:
                raise CompileError(
                    f"symgrad: the compiled module for {label} does not import ({exc}); built in {entry}"
                ) from None
            broken += 1
            if importing:
                opened.add(so)
            if debug(1):
                say(f"cache entry {entry} is broken ({exc}); rebuilding")
            remove_aside(entry)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verify(entry: Path, so: Path) -> None:
    """Raise ImportError unless ``so`` is byte-for-byte what the build recorded in build.json."""
    try:
        recorded = json.loads((entry / "build.json").read_text())["so_sha256"]
        ok = recorded == _digest(so)
    except (OSError, ValueError, KeyError):
        ok = False
    if not ok:
        raise ImportError(f"{so} does not match the digest recorded when it was built")


def _build(key: str, cdir: Path, label: str, tc: Toolchain, prepare, fresh: bool = False) -> Path:
    """Compile in a private directory, then rename it to ``cdir/key`` (atomic publication); returns the
    published module's path (another process's, when it published the same build first).

    ``prepare(tmp, so)`` writes the sources into ``tmp`` and returns (main source file, compile commands, run
    in parallel, link command that writes ``so``). ``fresh``: the module gets a file name of its own."""
    tmp = Path(tempfile.mkdtemp(dir=cdir, prefix=".tmp-"))
    so = _so_name(key, fresh)
    try:
        return _build_in(tmp, key, cdir, label, tc, so, *prepare(tmp, so))
    except CompileError:  # its message points at the kept generated files
        raise
    except BaseException:  # a full disk or Ctrl-C: no half-built directory stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _build_in(
    tmp: Path, key: str, cdir: Path, label: str, tc: Toolchain, so: str, main: str, steps: list, link: list
) -> Path:
    started = time.perf_counter()
    results = _run_all(steps, tmp, commands.cores())
    if all(rc == 0 for _, rc, _ in results):
        r = run_command(link, cwd=tmp)
        results.append((link, r.returncode, r.stderr))
    failed_step = next(((cmd, err) for cmd, rc, err in results if rc), None)
    if failed_step is not None:
        if "No space left on device" in failed_step[1] or "Disk quota exceeded" in failed_step[1]:
            raise OSError(errno.ENOSPC, f"the C compiler could not write its output in {tmp}")
        _fail(tmp, cdir, key, label, main, *failed_step)
    (tmp / "build.json").write_text(
        json.dumps(
            {
                "key": key,
                "label": label,
                "so": so,
                "so_sha256": _digest(tmp / so),
                "commands": [*steps, link],
                "seconds": round(time.perf_counter() - started, 3),
                "toolchain": asdict(tc),
                "created": time.time(),
            },
            indent=1,
        )
    )
    for leftover in [*tmp.glob("*.o"), *tmp.glob("kernels.*.c")]:  # kernels.c stays, whole
        leftover.unlink(missing_ok=True)
    entry = cdir / key
    try:
        os.replace(tmp, entry)  # atomic: the entry appears complete
    except OSError:
        published = _recorded_so(entry, key)
        if published is not None:  # another process published the same build first
            shutil.rmtree(tmp, ignore_errors=True)
            return published
        remove_aside(entry)  # an entry without its module (being deleted in place): replaced
        os.replace(tmp, entry)
    return entry / so


def _run_all(steps: list[list[str]], cwd: Path, slots: int) -> list[tuple[list[str], int | None, str]]:
    """(command, exit status, compiler messages) of each of ``steps``, run in their order, ``slots`` at a
    time; once one fails none more starts (status None)."""
    failed = threading.Event()

    def run(cmd: list[str]) -> tuple[list[str], int | None, str]:
        if failed.is_set():
            return cmd, None, ""
        try:
            r = run_command(cmd, cwd=cwd)
        except BaseException:  # the compiler did not start (a full process table): none more does
            failed.set()
            raise
        if r.returncode:
            failed.set()
        return cmd, r.returncode, r.stderr

    with ThreadPoolExecutor(max_workers=max(1, min(slots, len(steps)))) as pool:
        try:
            return list(pool.map(run, steps))
        except BaseException:  # Ctrl-C: the queued compiles do not start either
            failed.set()
            raise


def _fail(tmp: Path, cdir: Path, key: str, label: str, main: str, cmd: list[str], stderr: str) -> None:
    """Keep the generated files under ``cdir/failed-<key>`` and raise CompileError pointing at them."""
    failed = cdir / f"failed-{key[:16]}"
    if failed.exists():
        remove_aside(failed)
    try:
        os.replace(tmp, failed)
    except OSError:
        failed = tmp
    raise CompileError(
        f"the C compiler failed on the generated code of {label}.\n"
        f"  generated C: {failed / main}\n"
        f"  command (in {failed}): {' '.join(shlex.quote(c) for c in cmd)}\n"
        f"compiler output:\n{stderr.strip()}"
    )


def list_entries() -> list[tuple[str, Path, int, float]]:
    """Complete cache entries as (key, path, size in bytes, modification time), newest first."""
    cdir = cache_root() / "c"
    result = []
    if cdir.is_dir():
        for entry in cdir.iterdir():
            if entry.name.startswith(".") or not (entry / "build.json").exists():
                continue
            files = [f for f in entry.iterdir() if f.is_file()]
            result.append(
                (
                    entry.name,
                    entry,
                    sum(f.stat().st_size for f in files),
                    max((f.stat().st_mtime for f in files), default=entry.stat().st_mtime),
                )
            )
    return sorted(result, key=lambda e: -e[3])


def clear(stale_after: float = 3600.0) -> int:
    """Delete every C cache entry, failed build and toolchain probe, moved aside atomically first (see
    ``symgrad.build.cache.clear``); returns the number of entries removed.

    Temporary build directories younger than ``stale_after`` seconds belong to running builds: kept."""
    removed = cache.clear(("c",), stale_after)
    forget_toolchain()
    return removed
