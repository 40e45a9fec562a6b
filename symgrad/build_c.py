"""Compile generated C into an importable cffi module, through a content-hashed, multi-process-safe cache.

No setuptools: cffi only writes its wrapper (``ffi.emit_c_code``), then we run the compiler ourselves with
exact flags. The cache entry ``<cache>/c/<key>/`` is built in a private temporary directory and renamed
into place, so concurrent builds of the same model all succeed and nobody imports half a file; an entry
that fails to import is deleted and rebuilt. The key covers everything that changes the binary: the C
text, the cdef, the compiler and its version, the flags, the CPU (``-march=native``), the Python ABI and
the cffi/numpy versions.

The toolchain is probed once per machine (result cached beside the entries): does ``-march=native``,
``-fopenmp`` and glibc's libmvec work? Anything that does not is left out; no compiler at all raises
``CompilerUnavailable`` so the caller can fall back to NumPy.

This module must not import SymPy: the runtime loads compiled packages with it.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from .backends import BackendUnavailable
from .cache import cache_root
from .errors import CompileError

#: Bump when the probe, the flags or the module layout change.
BUILD_VERSION = "2"
C_TYPES = {"f64": "double", "f32": "float"}
NO_SINCOS = ("-fno-builtin-sin", "-fno-builtin-cos", "-fno-builtin-sinf", "-fno-builtin-cosf")
BASE_FLAGS = ("-O3", "-fPIC", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-fopenmp-simd")

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


class CompilerUnavailable(BackendUnavailable):
    """No working C compiler (or no Python headers) here: the C backend cannot build anything."""


def prototype(name: str, suffix: str, params: list[str]) -> str:
    """``void name(int64_t n, params...)``, wrapped one parameter per line when long."""
    del suffix
    one_line = f"void {name}(int64_t n, {', '.join(params)})"
    if len(one_line) <= 110:
        return one_line
    indent = " " * (len(name) + 6)
    return f"void {name}(int64_t n,\n" + ",\n".join(indent + p for p in params) + ")"


def cdef_from_manifest(manifest: dict) -> str:
    """The cffi cdef of a package's ``kernels.c``, from its manifest (same function set as the emitter)."""
    lines = []
    for suffix, ctype in C_TYPES.items():
        for fn in manifest["functions"]:
            for program, io in fn["programs"].items():
                params = [f"const {ctype} *"] * len(io["inputs"]) + [f"{ctype} *"] * len(io["outputs"])
                ident = fn.get("ident", fn["name"])
                lines.append(f"void {ident}__{program}_{suffix}(int64_t, {', '.join(params)});")
    return "\n".join(sorted(lines))


# -- toolchain --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Toolchain:
    cc: tuple[str, ...]          # compiler command (from $CC, else cc/gcc/clang)
    version: str                 # first line of `cc --version`
    target: str                  # what -march=native expands to ('' when not used)
    flags: tuple[str, ...]       # compile flags
    libs: tuple[str, ...]        # link flags
    openmp: bool
    libmvec: int                 # 0, 1 (glibc >= 2.22 set) or 2 (glibc >= 2.35 set)

    def identity(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


_toolchain: tuple[str, Toolchain] | None = None    # (probe id, toolchain) of this process


def _debug(level: int) -> bool:
    try:
        return int(os.environ.get("SYMGRAD_DEBUG", "0")) >= level
    except ValueError:
        return False


def _compiler_command() -> list[str]:
    env = os.environ.get("CC")
    if env:
        cmd = shlex.split(env)
        if not cmd or shutil.which(cmd[0]) is None:
            raise CompilerUnavailable(f"CC={env!r} is not an executable compiler")
        return [shutil.which(cmd[0]), *cmd[1:]]
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    raise CompilerUnavailable("no C compiler found (install gcc, or set CC)")


@functools.lru_cache(maxsize=None)
def _cpu_id() -> str:
    """The CPU model and feature flags: part of the key when -march=native is used."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read(65536)
        keep = [line for line in info.splitlines() if line.split(":")[0].strip() in ("model name", "flags",
                                                                                     "Features", "CPU part")]
        return "\n".join(dict.fromkeys(keep))
    except OSError:
        import platform
        return f"{platform.machine()} {platform.processor()}"


def _cdir() -> Path:
    path = cache_root() / "c"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    _debug_command(cmd)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace")


def toolchain() -> Toolchain:
    """The probed toolchain; probing runs once per machine and compiler (cached on disk)."""
    global _toolchain
    cc = _compiler_command()
    extra = tuple(shlex.split(os.environ.get("SYMGRAD_CFLAGS", "")))
    st = os.stat(cc[0])
    probe_id = hashlib.sha256(json.dumps(
        [BUILD_VERSION, cc, st.st_size, st.st_mtime_ns, extra, _cpu_id(), sysconfig.get_paths()["include"],
         os.environ.get("SYMGRAD_OPENMP", "1"), os.environ.get("SYMGRAD_NATIVE", "1")]).encode()).hexdigest()[:24]
    if _toolchain is not None and _toolchain[0] == probe_id:
        return _toolchain[1]
    cache_file = _cdir() / f".toolchain-{probe_id}.json"
    try:
        data = json.loads(cache_file.read_text())
        tc = Toolchain(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    except (OSError, ValueError, TypeError):
        tc = _probe(cc, extra)
        _atomic_write(cache_file, json.dumps(asdict(tc), indent=1))
    _toolchain = (probe_id, tc)
    return tc


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


_PROBE_OPENMP = """
#include <omp.h>
int sg_probe(void) { int s = 0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < 100; ++i) s += i;
  return s + 0 * omp_get_max_threads(); }
"""


def _libmvec_source(tier: int) -> tuple[str, list[str]]:
    funcs = ["exp", "log", "sin", "cos", "pow"]
    if tier >= 2:
        funcs += ["tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                  "erf", "erfc", "log1p", "expm1"]
    lines = ["#include <math.h>", "#include <stdint.h>"]
    for f in funcs:
        two = f in ("pow", "atan2")
        for t, s in (("double", ""), ("float", "f")):
            lines += ["#pragma omp declare simd notinbranch", f"{t} {f}{s}({t}{', ' + t if two else ''});"]
            call = f"{f}{s}(x[i], x[i])" if two else f"{f}{s}(x[i])"
            lines += [f"void probe_{f}{s}(int64_t n, const {t} *restrict x, {t} *restrict y) {{",
                      "#pragma omp simd", f"  for (int64_t i = 0; i < n; ++i) y[i] = {call};", "}"]
    return "\n".join(lines) + "\n", funcs


def _try_shared(cc: list[str], flags: list[str], libs: list[str], source: str, tmp: Path, name: str
                ) -> tuple[bool, str, Path]:
    src = tmp / f"{name}.c"
    out = tmp / f"{name}.so"
    src.write_text(source)
    r = _run([*cc, *flags, "-shared", "-o", str(out), str(src), *libs])
    if r.returncode != 0:
        return False, r.stderr, out
    import ctypes
    try:
        ctypes.CDLL(str(out))     # RTLD_NOW: every symbol (libgomp, libmvec variants) must resolve
    except OSError as exc:
        return False, str(exc), out
    return True, "", out


def _probe(cc: list[str], extra: tuple[str, ...]) -> Toolchain:
    r = _run([*cc, "--version"])
    if r.returncode != 0:
        raise CompilerUnavailable(f"{cc[0]} --version failed: {r.stderr.strip()[:300]}")
    version = (r.stdout.splitlines() or ["?"])[0]
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        raise CompilerUnavailable(f"Python headers not found ({include}/Python.h); install python3-dev")
    flags = [*BASE_FLAGS]
    with tempfile.TemporaryDirectory(prefix="symgrad-probe-") as d:
        tmp = Path(d)
        ok, err, _ = _try_shared(cc, flags, ["-lm"], "int sg_probe(void) { return 1; }\n", tmp, "base")
        if not ok:
            flags = ["-O2", "-fPIC"]
            ok, err2, _ = _try_shared(cc, flags, ["-lm"], "int sg_probe(void) { return 1; }\n", tmp, "plain")
            if not ok:
                raise CompilerUnavailable(f"{cc[0]} cannot build a shared library: {err.strip()[:500]}")
        target = ""
        if os.environ.get("SYMGRAD_NATIVE", "1") != "0":
            r = _run([*cc, "-march=native", "-###", "-E", "-x", "c", os.devnull])
            lines = [line for line in r.stderr.splitlines() if "cc1" in line and "march" in line]
            if r.returncode == 0 and lines:
                target = lines[0].strip()      # cc1 with every -m option -march=native expands to
                ok, _, _ = _try_shared(cc, [*flags, "-march=native"], ["-lm"], "int sg_probe(void){return 1;}\n",
                                       tmp, "native")
                if ok:
                    flags.append("-march=native")
                else:
                    target = ""
        flags += list(extra)
        openmp = False
        if os.environ.get("SYMGRAD_OPENMP", "1") != "0":
            openmp, _, _ = _try_shared(cc, [*flags, "-fopenmp"], ["-lm"], _PROBE_OPENMP, tmp, "openmp")
            if openmp:
                flags.append("-fopenmp")
        libmvec = 0
        for tier in (2, 1):
            source, funcs = _libmvec_source(tier)
            ok, _, so = _try_shared(cc, flags, ["-lmvec", "-lm"], source, tmp, f"mvec{tier}")
            if ok and b"_ZGV" in so.read_bytes():
                libmvec = tier
                break
    libs = ["-lmvec", "-lm"] if libmvec else ["-lm"]
    if libmvec:
        # gcc fuses sin(x) and cos(x) into sincos(), which has no vector variant: keep them apart
        flags += [f"-DSG_LIBMVEC={libmvec}", *NO_SINCOS]
    return Toolchain(cc=tuple(cc), version=version, target=target, flags=tuple(flags), libs=tuple(libs),
                     openmp=openmp, libmvec=libmvec)


# -- cache ------------------------------------------------------------------------------------------------

def _versions() -> str:
    import _cffi_backend
    import numpy
    return f"cffi {_cffi_backend.__version__} numpy {numpy.__version__}"


def sanitize_flags() -> tuple[str, ...]:
    """``SYMGRAD_SANITIZE=1``: AddressSanitizer and UBSan in every module (run with libasan preloaded)."""
    if os.environ.get("SYMGRAD_SANITIZE", "0") in ("", "0"):
        return ()
    return ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g")


def build_key(source: str, cdef: str, tc: Toolchain) -> str:
    h = hashlib.sha256()
    for part in (BUILD_VERSION, source, cdef, SUPPORT_SOURCE, tc.identity(), " ".join(sanitize_flags()), sysconfig.get_config_var("EXT_SUFFIX"),
                 sysconfig.get_paths()["include"], _versions()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def module_name(key: str) -> str:
    return f"_sg_{key[:16]}"


def _so_name(key: str) -> str:
    return module_name(key) + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


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


def load(source: str, cdef: str, label: str = "kernels.c") -> ModuleType:
    """The cffi module (``.ffi``, ``.lib``) for ``source``, from the cache or freshly built.

    ``label`` names the model in messages. Raises ``CompilerUnavailable`` (no toolchain) or
    ``CompileError`` (the compiler rejected the generated code)."""
    tc = toolchain()
    key = build_key(source, cdef, tc)
    name = module_name(key)
    if name in sys.modules:
        return sys.modules[name]
    cdir = _cdir()
    entry = cdir / key
    for attempt in range(2):
        so = entry / _so_name(key)
        if not so.exists():
            _build(source, cdef, tc, key, cdir, label)
        try:
            return _import(name, so)
        except ImportError as exc:
            if attempt:
                raise CompileError(f"symgrad: the compiled module for {label} does not import ({exc}); "
                                   f"built in {entry}") from None
            if _debug(1):
                print(f"symgrad: cache entry {entry} is broken ({exc}); rebuilding", file=sys.stderr)
            _remove(entry)
    raise AssertionError("unreachable")


def _build(source: str, cdef: str, tc: Toolchain, key: str, cdir: Path, label: str) -> None:
    """Compile in a private directory, then rename it to ``cdir/key`` (atomic publication).

    ``kernels.c`` (-O3 and the probed flags) and cffi's wrapper (-O1: Python glue only, declaring the
    kernels through the cdef) compile in parallel, then link."""
    import cffi
    name = module_name(key)
    tmp = Path(tempfile.mkdtemp(dir=cdir, prefix=".tmp-"))
    (tmp / "kernels.c").write_text(source)
    ffi = cffi.FFI()
    ffi.cdef(cdef + "\n" + SUPPORT_CDEF)
    ffi.set_source(name, "#include <stdint.h>\n" + cdef + "\n" + SUPPORT_SOURCE)
    wrapper = f"{name}.c"
    with contextlib.redirect_stdout(io.StringIO()):    # cffi prints "generating ..."
        ffi.emit_c_code(str(tmp / wrapper))
    omp = ["-fopenmp"] if tc.openmp else []
    omp += list(sanitize_flags())
    steps = [[*tc.cc, *tc.flags, *sanitize_flags(), "-c", "-o", "kernels.o", "kernels.c"],
             [*tc.cc, "-O1", "-fPIC", *omp, f"-I{sysconfig.get_paths()['include']}", "-c", "-o", "wrapper.o",
              wrapper]]
    link = [*tc.cc, "-shared", *omp, "-o", _so_name(key), "kernels.o", "wrapper.o", *tc.libs]
    started = time.perf_counter()
    for cmd in steps:
        _debug_command(cmd)
    procs = [subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="replace") for cmd in steps]
    errors = [p.communicate()[1] for p in procs]
    results = [(cmd, p.returncode, err) for cmd, p, err in zip(steps, procs, errors)]
    if all(rc == 0 for _, rc, _ in results):
        r = _run(link, cwd=tmp)
        results.append((link, r.returncode, r.stderr))
    failed_step = next(((cmd, err) for cmd, rc, err in results if rc != 0), None)
    if failed_step is not None:
        _fail(tmp, cdir, key, label, *failed_step)
    (tmp / "build.json").write_text(json.dumps(
        {"key": key, "label": label, "commands": [*steps, link],
         "seconds": round(time.perf_counter() - started, 3), "toolchain": asdict(tc), "created": time.time()},
        indent=1))
    for leftover in ("kernels.o", "wrapper.o"):
        (tmp / leftover).unlink(missing_ok=True)
    entry = cdir / key
    try:
        os.replace(tmp, entry)           # atomic: the entry appears complete
    except OSError:
        if not (entry / _so_name(key)).exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)   # another process published the same build first


def _debug_command(cmd: list[str]) -> None:
    if _debug(2):
        print("symgrad: " + " ".join(shlex.quote(str(c)) for c in cmd), file=sys.stderr)


def _fail(tmp: Path, cdir: Path, key: str, label: str, cmd: list[str], stderr: str) -> None:
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
        f"  generated C: {failed / 'kernels.c'}\n"
        f"  command (in {failed}): {' '.join(shlex.quote(c) for c in cmd)}\n"
        f"compiler output:\n{stderr.strip()}")


def list_entries() -> list[tuple[str, Path, int, float]]:
    """Complete cache entries as (key, path, size in bytes, modification time), newest first."""
    cdir = cache_root() / "c"
    result = []
    if cdir.is_dir():
        for entry in cdir.iterdir():
            if entry.name.startswith(".") or not (entry / "build.json").exists():
                continue
            files = [f for f in entry.iterdir() if f.is_file()]
            result.append((entry.name, entry, sum(f.stat().st_size for f in files),
                           max((f.stat().st_mtime for f in files), default=entry.stat().st_mtime)))
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
    global _toolchain
    _toolchain = None
    return removed
