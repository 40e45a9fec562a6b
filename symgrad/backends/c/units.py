"""``kernels.c`` cut into pieces that compile as separate translation units: one program in one dtype each.

The file is a header (what precedes the first line that starts with ``abi.SECTION_MARK``) and one section
per kernel; a section refers to nothing in another (the emitter's contract). Within a section the cut falls
between top-level definitions, and definitions that name one another stay in one piece (a ``static`` loop
function and the entry points that call it), so each piece compiles beside the header alone. A section with
a preprocessor directive at file level stays whole: the directive may apply to what follows it. Each part
of a piece sits under a ``#line`` directive, so compiler messages name the lines of ``kernels.c``.

Only the cut is here, not which flags or how many units: ``commands.split_units``.
This module must not import SymPy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from symgrad import abi

#: What the cut has to see: comments, string and character literals and preprocessor lines (skipped whole),
#: braces and semicolons.
_TOKENS = re.compile(
    r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|^[ \t]*#(?:\\\n|[^\n])*|[{};]",
    re.M | re.S,
)
_SKIPPED = re.compile(
    r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|^[ \t]*#[^\n]*", re.M | re.S
)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
#: The name a top-level declaration defines: the last identifier before its first ( = [ ; or {
_DEFINED = re.compile(r"([A-Za-z_]\w*)\s*[(=\[;{]")


@dataclass(frozen=True)
class Piece:
    text: str  # under ``#line`` directives
    size: int  # bytes of C
    section: int  # bytes of the whole section it comes from (what the compile flags go by)


def cut(source: str) -> tuple[str, list[Piece]]:
    """``source``'s header and its pieces, in the order of ``kernels.c``."""
    mark = "\n" + abi.SECTION_MARK
    head, *sections = source.split(mark)
    line = head.count("\n") + 2  # the line of the first section's mark in kernels.c
    pieces = []
    for section in sections:
        text = abi.SECTION_MARK + section
        spans = _declarations(text)
        groups = _connected(text, spans) if spans else [[(0, len(text))]]
        for group in groups:
            parts = [
                f'#line {line + text.count(chr(10), 0, start)} "kernels.c"\n{text[start:end]}'
                for start, end in group
            ]
            pieces.append(Piece("\n".join(parts), sum(end - start for start, end in group), len(text)))
        line += text.count("\n") + 1
    return head, pieces


def _declarations(text: str) -> list[tuple[int, int]] | None:
    """The spans of ``text``'s top-level declarations and definitions (each with the comments before it); None
    where a preprocessor directive sits at file level or the braces do not balance."""
    depth, start, spans = 0, 0, []
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth < 0:
                return None
            newline = text.find("\n", m.end())
            end = len(text) if newline < 0 else newline + 1
            if depth == 0 and not text[m.end() : end].strip():  # a body ends its line: a definition
                spans.append((start, end))
                start = end
        elif token == ";" and depth == 0:
            spans.append((start, m.end()))
            start = m.end()
        elif token.lstrip().startswith("#") and depth == 0:
            return None
    if depth:
        return None
    if start < len(text):
        if spans and not _SKIPPED.sub("", text[start:]).strip():  # trailing comments and blank lines
            spans[-1] = (spans[-1][0], len(text))
        else:
            spans.append((start, len(text)))
    return spans


def _connected(text: str, spans: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``spans`` grouped so that a declaration and every one that names what it defines share a group; the
    groups in order of their first span."""
    code = [_SKIPPED.sub(" ", text[s:e]) for s, e in spans]
    parent = list(range(len(spans)))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    definer: dict[str, int] = {}
    for k, c in enumerate(code):
        m = _DEFINED.search(c)
        if m is not None:
            parent[root(k)] = root(definer.setdefault(m.group(1), k))
    for k, c in enumerate(code):
        for name in set(_IDENTIFIER.findall(c)) & definer.keys():
            parent[root(k)] = root(definer[name])
    groups: dict[int, list[tuple[int, int]]] = {}
    for k, span in enumerate(spans):
        groups.setdefault(root(k), []).append(span)
    return sorted(groups.values(), key=lambda g: g[0][0])
