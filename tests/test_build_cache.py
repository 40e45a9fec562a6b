"""The build cache under stress, end to end (model file -> package -> C module), in fresh processes.

- N = 4 processes compiling the same model at once (``sg.compile`` into one fresh ``SYMGRAD_CACHE_DIR``,
  and ``symgrad compile`` into one output directory) all succeed and agree;
- a truncated or corrupted entry (the C extension, a package's ``manifest.json``, its ``kernels_numpy.py``)
  is detected and rebuilt;
- a read-only cache directory, or one that fails writes part-way (disk full), falls back to a temporary one,
  with one warning and no debris left behind;
- ``symgrad compile`` interrupted by SIGINT (while deriving, or while writing the package) leaves the
  previous package intact, or none, and no staging directories behind.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_symgrad

import symgrad as sg
from symgrad.backends.c import direct
from symgrad.build.cache import cache_root
from symgrad.build.compile import compile_model

#: subprocess fleets, interrupted builds and damaged caches: seconds each (make test-fast skips them)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
N_PROCESSES = 4

MODEL = textwrap.dedent("""\
    import symgrad as sg

    @sg.function
    def softplus(x):
        return sg.log(1 + sg.exp(x))

    @sg.function
    def blend(x, y):
        return sg.sin(x) * sg.exp(-y**2) + sg.log(1 + x**2 * y**2)
""")
X = [-2.0, -0.5, 0.0, 0.5, 3.0]


def _expected():
    x = np.array(X)
    return {
        "softplus": np.log1p(np.exp(x)).tolist(),
        "blend": (np.sin(x) * np.exp(-(x**2)) + np.log1p(x**4)).tolist(),
    }


def env_for(cache: Path | str, **extra) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        SYMGRAD_CACHE_DIR=str(cache),
    )
    env.update(extra)
    return env


def _model_and_cache(tmp_path: Path) -> tuple[Path, Path]:
    """MODEL written to tmp_path/model.py, and a fresh cache directory that already has the toolchain
    probe."""
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    cache = tmp_path / "cache"
    _seed_toolchain(cache)
    return model, cache


def _seed_toolchain(cache: Path) -> None:
    """Copy this machine's toolchain probe into a fresh cache (probing costs a second per process)."""
    shared = cache_root() / "c"
    (cache / "c").mkdir(parents=True, exist_ok=True)
    for probe in shared.glob(".toolchain-*.json"):
        (cache / "c" / probe.name).write_bytes(probe.read_bytes())


# -- concurrent compiles -------------------------------------------------------------------------------------


def _compile_and_run(model: str, cache: str, start: str, backend: str) -> dict:
    """One worker process: wait for the start signal, then compile the model and run it."""
    os.environ["SYMGRAD_CACHE_DIR"] = cache
    sys.path.insert(0, str(ROOT))
    import symgrad as sg

    while not os.path.exists(start):
        time.sleep(0.001)
    module = sg.compile(model)
    sg.set_backend(backend)
    x = np.array(X)
    return {
        "softplus": module.softplus(x).tolist(),
        "blend": module.blend(x, x).tolist(),
        "backend": module.softplus.backend,
    }


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_processes_compiling_the_same_model_at_once_all_succeed(tmp_path, backend):
    model, cache = _model_and_cache(tmp_path)
    start = tmp_path / "go"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(N_PROCESSES) as pool:
        pending = [
            pool.apply_async(_compile_and_run, (str(model), str(cache), str(start), backend))
            for _ in range(N_PROCESSES)
        ]
        time.sleep(1.5)  # all four imported symgrad and wait at the start line
        start.write_text("go")
        results = [p.get(timeout=600) for p in pending]
    want = _expected()
    for r in results:
        assert r["backend"] == backend
        np.testing.assert_allclose(r["softplus"], want["softplus"], rtol=1e-12)
        np.testing.assert_allclose(r["blend"], want["blend"], rtol=1e-12)
    packages = [p for p in (cache / "models").iterdir() if not p.name.startswith(".")]
    assert len(packages) == 1
    leftovers = [
        p.name
        for d in (cache / "models", cache / "c")
        if d.is_dir()
        for p in d.iterdir()
        if p.name.startswith((".tmp-", ".old-", ".trash-"))
    ]
    assert not leftovers
    if backend == "c":
        assert len(_c_entries(cache)) == 1


def test_cli_compiles_into_one_output_directory_at_once(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    start = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(start)!r}): time.sleep(0.001)\n"
        "from symgrad.cli import main\n"
        "sys.exit(main(['compile', 'model.py', '--force']))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env_for(tmp_path / "cache"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(N_PROCESSES)
    ]
    time.sleep(1.0)
    start.write_text("go")
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    manifest = json.loads((tmp_path / "model_symgrad" / "manifest.json").read_text())
    assert [f["name"] for f in manifest["functions"]] == ["softplus", "blend"]
    assert not _staging_leftovers(tmp_path)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import numpy as np, model_symgrad as m; print(m.softplus(np.array({X})).tolist())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env_for(tmp_path / "cache"),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(json.loads(r.stdout), _expected()["softplus"], rtol=1e-12)


# -- corrupted entries ---------------------------------------------------------------------------------------

CHILD = f"""
import sys, json, warnings
import numpy as np
import symgrad as sg
sg.set_backend(sys.argv[2])
m = sg.compile(sys.argv[1])
x = np.array({X})
print(json.dumps({{"softplus": m.softplus(x).tolist(), "blend": m.blend(x, x).tolist(),
                  "backend": m.softplus.backend}}))
"""


def run_child(model: Path, cache: Path, backend: str, **env) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), backend],
        capture_output=True,
        text=True,
        env=env_for(cache, **env),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    want = _expected()
    np.testing.assert_allclose(result["softplus"], want["softplus"], rtol=1e-12)
    np.testing.assert_allclose(result["blend"], want["blend"], rtol=1e-12)
    assert result["backend"] == backend
    result["stderr"] = r.stderr
    return result


@pytest.fixture
def built(tmp_path):
    """A model compiled once into a private cache on both backends: (model, cache, package dir)."""
    model, cache = _model_and_cache(tmp_path)
    run_child(model, cache, "c")
    run_child(model, cache, "numpy")
    (package,) = [p for p in (cache / "models").iterdir() if not p.name.startswith(".")]
    return model, cache, package


def _c_entries(cache: Path) -> list[Path]:
    """The model's C cache entries (the backend's direct-call module has its own entry)."""
    return [
        p
        for p in (cache / "c").iterdir()
        if (p / "build.json").exists() and json.loads((p / "build.json").read_text())["label"] != direct.LABEL
    ]


def _c_entry(cache: Path) -> Path:
    (entry,) = _c_entries(cache)
    return entry


def _damage(path: Path, how: str) -> None:
    """Leave ``path`` as a crash, a full disk or a stray edit might: truncated, emptied, garbage, ..."""
    if how == "delete":
        path.unlink()
        return
    data = path.read_bytes()
    path.write_bytes(
        {
            "truncate": data[: len(data) // 3],
            "empty": b"",
            "garbage": os.urandom(len(data)),
            "zero the ELF header": b"\0" * 64 + data[64:],
            "wrong json": json.dumps({"functions": []}).encode(),
            "syntax": data.replace(b"def ", b"def def ", 1),
        }[how]
    )


@pytest.mark.parametrize("damage", ["truncate", "zero the ELF header", "empty", "delete"])
def test_broken_c_extension_is_rebuilt(built, damage):
    model, cache, _ = built
    (so,) = _c_entry(cache).glob("_sg_*.so")
    size = so.stat().st_size
    _damage(so, damage)
    run_child(model, cache, "c")
    entry = _c_entry(cache)
    assert next(entry.glob("_sg_*.so")).stat().st_size == size


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "wrong json", "delete"])
def test_broken_package_manifest_is_rebuilt(built, damage):
    model, cache, package = built
    manifest = package / "manifest.json"
    text = manifest.read_text()
    _damage(manifest, damage)
    for backend in ("numpy", "c"):
        run_child(model, cache, backend)
    assert json.loads(manifest.read_text()) == json.loads(text)


@pytest.mark.parametrize(
    "backend, filename, damage",
    [
        *[("numpy", "kernels_numpy.py", d) for d in ("truncate", "syntax", "empty", "delete")],
        ("c", "kernels.c", "truncate"),
    ],
)
def test_broken_generated_source_is_rebuilt(built, backend, filename, damage):
    model, cache, package = built
    kernels = package / filename
    text = kernels.read_text()
    _damage(kernels, damage)
    run_child(model, cache, backend)
    assert kernels.read_text() == text


def test_broken_jit_entry_is_rebuilt(tmp_path):
    """``@sg.function`` called on arrays builds into <cache>/jit: its entries are checked the same way."""
    cache = tmp_path / "cache"
    _seed_toolchain(cache)
    code = textwrap.dedent("""\
        import numpy as np, symgrad as sg
        @sg.function
        def f(x):
            return sg.tanh(x) * x
        print(f(np.array([0.5, 2.0])).tolist())
    """)

    def run() -> list:
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env_for(cache, SYMGRAD_BACKEND="numpy"),
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    want = (np.tanh([0.5, 2.0]) * np.array([0.5, 2.0])).tolist()
    assert run() == pytest.approx(want)
    (entry,) = (cache / "jit").iterdir()
    for name in ("kernels_numpy.py", "manifest.json"):
        path = entry / name
        good = path.read_text()
        path.write_text(good[: len(good) // 2])
        assert run() == pytest.approx(want)
        assert path.read_text() == good


# -- unusable cache directory --------------------------------------------------------------------------------


def _read_only_dir(tmp_path: Path) -> Path:
    """A directory nobody can create files in: chmod 555, or for root (who ignores modes) /proc/self."""
    if os.geteuid() == 0:
        return Path("/proc/self")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    return d


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_read_only_cache_directory_falls_back_with_one_warning(tmp_path, backend):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    ro = _read_only_dir(tmp_path)
    result = run_child(model, ro, backend, PYTHONWARNINGS="always")
    assert result["stderr"].count("is not usable") == 1, result["stderr"]
    assert "using " in result["stderr"] and "SYMGRAD_CACHE_DIR" in result["stderr"]
    if ro != Path("/proc/self"):
        assert list(ro.iterdir()) == []


def test_cache_directory_that_is_a_file_falls_back(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    result = run_child(model, blocker / "cache", "numpy", PYTHONWARNINGS="always")
    assert result["stderr"].count("is not usable") == 1
    used = Path(re.search(r"; using (\S+) for this process", result["stderr"])[1])
    assert used.name.startswith("symgrad-cache-") and not used.exists()  # removed when the process ended


FULL_DISK_CHILD = f"""
import errno, json, os, pathlib, sys
root = os.environ["SYMGRAD_CACHE_DIR"]
_write_text = pathlib.Path.write_text
def write_text(self, *args, **kwargs):          # every file written into the cache hits a full disk
    if str(self).startswith(root + os.sep):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))
    return _write_text(self, *args, **kwargs)
pathlib.Path.write_text = write_text
import numpy as np
import symgrad as sg
sg.set_backend(sys.argv[2])
m = sg.compile(sys.argv[1])
x = np.array({X})
print(json.dumps({{"softplus": m.softplus(x).tolist(), "blend": m.blend(x, x).tolist(),
                  "backend": m.softplus.backend}}))
"""


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_full_cache_directory_falls_back_with_one_warning_and_no_debris(tmp_path, backend):
    model, cache = _model_and_cache(tmp_path)
    r = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CHILD, str(model), backend],
        capture_output=True,
        text=True,
        env=env_for(cache, PYTHONWARNINGS="always"),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("is not usable") == 1 and "No space left on device" in r.stderr, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["backend"] == backend
    np.testing.assert_allclose(result["softplus"], _expected()["softplus"], rtol=1e-12)
    np.testing.assert_allclose(result["blend"], _expected()["blend"], rtol=1e-12)
    debris = [
        str(p.relative_to(cache))
        for p in cache.rglob("*")
        if p.is_file() and not p.name.startswith(".toolchain-")
    ]
    assert not debris, debris


# -- interrupted compiles ------------------------------------------------------------------------------------

SLOW_MODEL = textwrap.dedent("""\
    import time
    import symgrad as sg

    @sg.function
    def fast(x):
        return x * 2

    @sg.function
    def slow(x):
        time.sleep(60)                  # stands for a function that takes long to derive
        return x * 3
""")

#: ``symgrad compile`` with the package publication slowed down, to interrupt it while files are written.
SLOW_PUBLISH = textwrap.dedent("""\
    import sys, time
    import symgrad.build.package as build
    _publish = build.publish_dir
    def slow_publish(stage, dest):
        print("publishing", file=sys.stderr, flush=True)
        time.sleep(60)
        _publish(stage, dest)
    build.publish_dir = slow_publish
    from symgrad.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _interruptible() -> None:
    """In the child: Ctrl-C's default action, which a shell's background job inherits as ignored (then
    Python installs no KeyboardInterrupt handler and the SIGINT these tests send does nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_when(proc: subprocess.Popen, marker: str, timeout: float = 120) -> tuple[str, str]:
    """Read stderr until ``marker`` shows up, send SIGINT, wait; returns (stderr before, stderr after)."""
    import select

    seen = b""
    deadline = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while marker.encode() not in seen:
        assert time.monotonic() < deadline, f"never saw {marker!r}: {seen!r}"
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk or proc.poll() is None, f"exited early: {seen!r}"
            seen += chunk
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    return seen.decode(errors="replace"), rest.decode(errors="replace")


def _staging_leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith((".tmp-", ".old-", ".trash-"))]


@pytest.mark.parametrize("previous", [False, True])
def test_sigint_while_deriving_leaves_previous_package_or_none(tmp_path, previous):
    model = tmp_path / "model.py"
    package = tmp_path / "model_symgrad"
    if previous:
        model.write_text(MODEL)
        r = run_symgrad("compile", "model.py", cwd=tmp_path, env=env_for(tmp_path / "cache"))
        assert r.returncode == 0, r.stderr
        before = {p.name: p.read_bytes() for p in package.iterdir()}
    model.write_text(SLOW_MODEL)
    proc = subprocess.Popen(
        [sys.executable, "-m", "symgrad", "compile", "model.py"],
        cwd=tmp_path,
        env=env_for(tmp_path / "cache"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_interruptible,
    )
    seen, err = _interrupt_when(proc, "[2/2] slow")
    assert proc.returncode == 130, seen + err
    assert "symgrad: interrupted" in err
    if previous:
        assert {p.name: p.read_bytes() for p in package.iterdir()} == before
    else:
        assert not package.exists()
    assert not _staging_leftovers(tmp_path)


@pytest.mark.parametrize("previous", [False, True])
def test_sigint_while_writing_the_package_leaves_previous_package_or_none(tmp_path, previous):
    model = tmp_path / "model.py"
    package = tmp_path / "model_symgrad"
    model.write_text(MODEL)
    if previous:
        r = run_symgrad("compile", "model.py", cwd=tmp_path, env=env_for(tmp_path / "cache"))
        assert r.returncode == 0, r.stderr
        before = {p.name: p.read_bytes() for p in package.iterdir()}
        model.write_text(MODEL + "\n\n@sg.function\ndef extra(x):\n    return x + 1\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_PUBLISH, "compile", "model.py"],
        cwd=tmp_path,
        env=env_for(tmp_path / "cache"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_interruptible,
    )
    seen, err = _interrupt_when(proc, "publishing")
    assert proc.returncode == 130, seen + err
    if previous:
        assert {p.name: p.read_bytes() for p in package.iterdir()} == before
    else:
        assert not package.exists()
    assert not _staging_leftovers(tmp_path), _staging_leftovers(tmp_path)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_damaged_cli_package_names_the_file_and_symgrad_compile_repairs_it(tmp_path, backend):
    """A package from ``symgrad compile`` is never silently trusted: importing a damaged one names the file
    and the fix, and ``symgrad compile`` (no --force) rebuilds it."""
    (tmp_path / "model.py").write_text(MODEL)
    env = env_for(tmp_path / "cache", SYMGRAD_BACKEND=backend)
    compile_cmd = [sys.executable, "-m", "symgrad", "compile", "model.py"]
    assert (
        subprocess.run(compile_cmd, cwd=tmp_path, env=env, capture_output=True, timeout=300).returncode == 0
    )
    package = tmp_path / "model_symgrad"
    damaged = package / ("kernels_numpy.py" if backend == "numpy" else "kernels.c")
    good = damaged.read_text()
    damaged.write_text(good[: len(good) // 2])
    use = ["-c", f"import numpy as np, model_symgrad as m; print(m.softplus(np.array({X})).tolist())"]
    r = subprocess.run(
        [sys.executable, *use], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0
    assert "PackageError" in r.stderr and str(damaged) in r.stderr and "symgrad compile" in r.stderr, r.stderr
    assert (
        subprocess.run(compile_cmd, cwd=tmp_path, env=env, capture_output=True, timeout=300).returncode == 0
    )
    assert damaged.read_text() == good
    r = subprocess.run(
        [sys.executable, *use], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(json.loads(r.stdout), _expected()["softplus"], rtol=1e-12)


def test_editing_a_module_the_model_imports_rebuilds_the_package(tmp_path):
    """Only the model file's bytes were hashed: editing consts.py or a helper @sg.function it imports left
    the package 'up to date' with the old results."""
    (tmp_path / "consts.py").write_text("K = 2.0\n")
    (tmp_path / "helpers.py").write_text(
        "import symgrad as sg\n\n@sg.function\ndef bump(x):\n    return x + 1\n"
    )
    (tmp_path / "model.py").write_text(
        "import symgrad as sg\nfrom consts import K\nfrom helpers import bump\n\n"
        "@sg.function\ndef f(x):\n    return K * bump(x)\n"
    )
    x = np.array([1.0, 2.0])
    first = compile_model(tmp_path / "model.py")
    assert first.rebuilt and set(json.loads((first.path / "manifest.json").read_text())["dependencies"]) == {
        "consts.py",
        "helpers.py",
    }
    np.testing.assert_allclose(sg.compile(tmp_path / "model.py").f(x), 2 * (x + 1))
    assert not compile_model(tmp_path / "model.py").rebuilt  # nothing changed: up to date
    (tmp_path / "consts.py").write_text("K = 3.0\n")
    assert compile_model(tmp_path / "model.py").rebuilt
    np.testing.assert_allclose(sg.load_package(first.path)["f"](x), 3 * (x + 1))
    (tmp_path / "helpers.py").write_text(
        "import symgrad as sg\n\n@sg.function\ndef bump(x):\n    return x + 10\n"
    )
    np.testing.assert_allclose(sg.compile(tmp_path / "model.py").f(x), 3 * (x + 10))


# -- shared and damaged cache roots, clearing a cache in use -------------------------------------------------


@pytest.fixture
def fresh_root(tmp_path, monkeypatch):
    """``SYMGRAD_CACHE_DIR`` pointing at tmp_path/cache (not created), with no fallback chosen yet."""
    from symgrad.build import cache

    root = tmp_path / "cache"
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(root))
    monkeypatch.delenv("SYMGRAD_CACHE_SHARED", raising=False)
    monkeypatch.setattr(cache, "_fallback", None)
    return root


@pytest.mark.parametrize("how", ["group-writable", "world-writable", "another user's"])
def test_cache_root_that_others_can_write_is_refused_unless_shared(fresh_root, monkeypatch, how):
    """Whoever can write the cache decides what code this process loads: a cache root owned by another user
    or writable by group/others falls back (one warning, nothing written in it) unless
    SYMGRAD_CACHE_SHARED=1 says it is meant to be shared."""
    import warnings

    from symgrad.build import cache

    fresh_root.mkdir()
    if how == "another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(fresh_root, 54321, 54321)
    else:
        fresh_root.chmod(0o775 if how == "group-writable" else 0o777)
    with pytest.warns(RuntimeWarning, match="SYMGRAD_CACHE_SHARED") as caught:
        used = cache_root()
    assert used != fresh_root and "is not usable" in str(caught[0].message)
    assert list(fresh_root.iterdir()) == []
    monkeypatch.setattr(cache, "_fallback", None)
    monkeypatch.setenv("SYMGRAD_CACHE_SHARED", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_root() == fresh_root


def test_cache_root_created_private_is_accepted_later_whatever_the_umask(fresh_root):
    """The directories symgrad creates in the cache are its user's only, so that a umask of 002 does not
    make the next process refuse them."""
    import warnings

    old = os.umask(0o002)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cache_root() == fresh_root
            assert cache_root() == fresh_root
    finally:
        os.umask(old)
    assert fresh_root.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("kind", ["c", "models", "jit"])
def test_a_file_in_place_of_a_cache_subdirectory_falls_back(fresh_root, kind):
    fresh_root.mkdir()
    (fresh_root / kind).write_text("x")
    with pytest.warns(RuntimeWarning, match="is not usable"):
        used = cache_root()
    assert used != fresh_root and (fresh_root / kind).read_text() == "x"


@pytest.mark.parametrize("kind, backend", [("models", "numpy"), ("c", "c")])
def test_compiling_with_a_file_in_place_of_a_cache_subdirectory_falls_back(tmp_path, kind, backend):
    model, cache = _model_and_cache(tmp_path)
    if kind == "c":
        import shutil

        shutil.rmtree(cache / "c")
    (cache / kind).write_text("x")
    result = run_child(model, cache, backend, PYTHONWARNINGS="always")
    assert result["stderr"].count("is not usable") == 1, result["stderr"]


def test_cache_clear_moves_entries_aside_and_removes_probes_and_stale_leftovers(
    fresh_root, monkeypatch, capsys
):
    """`symgrad cache clear` renames each entry into a trash directory before deleting it (a process using
    the cache sees an entry whole or not at all, never half deleted); it also removes the toolchain
    probes and staging leftovers older than the stale limit, and keeps young ones (running builds)."""
    import shutil

    from symgrad.cli import main

    old = time.time() - 7200
    for kind in ("models", "jit", "c"):
        (fresh_root / kind / "entry").mkdir(parents=True)
        (fresh_root / kind / "entry" / "manifest.json").write_text("{}")
    (fresh_root / "c" / "failed-0123456789abcdef").mkdir()
    (fresh_root / "c" / ".toolchain-0123.json").write_text("{}")
    stale = [
        fresh_root / "c" / ".tmp-build",
        fresh_root / "models" / ".tmp-pkg-1",
        fresh_root / "jit" / ".old-f-1",
    ]
    for path in stale:
        path.mkdir()
        os.utime(path, (old, old))
    (fresh_root / "c" / ".tmp-probe").write_text("{}")
    os.utime(fresh_root / "c" / ".tmp-probe", (old, old))
    young = [fresh_root / "c" / ".tmp-running", fresh_root / "models" / ".tmp-pkg-2"]
    for path in young:
        path.mkdir()
    removed_trees = []
    rmtree = shutil.rmtree

    def recording_rmtree(path, *args, **kwargs):
        removed_trees.append(Path(path))
        return rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", recording_rmtree)
    assert main(["cache", "clear"]) == 0
    assert "removed 4 entries" in capsys.readouterr().out
    left = sorted(p for p in fresh_root.rglob("*") if p.parent != fresh_root)
    assert left == sorted(young)
    assert removed_trees and all(p.name.startswith(".trash-") for p in removed_trees), removed_trees


# -- entries removed while a process uses them ---------------------------------------------------------------

VANISH_CHILD = textwrap.dedent("""\
    import json, os, sys, time
    import numpy as np
    import symgrad as sg

    model, backend, go = sys.argv[1:]
    sg.set_backend(backend)

    @sg.function
    def jit_square(x):
        return x * x

    m = sg.compile(model)
    jit = jit_square.compiled()
    print("compiled", flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    x = np.array(X)
    print(json.dumps({"softplus": m.softplus(x).tolist(), "blend": m.blend(x, x).tolist(),
                      "square": jit(x).tolist(), "backend": m.softplus.backend}))
""").replace("np.array(X)", f"np.array({X})")


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_process_whose_entries_are_cleared_meanwhile_rebuilds_them(tmp_path, backend):
    """``symgrad cache clear`` in another process between ``sg.compile`` (and a first ``@sg.function``
    build) and the first call: the process builds its package again instead of failing with advice to rerun
    ``symgrad compile``."""
    model, cache = _model_and_cache(tmp_path)
    go = tmp_path / "go"
    env = env_for(cache)
    proc = subprocess.Popen(
        [sys.executable, "-c", VANISH_CHILD, str(model), backend, str(go)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "compiled", proc.stderr.read()
        r = run_symgrad("cache", "clear", cwd=tmp_path, env=env)
        assert r.returncode == 0 and not [p for p in (cache / "models").iterdir() if p.name[0] != "."]
        go.touch()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    result = json.loads(out)
    np.testing.assert_allclose(result["softplus"], _expected()["softplus"], rtol=1e-12)
    np.testing.assert_allclose(result["blend"], _expected()["blend"], rtol=1e-12)
    assert result["square"] == [x * x for x in X] and result["backend"] == backend
    assert [p for p in (cache / "models").iterdir() if p.name[0] != "."]  # built again


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_entry_corrupted_after_loading_is_rebuilt_and_loads_in_the_same_process(tmp_path, backend):
    model, _ = _model_and_cache(tmp_path)
    m = sg.compile(model, force=True)
    package = m.softplus.package.path
    kernels = package / ("kernels_numpy.py" if backend == "numpy" else "kernels.c")
    good = kernels.read_text()
    kernels.write_text(good[: len(good) // 2])
    previous = sg.get_backend()
    sg.set_backend(backend)
    try:
        np.testing.assert_allclose(m.softplus(np.array(X)), _expected()["softplus"], rtol=1e-12)
    finally:
        sg.set_backend(previous)
    assert kernels.read_text() == good
