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

import pytest

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


def test_units_never_mix_sections_built_with_other_flags(monkeypatch):
    """Pieces of a section past LONG_SECTION_BYTES (-O1) and of a short one (-O3) never share a unit, and each
    unit's flags go by the longest section it has a piece of."""
    monkeypatch.setattr(commands, "UNIT_BYTES", 1)
    long_body = "\n\n".join(program(f"l__{p}_f64", "double") for p in "abcd")
    short_body = "\n\n".join(program(f"t__{p}_f64", "double") for p in "ab")
    long_section, short_section = section("l", long_body), section("t", short_body)
    monkeypatch.setattr(commands, "LONG_SECTION_BYTES", len(short_section) + 1)
    split = commands.split_units(HEAD + "\n" + short_section + "\n" + long_section, 2)
    assert len(split) > 2
    for text, longest in split:
        names = set(re.findall(r"void ([lt])__\w+__ptrs", text))
        assert len(names) == 1
        assert longest == len(long_section if names == {"l"} else short_section)
        assert ("-O1" in commands.unit_flags(TOOLCHAIN, longest)) == (names == {"l"})


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
