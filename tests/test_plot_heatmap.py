"""Heat maps of a function of two arguments (``f.plot`` with two ``wrt``, ``symgrad plot --wrt x,y``): the
plotted arrays are the value and the gradient norm, NaN/inf masked, branch switches drawn as zero contours.
Float64 throughout; the compiled kernels match the closed forms to rtol 1e-12."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import symgrad as sg
from tests.cli_runner import ROOT, run_symgrad


@sg.function
def wave(x, y):
    return x**2 * sg.sin(y)


@sg.function
def split(x, y, c):
    return sg.where(x > y, x * c, sg.log(x) + y)


def test_heat_map_draws_value_and_gradient_norm_side_by_side(tmp_path):
    fig = wave.plot((-2, 2), range2=(-1, 3), points=41, path=tmp_path / "wave.png")
    (value,), (norm,) = (ax.images for ax in fig.axes[:2])
    x, y = np.meshgrid(np.linspace(-2, 2, 41), np.linspace(-1, 3, 41))
    np.testing.assert_allclose(value.get_array(), x**2 * np.sin(y), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(norm.get_array(), np.hypot(2 * x * np.sin(y), x**2 * np.cos(y)), rtol=1e-12)
    assert value.get_extent() == [-2, 2, -1, 3]
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == ["x", "x"] and fig.axes[0].get_ylabel() == "y"
    assert (tmp_path / "wave.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heat_map_masks_nan_holds_other_arguments_and_draws_branch_switches():
    fig = split.plot((-2, 2), wrt=("x", "y"), at={"c": 3.0}, points=51)
    (value,), (norm,) = (ax.images for ax in fig.axes[:2])
    x, y = np.meshgrid(np.linspace(-2, 2, 51), np.linspace(-2, 2, 51))
    with np.errstate(all="ignore"):
        expected = np.where(x > y, 3 * x, np.log(x) + y)
        grad = np.where(x > y, 3.0, np.hypot(1 / x, 1.0))
    data = value.get_array()
    assert np.array_equal(data.mask, ~np.isfinite(expected))
    np.testing.assert_allclose(data.compressed(), expected[np.isfinite(expected)], rtol=1e-12)
    np.testing.assert_allclose(norm.get_array(), grad, rtol=1e-12)
    (contour,) = [c for c in fig.axes[0].collections if c.get_linestyle()]
    points = np.concatenate([p.vertices for p in contour.get_paths()])
    assert len(points) > 10
    np.testing.assert_allclose(points[:, 0], points[:, 1], atol=1e-9)  # the switch x = y
    assert "c=3" in fig._suptitle.get_text() and "grey: NaN or inf" in fig._suptitle.get_text()


def test_heat_map_argument_errors():
    with pytest.raises(sg.ModelError, match="two different arguments"):
        wave.plot(wrt=("x", "x"))
    with pytest.raises(sg.ModelError, match="no argument 'z'"):
        split.plot(wrt=("x", "z"))
    with pytest.raises(sg.ModelError, match="y is drawn along y; it takes no --at value"):
        split.plot(wrt=("x", "y"), at={"y": 1.0})
    with pytest.raises(sg.ModelError, match=r"expected A < B, got 1 0"):
        wave.plot((-1, 1), range2=(1, 0))


@pytest.fixture
def model(tmp_path):
    shutil.copy(ROOT / "examples" / "model.py", tmp_path / "model.py")
    return tmp_path


def test_plot_command_draws_a_heat_map(model):
    r = run_symgrad(
        "plot", "model.py", "blend", "--wrt", "x,y", "--range2", "-1", "1", "-o", "m.png", cwd=model
    )
    assert r.returncode == 0 and r.stdout == "wrote m.png\n", r.stderr
    assert (model / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run_symgrad("plot", "model.py", "blend", "-o", "d.svg", cwd=model)  # two arguments: a heat map
    assert r.returncode == 0 and "<image" in (model / "d.svg").read_text()
