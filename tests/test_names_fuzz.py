"""Hostile names, fuzzed: file names, function names and docstrings through every emitter and to the terminal.

Everything here is user text that symgrad prints somewhere: a function's ``__name__`` (anything, set by hand),
its docstring, and the file it was compiled from (``co_filename``: ``exec`` and notebooks give any string, and
a file system gives any byte but ``/`` and NUL). Properties, for hypothesis-made text mixing control
characters, ANSI escapes, bidi overrides, lone surrogates, comment and string delimiters and code:

- every emitter's file holds exactly the code it holds for a plain name: the NumPy module, docstrings aside,
  has the same syntax tree; the C file outside its comments (read as a C compiler reads it, trigraphs and
  line splices included) is the same text and no comment is left open; the YAML differs in its banner line
  only; every line of every file is printable text;
- what ``symgrad show`` (every format) and ``symgrad check`` print holds no C0 or C1 control character but
  the line break, no DEL, no bidi embedding, override or isolate (U+202A..U+202E, U+2066..U+2069) and no
  lone surrogate, and still shows the names (escaped as ``repr`` escapes them).

Budget: a few dozen examples in the normal suite (deterministic, well under 20 s), ``$SYMGRAD_FUZZ_EXAMPLES``
per property when set (random seeds, the example database replays failures), as in tests/test_properties.py.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import os
import re
import tempfile
import types
from contextlib import redirect_stdout
from pathlib import Path
from unittest import mock

import pytest
from fuzzing import budget
from hypothesis import example, given
from hypothesis import strategies as st

import emitters
import symgrad as sg
from symgrad import cli
from symgrad.build.package import write_package
from symgrad.compiled import load_package
from symgrad.compiler import compile_spec
from symgrad.debug import printable

HOSTILE = [
    "\x1b[31m",  # ANSI colour
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]0;pwned\x07",  # OSC: set the window title
    "\x1b]8;;http://x\x1b\\",  # OSC 8 hyperlink
    "\x9b31m",  # C1 CSI
    "\x1b",
    "\r",
    "\n",
    "\r\n",
    "\t",
    "\x07",
    "\x08",
    "\x00",
    "\x7f",
    "\x85",
    "\x0b\x0c\x1c",
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u202a",
    "\u2066",
    "\u2069",
    "\u200f",
    "\u061c",
    "\u2028\u2029",
    "\ufeff",
    "\udc80",  # a lone surrogate: an undecodable byte of a file name (surrogateescape)
    "*/",
    "/*",
    "//",
    "\\",
    "*\\",
    "??/",
    '"""',
    "'''",
    '"',
    "'",
    "#",
    ";",
    "\n#include <stdlib.h>\n",
    ' system("rm -rf /"); ',
    "int sg_pwned = 1;",
    "__import__('os').system('x')",
    "\n- name: pwned\n",
    "{0}%s",
    ".py",
    ":12",
    "/",
    " ",
    "é",
    "α",
    "\U0001f600",
]

#: characters a terminal must never get from user text: C0 but the line break, DEL, C1, bidi controls
FORBIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

_controls = st.characters(categories=("Cc", "Cf", "Cs", "Zl", "Zp"))
_fragments = st.sampled_from(HOSTILE)
hostile_text = st.lists(  # mostly known-hostile fragments (each one a few times as likely as free text)
    st.one_of(_fragments, _fragments, _fragments, _controls, st.text(max_size=4)), min_size=1, max_size=8
).map("".join)
file_names = hostile_text.map(lambda s: s.replace("\x00", ""))  # compile() refuses a NUL in a file name
docstrings = st.one_of(st.none(), hostile_text)

#: the classic attacks, run on every run whatever hypothesis draws: (file name, function name, docstring)
CLASSICS = [
    ("x*/ int sg_pwned = 1; /*.py", "*/ int sg_pwned; /*", '*/ system("rm -rf /"); /* """ \\'),
    ("x*\\ int sg_pwned = 1; .py", "f\x1b[31m", None),  # "*\" was once turned into "*/"
    ('we"""ird\n""" ; import os #.py', '"""\nimport os\n"""', "'''\n\x00"),
    ("a??/\n*/\n??/", "a??/", "??/\n"),
    ("\x1b]0;title\x07\u202e\udc80.py", "\x9b2J\r\x07\u2066\udcff\x00", "\x1b[2J"),
    ("", "", ""),
]


def classics(test):
    for filename, name, doc in CLASSICS:
        test = example(filename=filename, name=name, doc=doc)(test)
    return test


SOURCE = """\
def f(x, y):
    return sg.where(x > 0, x * y, sg.exp(x)) + sg.sin(y)
"""


def hostile_function(filename: str, name: str, doc: str | None) -> sg.SymbolicFunction:
    """An ``@sg.function`` compiled from code under ``filename``, named ``name``, documented by ``doc``."""
    namespace: dict = {"sg": sg}
    exec(compile(SOURCE, filename, "exec"), namespace)
    raw = namespace["f"]
    raw.__name__, raw.__doc__ = name, doc
    return sg.function(raw)


def plain(kernel):
    """The same kernel under a plain name, origin and docstring: what every target must generate as code."""
    return dataclasses.replace(kernel, public_name=kernel.name, origin="plain.py:1", doc="")


def _info(source: str) -> emitters.ModelInfo:
    return emitters.ModelInfo(source=source, symgrad_version=sg.__version__)


def numpy_code(text: str) -> str:
    """The NumPy module's syntax tree without docstrings (comments are not in it)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and ast.get_docstring(node, clean=False) is not None:
            assert "\n" not in ast.get_docstring(node, clean=False)
            node.body = node.body[1:]
    return ast.dump(tree)


def c_code(text: str) -> str:
    """The C file outside its comments, as a compiler in an ISO mode reads it (``-std=c11`` reads
    trigraphs: ``??/`` is a backslash, and a backslash before a line break joins the lines)."""
    text = re.sub(r"\\\n", "", text.replace("??/", "\\"))
    code = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    assert "/*" not in code and "*/" not in code, "a comment is left open or closed twice"
    return code


def check_emitters(kernel, source: str) -> None:
    reference = plain(kernel)
    assert kernel.name.isidentifier() and kernel.name.isascii(), kernel.name
    for name in emitters.names():
        got = emitters.get(name).emit_module([kernel], _info(source))
        want = emitters.get(name).emit_module([reference], _info("plain.py"))
        lines = got.split("\n")
        assert all(line.isprintable() for line in lines), (name, [ln for ln in lines if not ln.isprintable()])
        if name == "numpy":
            assert numpy_code(got) == numpy_code(want)
        elif name == "c":
            assert c_code(got) == c_code(want)
        elif name == "yaml":
            assert lines[0].startswith("# @generated by symgrad ") and lines[0].endswith(". Do not edit.")
            assert lines[1:] == want.split("\n")[1:]
            assert all(line.startswith(("- name: ", "  ")) for line in lines[1:-1]) and lines[-1] == ""
        else:  # a new target: at least its code must not change with the names
            assert len(lines) == len(want.split("\n")), name


@given(filename=file_names, name=hostile_text, doc=docstrings)
@classics
@budget(100)
def test_hostile_names_never_reach_generated_code(filename, name, doc):
    fn = hostile_function(filename, name, doc)
    kernel = compile_spec(fn.trace())
    assert kernel.public_name == name and kernel.origin == f"{os.path.basename(filename)}:1"
    check_emitters(kernel, filename)
    check_emitters(kernel, kernel.origin)  # what a jit package gets as its source


def assert_terminal_safe(out: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in FORBIDDEN.findall(out)})
    assert not bad, f"raw control characters reach the terminal: {bad}\n{out!r}"
    out.encode("utf-8")  # no lone surrogate: printing it would raise UnicodeEncodeError


def joined(text: str) -> str:
    """``text`` with each surrogate pair read as the character it encodes, as JSON reads it back."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def run_cli(command, **options) -> str:
    """What ``command`` prints to stdout for the arguments ``options`` (the model file is patched away)."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert command(argparse.Namespace(**{"model": "model.py", "function": None, **options})) == 0
    return out.getvalue()


@given(filename=file_names, name=hostile_text, doc=docstrings)
@classics
@budget(30)
def test_show_and_check_print_no_control_characters(filename, name, doc):
    fn = hostile_function(filename, name, doc)
    kernel = compile_spec(fn.trace())
    previous = sg.get_backend()
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "pkg"
        write_package([kernel], dest, kernel.origin, "fuzz")
        functions = load_package(dest)
        (shown,) = functions.values()
        # the manifest (JSON) keeps every name, but reads a surrogate pair back as the character it encodes
        assert (shown.name, shown.origin) == (joined(name), joined(kernel.origin))
        module = types.ModuleType("fuzz_symgrad")  # as sg.compile makes it
        module.__file__ = str(dest / "__init__.py")
        module.__dict__.update(functions)
        module.__all__ = list(functions)
        sg.set_backend("numpy")
        try:
            with (
                mock.patch.object(cli, "_compiled_module", return_value=module),
                mock.patch("symgrad.compiler.model.load_model", return_value=[fn]),
            ):
                for fmt in cli.FORMATS:
                    for selected in (None, shown.name):  # every function, and the one named
                        out = run_cli(cli.cmd_show, function=selected, format=fmt, program=None, order=1)
                        assert_terminal_safe(out)
                        if fmt == "formula":
                            assert out.startswith(f"# {printable(shown.name)}  [{printable(shown.origin)}]\n")
                        if fmt == "ir" and selected is None:  # the model traced again: names as written
                            assert f"[{printable(kernel.origin)}]" in out
                out = run_cli(cli.cmd_check, against=None, points=4, rtol=1e-5)
        finally:
            sg.set_backend(previous)
    assert_terminal_safe(out)
    assert out == f"ok   {printable(shown.name)}: every gradient matches finite differences\n"


def test_printable_escapes_as_repr_does():
    assert printable("plain α text\nnext line") == "plain α text\nnext line"
    assert printable("a\x1b[31mb\r\x07\x00\u202e\x9b\t\udc80") == r"a\x1b[31mb\r\x07\x00\u202e\x9b\t\udc80"


@pytest.mark.parametrize("stem", ["evil\x1b[31m\r\x07\u202e\u2066", "plain"])
def test_the_command_line_on_a_hostile_model(tmp_path, capsys, stem):
    """``symgrad show`` (every format), ``check``, ``compile`` and an error, end to end on a model file
    whose name, function name and docstring hold escapes (as a Linux file system allows)."""
    path = tmp_path / f"{stem}.py"
    path.write_text(
        "import symgrad as sg\n\n"
        "def f(x):\n"
        "    return sg.sin(x) * x\n\n"
        "f.__name__ = 'na\\x1b[2Jme\\u202e\\r\\x07'\n"
        "f.__doc__ = '\\x1b]0;title\\x07 doc \\u2066'\n"
        "f = sg.function(f)\n",
        encoding="utf-8",
    )
    previous = sg.get_backend()
    sg.set_backend("numpy")
    try:
        for fmt in cli.FORMATS:
            assert cli.main(["show", str(path), "--format", fmt]) == 0
        assert cli.main(["check", str(path), "--points", "4"]) == 0
        assert cli.main(["show", str(path), "no such function"]) == 1
        assert cli.main(["compile", str(path), "-o", str(tmp_path / "out")]) == 0
    finally:
        sg.set_backend(previous)
    captured = capsys.readouterr()
    for out in (captured.out, captured.err):
        assert_terminal_safe(out)
    assert r"# na\x1b[2Jme\u202e\r\x07  [" in captured.out
    assert r"available: na\x1b[2Jme\u202e\r\x07" in captured.err
    assert printable(path.name) in captured.out  # the banner's origin and compile's "wrote ..." line
