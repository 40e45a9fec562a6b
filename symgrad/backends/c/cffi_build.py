"""Compile generated C into an importable cffi module, through a content-hashed, multi-process-safe cache.

No setuptools: cffi only writes its wrapper (``ffi.emit_c_code``), then we run the compiler ourselves with
exact flags. The cache entry ``<cache>/c/<key>/`` is built in a private temporary directory and renamed
into place, so concurrent builds of the same model all succeed and nobody imports half a file; an entry
that fails to import is deleted and rebuilt. The key covers everything that changes the binary: the C
text, the cdef, the compiler and its version, the flags, the CPU (``-march=native``), the Python ABI and
the cffi/numpy versions. ``load_extension`` builds a plain CPython extension (the backend's direct call,
``symgrad/backends/c/direct.py``) through the same cache.

The flags come from ``symgrad.backends.c.toolchain`` (probed once per machine); no compiler at all raises
``CompilerUnavailable`` so the caller can fall back to NumPy. ``SYMGRAD_SANITIZE=1`` builds every module
with AddressSanitizer and UBSan (run Python with libasan preloaded, see ``make sanitize``).

This module must not import SymPy: the runtime loads compiled packages with it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

from symgrad import abi
from symgrad.backends.c.toolchain import (
    EXT_SUFFIX,
    PYTHON_INCLUDE,
    Toolchain,
    debug_command,
    forget_toolchain,
    run_command,
    toolchain,
)
from symgrad.build.cache import cache_root, in_cache
from symgrad.debug import debug, say
from symgrad.errors import CompileError

__all__ = ["load", "load_extension", "list_entries", "clear", "build_key", "module_name", "toolchain"]

#: The build commands and module layout are this file and the toolchain probe: their text is in every key.
BUILD_SOURCE_DIGEST = hashlib.sha256(
    Path(__file__).read_bytes() + Path(__file__).with_name("toolchain.py").read_bytes()
).hexdigest()

#: Appended to every module: thread control for the OpenMP loops (no-ops without OpenMP).
SUPPORT_SOURCE = """
#line 1 "<symgrad runtime support>"
#if defined(_OPENMP)
#include <omp.h>
void sg_set_num_threads(int k) { omp_set_num_threads(k); }
int sg_get_max_threads(void) { return omp_get_max_threads(); }
#else
void sg_set_num_threads(int k) { (void)k; }
int sg_get_max_threads(void) { return 1; }
#endif
"""
SUPPORT_CDEF = "void sg_set_num_threads(int);\nint sg_get_max_threads(void);"


def _versions() -> str:
    import _cffi_backend
    import numpy

    return f"cffi {_cffi_backend.__version__} numpy {numpy.__version__}"


def sanitize_flags() -> tuple[str, ...]:
    """``SYMGRAD_SANITIZE=1``: AddressSanitizer and UBSan (any report aborts) in every module (run with
    libasan preloaded)."""
    if os.environ.get("SYMGRAD_SANITIZE", "0") in ("", "0"):
        return ()
    return (
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined",
        "-fno-omit-frame-pointer",
        "-g",
    )


def build_key(source: str, cdef: str, tc: Toolchain) -> str:
    h = hashlib.sha256()
    for part in (
        BUILD_SOURCE_DIGEST,
        source,
        cdef,
        SUPPORT_SOURCE,
        tc.identity(),
        " ".join(sanitize_flags()),
        EXT_SUFFIX,
        PYTHON_INCLUDE,
        _versions(),
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def module_name(key: str) -> str:
    return f"_sg_{key[:16]}"


def _so_name(key: str) -> str:
    return module_name(key) + EXT_SUFFIX


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


def _remove(path: Path) -> None:
    """Move ``path`` aside atomically, then delete it (a reader sees it whole or not at all)."""
    try:
        trash = Path(tempfile.mkdtemp(dir=path.parent, prefix=".trash-"))
        os.replace(path, trash / "x")
        shutil.rmtree(trash, ignore_errors=True)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def load(source: str, cdef: str, label: str = "kernels.c", glue: str = "") -> ModuleType:
    """The cffi module (``.ffi``, ``.lib``) for ``source``, from the cache or freshly built.

    ``cdef`` declares what Python calls; ``glue`` is C compiled into cffi's wrapper beside it (the C
    backend's entry table). ``label`` names the model in messages. Raises ``CompilerUnavailable`` (no
    toolchain) or ``CompileError`` (the compiler rejected the generated code)."""
    tc = toolchain()
    key = build_key(source, cdef + "\n" + glue, tc)
    return _cached(key, label, tc, lambda tmp: _cffi_steps(tmp, source, cdef, glue, tc, key))


def load_extension(source: str, label: str) -> ModuleType:
    """A plain CPython extension module compiled from C ``source``, through the same cache as ``load``.

    The source names its init function ``SG_CAT(PyInit_, SG_MODULE)`` and its module ``SG_STR(SG_MODULE)``:
    the build defines those macros and ``SG_MODULE`` (the module name, from the key)."""
    tc = toolchain()
    key = build_key(source, "<CPython extension>", tc)
    return _cached(key, label, tc, lambda tmp: _extension_steps(tmp, source, tc, key))


def _cached(key: str, label: str, tc: Toolchain, prepare) -> ModuleType:
    name = module_name(key)
    if name in sys.modules:
        return sys.modules[name]
    return in_cache(lambda root: _load_from(root / "c", key, label, tc, prepare))


def _load_from(cdir: Path, key: str, label: str, tc: Toolchain, prepare) -> ModuleType:
    cdir.mkdir(parents=True, exist_ok=True)
    name = module_name(key)
    entry = cdir / key
    for attempt in range(2):
        so = entry / _so_name(key)
        if not so.exists():
            if entry.exists():  # an entry without its module (deleted by hand, or a crash)
                _remove(entry)
            _build(key, cdir, label, tc, prepare)
        try:
            _verify(entry, so)  # dlopen of a truncated .so can crash the process (SIGBUS)
            return _import(name, so)
        except ImportError as exc:
            if attempt:
                raise CompileError(
                    f"symgrad: the compiled module for {label} does not import ({exc}); built in {entry}"
                ) from None
            if debug(1):
                say(f"cache entry {entry} is broken ({exc}); rebuilding")
            _remove(entry)
    raise AssertionError("unreachable")


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


def _build(key: str, cdir: Path, label: str, tc: Toolchain, prepare) -> None:
    """Compile in a private directory, then rename it to ``cdir/key`` (atomic publication).

    ``prepare(tmp)`` writes the sources into ``tmp`` and returns (main source file, compile commands, run
    in parallel, link command)."""
    tmp = Path(tempfile.mkdtemp(dir=cdir, prefix=".tmp-"))
    try:
        _build_in(tmp, key, cdir, label, tc, *prepare(tmp))
    except CompileError:  # its message points at the kept generated files
        raise
    except BaseException:  # a full disk or Ctrl-C: no half-built directory stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise


#: Generated C past this size (bytes) is compiled as several translation units, one per core at most.
UNIT_BYTES = 500_000


def split_units(source: str, units: int) -> list[str]:
    """``source`` as up to ``units`` translation units of similar size: its header (what precedes the first
    line that starts with ``abi.SECTION_MARK``) followed by consecutive sections, each section under a
    ``#line`` directive so that compiler messages name the lines of ``kernels.c``."""
    mark = "\n" + abi.SECTION_MARK
    head, *sections = source.split(mark)
    if units <= 1 or len(sections) < 2:
        return [source]
    line = head.count("\n") + 2  # the line of the first section's mark in kernels.c
    placed = []
    for section in sections:
        placed.append(f'#line {line} "kernels.c"\n{abi.SECTION_MARK}{section}')
        line += section.count("\n") + 1
    total, offset = sum(map(len, sections)), 0
    groups: list[list[str]] = [[] for _ in range(units)]
    for text, section in zip(placed, sections):  # by each section's offset in kernels.c: similar sizes
        groups[min(units - 1, offset * units // total)].append(text)
        offset += len(section)
    return [head + "\n" + "\n".join(group) for group in groups if group]


def _cffi_steps(tmp: Path, source: str, cdef: str, glue: str, tc: Toolchain, key: str) -> tuple:
    """``kernels.c`` (-O3 and the probed flags; split into units past ``UNIT_BYTES``) and cffi's wrapper (-O1:
    the cdef's Python glue and ``glue``) compile in parallel, then link."""
    import cffi

    name = module_name(key)
    (tmp / "kernels.c").write_text(source)
    units = split_units(source, min(os.cpu_count() or 1, 1 + len(source) // UNIT_BYTES))
    files = ["kernels.c"] if len(units) == 1 else [f"kernels.{k}.c" for k in range(len(units))]
    if len(units) > 1:
        for file, text in zip(files, units):
            (tmp / file).write_text(text)
    ffi = cffi.FFI()
    ffi.cdef(cdef + "\n" + SUPPORT_CDEF)
    ffi.set_source(name, "#include <stdint.h>\n" + cdef + "\n" + glue + SUPPORT_SOURCE)
    wrapper = f"{name}.c"
    with contextlib.redirect_stdout(io.StringIO()):  # cffi prints "generating ..."
        ffi.emit_c_code(str(tmp / wrapper))
    omp = ["-fopenmp"] if tc.openmp else []
    omp += list(sanitize_flags())
    objects = [file[:-2] + ".o" for file in files]
    steps = [[*tc.cc, *tc.flags, *sanitize_flags(), "-c", "-o", o, f] for o, f in zip(objects, files)]
    include = f"-I{PYTHON_INCLUDE}"
    steps.append([*tc.cc, "-O1", "-fPIC", *omp, include, "-c", "-o", "wrapper.o", wrapper])
    link = [*tc.cc, "-shared", *omp, "-o", _so_name(key), *objects, "wrapper.o", *tc.libs]
    return "kernels.c", steps, link


def _extension_steps(tmp: Path, source: str, tc: Toolchain, key: str) -> tuple:
    """One C file that includes Python.h, compiled with the probed flags (no OpenMP: it has no loops)."""
    (tmp / "module.c").write_text(source)
    flags = [f for f in tc.flags if f != "-fopenmp"]
    step = [
        *tc.cc,
        *flags,
        *sanitize_flags(),
        f"-DSG_MODULE={module_name(key)}",
        f"-I{PYTHON_INCLUDE}",
        "-c",
        "-o",
        "module.o",
        "module.c",
    ]
    return "module.c", [step], [*tc.cc, "-shared", *sanitize_flags(), "-o", _so_name(key), "module.o"]


def _build_in(
    tmp: Path, key: str, cdir: Path, label: str, tc: Toolchain, main: str, steps: list, link: list
) -> None:
    started = time.perf_counter()
    for cmd in steps:
        debug_command(cmd)
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
        )
        for cmd in steps
    ]
    errors = [p.communicate()[1] for p in procs]
    results = [(cmd, p.returncode, err) for cmd, p, err in zip(steps, procs, errors)]
    if all(rc == 0 for _, rc, _ in results):
        r = run_command(link, cwd=tmp)
        results.append((link, r.returncode, r.stderr))
    failed_step = next(((cmd, err) for cmd, rc, err in results if rc != 0), None)
    if failed_step is not None:
        if "No space left on device" in failed_step[1] or "Disk quota exceeded" in failed_step[1]:
            raise OSError(errno.ENOSPC, f"the C compiler could not write its output in {tmp}")
        _fail(tmp, cdir, key, label, main, *failed_step)
    (tmp / "build.json").write_text(
        json.dumps(
            {
                "key": key,
                "label": label,
                "so_sha256": _digest(tmp / _so_name(key)),
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
        if not (entry / _so_name(key)).exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process published the same build first


def _fail(tmp: Path, cdir: Path, key: str, label: str, main: str, cmd: list[str], stderr: str) -> None:
    """Keep the generated files under ``cdir/failed-<key>`` and raise CompileError pointing at them."""
    failed = cdir / f"failed-{key[:16]}"
    if failed.exists():
        _remove(failed)
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
    """Delete every cache entry, failed build and toolchain probe; returns the number of entries removed.

    Temporary build directories younger than ``stale_after`` seconds belong to running builds: kept."""
    cdir = cache_root() / "c"
    if not cdir.is_dir():
        return 0
    removed = 0
    now = time.time()
    for child in cdir.iterdir():
        if child.name.startswith((".tmp-", ".trash-")) and now - child.stat().st_mtime < stale_after:
            continue
        if child.is_dir():
            removed += (child / "build.json").exists() or child.name.startswith("failed-")
            _remove(child)
        else:
            child.unlink(missing_ok=True)
    forget_toolchain()
    return removed
