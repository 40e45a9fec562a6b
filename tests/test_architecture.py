"""The house rules, read from the source with ast: the pipeline imports one way, no import loops outside the
runtime's Tensor <-> ops loop, no package module over 400 lines and no function over 60."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("symgrad", "emitters")

#: The stages in pipeline order: a module of one never imports (directly or inside a function) a later one.
PIPELINE = (
    "symgrad.compiler",
    "emitters",
    "symgrad.build",
    "symgrad.backends",
    "symgrad.compiled",
    "symgrad.runtime",
    "symgrad.nn",
    "symgrad.optim",
    "symgrad.interop",
    "symgrad.api",
    "symgrad.check",
    "symgrad.cli",
)
#: What runs compiled code never imports the compiler or SymPy ("the runtime never parses SymPy").
SYMPY_FREE = (
    "symgrad.abi",
    "symgrad.backends",
    "symgrad.compiled",
    "symgrad.runtime",
    "symgrad.nn",
    "symgrad.optim",
    "symgrad.interop",
)
FORBIDDEN = {stage: PIPELINE[k + 1 :] for k, stage in enumerate(PIPELINE)}
for _stage in SYMPY_FREE:
    FORBIDDEN[_stage] = (*FORBIDDEN.get(_stage, ()), "symgrad.compiler", "sympy")


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name`` imports, at any depth (relative imports resolved), as known module names where
    they are ours, else as written (third-party)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(
                (package[: len(package) - node.level + 1] if node.level else [])
                + ([node.module] if node.module else [])
            )
            targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
        elif isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
    result = set()
    for t in targets:
        while t not in known and "." in t and t.split(".")[0] in PACKAGES:
            t = t.rsplit(".", 1)[0]
        if t != name:
            result.add(t)
    return result


GRAPH = {name: _imports(name, path, set(_modules())) for name, path in _modules().items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root] & graph.keys())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w] & graph.keys()))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_loops_outside_the_runtime():
    loops = [c for c in _cycles(GRAPH) if not all(m.startswith("symgrad.runtime.") for m in c)]
    assert loops == [], "import loops: " + "; ".join(" <-> ".join(c) for c in loops)


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_no_stage_imports_a_later_one(stage):
    wrong = sorted(
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if m == stage or m.startswith(stage + ".")
        for t in targets
        for f in FORBIDDEN[stage]
        if t == f or t.startswith(f + ".")
    )
    assert wrong == []


def test_modules_and_functions_stay_small():
    too_big = []
    for name, path in _modules().items():
        text = path.read_text()
        if text.count("\n") > 400:
            too_big.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno >= 60
            ):
                too_big.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert too_big == []
