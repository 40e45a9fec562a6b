"""The ``symgrad`` command: compile | show | check | cache.

Exit codes: 0 success, 1 failure (model error, compiler error, gradient mismatch), 2 usage error.
Errors print as one line; ``SYMGRAD_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from symgrad.debug import debug, printable
from symgrad.errors import ModelError, SymgradError

FORMATS = ("formula", "numpy", "c", "yaml", "ir")


def _say(text: str, end: str = "\n", file=None) -> None:
    """Print text that holds user text (function and file names, docstrings): a terminal gets no control
    character or escape sequence from it (``symgrad.debug.printable``)."""

    print(printable(text), end=end, file=file, flush=file is sys.stderr)


@contextmanager
def _time_limit(seconds: float | None, what: str) -> Iterator[None]:
    if not seconds:
        yield
        return

    def expire(signum, frame):
        raise ModelError(f"{what}: gave up after {seconds:g} s (--timeout); does the model loop forever?")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cmd_compile(args: argparse.Namespace) -> int:
    from symgrad.build.compile import compile_model

    start = time.perf_counter()

    def progress(i: int, total: int, name: str) -> None:
        _say(f"[{i + 1}/{total}] {name}", file=sys.stderr)

    with _time_limit(args.timeout, args.model):
        result = compile_model(args.model, args.output, force=args.force, progress=progress)
    elapsed = time.perf_counter() - start
    if not result.rebuilt:
        _say(f"{result.path}: up to date")
        return 0
    for k in result.kernels:
        ops = dict(k.op_counts)
        print(
            f"  {k.name:<24} forward {ops['forward']:>5} ops   vjp {ops['vjp']:>5} ops   "
            f"fused {ops['value_and_vjp']:>5} ops"
        )
    _say(f"wrote {result.path} ({len(result.kernels)} functions, {elapsed:.2f} s)")
    return 0


def _compiled_module(model: str):
    from symgrad.compiled import compile_module as compile_in_cache

    return compile_in_cache(model)


def _pick(module, name: str | None) -> list:
    functions = [getattr(module, n) for n in module.__all__]
    if name is None:
        return functions
    if name not in module.__all__:
        raise ModelError(
            f"{Path(module.__file__).parent.name}: no function {name!r}; "
            f"available: {', '.join(module.__all__)}"
        )
    return [getattr(module, name)]


def cmd_show(args: argparse.Namespace) -> int:
    module = _compiled_module(args.model)
    functions = _pick(module, args.function)
    if args.format == "ir":
        from symgrad.compiler import compile_spec
        from symgrad.compiler.model import load_model

        for fn in load_model(Path(args.model)):
            if args.function in (None, fn.name):
                _say(str(compile_spec(fn.trace())), end="\n\n")
        return 0
    for fn in functions:
        if args.format == "formula":
            _say(f"# {fn.name}  [{fn.origin}]")
            for out, text in fn.formulas.items():
                _say(f"{out} = {text}")
            for arg, text in fn.derivatives.items():
                _say(f"vjp {arg}: {text or '(see the generated program below)'}")
            print(f"ops: {fn.op_counts}\n")
            _say(fn.source("numpy"), end="\n\n")
        else:
            _say(fn.source(args.format), end="\n\n" if args.format != "yaml" else "\n")
    return 0


def _load_against(spec: str):
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ModelError(f"--against {spec!r}: expected module:function")
    path = Path(module_name)
    if path.suffix == ".py" and path.exists():
        sys.path.insert(0, str(path.parent.resolve()))
        module_name = path.stem
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ModelError(f"--against {spec!r}: {exc}") from None


def cmd_check(args: argparse.Namespace) -> int:
    from symgrad.check import check_function

    module = _compiled_module(args.model)
    against = _load_against(args.against) if args.against else None
    if against is not None and args.function is None:
        raise ModelError(
            "--against needs the name of the function it implements (symgrad check model.py f ...)"
        )
    failed = 0
    for fn in _pick(module, args.function):
        mismatches = check_function(fn, n=args.points, rtol=args.rtol, against=against)
        what = "hand-written vjp" if against else "finite differences"
        if mismatches:
            failed += 1
            _say(f"FAIL {fn.name}: {len(mismatches)} mismatches against {what}")
            for m in mismatches[:5]:
                _say(f"  {m}")
        else:
            _say(f"ok   {fn.name}: every gradient matches {what}")
    return 1 if failed else 0


def cmd_cache(args: argparse.Namespace) -> int:
    from symgrad.build import cache

    root = cache.cache_root()
    if args.action == "clear":  # entries move aside atomically (see symgrad.build.cache.clear)
        print(f"removed {cache.clear()} entries from {root}")
        return 0
    entries = [
        p
        for kind in cache.KINDS
        if (root / kind).is_dir()
        for p in sorted((root / kind).iterdir())
        if not p.name.startswith(".")
    ]
    for p in entries:
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
        print(f"{p.parent.name:<7} {p.name:<48} {size / 1024:8.1f} KiB")
    print(f"{len(entries)} entries in {root}")
    return 0


MODEL_HELP = "the model file (imported, so its code runs, as with `python MODEL`)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="symgrad",
        description="Symbolic differentiation compiler for Python.",
        epilog="compile, show and check import MODEL to trace it: like `python MODEL`, that runs its code.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a model file into <model>_symgrad/")
    c.add_argument("model", help=MODEL_HELP)
    c.add_argument("-o", "--output", help="package directory (default: <model>_symgrad beside the model)")
    c.add_argument("--force", action="store_true", help="rebuild even if the model is unchanged")
    c.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    c.set_defaults(run=cmd_compile)
    s = sub.add_parser("show", help="print derived formulas and generated source")
    s.add_argument("model", help=MODEL_HELP)
    s.add_argument("function", nargs="?")
    s.add_argument("--format", choices=FORMATS, default="formula")
    s.set_defaults(run=cmd_show)
    k = sub.add_parser("check", help="check every gradient against central finite differences")
    k.add_argument("model", help=MODEL_HELP)
    k.add_argument("function", nargs="?")
    k.add_argument(
        "--against",
        metavar="MODULE:FUNCTION",
        help="compare with a hand-written backward(*args, grad_output) instead",
    )
    k.add_argument("--points", type=int, default=64)
    k.add_argument("--rtol", type=float, default=1e-5)
    k.set_defaults(run=cmd_check)
    a = sub.add_parser("cache", help="list or clear compiled artifacts in the cache directory")
    a.add_argument("action", choices=("list", "clear"))
    a.set_defaults(run=cmd_cache)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (SymgradError, OSError) as exc:
        if debug(1):
            traceback.print_exc()
        _say(f"symgrad: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("symgrad: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
