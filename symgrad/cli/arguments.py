"""The ``symgrad`` command's arguments: one parser per command, each argument described with its default and
an example, and examples under each command's ``--help``."""

from __future__ import annotations

import argparse

from symgrad import __version__

FORMATS = ("formula", "latex", "numpy", "c", "yaml", "ir", "dot")

MODEL_HELP = "the model file (imported, so its code runs, as with `python MODEL`)"
#: ``--program`` choices: the CLI's short names of the programs every function is compiled into
PROGRAMS = {
    "forward": "forward",
    "vjp": "vjp",
    "value_and_vjp": "value_and_vjp",
    "jvp": "jvp",
    "jacobian": "value_and_jacobian",
    "hessian": "value_jacobian_hessian",
    "hvp": "hvp",
}


def _subparser(sub, name: str, summary: str, examples: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=summary,
        description=summary,
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _compile_parser(sub) -> None:
    c = _subparser(
        sub,
        "compile",
        "compile a model file into <model>_symgrad/",
        "  symgrad compile model.py\n  symgrad compile model.py -o build/model_symgrad --force",
    )
    c.add_argument("model", help=MODEL_HELP + "; e.g. model.py")
    c.add_argument(
        "-o", "--output", help="package directory (default: <model>_symgrad beside the model); e.g. -o pkg"
    )
    c.add_argument(
        "--force", action="store_true", help="rebuild even if the model is unchanged (default: off)"
    )
    c.add_argument(
        "--timeout", type=float, default=None, help="give up after this many seconds (default: none); e.g. 60"
    )


def _show_parser(sub) -> None:
    s = _subparser(
        sub,
        "show",
        "print derived formulas and generated source",
        "  symgrad show model.py softplus\n  symgrad show model.py blend --program vjp --format c\n"
        "  symgrad show model.py blend --format latex --order 2\n"
        "  symgrad show model.py blend --format dot | dot -Tsvg > blend.svg",
    )
    s.add_argument("model", help=MODEL_HELP + "; e.g. model.py")
    s.add_argument("function", nargs="?", help="the function to show (default: every one); e.g. softplus")
    s.add_argument(
        "--format",
        choices=FORMATS,
        default="formula",
        help="formula: formulas, op counts and the NumPy source; latex: the formulas as LaTeX; numpy, c: "
        "generated source; yaml: the derivatives manifest; ir: the kernel IR; dot: the program's dataflow "
        "graph (Graphviz) (default: formula); e.g. --format c",
    )
    s.add_argument(
        "--order",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: also the second derivatives, the Hessian's upper triangle d2out/dx dy, as formulas (with "
        "--format formula or latex; small functions) (default: 1); e.g. --order 2",
    )
    s.add_argument(
        "--program",
        choices=tuple(PROGRAMS),
        default=None,
        help="show only this program (default: all; for dot: value_and_vjp); e.g. --program vjp",
    )


def _check_parser(sub) -> None:
    k = _subparser(
        sub,
        "check",
        "check every gradient against central finite differences",
        "  symgrad check model.py\n  symgrad check model.py softplus blend --points 256\n"
        "  symgrad check model.py neo_relu --against hand.py:neo_relu_backward",
    )
    k.add_argument("model", help=MODEL_HELP + "; e.g. model.py")
    k.add_argument(
        "function", nargs="*", help="the functions to check (default: every one); e.g. softplus blend"
    )
    k.add_argument(
        "--against",
        metavar="MODULE:FUNCTION",
        help="compare with a hand-written backward(*args, grad_output) instead of finite differences "
        "(default: none; needs one function); e.g. --against hand.py:neo_relu_backward",
    )
    k.add_argument(
        "--points", type=int, default=64, help="random points per function (default: 64); e.g. 256"
    )
    k.add_argument(
        "--rtol", type=float, default=1e-5, help="relative tolerance of a match (default: 1e-05); e.g. 1e-4"
    )


def _cache_parser(sub) -> None:
    a = _subparser(
        sub,
        "cache",
        "list or clear compiled artifacts in the cache directory",
        "  symgrad cache list\n  symgrad cache clear",
    )
    a.add_argument(
        "action", choices=("list", "clear"), help="list: each entry and its size; clear: remove all"
    )


def _plot_parser(sub) -> None:
    p = _subparser(
        sub,
        "plot",
        "draw a function and its derivative over a range, or heat maps of the value and the gradient norm of "
        "a function of two arguments (needs matplotlib: pip install 'symgrad[plot]')",
        "  symgrad plot model.py softplus\n"
        "  symgrad plot model.py gelu_tanh --order 2 --range -4 4\n"
        "  symgrad plot model.py blend --wrt y --at x=0.5 --range -2 2 -o blend.svg\n"
        "  symgrad plot model.py blend --wrt x,y --range -2 2 --range2 -1 1 -o blend_map.png",
    )
    p.add_argument("model", help=MODEL_HELP + "; e.g. model.py")
    p.add_argument("function", help="the function to draw; e.g. softplus")
    p.add_argument(
        "--range",
        nargs=2,
        type=float,
        default=(-3.0, 3.0),
        metavar=("A", "B"),
        help="the x range (default: -3 3); e.g. --range -10 10",
    )
    p.add_argument(
        "--range2",
        nargs=2,
        type=float,
        default=None,
        metavar=("C", "D"),
        help="the y range of a heat map (default: --range); e.g. --range2 0 1",
    )
    p.add_argument(
        "--wrt",
        default=None,
        help="the argument along x, or two, comma-separated, for heat maps of the value and the gradient "
        "norm (default: the first; both for a function of two arguments and no --at); e.g. --wrt y or "
        "--wrt x,y",
    )
    p.add_argument(
        "--at",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the value of another argument (default: 1.0 each); e.g. --at x=0.5",
    )
    p.add_argument("--output", type=int, default=0, help="which output of a tuple (default: 0); e.g. 1")
    p.add_argument(
        "--order",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: also the second derivative along x, with finite differences of the first (not for heat "
        "maps) (default: 1); e.g. --order 2",
    )
    p.add_argument(
        "-o",
        metavar="PATH",
        help="the image file, .png or .svg (default: FUNCTION.png); e.g. -o softplus.svg",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="symgrad",
        description="Symbolic differentiation compiler for Python.",
        epilog="compile, show, check and plot import MODEL to trace it: like `python MODEL`, that runs its "
        "code. `symgrad COMMAND --help` describes each command.",
    )
    p.add_argument("--version", action="version", version=f"symgrad {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_compile_parser, _show_parser, _check_parser, _plot_parser, _cache_parser):
        add(sub)
    return p
