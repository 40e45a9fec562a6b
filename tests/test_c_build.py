"""The C build cache and backend: keys, concurrent builds, broken entries, compiler errors, no compiler,
and the ``run`` contract (materialization, dtype checks, fresh outputs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from symgrad import abi
from symgrad.backends.c import cffi_build as build_c
from symgrad.backends.c import commands
from symgrad.build.cache import cache_root
from symgrad.errors import BackendUnavailable, CompileError, CompilerUnavailable

ROOT = Path(__file__).resolve().parents[1]

try:
    TOOLCHAIN = build_c.toolchain()
except CompilerUnavailable as exc:  # pragma: no cover - machines without a compiler
    pytest.skip(f"no C toolchain: {exc}", allow_module_level=True)

CDEF = "void twice__forward_f64(int64_t, const double *, double *);"


def source(salt: float) -> str:
    """A tiny hand-written kernel file; ``salt`` makes a distinct cache key per test."""
    return textwrap.dedent(f"""\
        #include <stdint.h>
        void twice__forward_f64(int64_t n, const double *restrict x, double *restrict out)
        {{
            for (int64_t i = 0; i < n; ++i) out[i] = 2.0*x[i] + {salt!r};
        }}
        """)


CHILD = """
import os, sys, time
import numpy as np
from symgrad.backends.c import cffi_build as build_c
start = os.environ.get("SG_TEST_START")
while start and not os.path.exists(start):
    time.sleep(0.001)
m = build_c.load(sys.argv[1], sys.argv[2], label="child")
x = np.arange(4.0); out = np.empty(4)
m.lib.twice__forward_f64(4, m.ffi.from_buffer("double[]", x), m.ffi.from_buffer("double[]", out))
print(out.tolist())
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory, seeded with this machine's toolchain probe (probing takes ~1 s)."""
    shared = cache_root() / "c"
    root = tmp_path / "cache"
    (root / "c").mkdir(parents=True)
    for probe in shared.glob(".toolchain-*.json"):
        shutil.copy(probe, root / "c" / probe.name)
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(root))
    return root / "c"


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.update(extra or {})
    return env


def run_child(src: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, src, CDEF],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=300,
    )


def entries(cdir: Path) -> list[Path]:
    return [p for p in cdir.iterdir() if p.is_dir() and (p / "build.json").exists()]


# -- keys and warm loads ----------------------------------------------------------------------------------


def test_key_covers_source_cdef_and_toolchain():
    key = build_c.build_key(source(1.0), CDEF, TOOLCHAIN)
    assert key == build_c.build_key(source(1.0), CDEF, TOOLCHAIN)
    assert key != build_c.build_key(source(2.0), CDEF, TOOLCHAIN)
    assert key != build_c.build_key(source(1.0), CDEF + "\n", TOOLCHAIN)
    assert key != build_c.build_key(source(1.0), CDEF, replace(TOOLCHAIN, flags=TOOLCHAIN.flags + ("-O1",)))
    assert key != build_c.build_key(source(1.0), CDEF, replace(TOOLCHAIN, version="gcc 99"))
    assert key != build_c.build_key(source(1.0), CDEF, replace(TOOLCHAIN, target="-march=other"))
    assert build_c.module_name(key) == f"_sg_{key[:16]}"


def test_never_fast_math():
    assert not any("fast-math" in f for f in TOOLCHAIN.flags)
    assert "-fno-math-errno" in TOOLCHAIN.flags and "-fno-trapping-math" in TOOLCHAIN.flags


def test_build_then_warm_load(cache):
    src = source(3.0)
    m = build_c.load(src, CDEF, label="t")
    x, out = np.arange(3.0), np.empty(3)
    m.lib.twice__forward_f64(3, m.ffi.from_buffer("double[]", x), m.ffi.from_buffer("double[]", out))
    assert out.tolist() == [3.0, 5.0, 7.0]
    assert build_c.load(src, CDEF) is m  # same process: the loaded module
    (entry,) = entries(cache)
    stamp = (entry / "build.json").stat().st_mtime_ns
    r = run_child(src)  # another process: a cache hit, no rebuild
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[3.0, 5.0, 7.0, 9.0]"
    assert (entry / "build.json").stat().st_mtime_ns == stamp and len(entries(cache)) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]


def test_concurrent_builds_all_succeed(cache, tmp_path):
    src = source(4.0)
    start = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, src, CDEF],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env({"SG_TEST_START": str(start)}),
        )
        for _ in range(4)
    ]
    time.sleep(1.0)  # let all four import and wait at the start line
    start.write_text("go")
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert out.strip() == "[4.0, 6.0, 8.0, 10.0]"
    assert len(entries(cache)) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]


def test_corrupted_entry_is_rebuilt(cache):
    src = source(5.0)
    assert run_child(src).returncode == 0
    (entry,) = entries(cache)
    so = next(entry.glob("_sg_*.so")) if list(entry.glob("_sg_*.so")) else next(entry.glob("_sg_*"))
    good_size = so.stat().st_size
    so.write_bytes(b"\x7fELF truncated")
    r = run_child(src)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[5.0, 7.0, 9.0, 11.0]"
    (entry,) = entries(cache)
    assert next(entry.glob(so.name)).stat().st_size == good_size


# -- errors -------------------------------------------------------------------------------------------------


def test_compile_error_names_file_and_shows_compiler_output(cache):
    bad = source(6.0).replace("2.0*x[i]", "2.0*x[i] +* undefined_thing")
    with pytest.raises(CompileError) as info:
        build_c.load(bad, CDEF, label="broken_model.py")
    message = str(info.value)
    assert "broken_model.py" in message and "error" in message and "undefined_thing" in message
    path = Path(message.split("generated C: ")[1].split()[0])
    assert path.name == "kernels.c" and path.exists() and "undefined_thing" in path.read_text()
    assert not entries(cache)


def test_no_compiler_raises_backend_unavailable(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(CompilerUnavailable, match="nonexistent") as info:
        build_c.load(source(7.0), CDEF)
    assert isinstance(info.value, BackendUnavailable)


def test_unusable_cache_dir_falls_back_with_one_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = CHILD.replace(
        "m = build_c.load", "import warnings\nwarnings.simplefilter('always')\nm = build_c.load"
    )
    code += "m = build_c.load(sys.argv[1].replace('8.0', '9.0'), sys.argv[2])\n"
    r = subprocess.run(
        [sys.executable, "-c", code, source(8.0), CDEF],
        capture_output=True,
        text=True,
        env=child_env({"SYMGRAD_CACHE_DIR": str(blocker / "sub")}),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[8.0, 10.0, 12.0, 14.0]"
    assert r.stderr.count("not usable") == 1


def test_debug_2_prints_compiler_commands(cache):
    r = run_child(source(10.0), {"SYMGRAD_DEBUG": "2"})
    assert r.returncode == 0, r.stderr
    assert "symgrad: " in r.stderr and "-shared" in r.stderr and "kernels.c" in r.stderr


def test_list_and_clear(cache):
    build_c.load(source(11.0), CDEF)
    build_c.load(source(12.0), CDEF)
    listed = build_c.list_entries()
    assert len(listed) == 2
    for key, path, size, mtime in listed:
        assert path.name == key and size > 1000 and mtime <= time.time() + 1
    assert build_c.clear() == 2
    assert build_c.list_entries() == []


# -- the backend's run() contract ----------------------------------------------------------------------------

MODEL = """
import symgrad as sg

@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-y**2) + sg.log(1 + x**2 * y**2)

@sg.function
def norm3(p: sg.Vector(3), s):
    return sg.sqrt(p[0]**2 + p[1]**2 + p[2]**2) * s

@sg.function
def polar(r, theta):
    return r * sg.cos(theta), r * sg.sin(theta)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    from symgrad.build.compile import compile_model
    from symgrad.build.package import Package

    d = tmp_path_factory.mktemp("model")
    (d / "model.py").write_text(MODEL)
    return Package(compile_model(d / "model.py").path)


@pytest.fixture(scope="module")
def kernels(package):
    from symgrad.backends.c import CBackend

    return CBackend().load(package)


def test_backend_registered():
    from symgrad import backends

    assert "c" in backends.available()


def test_run_matches_numpy_backend(package, kernels):
    from symgrad.backends.numpy import NumPyBackend

    ref = NumPyBackend().load(package)
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        x, y, g = (rng.normal(size=(5, 7)).astype(dtype) for _ in range(3))
        got = kernels.program("blend", "value_and_vjp", dtype)((x, y, g), (5, 7))
        want = ref.program("blend", "value_and_vjp", dtype)((x, y, g), (5, 7))
        for a, b in zip(got, want):
            assert a.dtype == dtype and a.shape == (5, 7)
            np.testing.assert_allclose(a, b, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


def test_run_materializes_broadcast_and_strided_inputs(kernels):
    run = kernels.program("blend", "value_and_vjp", np.float64)
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    y = np.array([0.5, 1.0, 1.5, 2.0])  # broadcast along the batch
    g = 1.0  # a Python scalar
    full = run((x, np.broadcast_to(y, (3, 4)).copy(), np.ones((3, 4))), (3, 4))
    for a, b in zip(run((x, y, g), (3, 4)), full):
        np.testing.assert_array_equal(a, b)
    xt = np.asfortranarray(x)  # not C-contiguous
    for a, b in zip(run((xt, y[None, :], np.ones((1, 1))), (3, 4)), full):
        np.testing.assert_array_equal(a, b)


def test_run_checks_dtype_instead_of_reinterpreting(kernels):
    run64 = kernels.program("blend", "forward", np.float64)
    x32 = np.linspace(-1, 1, 8, dtype=np.float32)  # from_buffer would read 4 doubles out of it
    (out,) = run64((x32, np.ones(8)), (8,))
    (ref,) = run64((x32.astype(np.float64), np.ones(8)), (8,))
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(TypeError, match="float32 or float64"):
        kernels.program("blend", "forward", np.int64)


def test_run_vector_slots_and_fresh_outputs(kernels):
    run = kernels.program("norm3", "value_and_vjp", np.float32)
    p = np.array([[3.0, 4.0, 12.0], [1.0, 2.0, 2.0]], np.float32)
    s = np.array([2.0, 3.0], np.float32)
    g = np.ones(2, np.float32)
    out, grad_p, grad_s = run((p, s, g), (2,))
    np.testing.assert_allclose(out, [26.0, 9.0])
    np.testing.assert_allclose(grad_p, p / np.array([[13.0], [3.0]]) * s[:, None], rtol=1e-6)
    np.testing.assert_allclose(grad_s, [13.0, 3.0])
    assert grad_p.shape == (2, 3) and grad_p.dtype == np.float32
    for r in (out, grad_p, grad_s):
        assert not any(np.shares_memory(r, a) for a in (p, s, g))


def test_run_empty_and_scalar_batches(kernels):
    run = kernels.program("blend", "value_and_vjp", np.float64)
    outs = run((np.empty((0, 3)), np.empty((0, 3)), np.empty((0, 3))), (0, 3))
    assert [o.shape for o in outs] == [(0, 3)] * 3
    outs = run((np.float64(0.5), 2.0, 1.0), ())
    assert [o.shape for o in outs] == [()] * 3
    assert np.isclose(outs[0], np.sin(0.5) * np.exp(-4.0) + np.log(1 + 0.25 * 4.0))


def test_run_copies_an_unaligned_input(kernels):
    run = kernels.program("blend", "value_and_vjp", np.float64)
    raw = np.zeros(8 * 12 + 1, np.uint8)
    x = np.frombuffer(raw.data, np.float64, count=12, offset=1)  # a float64 view at an odd address
    x[...] = np.linspace(-2, 2, 12)
    assert not x.flags.aligned
    for a, b in zip(run((x, 0.5, 1.0), (12,)), run((x.copy(), 0.5, 1.0), (12,))):
        np.testing.assert_array_equal(a, b)


def test_cffi_call_matches_the_direct_call(package, monkeypatch):
    """Where the direct-call extension cannot be built, the kernels run through cffi, with the same
    results."""
    from symgrad.backends import c as c_backend
    from symgrad.backends.c import direct

    rng = np.random.default_rng(1)
    x, y, g = (rng.normal(size=(4, 5)) for _ in range(3))
    p = np.abs(rng.normal(size=(3, 3))).astype(np.float32)
    s = np.ones(3, np.float32)
    cases = [
        ("blend", "value_and_vjp", np.float64, (x, y, g), (4, 5)),
        ("blend", "forward", np.float64, (x, y), (4, 5)),
        ("blend", "value_and_vjp", np.float64, (np.asfortranarray(x), 0.5, g), (4, 5)),
        ("norm3", "forward", np.float32, (p, s), (3,)),
    ]

    def results(*via: str) -> list:
        kernels = c_backend.CBackend().load(package)  # a fresh kernel set: its runs are made now
        runs = [kernels.program(f, prog, dtype) for f, prog, dtype, _, _ in cases]
        assert all(run.__qualname__.split(".")[0] in via for run in runs)
        return [run(args, batch) for run, (_, _, _, args, batch) in zip(runs, cases)]

    assert direct.caller() is not None  # this machine builds it
    want = results("_direct_run", "_fresh_run")  # (per-element programs try ``direct.fresh`` first)
    monkeypatch.setattr(direct, "_caller", [None])
    got = results("_cffi_run")
    for g_results, w_results in zip(got, want):
        for a, b in zip(g_results, w_results):
            np.testing.assert_array_equal(a, b)


def test_direct_call_refuses_bad_buffers(kernels):
    from symgrad.backends.c import direct

    call = direct.caller()
    address = int(kernels.ffi.cast("uintptr_t", kernels.lib.sg_entry(b"blend__forward_f64__ptrs")))
    x, y, out = np.ones(4), np.ones(4), np.zeros(4)
    call(address, 4, 2, 8, x, y, out)
    np.testing.assert_allclose(out, np.sin(1.0) * np.exp(-1.0) + np.log(2.0))
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        call(address, 4, 2, 8, x, y, frozen)  # a result must be writable
    with pytest.raises(ValueError, match="not C-contiguous|contiguous"):
        call(address, 4, 2, 8, np.ones(8)[::2], y, out)
    with pytest.raises(TypeError, match="address, n, n_inputs, itemsize"):
        call(address, 4, 2, 8)
    assert not frozen.any()
    run = kernels.program("blend", "forward", np.float64)
    for inputs in ((x,), (x, y, out)):  # the run refuses before any pointer reaches C
        with pytest.raises(TypeError, match=f"kernel takes 2 inputs, got {len(inputs)}"):
            run(inputs, (4,))


def test_parallel_rows_match_one_thread(kernels):
    """From the threshold on the rows are split between the OpenMP threads: the same results for any split
    (an odd count included), up to rounding: the few rows each share leaves to the vector loop's scalar tail
    (scalar libm rather than libmvec, 1 ulp apart) move with the split."""
    from symgrad.backends import c

    run = kernels.program("blend", "value_and_vjp", np.float64)
    rng = np.random.default_rng(2)
    before = c.get_num_threads()
    try:
        for n in (45_001, 300_001, 1 << 19):  # blend's value_and_vjp_f64 threshold is 42,372 rows
            x, y, g = (rng.normal(size=n) for _ in range(3))
            c.set_num_threads(1)
            one = run((x, y, g), (n,))
            c.set_num_threads(2)
            two = run((x, y, g), (n,))
            for a, b in zip(one, two):
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    finally:
        c.set_num_threads(before)


def test_two_row_loops_on_threads_match_one_thread(package, kernels):
    """A two-row loop split between threads: each share pairs its own halves (an odd share does its middle row
    twice); up to rounding, as the rows that fall to the scalar tail move with the split."""
    from symgrad.backends import c

    assert "SG_ROWS(200000, sg_rows_polar__forward_f32" in package.read("c")
    assert "sg_skip" in package.read("c").split("sg_rows_polar__forward_f32", 1)[1].split("}")[0]
    run = kernels.program("polar", "forward", np.float32)
    rng = np.random.default_rng(5)
    before = c.get_num_threads()
    try:
        for n in (200_000, 210_001, 210_002):
            r, theta = (rng.normal(size=n).astype(np.float32) for _ in range(2))
            c.set_num_threads(1)
            one = run((r, theta), (n,))
            c.set_num_threads(2)
            two = run((r, theta), (n,))
            for a, b, want in zip(two, one, (r * np.cos(theta), r * np.sin(theta))):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(a, want, rtol=2e-5, atol=1e-6)
    finally:
        c.set_num_threads(before)


def test_set_num_threads(kernels):
    from symgrad.backends import c

    before = c.get_num_threads()
    c.set_num_threads(1)
    assert c.get_num_threads() == 1
    c.set_num_threads(before)


def test_split_units_keep_kernels_c_line_numbers(tmp_path, monkeypatch):
    """Past UNIT_BYTES a kernels.c is compiled as several units; a compiler message still names the line of
    kernels.c (each piece sits under a #line directive)."""
    monkeypatch.setattr(commands, "UNIT_BYTES", 1)
    sections = [f"{abi.SECTION_MARK}f{k} */\nvoid f{k}(void) {{ }}\n" for k in range(4)]
    broken = f"{abi.SECTION_MARK}g */\nvoid g(void) {{ return 1 }}\n"
    text = "#include <stdint.h>\n/* header */\n\n" + "\n".join([*sections, broken])
    units = [unit for unit, _ in commands.split_units(text, 2)]
    assert len(units) > 1 and all(u.startswith("#include <stdint.h>\n/* header */") for u in units)
    assert sum(u.count(abi.SECTION_MARK) for u in units) == 5
    assert commands.split_units(text, 1) == [(text, max(map(len, text.split("\n" + abi.SECTION_MARK))))]
    bad_line = text.splitlines().index("void g(void) { return 1 }") + 1
    for k, unit in enumerate(units):
        (tmp_path / f"kernels.{k}.c").write_text(unit)
        r = subprocess.run(
            [*TOOLCHAIN.cc, "-fsyntax-only", f"kernels.{k}.c"], cwd=tmp_path, capture_output=True, text=True
        )
        if "void g(void)" in unit:
            assert r.returncode != 0 and f"kernels.c:{bad_line}:" in r.stderr
        else:
            assert r.returncode == 0, r.stderr


def test_a_split_model_builds_loads_and_computes(tmp_path, monkeypatch, cache):
    """Forced to split into units of one program each, a package builds, loads and computes what the formulas
    say; the build recorded one compile per unit, the longest first, and keeps only the whole kernels.c."""
    from symgrad.backends.c import CBackend
    from symgrad.build.compile import compile_model
    from symgrad.build.package import Package

    (tmp_path / "split.py").write_text(MODEL.replace("sg.exp(-y**2)", "sg.exp(-y**2 / 3)"))
    package = Package(compile_model(tmp_path / "split.py").path)
    monkeypatch.setattr(commands, "UNIT_BYTES", 1)
    monkeypatch.setattr(commands, "cores", lambda: 2)
    kernels = CBackend().load(package)
    (entry,) = [
        e for e in entries(cache) if "split.py" in json.loads((e / "build.json").read_text())["label"]
    ]
    recorded = json.loads((entry / "build.json").read_text())["commands"]
    units = commands.split_units(package.read("c"), 2)
    compiled = [c[-1] for c in recorded if c[-1].startswith("kernels.")]
    assert len(units) >= 3 and sorted(compiled) == sorted(f"kernels.{k}.c" for k in range(len(units)))
    sizes = [len(units[int(name.split(".")[1])][0]) for name in compiled]
    assert sizes == sorted(sizes, reverse=True)
    assert (entry / "kernels.c").exists() and not list(entry.glob("kernels.*.c"))
    x, y = np.linspace(-2, 2, 7), np.linspace(0.5, 1.5, 7)
    (out,) = kernels.program("blend", "forward", np.dtype(np.float64))((x, y), (7,))
    np.testing.assert_allclose(out, np.sin(x) * np.exp(-(y**2) / 3) + np.log1p(x**2 * y**2), rtol=1e-14)
    p, s = np.abs(np.linspace(-1, 1, 9)).reshape(3, 3), np.ones(3)
    (norm,) = kernels.program("norm3", "forward", np.dtype(np.float64))((p, s), (3,))
    np.testing.assert_allclose(norm, np.linalg.norm(p, axis=1), rtol=1e-14)


def test_builds_read_sysconfig_once_at_import(cache, monkeypatch):
    """CPython 3.11's first sysconfig query is racy (threads' first calls saw None: "'NoneType' object has no
    attribute 'encode'" in build_key): builds use the values read when the toolchain module loaded."""
    import sysconfig

    monkeypatch.setattr(sysconfig, "get_config_var", lambda *a, **k: None)
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {})
    assert build_c.build_key(source(3.0), CDEF, TOOLCHAIN) != build_c.build_key(source(3.5), CDEF, TOOLCHAIN)
    m = build_c.load(source(3.25), CDEF, label="sysconfig")
    x, out = np.arange(3.0), np.empty(3)
    m.lib.twice__forward_f64(3, m.ffi.from_buffer("double[]", x), m.ffi.from_buffer("double[]", out))
    np.testing.assert_allclose(out, 2 * x + 3.25)


# -- shared caches, concurrent clears, rebuilt modules -------------------------------------------------------


def test_compiler_command_is_never_read_from_the_cache(cache, tmp_path):
    """A toolchain probe in the cache directory names no command to run: one that does (an older symgrad's,
    or planted by whoever can write the cache) is ignored, the compiler comes from CC/PATH, and the probe
    is written again."""
    marker = tmp_path / "ran"
    planted = tmp_path / "planted-cc"
    planted.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    planted.chmod(0o755)
    probes = list(cache.glob(".toolchain-*.json"))
    assert probes
    for probe in probes:
        data = json.loads(probe.read_text())
        data["cc"] = [str(planted)]
        probe.write_text(json.dumps(data))
    planted_at = {p: p.stat().st_mtime_ns for p in probes}
    r = run_child(source(13.0))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[13.0, 15.0, 17.0, 19.0]"
    assert not marker.exists()
    # the probe this compiler uses was written again, without the command (the cache may also hold probes
    # of other compilers or symgrad versions, which nothing reads)
    rewritten = [p for p in cache.glob(".toolchain-*.json") if p.stat().st_mtime_ns != planted_at.get(p)]
    assert rewritten and all(str(planted) not in p.read_text() for p in rewritten)


def _library_that_is_not_the_module(tmp_path: Path) -> bytes:
    """A shared library that loads (so dlopen keeps a handle of its path) but has no module init."""
    (tmp_path / "other.c").write_text("int sg_unrelated(void) { return 1; }\n")
    out = tmp_path / "other.so"
    r = subprocess.run(
        [*TOOLCHAIN.cc, "-shared", "-fPIC", "-o", str(out), str(tmp_path / "other.c")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "a library that is not the module"])
def test_entry_rebuilt_in_the_same_process_loads_the_rebuilt_module(cache, tmp_path, damage):
    """A broken entry is rebuilt and the rebuilt module is what this process imports, even when its broken
    module was dlopened here first (dlopen returns the handle it holds for a path it has loaded)."""
    salt = {"truncated": 14.0, "a library that is not the module": 14.5}[damage]
    src = source(salt)
    assert run_child(src).returncode == 0  # built by another process
    (entry,) = entries(cache)
    (so,) = entry.glob("_sg_*.so")
    bad = b"\x7fELF truncated" if damage == "truncated" else _library_that_is_not_the_module(tmp_path)
    so.write_bytes(bad)
    if damage != "truncated":  # recorded as built: only the import can tell
        record = json.loads((entry / "build.json").read_text())
        record["so_sha256"] = hashlib.sha256(bad).hexdigest()
        (entry / "build.json").write_text(json.dumps(record))
    m = build_c.load(src, CDEF, label="rebuilt")
    x, out = np.arange(4.0), np.empty(4)
    m.lib.twice__forward_f64(4, m.ffi.from_buffer("double[]", x), m.ffi.from_buffer("double[]", out))
    np.testing.assert_allclose(out, 2 * x + salt)
    (entry,) = entries(cache)
    assert all(p.read_bytes() != bad for p in entry.glob("_sg_*.so"))


def test_entry_taken_by_cache_clear_between_check_and_load_is_rebuilt(cache):
    """`symgrad cache clear` run by someone else while this process loads (here: twice, between its check of
    the entry and its import) costs a rebuild, not an error."""
    src = source(15.0)
    assert run_child(src).returncode == 0
    code = CHILD.replace(
        "m = build_c.load",
        textwrap.dedent("""\
            from symgrad.cli import main
            _verify = build_c._verify
            cleared = []
            def verify(entry, so):
                if len(cleared) < 2:
                    cleared.append(main(["cache", "clear"]))
                return _verify(entry, so)
            build_c._verify = verify
            m = build_c.load"""),
    )
    r = subprocess.run(
        [sys.executable, "-c", code, src, CDEF], capture_output=True, text=True, env=child_env(), timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[15.0, 17.0, 19.0, 21.0]"
    assert r.stdout.count("removed 1 entries") == 2
    assert len(entries(cache)) == 1


def test_clear_removes_probes_and_stale_staging_leftovers(cache):
    """``clear`` empties the C cache: entries, failed builds, toolchain probes and staging leftovers older
    than the stale limit; a young staging directory belongs to a running build and stays."""
    build_c.load(source(16.0), CDEF)
    (cache / "failed-0123456789abcdef").mkdir()
    old = time.time() - 7200
    for name in (".tmp-old", ".trash-old"):
        (cache / name).mkdir()
        os.utime(cache / name, (old, old))
    (cache / ".tmp-young").mkdir()
    assert list(cache.glob(".toolchain-*.json"))
    assert build_c.clear() == 2
    assert sorted(p.name for p in cache.iterdir()) == [".tmp-young"]
    assert build_c.list_entries() == []
