"""Vector math in the C target: the toolchain probe's 512-bit choice (libmvec's AVX-512 variants), both
paths of it, and the accuracy of the kernels that call libmvec (softplus, erf-GELU) at the width in use.

The probe is forced off with ``SYMGRAD_VECTOR_WIDTH=256``; the on path is compiled for AVX-512 explicitly,
so it is checked on any x86-64 machine (running AVX-512 code needs such a CPU: where the CPU lacks it, both
widths build the same 256-bit code and the accuracy test checks that). SLEEF was measured and not adopted
(docs/numerics.md, "Vector math"), so no test links it.

Tolerances: softplus and its gradient in ulp of the result (well conditioned everywhere), value/gradient
4/8 in both dtypes (docs/numerics.md's float64 bound; float32 kernels call libmvec's float variants, within
4 ulp, where the special-function helpers compute in double; measured 2.0/2.0 and 2.2/2.8 at either
width). GELU's ``0.5*x*(1 + erf(x/sqrt 2))`` cancels for negative x, so its error is bounded by 4 eps times
the sum of the magnitudes of its terms (measured: 1.0).
"""

from __future__ import annotations

import dataclasses
import math
import platform
import subprocess

import mpmath as mp
import numpy as np
import pytest

import emitters
import symgrad as sg
from emitters.c import CEmitter
from symgrad.backends.c import cffi_build, toolchain
from symgrad.compiler import compile_spec
from symgrad.errors import CompilerUnavailable

try:
    TC = toolchain.toolchain()
except CompilerUnavailable as exc:  # pragma: no cover - CI has gcc
    pytest.skip(f"no C toolchain: {exc}", allow_module_level=True)
X86 = platform.machine() in ("x86_64", "AMD64")
needs_libmvec = pytest.mark.skipif(
    not (X86 and TC.libmvec >= 2), reason="libmvec's tier-2 set (glibc >= 2.35, x86-64) is not here"
)
AVX2 = ("-mavx2", "-mfma")
AVX512 = (*AVX2, "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw")


def softplus(x):
    return sg.log(1 + sg.exp(x))


def gelu_erf(x):
    return 0.5 * x * (1 + sg.erf(x / math.sqrt(2)))


@needs_libmvec
def test_probe_prefers_512_bits_only_with_avx512_native_and_libmvec(tmp_path, monkeypatch):
    monkeypatch.delenv("SYMGRAD_VECTOR_WIDTH", raising=False)
    cc = list(TC.cc)
    native = [*toolchain.BASE_FLAGS, "-march=native"]
    assert toolchain._wide_vectors(cc, [*native, *AVX512], 2, tmp_path)
    assert not toolchain._wide_vectors(cc, [*native, "-mno-avx512f"], 2, tmp_path)  # no _ZGVe calls
    assert not toolchain._wide_vectors(cc, [*toolchain.BASE_FLAGS, *AVX512], 2, tmp_path)  # not native
    assert not toolchain._wide_vectors(cc, [*native, *AVX512], 0, tmp_path)  # no libmvec
    width = "-mprefer-vector-width=256"  # SYMGRAD_CFLAGS chose a width
    assert not toolchain._wide_vectors(cc, [*native, *AVX512, width], 2, tmp_path)
    monkeypatch.setenv("SYMGRAD_VECTOR_WIDTH", "256")
    assert not toolchain._wide_vectors(cc, [*native, *AVX512], 2, tmp_path)


def test_width_switch_is_part_of_the_probe_and_build_keys(tmp_path, monkeypatch):
    """``SYMGRAD_VECTOR_WIDTH=256`` is a probe of its own (and leaves the flag out); a toolchain that differs
    only by the wide flag gives another build key."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    try:
        monkeypatch.setenv("SYMGRAD_VECTOR_WIDTH", "256")
        narrow = toolchain.toolchain()
        monkeypatch.delenv("SYMGRAD_VECTOR_WIDTH")
        default = toolchain.toolchain()
    finally:
        toolchain.forget_toolchain()
    assert not narrow.wide and toolchain.WIDE_FLAG not in narrow.flags
    assert default.wide == (toolchain.WIDE_FLAG in default.flags)
    assert len(list((tmp_path / "c").glob(".toolchain-*.json"))) == 2
    wide = dataclasses.replace(narrow, wide=True, flags=(*narrow.flags, toolchain.WIDE_FLAG))
    assert cffi_build.build_key("src", "cdef", wide) != cffi_build.build_key("src", "cdef", narrow)


@needs_libmvec
@pytest.mark.parametrize(
    "isa, variants",
    [
        (AVX2, ("_ZGVdN4v_exp", "_ZGVdN4v_log1p", "_ZGVdN4v_erf", "_ZGVdN8v_log1pf", "_ZGVdN8v_erff")),
        (
            (*AVX512, toolchain.WIDE_FLAG),
            ("_ZGVeN8v_exp", "_ZGVeN8v_log1p", "_ZGVeN8v_erf", "_ZGVeN16v_log1pf", "_ZGVeN16v_erff"),
        ),
    ],
    ids=["256", "512"],
)
def test_softplus_and_gelu_erf_call_libmvec_at_both_widths(tmp_path, isa, variants):
    """The emitted softplus and erf-GELU loops (both dtypes) call libmvec's vector exp, log1p and erf at the
    width the flags choose: the loops vectorize, erf included."""
    kernels = [compile_spec(sg.function(f).trace()) for f in (softplus, gelu_erf)]
    src = tmp_path / "kernels.c"
    src.write_text(CEmitter().emit_module(kernels, emitters.ModelInfo("m.py", "test")))
    keep = [f for f in TC.flags if f not in ("-march=native", "-fopenmp", toolchain.WIDE_FLAG)]
    obj = tmp_path / "k.o"
    r = subprocess.run([*TC.cc, *keep, *isa, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    symbols = obj.read_bytes()
    assert [v for v in variants if v.encode() not in symbols] == []


def _points(dtype) -> np.ndarray:
    lim = 40.0 if dtype == np.float64 else 20.0
    grid = np.linspace(-lim, lim, 397)
    return np.concatenate([grid, [0.0, -0.0, 1e-300 if dtype == np.float64 else 1e-30, 1e-8]]).astype(dtype)


@mp.workdps(50)
def _softplus_reference(x: float) -> tuple[float, float]:
    x = mp.mpf(x)
    return float(mp.log1p(mp.exp(x))), float(1 / (1 + mp.exp(-x)))


@mp.workdps(50)
def _gelu_reference(x: float) -> tuple[float, ...]:
    """Value, gradient, and the magnitudes of their terms (the scale of the formula's rounding error)."""
    x = mp.mpf(x)
    e = mp.erf(x / mp.sqrt(2))
    phi = x * mp.exp(-x * x / 2) / mp.sqrt(2 * mp.pi)
    terms = (x * (1 + e) / 2, (1 + e) / 2 + phi, abs(x) * (1 + abs(e)) / 2, (1 + abs(e)) / 2 + abs(phi))
    return tuple(float(t) for t in terms)


@needs_libmvec
@pytest.mark.parametrize("width", ["256", "default"])
def test_softplus_and_gelu_erf_accuracy_at_both_widths(tmp_path, monkeypatch, width):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    if width == "256":
        monkeypatch.setenv("SYMGRAD_VECTOR_WIDTH", width)
    else:
        monkeypatch.delenv("SYMGRAD_VECTOR_WIDTH", raising=False)
    previous = sg.get_backend()
    sg.set_backend("c")
    try:
        sp, gelu = sg.function(softplus), sg.function(gelu_erf)
        for dtype, (tol_v, tol_g) in ((np.float64, (4.0, 8.0)), (np.float32, (4.0, 8.0))):
            x = _points(dtype)
            eps = float(np.finfo(dtype).eps)
            value, (grad,) = sp.value_and_vjp(x, np.ones_like(x))
            assert sp.compiled().backend == "c"
            want = np.array([_softplus_reference(float(v)) for v in x])
            for got, ref, tol in ((value, want[:, 0], tol_v), (grad, want[:, 1], tol_g)):
                normal = np.abs(ref) >= np.finfo(dtype).tiny
                ulp = np.abs(got.astype(np.float64) - ref)[normal] / np.spacing(ref.astype(dtype)[normal])
                assert ulp.max() <= tol, (dtype, tol, x[normal][np.argmax(ulp)], ulp.max())
            value, (grad,) = gelu.value_and_vjp(x, np.ones_like(x))
            want = np.array([_gelu_reference(float(v)) for v in x])
            for got, ref, scale in ((value, want[:, 0], want[:, 2]), (grad, want[:, 1], want[:, 3])):
                err = np.abs(got.astype(np.float64) - ref)
                assert np.all(err <= 4 * eps * scale + np.finfo(dtype).tiny), (dtype, x[np.argmax(err)])
    finally:
        sg.set_backend(previous)
        toolchain.forget_toolchain()


def test_long_functions_keep_256_bit_vectors_and_a_width_the_user_set_is_kept():
    """512-bit vectors doubled gcc's time on the Neo-Hookean tet's 160 KB function (4.8 s -> 9.6 s) and sped
    none of its kernels: a unit holding a function past ``WIDE_SECTION_BYTES`` is built without the probe's
    preference; short units keep it, and a width from ``SYMGRAD_CFLAGS`` (``wide`` False) is never dropped."""
    from symgrad import abi
    from symgrad.backends.c.commands import WIDE_SECTION_BYTES
    from symgrad.backends.c.commands import unit_flags as by_length

    def unit_flags(tc, text):  # the flags of a unit holding all of ``text``
        return by_length(tc, max(map(len, text.split("\n" + abi.SECTION_MARK))))

    wide = dataclasses.replace(TC, wide=True, flags=(*TC.flags, toolchain.WIDE_FLAG))
    user = dataclasses.replace(TC, wide=False, flags=(*TC.flags, toolchain.WIDE_FLAG))
    short = f"head\n{abi.SECTION_MARK}" + "x" * 1000
    long = short + f"\n{abi.SECTION_MARK}" + "y" * (WIDE_SECTION_BYTES + 1)
    assert toolchain.WIDE_FLAG in unit_flags(wide, short)
    assert toolchain.WIDE_FLAG not in unit_flags(wide, long)
    assert toolchain.WIDE_FLAG in unit_flags(user, long)
