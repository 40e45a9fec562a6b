"""The C toolchain, probed once per machine: which compiler, and do ``-march=native``, ``-fopenmp`` and
glibc's libmvec work with it?

Each feature is tried with a test compile (and a load, so missing libraries show up); whatever fails is left
out of the flags. The result is cached as ``<cache>/c/.toolchain-<id>.json``, keyed by the compiler binary,
the CPU, the Python headers and the environment switches, so later processes pay only a ``stat``. That record
holds what the probe found (which flags work, OpenMP, the libmvec tier, the version text) and the identity of
the compiler it is about, checked on every read; never a command: the compiler that runs is always the one
``CC``/``PATH`` name in this process.

Environment: ``CC`` (compiler command), ``SYMGRAD_CFLAGS`` (extra flags), ``SYMGRAD_NATIVE=0`` (no
``-march=native``), ``SYMGRAD_OPENMP=0`` (no threads), ``SYMGRAD_VECTOR_WIDTH=256`` (gcc's own vector width
on an AVX-512 CPU, see ``_wide_vectors``), ``SYMGRAD_DEBUG=2`` (print every compiler command).
This module must not import SymPy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from symgrad import abi
from symgrad.build.cache import cache_root
from symgrad.debug import debug, say
from symgrad.errors import CompilerUnavailable

#: Python's header directory and extension suffix, read once at import: CPython 3.11's first ``sysconfig``
#: query is not thread-safe (concurrent first calls saw None).
PYTHON_INCLUDE: str = sysconfig.get_paths()["include"]
EXT_SUFFIX: str = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
#: The probe and the base flags are this file: its text is part of every probe id.
PROBE_SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
BASE_FLAGS = ("-O3", "-fPIC", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-fopenmp-simd")
#: For a compiler that rejects one of BASE_FLAGS.
PLAIN_FLAGS = ("-O2", "-fPIC")
#: 512-bit vectors where -march=native has AVX-512 and libmvec's AVX-512 variants link (``_wide_vectors``).
WIDE_FLAG = "-mprefer-vector-width=512"


@dataclass(frozen=True)
class Toolchain:
    cc: tuple[str, ...]  # compiler command (from $CC, else cc/gcc/clang; never from the cache)
    version: str  # first line of `cc --version`
    target: str  # what -march=native expands to ('' when not used)
    flags: tuple[str, ...]  # compile flags
    libs: tuple[str, ...]  # link flags
    openmp: bool
    libmvec: int  # 0, 1 (glibc >= 2.22 set) or 2 (glibc >= 2.35 set)
    wide: bool  # WIDE_FLAG in flags: 512-bit vectors and libmvec's AVX-512 variants

    def identity(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


_toolchain: tuple[str, Toolchain] | None = None  # (probe id, toolchain) of this process
_unusable: dict[str, CompilerUnavailable] = {}  # probe id -> why it failed, in this process


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


@functools.cache
def _cpu_id() -> str:
    """The CPU model and feature flags: part of the key when -march=native is used."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read(65536)
        keep = [
            line
            for line in info.splitlines()
            if line.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part")
        ]
        return "\n".join(dict.fromkeys(keep))
    except OSError:
        import platform

        return f"{platform.machine()} {platform.processor()}"


def cache_dir() -> Path:
    path = cache_root() / "c"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_command(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    debug_command(cmd)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace")


def debug_command(cmd: list[str]) -> None:
    if debug(2):
        say(" ".join(shlex.quote(str(c)) for c in cmd))


def _compiler_identity(cc: list[str]) -> dict:
    """The command and its binary (size, modification time, inode): what a probe record is about."""
    st = os.stat(cc[0])
    return {"command": cc, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": [st.st_dev, st.st_ino]}


def toolchain() -> Toolchain:
    """The probed toolchain; probing runs once per machine and compiler (cached on disk)."""
    global _toolchain
    cc = _compiler_command()
    extra = tuple(shlex.split(os.environ.get("SYMGRAD_CFLAGS", "")))
    compiler = _compiler_identity(cc)
    probe_id = hashlib.sha256(
        json.dumps(
            [
                PROBE_SOURCE_DIGEST,
                compiler,
                extra,
                _cpu_id(),
                PYTHON_INCLUDE,
                os.environ.get("SYMGRAD_OPENMP", "1"),
                os.environ.get("SYMGRAD_NATIVE", "1"),
                os.environ.get("SYMGRAD_VECTOR_WIDTH", ""),
            ]
        ).encode()
    ).hexdigest()[:24]
    if _toolchain is not None and _toolchain[0] == probe_id:
        return _toolchain[1]
    if probe_id in _unusable:  # probed in this process and failed: do not pay for it again
        raise _unusable[probe_id]
    cache_file = cache_dir() / f".toolchain-{probe_id}.json"
    found = _read_record(cache_file, compiler)
    if found is None:
        try:
            found = _probe(cc, extra)
        except CompilerUnavailable as exc:
            _unusable[probe_id] = exc
            raise
        _atomic_write(cache_file, json.dumps({"compiler": compiler, **found}, indent=1))
    tc = _assemble(cc, extra, found)
    _toolchain = (probe_id, tc)
    return tc


#: A probe record: the compiler it is about and what the probe found, by type; nothing else is accepted.
_RECORD = {
    "compiler": dict,
    "version": str,
    "target": str,
    "base": bool,
    "native": bool,
    "openmp": bool,
    "libmvec": int,
    "wide": bool,
}


def _read_record(path: Path, compiler: dict) -> dict | None:
    """The findings recorded in ``path`` about ``compiler``; None when missing, malformed, holding anything
    else than ``_RECORD`` (an older format's command, say) or about another compiler."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or set(data) != set(_RECORD):
        return None
    if any(type(data[k]) is not t for k, t in _RECORD.items()) or data["libmvec"] not in (0, 1, 2):
        return None
    if data.pop("compiler") != compiler:
        return None
    return data


def _assemble(cc: list[str], extra: tuple[str, ...], found: dict) -> Toolchain:
    """The toolchain of compiler ``cc``: flags and libraries from what the probe ``found``, and ``extra``."""
    flags = [*(BASE_FLAGS if found["base"] else PLAIN_FLAGS)]
    if found["native"]:
        flags.append("-march=native")
    if found["wide"]:
        flags.append(WIDE_FLAG)
    flags += extra
    if found["openmp"]:
        flags.append("-fopenmp")
    libmvec = found["libmvec"]
    if libmvec:
        flags.append(f"-DSG_LIBMVEC={libmvec}")
    return Toolchain(
        cc=tuple(cc),
        version=found["version"],
        target=found["target"],
        flags=tuple(flags),
        libs=("-lmvec", "-lm") if libmvec else ("-lm",),
        openmp=found["openmp"],
        libmvec=libmvec,
        wide=found["wide"],
    )


def forget_toolchain() -> None:
    """Probe again on the next ``toolchain()`` call (after the cache was cleared)."""
    global _toolchain
    _toolchain = None
    _unusable.clear()


def _atomic_write(path: Path, text: str) -> None:
    """Best effort: the probe is only remembered to save time, so a full or read-only cache is no error."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


_PROBE_PLAIN = "int sg_probe(void) { return 1; }\n"
_PROBE_OPENMP = """
#include <omp.h>
int sg_probe(void) { int s = 0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < 100; ++i) s += i;
  return s + 0 * omp_get_max_threads(); }
"""


def _libmvec_source(tier: int) -> str:
    """One ``omp simd`` loop per libmvec function of ``tier``, calling it through a declare-simd prototype."""
    funcs = [f for f, needs in abi.LIBMVEC_TIER.items() if needs <= tier]
    lines = ["#include <math.h>", "#include <stdint.h>"]
    for f in funcs:
        two = f in ("pow", "atan2")
        for t, s in (("double", ""), ("float", "f")):
            lines += ["#pragma omp declare simd notinbranch", f"{t} {f}{s}({t}{', ' + t if two else ''});"]
            call = f"{f}{s}(x[i], x[i])" if two else f"{f}{s}(x[i])"
            lines += [
                f"void probe_{f}{s}(int64_t n, const {t} *restrict x, {t} *restrict y) {{",
                "#pragma omp simd",
                f"  for (int64_t i = 0; i < n; ++i) y[i] = {call};",
                "}",
            ]
    return "\n".join(lines) + "\n"


def _try_shared(
    cc: list[str], flags: list[str], libs: list[str], source: str, tmp: Path, name: str
) -> tuple[bool, str, Path]:
    src = tmp / f"{name}.c"
    out = tmp / f"{name}.so"
    src.write_text(source)
    r = run_command([*cc, *flags, "-shared", "-o", str(out), str(src), *libs])
    if r.returncode != 0:
        return False, r.stderr, out
    import ctypes

    try:
        ctypes.CDLL(str(out))  # RTLD_NOW: every symbol (libgomp, libmvec variants) must resolve
    except OSError as exc:
        return False, str(exc), out
    return True, "", out


def _probe(cc: list[str], extra: tuple[str, ...]) -> dict:
    """What works with compiler ``cc``: the ``_RECORD`` fields but the compiler's identity."""
    r = run_command([*cc, "--version"])
    if r.returncode != 0:
        raise CompilerUnavailable(f"{cc[0]} --version failed: {r.stderr.strip()[:300]}")
    version = (r.stdout.splitlines() or ["?"])[0]
    include = Path(PYTHON_INCLUDE)
    if not (include / "Python.h").exists():
        raise CompilerUnavailable(f"Python headers not found ({include}/Python.h); install python3-dev")
    flags = [*BASE_FLAGS]
    with tempfile.TemporaryDirectory(prefix="symgrad-probe-") as d:
        tmp = Path(d)
        base, err, _ = _try_shared(cc, flags, ["-lm"], _PROBE_PLAIN, tmp, "base")
        if not base:  # a compiler without some of the base flags: plain -O2
            flags = [*PLAIN_FLAGS]
            ok, _, _ = _try_shared(cc, flags, ["-lm"], _PROBE_PLAIN, tmp, "plain")
            if not ok:
                raise CompilerUnavailable(f"{cc[0]} cannot build a shared library: {err.strip()[:500]}")
        target = ""
        if os.environ.get("SYMGRAD_NATIVE", "1") != "0":
            r = run_command([*cc, "-march=native", "-###", "-E", "-x", "c", os.devnull])
            lines = [line for line in r.stderr.splitlines() if "cc1" in line and "march" in line]
            if r.returncode == 0 and lines:
                target = lines[0].strip()  # cc1 with every -m option -march=native expands to
                ok, _, _ = _try_shared(cc, [*flags, "-march=native"], ["-lm"], _PROBE_PLAIN, tmp, "native")
                if ok:
                    flags.append("-march=native")
                else:
                    target = ""
        native = "-march=native" in flags
        flags += list(extra)
        openmp = False
        if os.environ.get("SYMGRAD_OPENMP", "1") != "0":
            openmp, _, _ = _try_shared(cc, [*flags, "-fopenmp"], ["-lm"], _PROBE_OPENMP, tmp, "openmp")
            if openmp:
                flags.append("-fopenmp")
        libmvec = 0
        for tier in (2, 1):
            source = _libmvec_source(tier)
            ok, _, so = _try_shared(cc, flags, ["-lmvec", "-lm"], source, tmp, f"mvec{tier}")
            if ok and b"_ZGV" in so.read_bytes():
                libmvec = tier
                break
        wide = _wide_vectors(cc, flags, libmvec, tmp)
    return {
        "version": version,
        "target": target,
        "base": base,
        "native": native,
        "openmp": openmp,
        "libmvec": libmvec,
        "wide": wide,
    }


def _wide_vectors(cc: list[str], flags: list[str], libmvec: int, tmp: Path) -> bool:
    """Whether to prefer 512-bit vectors: -march=native has AVX-512 and the probe's loops then call libmvec's
    AVX-512 variants (``_ZGVe``). gcc's tuning keeps 256 bits on such CPUs (some Intel parts clock down
    under AVX-512), but the libmvec calls are the kernels' cost: softplus value_and_vjp at N=1e6 took 1.9 ms
    for 3.6 at 256 bits (docs/numerics.md, "Vector math"). Off under ``SYMGRAD_VECTOR_WIDTH=256`` and when
    ``SYMGRAD_CFLAGS`` sets a width itself."""
    if not libmvec or "-march=native" not in flags or os.environ.get("SYMGRAD_VECTOR_WIDTH") == "256":
        return False
    if any(f.startswith("-mprefer-vector-width") for f in flags):
        return False
    source = _libmvec_source(libmvec)
    ok, _, so = _try_shared(cc, [*flags, WIDE_FLAG], ["-lmvec", "-lm"], source, tmp, "wide")
    return ok and b"_ZGVe" in so.read_bytes()
