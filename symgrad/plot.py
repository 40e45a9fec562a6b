"""``f.plot()`` and ``symgrad plot``: a function and its derivative over a range, on one matplotlib Figure.

The derivative comes from the compiled vjp (the second, with ``order=2``, from the compiled hvp), and central
finite differences are drawn over each as points (of the value, of the vjp), so that a wrong gradient shows.
Where the value or the derivative is NaN or infinite the range is shaded; the points where a
``where``/``clamp`` condition, a ``Max``/``Min``/``maximum``/``minimum`` or an ``Abs`` of the traced function
switches branch are marked (kinks, or branch switches of a smooth function).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import sympy

from symgrad.compiler.primitives import maximum, minimum
from symgrad.errors import ModelError

#: finite-difference points drawn over the derivative
FD_POINTS = 25
#: bisection steps that place a branch switch found between two grid points
BISECTIONS = 60


def _figure():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'symgrad[plot]'") from None
    return Figure(figsize=(7, 4.5), layout="constrained")


def _switch_expressions(exprs) -> set[sympy.Expr]:
    """Expressions whose sign change is a branch switch: condition sides, extremum rivals, Abs arguments."""
    found: set[sympy.Expr] = set()
    for e in exprs:
        for rel in e.atoms(sympy.core.relational.Relational):
            found.add(rel.lhs - rel.rhs)
        for node in e.atoms(sympy.Max, sympy.Min, maximum, minimum):
            found |= {a - b for i, a in enumerate(node.args) for b in node.args[i + 1 :]}
        found |= {node.args[0] for node in e.atoms(sympy.Abs)}
    return {g for g in found if g.free_symbols}


def _roots(g, x: np.ndarray) -> list[float]:
    """Where ``g`` (a vectorized function) changes sign on the grid ``x``, refined by bisection."""
    with np.errstate(all="ignore"):
        v = np.broadcast_to(np.asarray(g(x), dtype=float), x.shape)
    roots = [float(t) for t in x[v == 0]]
    for i in np.flatnonzero(np.sign(v[:-1]) * np.sign(v[1:]) < 0):
        lo, hi, s_lo = x[i], x[i + 1], np.sign(v[i])
        for _ in range(BISECTIONS):
            mid = 0.5 * (lo + hi)
            with np.errstate(all="ignore"):
                s = np.sign(float(g(mid)))
            lo, hi = (mid, hi) if s == s_lo else (lo, mid)
        roots.append(float(0.5 * (lo + hi)))
    return roots


def kinks(fn, wrt: str, at: Mapping[str, float], lo: float, hi: float, output: int = 0) -> list[float]:
    """The points of [lo, hi] where the traced ``fn`` switches branch along ``wrt`` (others fixed ``at``)."""
    spec = fn.trace()
    symbol = {a.name: a.symbols[0] for a in spec.args}
    fixed = {symbol[n]: v for n, v in at.items()}
    x = np.linspace(lo, hi, 2001)
    found = set()
    for g in _switch_expressions(spec.outputs[output].exprs):
        g = g.xreplace(fixed)
        if g.free_symbols != {symbol[wrt]}:
            continue
        f = sympy.lambdify(symbol[wrt], g, modules="numpy")
        found |= {round(r, 12) for r in _roots(f, x)}
    return sorted(found)


def _nonfinite_runs(x: np.ndarray, bad: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) of each run of grid points where ``bad`` holds, widened by half a grid step."""
    step = (x[-1] - x[0]) / max(len(x) - 1, 1)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], bad.astype(np.int8), [0]])))
    return [(x[a] - step / 2, x[b - 1] + step / 2) for a, b in zip(edges[::2], edges[1::2])]


def _arguments(compiled, wrt: str | None, at: Mapping[str, float] | None) -> tuple[str, dict[str, float]]:
    names = compiled.arg_names
    wrt = wrt or names[0]
    if wrt not in names:
        raise ModelError(f"{compiled.name}: no argument {wrt!r} to plot along; arguments: {', '.join(names)}")
    for name, shape in zip(names, compiled.arg_shapes):
        if shape:
            raise ModelError(
                f"{compiled.name}: plot draws functions of scalar arguments; {name} has shape {shape}"
            )
    unknown = sorted(set(at or {}) - set(names))
    if unknown:
        raise ModelError(f"{compiled.name}: no argument {unknown[0]!r}; arguments: {', '.join(names)}")
    at = {n: float((at or {}).get(n, 1.0)) for n in names if n != wrt}
    return wrt, at


def _arrays(compiled, wrt: str, at: dict, x: np.ndarray) -> list[np.ndarray]:
    return [x if n == wrt else np.full_like(x, at[n]) for n in compiled.arg_names]


def _curves(compiled, wrt: str, at: dict, x: np.ndarray, output: int) -> tuple[np.ndarray, np.ndarray]:
    """(value, derivative along ``wrt``) of output ``output`` on the grid ``x``."""
    args = _arrays(compiled, wrt, at, x)
    cots = [np.full_like(x, float(k == output)) for k in range(compiled.n_outputs)]
    with np.errstate(all="ignore"):
        outs, grads = compiled.value_and_vjp(*args, *cots)
    value = outs[output] if compiled.returns_tuple else outs
    return value, grads[compiled.arg_names.index(wrt)]


def second_derivative(compiled, wrt: str, at: dict, x: np.ndarray, output: int = 0) -> np.ndarray:
    """The second derivative along ``wrt`` of output ``output`` on the grid ``x`` (the compiled hvp)."""
    tangents = [
        (np.full_like(x, float(n == wrt)) if diff else None)
        for n, diff in zip(compiled.arg_names, compiled.arg_diff)
    ]
    cots = tuple(np.full_like(x, float(k == output)) for k in range(compiled.n_outputs))
    with np.errstate(all="ignore"):
        hvp = compiled.hvp(_arrays(compiled, wrt, at, x), tangents, cots)
    return hvp[compiled.arg_names.index(wrt)]


def plot(
    fn,
    range: tuple[float, float] = (-3.0, 3.0),  # noqa: A002  (the CLI's --range)
    wrt: str | Sequence[str] | None = None,
    at: Mapping[str, float] | None = None,
    output: int = 0,
    points: int | None = None,
    path: str | Path | None = None,
    range2: tuple[float, float] | None = None,
    order: int = 1,
):
    """A matplotlib Figure of ``fn``'s output ``output`` and its derivative along argument ``wrt`` (the
    first one; ``order`` 2: and its second derivative) over ``range`` (``points``: 801), the other arguments
    fixed at ``at`` (default 1.0); finite differences as points, NaN/inf regions shaded, branch switches as
    dotted lines; ``path``: saved there (.png, .svg). Two arguments in ``wrt`` (the default for a function
    of two, with no ``at``): heat maps of the value and of the gradient norm over ``range`` x ``range2``
    (default: ``range``; ``points``: 201 per axis), see ``symgrad.heatmap``."""
    compiled = fn.compiled() if hasattr(fn, "compiled") else fn
    if wrt is None and not at and len(compiled.arg_names) == 2:
        wrt = compiled.arg_names
    if order not in (1, 2):
        raise ModelError(f"plot order: expected 1 or 2, got {order}")
    if wrt is not None and not isinstance(wrt, str):
        if order == 2:
            raise ModelError("plot order 2 draws a curve along one argument: pass wrt= (--wrt) one name")
        return heatmap(fn, tuple(wrt), range, range2 or range, at, output, points or 201, path)
    wrt, at = _arguments(compiled, wrt, at)
    lo, hi = _span(range)
    x = np.linspace(lo, hi, points or 801)
    value, deriv = _curves(compiled, wrt, at, x, output)
    switches = kinks(fn, wrt, at, lo, hi, output) if hasattr(fn, "trace") else []
    xs, fd = _finite_differences(compiled, wrt, at, (lo, hi), output, switches)
    fig = _figure()
    ax = fig.add_subplot()
    name = f"{compiled.name}({', '.join(wrt if n == wrt else f'{n}={at[n]:g}' for n in compiled.arg_names)})"
    out = f"[{output}]" if compiled.n_outputs > 1 else ""
    ax.plot(x, value, label=f"{name}{out}", color="C0")
    ax.plot(x, deriv, label=f"d/d{wrt}", color="C1")
    ax.plot(xs, fd, "o", ms=4, mfc="none", color="C3", label="finite differences")
    curves = [value, deriv]
    if order == 2:
        curves.append(second_derivative(compiled, wrt, at, x, output))
        ax.plot(x, curves[-1], label=f"d²/d{wrt}²", color="C2")
        xs, fd2 = _finite_differences(compiled, wrt, at, (lo, hi), output, switches, of=1)
        ax.plot(xs, fd2, "s", ms=4, mfc="none", color="C4", label="finite differences of d/d" + wrt)
    _mark(ax, x, ~np.logical_and.reduce([np.isfinite(c) for c in curves]), switches)
    ax.set_ylim(*_y_limits(*curves))
    ax.set_xlabel(wrt)
    what = "its derivative" if order == 1 else "its first and second derivatives"
    ax.set_title(f"{compiled.name} and {what} [{compiled.origin}]")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    if path is not None:
        fig.savefig(path)
    return fig


def _span(span: tuple[float, float]) -> tuple[float, float]:
    lo, hi = map(float, span)
    if not lo < hi:
        raise ModelError(f"plot range: expected A < B, got {lo:g} {hi:g}")
    return lo, hi


def _finite_differences(
    compiled, wrt: str, at: dict, span: tuple, output: int, switches: list, of: int = 0
) -> tuple:
    """(points, central differences of the value, or with ``of=1`` of the derivative) at ``FD_POINTS`` points
    of ``span``, none within reach of a switch."""
    xs = np.linspace(*span, FD_POINTS + 2)[1:-1]
    step = lambda t: np.cbrt(np.finfo(float).eps) * np.maximum(1.0, np.abs(t))  # noqa: E731
    xs = xs[[all(abs(t - s) > 4 * step(t) for s in switches) for t in xs]]
    h = step(xs)
    up, down = (_curves(compiled, wrt, at, xs + sign * h, output)[of] for sign in (1, -1))
    with np.errstate(all="ignore"):
        return xs, (up - down) / (2 * h)


def _y_limits(*curves: np.ndarray) -> tuple[float, float]:
    """A y range that shows the curves, not their poles: their finite values but the top and bottom 0.5%."""
    finite = np.concatenate([c[np.isfinite(c)] for c in curves])
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = np.percentile(finite, [0.5, 99.5])
    pad = 0.1 * (hi - lo) or 1.0
    return float(lo - pad), float(hi + pad)


def _mark(ax, x: np.ndarray, bad: np.ndarray, switches: list[float]) -> None:
    """Shade the non-finite runs and draw the branch switches."""
    for k, (a, b) in enumerate(_nonfinite_runs(x, bad)):
        ax.axvspan(a, b, color="0.6", alpha=0.3, label="NaN or inf" if k == 0 else None)
    for k, s in enumerate(switches):
        ax.axvline(s, color="0.3", ls=":", lw=1, label="branch switch" if k == 0 else None)


# -- heat maps: functions of two arguments ------------------------------------------------------------------
def _grid_arguments(compiled, wrt: tuple, at: Mapping[str, float] | None) -> dict[str, float]:
    """The fixed arguments of a heat map along the two arguments ``wrt`` (checked)."""
    if len(wrt) != 2 or wrt[0] == wrt[1]:
        raise ModelError(f"{compiled.name}: a heat map takes two different arguments in wrt; got {wrt}")
    if wrt[1] in (at or {}):
        raise ModelError(f"{compiled.name}: {wrt[1]} is drawn along y; it takes no --at value")
    _, fixed = _arguments(compiled, wrt[0], {n: v for n, v in (at or {}).items()})
    if wrt[1] not in fixed:
        raise ModelError(
            f"{compiled.name}: no argument {wrt[1]!r}; arguments: {', '.join(compiled.arg_names)}"
        )
    for name in wrt:
        if not compiled.arg_diff[compiled.arg_names.index(name)]:
            raise ModelError(f"{compiled.name}: {name} is nondiff; a heat map draws the gradient along it")
    del fixed[wrt[1]]
    return fixed


def surfaces(compiled, wrt: tuple, at: dict, x: np.ndarray, y: np.ndarray, output: int = 0) -> tuple:
    """(value, gradient norm along the two ``wrt`` arguments) of output ``output`` on the grid ``x`` by
    ``y``, each of shape ``(len(y), len(x))``."""
    grid = dict(zip(wrt, np.meshgrid(x, y)))
    args = [grid[n] if n in grid else np.full(grid[wrt[0]].shape, at[n]) for n in compiled.arg_names]
    cots = [np.full_like(args[0], float(k == output)) for k in range(compiled.n_outputs)]
    with np.errstate(all="ignore"):
        outs, grads = compiled.value_and_vjp(*args, *cots)
        gx, gy = (grads[compiled.arg_names.index(n)] for n in wrt)
        return (outs[output] if compiled.returns_tuple else outs), np.hypot(gx, gy)


def _switch_contours(ax, fn, wrt: tuple, at: dict, x: np.ndarray, y: np.ndarray, output: int) -> int:
    """Draw where ``fn`` switches branch as dotted zero contours; how many were drawn."""
    spec = fn.trace()
    symbol = {a.name: a.symbols[0] for a in spec.args}
    plane = {symbol[n] for n in wrt}
    drawn = 0
    for g in _switch_expressions(spec.outputs[output].exprs):
        g = g.xreplace({symbol[n]: v for n, v in at.items()})
        if not g.free_symbols or not g.free_symbols <= plane:
            continue
        f = sympy.lambdify([symbol[n] for n in wrt], g, modules="numpy")
        with np.errstate(all="ignore"):
            v = np.broadcast_to(np.asarray(f(*np.meshgrid(x, y)), dtype=float), (len(y), len(x)))
        if np.nanmin(v) < 0 < np.nanmax(v):
            ax.contour(x, y, v, levels=[0], colors="white", linestyles=":", linewidths=1.5)
            drawn += 1
    return drawn


def _color_limits(data: np.ndarray) -> tuple[float, float]:
    """Colour limits that show the surface, not its poles: its finite values but the top and bottom 0.5%."""
    finite = data[np.isfinite(data)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = np.percentile(finite, [0.5, 99.5])
    return (float(lo), float(hi)) if lo < hi else (float(lo) - 1.0, float(hi) + 1.0)


def heatmap(fn, wrt: tuple, range, range2, at, output: int, points: int, path):  # noqa: A002
    """Heat maps of the value and the gradient norm of ``fn`` over ``range`` (along ``wrt[0]``) by
    ``range2`` (along ``wrt[1]``), side by side; NaN/inf grey, branch switches dotted (``plot``)."""
    from matplotlib import colormaps

    compiled = fn.compiled() if hasattr(fn, "compiled") else fn
    at = _grid_arguments(compiled, wrt, at)
    (lo, hi), (lo2, hi2) = _span(range), _span(range2)
    x, y = np.linspace(lo, hi, points), np.linspace(lo2, hi2, points)
    value, norm = surfaces(compiled, wrt, at, x, y, output)
    fig = _figure()
    fig.set_size_inches(11, 4.5)
    held = ", ".join(f"{n}={v:g}" for n, v in at.items())
    out = f"[{output}]" if compiled.n_outputs > 1 else ""
    titles = (f"{compiled.name}{out}", f"|gradient along {wrt[0]}, {wrt[1]}|")
    switches = 0
    for ax, data, title, cmap in zip(fig.subplots(1, 2), (value, norm), titles, ("viridis", "magma")):
        image = ax.imshow(
            np.ma.masked_invalid(data),
            origin="lower",
            extent=(lo, hi, lo2, hi2),
            aspect="auto",
            interpolation="nearest",
            cmap=colormaps[cmap].with_extremes(bad="0.6"),
        )
        image.set_clim(*_color_limits(data))
        fig.colorbar(image, ax=ax)
        ax.set(xlabel=wrt[0], ylabel=wrt[1], title=title)
        if hasattr(fn, "trace"):
            switches = _switch_contours(ax, fn, wrt, at, x, y, output)
    notes = [held] if held else []
    notes += ["grey: NaN or inf"] if not (np.isfinite(value).all() and np.isfinite(norm).all()) else []
    notes += ["dotted: branch switches"] if switches else []
    fig.suptitle(f"{compiled.name} [{compiled.origin}]" + (f"  ({'; '.join(notes)})" if notes else ""))
    if path is not None:
        fig.savefig(path)
    return fig
