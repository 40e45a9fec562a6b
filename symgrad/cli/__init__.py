"""The ``symgrad`` command: compile | show | check | plot | cache.

Exit codes: 0 success, 1 failure (model error, compiler error, gradient mismatch), 2 usage error.
Errors print as one line; ``SYMGRAD_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
import traceback
from pathlib import Path

from symgrad.cli.arguments import FORMATS as FORMATS
from symgrad.cli.arguments import PROGRAMS, parser
from symgrad.debug import debug, printable
from symgrad.errors import ModelError, SymgradError


def _say(text: str, end: str = "\n", file=None) -> None:
    """Print text that holds user text (function and file names, docstrings): a terminal gets no control
    character or escape sequence from it (``symgrad.debug.printable``)."""

    print(printable(text), end=end, file=file, flush=file is sys.stderr)


def cmd_compile(args: argparse.Namespace) -> int:
    from symgrad.build.child import compile_model_bounded
    from symgrad.build.compile import compile_model, package_dir, up_to_date
    from symgrad.build.package import Package
    from symgrad.build.progress import FunctionLines

    start = time.perf_counter()
    model = Path(args.model)
    dest = package_dir(model, args.output)
    if args.timeout and (args.force or not up_to_date(model, dest)):  # a child, killed at the deadline
        rebuilt = compile_model_bounded(
            model, dest, timeout=args.timeout, force=args.force, progress=True, option="--timeout"
        )
    else:
        lines = FunctionLines()
        try:
            rebuilt = compile_model(model, dest, force=args.force, progress=lines).rebuilt
        finally:
            lines.end()
    if not rebuilt:
        _say(f"{dest}: up to date")
        return 0
    functions = Package(dest).manifest["functions"]
    for entry in functions:
        ops = entry["op_counts"]
        _say(
            f"  {entry['name']:<24} forward {ops['forward']:>5} ops   vjp {ops['vjp']:>5} ops   "
            f"fused {ops['value_and_vjp']:>5} ops"
        )
    _say(f"wrote {len(functions)} functions to {dest} ({time.perf_counter() - start:.2f} s)")
    return 0


def _compiled_functions(model: str, names: list[str]) -> tuple[list, list[SymgradError]]:
    """The compiled functions to show or check (``names``: those only, in that order; empty: all) and the
    errors of those that do not compile: the model compiled as a whole when it can; else each function on its
    own, so that one broken function does not hide the others (an error in the file itself still stops
    everything)."""
    try:
        module = _compiled_module(model)
    except SymgradError:
        from symgrad.build.compile import compile_traced
        from symgrad.compiled import load_package

        compiled, errors = [], []
        for fn in _selected(model, _model_functions(model), names):
            try:
                compiled.append(load_package(compile_traced(fn.trace()))[fn.name])
            except SymgradError as exc:
                errors.append(exc if fn.name in str(exc) else type(exc)(f"{fn.origin}: {fn.name}: {exc}"))
        return compiled, errors
    return _selected(
        Path(module.__file__).parent.name, [getattr(module, n) for n in module.__all__], names
    ), []


def _compiled_module(model: str):
    from symgrad.compiled import compile_module as compile_in_cache

    return compile_in_cache(model)


def _model_functions(model: str) -> list:
    """The ``@sg.function``s of the model file, in definition order (untraced)."""
    from symgrad.compiler.model import load_model

    return load_model(Path(model))


def _selected(where: str, functions: list, names: list[str]) -> list:
    """The ``functions`` called ``names``, in that order (empty: all of them)."""
    if not names:
        return functions
    by_name = {_joined(fn.name): fn for fn in functions}
    for name in names:
        if _joined(name) not in by_name:
            raise ModelError(f"{Path(where).name}: no function {name!r}; available: {', '.join(by_name)}")
    return [by_name[_joined(name)] for name in names]


def _joined(name: str) -> str:
    """``name`` with each UTF-16 surrogate pair read as its character (as a manifest's JSON gives it back)."""
    return name.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def _report(errors: list[SymgradError]) -> int:
    """Each broken function's error on stderr; the exit status (1 when any)."""
    for exc in errors:
        _say(f"symgrad: error: {exc}", file=sys.stderr)
    return 1 if errors else 0


def _show_kernel(kernel, args: argparse.Namespace) -> str:
    """``--format ir`` or ``dot`` of one kernel (the IR, straight from the compiler)."""
    if args.format == "dot":
        from emitters.dot import program_graph

        return program_graph(kernel, PROGRAMS[args.program or "value_and_vjp"])
    if args.program is None:
        return str(kernel)
    return str(kernel.program(PROGRAMS[args.program]))


def _show_ir(args: argparse.Namespace) -> int:
    """``--format ir`` and ``dot``: each function traced and derived here (no package is built)."""
    from symgrad.compiler import compile_spec

    errors = []
    for fn in _selected(args.model, _model_functions(args.model), [args.function] if args.function else []):
        try:
            _say(_show_kernel(compile_spec(fn.trace()), args), end="\n\n")
        except SymgradError as exc:
            errors.append(exc)
    return _report(errors)


def program_blocks(source: str, program: str) -> str:
    """The top-level blocks (separated by blank lines) of generated NumPy or C ``source`` that belong to
    ``program``: those that name one of its functions (``f__vjp(``, ``f__vjp_f64``)."""
    blocks = re.split(r"\n\s*\n(?=\S)", source.strip("\n"))
    pattern = re.compile(rf"__{re.escape(program)}(\(|_f(32|64)\b|_f(32|64)__)")
    return "\n\n".join(b for b in blocks if pattern.search(b))


def _show_source(fn, args: argparse.Namespace) -> str:
    """The generated source of one compiled function (``--program``: that program's part only)."""
    target = "numpy" if args.format == "formula" else args.format
    text = fn.source(target)
    if args.program is None:
        return text
    if target == "yaml":
        raise ModelError("--program selects a program of the generated source; the yaml manifest has none")
    return program_blocks(text, PROGRAMS[args.program])


def _show_formulas(args: argparse.Namespace) -> int:
    """``--format latex`` (and ``--order 2``): closed forms from the compiler, each function traced here."""
    from symgrad.cli.formulas import display_formulas, latex_lines

    errors = []
    for fn in _selected(args.model, _model_functions(args.model), [args.function] if args.function else []):
        try:
            _say(f"% {fn.name}  [{fn.origin}]")
            _say("\n".join(latex_lines(display_formulas(fn, args.order))), end="\n\n")
        except SymgradError as exc:
            errors.append(exc)
    return _report(errors)


def _second_derivatives(args: argparse.Namespace, name: str) -> None:
    """``--order 2`` with ``--format formula``: the Hessian's upper triangle of function ``name``."""
    from symgrad.cli.formulas import display_formulas, second_lines

    (fn,) = _selected(args.model, _model_functions(args.model), [name])
    for line in second_lines(display_formulas(fn, 2)):
        _say(line)


def cmd_show(args: argparse.Namespace) -> int:
    if args.order == 2 and args.format not in ("formula", "latex"):
        raise ModelError("--order 2 shows second derivatives as formulas: use --format formula or latex")
    if args.format in ("ir", "dot"):
        return _show_ir(args)
    if args.format == "latex":
        return _show_formulas(args)
    functions, errors = _compiled_functions(args.model, [args.function] if args.function else [])
    for fn in functions:
        if args.format == "formula":
            _say(f"# {fn.name}  [{fn.origin}]")
            for out, text in fn.formulas.items():
                _say(f"{out} = {text}")
            for arg, text in fn.derivatives.items():
                _say(f"vjp {arg}: {text or '(see the generated program below)'}")
            if args.order == 2:
                _second_derivatives(args, fn.name)
            print(f"ops: {fn.op_counts}\n")
        _say(_show_source(fn, args), end="\n" if args.format == "yaml" else "\n\n")
    return _report(errors)


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
    from symgrad.check import check_extremes, check_function, extremes_report

    against = _load_against(args.against) if args.against else None
    if against is not None and len(args.function) != 1:
        raise ModelError(
            "--against needs the name of the one function it implements (symgrad check model.py f ...)"
        )
    functions, errors = _compiled_functions(args.model, args.function)
    failed = 0
    for fn in functions:
        mismatches = check_function(fn, n=args.points, rtol=args.rtol, against=against)
        what = "hand-written vjp" if against else "finite differences"
        extremes = check_extremes(fn) if against is None else []
        if mismatches:
            _say(f"FAIL {fn.name}: {len(mismatches)} mismatches against {what}")
            for m in mismatches[:5]:
                _say(f"  {m}")
        if extremes:
            _say(f"FAIL {fn.name}: {len(extremes)} NaN/inf at extreme magnitudes where mpmath's are finite")
            for line in extremes_report(extremes):
                _say(f"  {line}")
        if mismatches or extremes:
            failed += 1
        else:
            _say(f"ok   {fn.name}: every gradient matches {what}")
    return max(_report(errors), 1 if failed else 0)


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


def cmd_plot(args: argparse.Namespace) -> int:
    from symgrad.plot import plot

    (fn,) = _selected(args.model, _model_functions(args.model), [args.function])
    at = {}
    for item in args.at:
        name, sep, value = item.partition("=")
        try:
            at[name] = float(value)
        except ValueError:
            raise ModelError(f"--at {item!r}: expected NAME=VALUE, e.g. --at x=0.5") from None
    path = Path(args.o or f"{fn.name}.png")
    wrt = args.wrt.split(",") if args.wrt and "," in args.wrt else args.wrt
    range2 = tuple(args.range2) if args.range2 else None
    options = {"output": args.output, "path": path, "range2": range2, "order": args.order}
    plot(fn, tuple(args.range), wrt=wrt, at=at, **options)
    _say(f"wrote {path}")
    return 0


COMMANDS = {
    "compile": cmd_compile,
    "show": cmd_show,
    "check": cmd_check,
    "plot": cmd_plot,
    "cache": cmd_cache,
}


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not report the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file (a test's StringIO)
        pass
    finally:
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:  # `symgrad show ... | head`: the reader has all it wants
        _quiet_stdout()
        return 0
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
