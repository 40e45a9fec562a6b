"""The compiler commands of a C build: the translation units of ``kernels.c``, cffi's wrapper, the link, and
the direct-call extension's one file. Each ``*_steps`` writes its sources into the build directory and
returns (main source file, compile commands to run in parallel in their order, link command)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy

from symgrad import abi
from symgrad.backends.c import units
from symgrad.backends.c.toolchain import PYTHON_INCLUDE, WIDE_FLAG, Toolchain

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


#: Generated C up to this size (bytes) compiles as one translation unit: a unit costs a compiler process and
#: the header once more (~20 ms).
UNIT_BYTES = 16_000
#: Past it, units per core: the compiles run one per core, the longest first, and a core that is done takes
#: the next, so that a costly function (the tet's float32 Hessian takes 1.8x the time of its float64 one)
#: does not leave a core idle. The tet on 2 cores, 1 / 2 / 4 per core: 3 / 6 / 9 units, gcc's time 4.10 /
#: 4.19 / 4.30 s (one unit 4.13), scheduled on 2 cores 2.45 / 2.18 / 2.15 s.
UNITS_PER_CORE = 2


def cores() -> int:
    """The processors this process may run on (its affinity, where the system tells)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def split_units(source: str, cores: int) -> list[tuple[str, int]]:
    """``source`` as translation units, each with the length of the longest section it has a piece of (what
    its flags go by): all of it up to ``UNIT_BYTES``; else its pieces (``units.cut``: one program in one
    dtype each) gathered in file order up to ``len(source) / (cores * UNITS_PER_CORE)`` bytes (and at least
    ``UNIT_BYTES``; on one core, all), pieces of sections built with other flags apart."""
    whole = [(source, max(map(len, source.split("\n" + abi.SECTION_MARK))))]
    if len(source) <= UNIT_BYTES:
        return whole
    head, pieces = units.cut(source)
    if len(pieces) < 2:
        return whole
    target = max(UNIT_BYTES, len(source) // (cores * UNITS_PER_CORE)) if cores > 1 else len(source)
    groups: list[list[units.Piece]] = []
    for piece in pieces:
        last = groups[-1] if groups else None
        if (
            last is None
            or sum(p.size for p in last) + piece.size > target
            or _kind(last[0].section) != _kind(piece.section)
        ):
            groups.append([piece])
        else:
            last.append(piece)
    if len(groups) == 1:
        return whole
    return [(head + "\n" + "\n".join(p.text for p in g), max(p.section for p in g)) for g in groups]


#: A function whose C is longer than this (bytes) is compiled at -O1: gcc's time at -O2/-O3 grows faster than
#: the length of a straight-line body, and such a body gains nothing from them (measured on a 10-atom
#: Lennard-Jones cluster, 500 KB of C: -O3 12.8 s, -O2 11.2 s, -O1 7.7 s of gcc; value_and_vjp 1.52 vs
#: 1.41 us per row). Its loops over rows still vectorize: ``#pragma omp simd`` runs the vectorizer at -O1.
#: Not lower: the Neo-Hookean tet's 160 KB at -O1 builds in 3.0 s instead of 4.8 s of gcc, but its forward
#: then takes 121 ns per row instead of 15.
LONG_SECTION_BYTES = 300_000

#: A function whose C is longer than this (bytes) is compiled at -O0, unless ``SYMGRAD_O0_BYTES`` says
#: otherwise (0: never). At -O1, gcc's time grows about with the square of a C function's length (its
#: register allocation: a Lennard-Jones cluster's hvp, one dtype, 138 KB 2.2 s, 285 KB 10.4 s of CPU), to
#: ~48 s for a 20-atom cluster's 1.9 MB and ~290 s for 30 atoms' 4.4 MB; at -O0 seconds (20 atoms: 8.5 s
#: cold build, everything included), while its kernels run ~3x slower (value_and_vjp, one thread: 1.74 vs
#: 4.98 us a row in float64, 0.90 vs 3.03 in float32). A 10-atom cluster (0.5 MB) stays at -O1.
HUGE_SECTION_BYTES = 1_000_000

#: A unit holding a function longer than this (bytes) keeps gcc's 256-bit vectors even where the toolchain
#: prefers 512 bits: on the tet's 160 KB of C, 512-bit vectors doubled gcc's time (4.8 s -> 9.6 s) and made
#: no kernel faster, while elementwise functions (under 40 KB each in examples/model.py) gain 1.1-2.6x.
WIDE_SECTION_BYTES = 100_000


def huge_section_bytes() -> int:
    """``SYMGRAD_O0_BYTES``, else ``HUGE_SECTION_BYTES``: the length past which a function's C compiles at
    -O0 (0: none does)."""
    text = os.environ.get("SYMGRAD_O0_BYTES", "")
    if not text:
        return HUGE_SECTION_BYTES
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        value = -1
    if value < 0:
        raise ValueError(f"SYMGRAD_O0_BYTES={text!r} is not a number of bytes (0: never compile at -O0)")
    return value


def _level(section: int) -> str:
    """The optimization level of a function whose C is ``section`` bytes long."""
    huge = huge_section_bytes()
    return "-O0" if 0 < huge < section else "-O1" if section > LONG_SECTION_BYTES else "-O3"


def _kind(section: int) -> tuple[str, bool]:
    return _level(section), section > WIDE_SECTION_BYTES


def unit_flags(tc: Toolchain, longest: int) -> list[str]:
    """``tc``'s flags for a unit whose longest section (a kernel's functions) is ``longest`` bytes: -O3 made
    -O1 past ``LONG_SECTION_BYTES`` and -O0 past ``huge_section_bytes()``, and the probe's 512-bit
    preference dropped past ``WIDE_SECTION_BYTES`` (``SYMGRAD_CFLAGS``, after them, still has the last word;
    a width set there is kept)."""
    flags = tc.flags
    if tc.wide and longest > WIDE_SECTION_BYTES:
        flags = tuple(f for f in flags if f != WIDE_FLAG)
    level = _level(longest)
    return [(level if f == "-O3" else f) for f in flags]


def cffi_steps(tmp: Path, source: str, cdef: str, glue: str, tc: Toolchain, name: str, so: str) -> tuple:
    """``kernels.c`` (-O3 and the probed flags, -O1 or -O0 for a unit with a very long function; split into
    units past ``UNIT_BYTES``) and cffi's wrapper (-O1: the cdef's Python glue and ``glue``) compile in
    parallel, the longest units first, then link."""
    import cffi
    from cffi.recompiler import make_c_source

    (tmp / "kernels.c").write_text(source)
    split = split_units(source, cores())
    files = ["kernels.c"] if len(split) == 1 else [f"kernels.{k}.c" for k in range(len(split))]
    if len(split) > 1:
        for file, (text, _) in zip(files, split):
            (tmp / file).write_text(text)
    ffi = cffi.FFI()
    ffi.cdef(cdef + "\n" + SUPPORT_CDEF)
    wrapper = f"{name}.c"
    preamble = "#include <stdint.h>\n" + cdef + "\n" + glue + SUPPORT_SOURCE
    # make_c_source, not emit_c_code: that one prints "generating ...", and redirecting sys.stdout around it
    # is process-wide (threads building at once left it replaced)
    make_c_source(ffi, name, preamble, str(tmp / wrapper), verbose=False)
    omp = ["-fopenmp"] if tc.openmp else []
    omp += list(sanitize_flags())
    objects = [file[:-2] + ".o" for file in files]
    order = sorted(range(len(split)), key=lambda k: -len(split[k][0]))
    steps = [
        [*tc.cc, *unit_flags(tc, split[k][1]), *sanitize_flags(), "-c", "-o", objects[k], files[k]]
        for k in order
    ]
    include = f"-I{PYTHON_INCLUDE}"
    steps.append([*tc.cc, "-O1", "-fPIC", *omp, include, "-c", "-o", "wrapper.o", wrapper])
    link = [*tc.cc, "-shared", *omp, "-o", so, *objects, "wrapper.o", *tc.libs]
    return "kernels.c", steps, link


def numpy_flags() -> list[str]:
    """NumPy's include directory and ``-DSG_NUMPY`` where its C API headers are installed (the direct-call
    extension's ``fresh`` uses them; without them it is built without ``fresh``)."""
    include = numpy.get_include()
    return [f"-I{include}", "-DSG_NUMPY"] if Path(include, "numpy", "arrayobject.h").is_file() else []


def extension_steps(tmp: Path, source: str, tc: Toolchain, name: str, so: str) -> tuple:
    """One C file that includes Python.h (and NumPy's C API headers: ``numpy_flags``), compiled with the
    probed flags (no OpenMP: it has no loops)."""
    (tmp / "module.c").write_text(source)
    flags = [f for f in tc.flags if f != "-fopenmp"]
    step = [
        *tc.cc,
        *flags,
        *sanitize_flags(),
        f"-DSG_MODULE={name}",
        f"-I{PYTHON_INCLUDE}",
        *numpy_flags(),
        "-c",
        "-o",
        "module.o",
        "module.c",
    ]
    return "module.c", [step], [*tc.cc, "-shared", *sanitize_flags(), "-o", so, "module.o"]
