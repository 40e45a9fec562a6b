"""The C build's translation units: ``kernels.c`` cut into one program in one dtype per piece (what names
what stays together, a file-level directive keeps its section whole, braces in comments and strings do not
cut), units that never mix compile flags, and compiles run a bounded number at a time, the longest first."""

from __future__ import annotations

import _thread
import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad import abi
from symgrad.backends.c import cffi_build, commands, units
from symgrad.errors import CompilerUnavailable

try:
    TOOLCHAIN = cffi_build.toolchain()
except CompilerUnavailable as exc:  # pragma: no cover - machines without a compiler
    pytest.skip(f"no C toolchain: {exc}", allow_module_level=True)

HEAD = "#include <stdint.h>\n#define SG_NOINLINE __attribute__((noinline))\n/* header */\n"


def program(name: str, ctype: str) -> str:
    """One program in one dtype as the C emitter writes it: a static loop, the entry, the pointer entry."""
    return (
        f"/* {name}: rows */\nstatic SG_NOINLINE void sg_rows_{name}(int64_t lo, int64_t hi, "
        f"const {ctype} *x, {ctype} *out)\n{{\n    for (int64_t i = lo; i < hi; ++i) {{\n"
        "        out[i] = 2*x[i];  /* a } */\n"
        f"    }}\n}}\n\n/* {name} */\nvoid {name}(int64_t n, const {ctype} *x, {ctype} *out)\n{{\n"
        f"    sg_rows_{name}(0, n, x, out);\n}}\n\n/* {name}: pointers */\n"
        f"void {name}__ptrs(int64_t n, void *const *p)\n{{\n    {name}(n, p[0], p[1]);\n}}"
    )


def section(title: str, body: str) -> str:
    return f"{abi.SECTION_MARK}{title} ----\n   formula: {{ x; }} */\n{body}\n"


def compiles(tmp_path: Path, text: str, name: str = "unit.c") -> subprocess.CompletedProcess:
    (tmp_path / name).write_text(text)
    command = [*TOOLCHAIN.cc, "-fsyntax-only", "-Werror=implicit-function-declaration", name]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)


def without_line_directives(text: str) -> str:
    return re.sub(r'#line \d+ "kernels\.c"\n', "", text)


def test_pieces_are_one_program_in_one_dtype_and_compile_alone(tmp_path):
    """Each piece holds one program's loop, entry and pointer entry, compiles beside the header alone, and the
    pieces hold every line of the sections, in order."""
    body = "\n\n".join(
        program(f"f__{p}_{s}", t) for s, t in (("f64", "double"), ("f32", "float")) for p in "ab"
    )
    source = HEAD + "\n" + section("f", body) + "\n" + section("g", program("g__a_f64", "double"))
    head, pieces = units.cut(source)
    assert head == HEAD
    defined = [sorted(re.findall(r"void (\w+__ptrs)", p.text)) for p in pieces]
    assert defined == [
        ["f__a_f64__ptrs"],
        ["f__b_f64__ptrs"],
        ["f__a_f32__ptrs"],
        ["f__b_f32__ptrs"],
        ["g__a_f64__ptrs"],
    ]
    for k, piece in enumerate(pieces):
        r = compiles(tmp_path, head + "\n" + piece.text, f"piece{k}.c")
        assert r.returncode == 0, r.stderr
    joined = "".join(without_line_directives(p.text) for p in pieces)
    assert joined.replace("\n", "") == source[len(HEAD) + 1 :].replace("\n", "")
    assert [p.section for p in pieces] == [len(section("f", body))] * 4 + [
        len(section("g", program("g__a_f64", "double")))
    ]


def test_definitions_that_share_a_static_stay_together(tmp_path):
    """A static table and helper used by two programs: both programs, the table and the helper form one piece
    (cut apart, one unit would lack the helper)."""
    shared = (
        "static const double sg_table[2] = {1.0, 2.0};\n"
        "static double sg_helper(double v) { return sg_table[0]*v; }\n"
    )
    uses = program("h__a_f64", "double").replace("out[i] = 2*x[i];", "out[i] = sg_helper(x[i]);")
    source = HEAD + "\n" + section("h", shared + uses + "\n\n" + uses.replace("h__a_f64", "h__b_f64"))
    _, pieces = units.cut(source)
    assert len(pieces) == 1
    assert compiles(tmp_path, HEAD + "\n" + pieces[0].text).returncode == 0


def test_a_file_level_directive_keeps_its_section_whole():
    """A ``#define`` between definitions may apply to what follows it: that section stays one piece, while a
    ``#pragma`` inside a body does not stop the cut."""
    inside = program("k__a_f64", "double").replace("    for (", "#pragma omp simd\n    for (")
    directive = section("k", inside + "\n#define K 2\n" + program("k__b_f64", "double"))
    plain = section("m", inside + "\n\n" + program("m__b_f64", "double").replace("k__a", "m__a"))
    _, pieces = units.cut(HEAD + "\n" + directive + "\n" + plain)
    assert [len(re.findall(r"__ptrs\(", p.text)) for p in pieces] == [2, 1, 1]


def test_braces_and_semicolons_in_comments_and_strings_do_not_cut(tmp_path):
    """Braces in comments (the emitter's notes quote formulas) and in strings neither cut a definition nor
    join two: two independent definitions that hold some are two pieces that compile alone."""
    body = (
        'const char *s__a_f64__ptrs(void)\n{\n    return "a; { b";  /* { */\n}\n\n'
        "void s__b_f64__ptrs(int64_t n, void *const *p)\n{\n    (void)n; (void)p; /* { x; */\n"
        "    // {\n}"
    )
    _, pieces = units.cut(HEAD + "\n" + section("s", body))
    assert len(pieces) == 2
    for piece in pieces:
        assert compiles(tmp_path, HEAD + "\n" + piece.text).returncode == 0


@pytest.mark.parametrize("cores", [1, 2])
def test_units_never_mix_sections_built_with_other_flags(monkeypatch, cores):
    """Pieces of a section past huge_section_bytes() (-O0), of one past LONG_SECTION_BYTES (-O1) and of a
    short one (-O3) never share a unit, on one core too, and each unit's flags go by the longest section it
    has a piece of."""
    monkeypatch.setattr(commands, "UNIT_BYTES", 1)
    monkeypatch.delenv("SYMGRAD_O0_BYTES", raising=False)
    bodies = {name: "\n\n".join(program(f"{name}__{p}_f64", "double") for p in "abcdef"[:n]) for name, n in
              (("t", 2), ("l", 4), ("h", 6))}  # fmt: skip
    sections = {name: section(name, body) for name, body in bodies.items()}
    monkeypatch.setattr(commands, "LONG_SECTION_BYTES", len(sections["t"]) + 1)
    monkeypatch.setattr(commands, "HUGE_SECTION_BYTES", len(sections["l"]) + 1)
    split = commands.split_units(HEAD + "\n" + "\n".join(sections.values()), cores)
    assert len(split) >= 3
    levels = {"t": "-O3", "l": "-O1", "h": "-O0"}
    for text, longest in split:
        (name,) = set(re.findall(r"void ([tlh])__\w+__ptrs", text))
        assert longest == len(sections[name])
        flags = commands.unit_flags(TOOLCHAIN, longest)
        assert [f for f in flags if f.startswith("-O")] == [levels[name]], flags


def test_symgrad_o0_bytes_moves_or_turns_off_the_o0_tier_and_keys_the_build(monkeypatch):
    """``SYMGRAD_O0_BYTES``: the length past which a function compiles at -O0 (0: never); it is part of the
    build key (a build made under another setting is not loaded for this one); a bad value is an error that
    names the variable."""
    from symgrad.backends.c.cffi_build import build_key

    monkeypatch.delenv("SYMGRAD_O0_BYTES", raising=False)
    default_key = build_key("int x;", "", TOOLCHAIN)
    assert "-O0" in commands.unit_flags(TOOLCHAIN, commands.HUGE_SECTION_BYTES + 1)
    monkeypatch.setenv("SYMGRAD_O0_BYTES", "0")
    assert "-O1" in commands.unit_flags(TOOLCHAIN, 10**9)
    assert build_key("int x;", "", TOOLCHAIN) != default_key
    monkeypatch.setenv("SYMGRAD_O0_BYTES", "2e5")
    assert "-O0" in commands.unit_flags(TOOLCHAIN, 200_001)
    assert "-O3" in commands.unit_flags(TOOLCHAIN, 100)
    for bad in ("lots", "-1"):
        monkeypatch.setenv("SYMGRAD_O0_BYTES", bad)
        with pytest.raises(ValueError, match="SYMGRAD_O0_BYTES"):
            commands.unit_flags(TOOLCHAIN, 100)


def test_compiles_run_a_few_at_a_time_in_order_and_stop_after_a_failure(monkeypatch, tmp_path):
    """``slots`` compiles at most run at once, started in the given order (the longest first); once one fails
    none more starts, and its messages are reported."""
    lock, active, peak, started = threading.Lock(), [0], [0], []

    def fake(cmd, cwd=None):
        with lock:
            started.append(cmd[0])
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return subprocess.CompletedProcess(cmd, 1 if cmd[0] == "bad" else 0, "", f"{cmd[0]} said")

    monkeypatch.setattr(cffi_build, "run_command", fake)
    steps = [[f"u{k}"] for k in range(7)]
    results = cffi_build._run_all(steps, tmp_path, 2)
    assert peak[0] == 2 and started == [f"u{k}" for k in range(7)]
    assert [rc for _, rc, _ in results] == [0] * 7
    started.clear()
    results = cffi_build._run_all([["u0"], ["bad"], ["u2"], ["u3"], ["u4"], ["u5"]], tmp_path, 2)
    statuses = [rc for _, rc, _ in results]
    assert statuses[1] == 1 and results[1][2] == "bad said" and statuses[-1] is None
    assert "u5" not in started


def test_an_interrupted_build_starts_no_more_compiles(monkeypatch, tmp_path):
    """A compile that raises (the compiler could not start) and Ctrl-C in the main thread leave the queued
    compiles unstarted."""
    started = []

    def fake(cmd, cwd=None):
        started.append(cmd[0])
        if cmd[0] == "u0":
            time.sleep(0.05)
            raise KeyboardInterrupt
        time.sleep(0.2)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(cffi_build, "run_command", fake)
    with pytest.raises(KeyboardInterrupt):
        cffi_build._run_all([[f"u{k}"] for k in range(6)], tmp_path, 2)
    assert started == ["u0", "u1"]
    started.clear()

    def interrupting(cmd, cwd=None):  # as Ctrl-C does: KeyboardInterrupt in the main thread
        started.append(cmd[0])
        if cmd[0] == "u0":
            _thread.interrupt_main()
        time.sleep(0.2)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(cffi_build, "run_command", interrupting)
    with pytest.raises(KeyboardInterrupt):
        cffi_build._run_all([[f"u{k}"] for k in range(6)], tmp_path, 2)
    assert started[0] == "u0" and set(started) <= {"u0", "u1"}  # (u1 may have started before the interrupt)


def test_a_function_built_at_o0_gives_the_numpy_targets_values(monkeypatch, tmp_path):
    """``SYMGRAD_O0_BYTES=1``: every function builds at -O0 (what a very long one gets), with the same
    results as the NumPy target (float64: rtol 1e-12; -O0 calls scalar libm where -O3 calls libmvec)."""
    from symgrad.backends import get_backend_name

    monkeypatch.setenv("SYMGRAD_O0_BYTES", "1")
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    ran = []
    run_command = cffi_build.run_command

    def recording(cmd, *args, **kwargs):
        ran.append(cmd)
        return run_command(cmd, *args, **kwargs)

    monkeypatch.setattr(cffi_build, "run_command", recording)

    @sg.function
    def o0_energy(p: sg.Vector(3), k):
        r = sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2)
        return sg.softplus(k * (r - 1)) + sg.where(p[0] > 0, sg.log(1 + p[0]), p[0] ** 2)

    rng = np.random.default_rng(0)
    p, k, cot = rng.normal(size=(50, 3)), rng.normal(size=50), rng.normal(size=50)
    c = o0_energy.compiled().value_and_vjp(p, k, cot)
    kernels = [cmd for cmd in ran if "-c" in cmd and str(cmd[-1]).startswith("kernels")]
    assert kernels and all("-O0" in cmd and "-O3" not in cmd for cmd in kernels), kernels
    chosen = get_backend_name()
    sg.set_backend("numpy")
    try:
        reference = o0_energy.value_and_vjp(p, k, cot)
    finally:
        sg.set_backend(chosen)
    np.testing.assert_allclose(c[0], reference[0], rtol=1e-12)
    for got, want in zip(c[1], reference[1]):
        np.testing.assert_allclose(got, want, rtol=1e-12)
