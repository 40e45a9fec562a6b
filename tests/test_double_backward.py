"""Double backward through compiled tape nodes (``create_graph=True``): second derivatives from the hvp and
jvp kernels, against closed forms and PyTorch on the same numbers, on both node paths (Jacobian-saving and
vjp), both backends and both float dtypes. Third and fourth derivatives go through the vjp compiled as a
function of its own (``CompiledFunction.derived("vjp")``); where its source is not reachable, a third
differentiation is refused clearly.

Tolerances: float64 rtol 1e-10 (atol 1e-12); float32 rtol 2e-4 (atol 1e-5), a few roundings of a second
derivative accumulated in single precision.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import symgrad as sg
from symgrad.runtime import compiled_node

TOL = {"float64": {"rtol": 1e-10, "atol": 1e-12}, "float32": {"rtol": 2e-4, "atol": 1e-5}}
#: third and fourth derivatives: float32 a little looser (more roundings, of larger terms)
TOL_HIGH = {"float64": {"rtol": 1e-10, "atol": 1e-12}, "float32": {"rtol": 1e-3, "atol": 1e-4}}


@sg.function
def cube(x):
    return x**3


@sg.function
def silu(x):
    return x * sg.sigmoid(x)


@sg.function
def wave(x, y):
    return x**2 * sg.sin(y) + sg.exp(x * y)


@sg.function
def polar(r, t):
    return r * sg.cos(t), r * sg.sin(t)


@sg.function
def spring(p: sg.Vector(3), k):
    r = sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2)
    return k * (r - 1) ** 2 / 2


@sg.function(nondiff=("c",), uniform=("s",))
def scaled(x, c, s):
    return s * sg.exp(c * x) + s**2 * x


@pytest.fixture(params=["jacobian", "vjp"])
def path(request, monkeypatch):
    """Both kinds of compiled node: the Jacobian-saving one (small same-shape arguments) and the vjp one."""
    if request.param == "vjp":
        monkeypatch.setattr(compiled_node, "JACOBIAN_MAX", -1)
    return request.param


def close(a, b, dtype):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), **TOL[dtype])


def test_cube_second_derivative_is_6x(backend, dtype, path):
    x = sg.tensor(np.linspace(-2, 2, 7), dtype=dtype, requires_grad=True)
    (g,) = sg.grad(cube(x).sum(), x, create_graph=True)
    assert g.requires_grad and "Backward" in g.grad_fn.name
    close(g.data, 3 * x.data.astype(np.float64) ** 2, dtype)
    (h,) = sg.grad(g.sum(), x, create_graph=True)
    assert h.dtype == x.dtype
    close(h.data, 6 * x.data.astype(np.float64), dtype)


def test_backward_with_create_graph_then_backward_of_the_gradient(path):
    x = sg.tensor(3.0, dtype=np.float64, requires_grad=True)
    cube(x).backward(create_graph=True)
    g = x.grad
    assert g.item() == 27.0 and g.requires_grad
    x.grad = None
    g.backward()
    assert x.grad.item() == 18.0


def test_a_third_differentiation_without_a_reachable_source_is_refused(monkeypatch, path):
    """Past the second order a compiled node needs its source; without one the refusal names the way out."""
    import symgrad.func

    monkeypatch.setattr(symgrad.func, "_vjps", {})
    monkeypatch.setattr(cube.compiled(), "symbolic", None)  # a traced package: no model file either
    x = sg.tensor(2.0, dtype=np.float64, requires_grad=True)
    (g,) = sg.grad(cube(x), x, create_graph=True)
    (h,) = sg.grad(g, x, create_graph=True)
    assert h.item() == 12.0
    with pytest.raises(
        RuntimeError, match=r"third derivative through the compiled function 'cube'.*sg\.func\.grad"
    ):
        sg.grad(h, x)
    assert sg.func.grad(sg.func.grad(sg.func.grad(cube)))(2.0) == 6.0  # the way the message points to


def hvp_both(build, arrays, wrt, dtype, seed=1):
    """d/d(wrt) <v, d(sum of build's outputs)/d(wrt)> in symgrad and in torch, from the same numbers."""
    results = []
    for m in (sg, torch):
        ts = [
            m.tensor(a, requires_grad=k in wrt) if isinstance(a, np.ndarray) else a
            for k, a in enumerate(arrays)
        ]
        grad = sg.grad if m is sg else torch.autograd.grad
        out = build(m, *ts)
        loss = sum(
            (o * m.tensor(np.cos(np.arange(o.numel())).reshape(o.shape).astype(dtype))).sum() for o in out
        )
        gs = grad(loss, [ts[k] for k in wrt], create_graph=True)
        vs = [
            np.random.default_rng(seed + k).normal(size=tuple(g.shape)).astype(dtype)
            for k, g in enumerate(gs)
        ]
        inner = sum((g * m.tensor(v)).sum() for g, v in zip(gs, vs))
        hs = grad(inner, [ts[k] for k in wrt])
        results.append([h.detach().numpy() if m is torch else h.data for h in hs])
    for a, b in zip(*results):
        assert a.dtype == np.dtype(dtype) and a.shape == b.shape
        close(a, b, dtype)


def test_two_arguments_against_torch(backend, dtype, path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2, 5)).astype(dtype)

    def build(m, a, b):
        if m is sg:
            return [wave(a, b)]
        return [a**2 * torch.sin(b) + torch.exp(a * b)]

    hvp_both(build, [x, y], (0, 1), dtype)
    hvp_both(build, [x, y], (1,), dtype)


def test_broadcast_arguments_sum_back(backend, dtype):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4, 1)).astype(dtype), rng.normal(size=3).astype(dtype)

    def build(m, a, b):
        return [wave(a, b)] if m is sg else [a**2 * torch.sin(b) + torch.exp(a * b)]

    hvp_both(build, [x, y], (0, 1), dtype)


def test_two_outputs_against_torch(backend, dtype):
    rng = np.random.default_rng(2)
    r, t = rng.uniform(0.5, 2, size=(2, 6)).astype(dtype)

    def build(m, a, b):
        return list(polar(a, b)) if m is sg else [a * torch.cos(b), a * torch.sin(b)]

    hvp_both(build, [r, t], (0, 1), dtype)


def test_vector_argument_against_torch(backend, dtype):
    rng = np.random.default_rng(3)
    p, k = rng.normal(size=(5, 3)).astype(dtype), rng.uniform(1, 2, size=5).astype(dtype)

    def build(m, a, b):
        if m is sg:
            return [spring(a, b)]
        return [b * (torch.sqrt((a**2).sum(-1)) - 1) ** 2 / 2]

    hvp_both(build, [p, k], (0, 1), dtype)


def test_nondiff_and_uniform_arguments_against_torch(backend, dtype):
    rng = np.random.default_rng(4)
    x, c = rng.normal(size=(2, 6)).astype(dtype)
    s = 1.5

    def build(m, a, b):
        return [scaled(a, b, s)] if m is sg else [s * torch.exp(b * a) + s**2 * a]

    hvp_both(build, [x, c], (0,), dtype)


def test_a_cotangent_that_requires_grad_gets_the_jvp(backend, path):
    """d/dw of <v, vjp(x, w)> is jvp(x, v): grad_outputs that are themselves tracked."""
    rng = np.random.default_rng(5)
    x0, w0, v0 = rng.normal(size=(3, 4))
    results = []
    for m in (sg, torch):
        x, w = m.tensor(x0, requires_grad=True), m.tensor(w0, requires_grad=True)
        grad = sg.grad if m is sg else torch.autograd.grad
        y = silu(x) if m is sg else torch.nn.functional.silu(x)
        (g,) = grad(y, x, grad_outputs=w, create_graph=True)
        results.append(
            [h.detach().numpy() if m is torch else h.data for h in grad((g * m.tensor(v0)).sum(), [x, w])]
        )
    for a, b in zip(*results):
        close(a, b, "float64")


def test_gradient_penalty_training_matches_torch(backend, dtype):
    """WGAN-GP: loss = mean(critic(x)) + 10 mean((|d critic / dx| - 1)^2), critic = head . silu(Linear(x)),
    the activation a compiled function; parameter gradients and three SGD steps against torch."""
    rng = np.random.default_rng(6)
    w, b, head = rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=4)
    data = rng.normal(size=(8, 3)).astype(dtype)
    lin = sg.nn.Linear(3, 4, dtype=dtype)
    tlin = torch.nn.Linear(3, 4, dtype=getattr(torch, dtype))
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(w)), tlin.bias.copy_(torch.tensor(b))
    lin.weight.data[...], lin.bias.data[...] = w, b
    sh = sg.nn.Parameter(head.astype(dtype))
    th = torch.nn.Parameter(torch.tensor(head.astype(dtype)))
    opt = sg.optim.SGD([lin.weight, lin.bias, sh], lr=0.05)
    topt = torch.optim.SGD([tlin.weight, tlin.bias, th], lr=0.05)
    for _ in range(3):
        x, tx = sg.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
        out, tout = silu(lin(x)) @ sh, torch.nn.functional.silu(tlin(tx)) @ th
        (gx,) = sg.grad(out.sum(), x, create_graph=True)
        (tgx,) = torch.autograd.grad(tout.sum(), tx, create_graph=True)
        loss = out.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        tloss = tout.mean() + 10 * ((tgx.norm(dim=1) - 1) ** 2).mean()
        opt.zero_grad(), topt.zero_grad()
        loss.backward(), tloss.backward()
        close(loss.data, tloss.detach().numpy(), dtype)
        for p, tp in ((lin.weight, tlin.weight), (lin.bias, tlin.bias), (sh, th)):
            assert p.grad.dtype == np.dtype(dtype)
            close(p.grad.data, tp.grad.numpy(), dtype)
        opt.step(), topt.step()
    close(lin.weight.data, tlin.weight.detach().numpy(), dtype)


def test_without_create_graph_the_gradient_is_a_plain_tensor(path):
    """Without create_graph the gradient is a plain leaf, as before."""
    x = sg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (g,) = sg.grad(cube(x).sum(), x)
    assert not g.requires_grad and g.grad_fn is None
    np.testing.assert_array_equal(g.data, 3 * x.data**2)


@sg.function
def wide(p: sg.Vector(50)):
    return sg.log(1 + sum((k + 1) * p[k] ** 2 for k in range(50))) + p[0] * p[49]


def test_a_function_too_large_for_a_hessian_program_still_differentiates_twice(backend):
    """50 inputs: 1275 Hessian entries, over ``HESSIAN_MAX_ENTRIES``; the hvp program is built regardless."""
    programs = wide.compiled().programs
    assert "value_jacobian_hessian" not in programs and "hvp" in programs
    rng = np.random.default_rng(7)
    p0 = rng.normal(size=(3, 50))
    scale = np.arange(1, 51)

    def build(m, a):
        if m is sg:
            return [wide(a)]
        return [torch.log(1 + (torch.tensor(scale) * a**2).sum(-1)) + a[:, 0] * a[:, 49]]

    hvp_both(build, [p0], (0,), "float64")


def test_tape_primitives_with_python_numbers_against_torch(backend, path):
    """The tape's own elementwise ops are compiled nodes: constants (numbers) get no gradient, and the
    second derivative of <g, g> for g = dy/dx matches torch."""
    results = []
    for m in (sg, torch):
        x = m.tensor(np.linspace(0.5, 2, 6), requires_grad=True)
        grad = sg.grad if m is sg else torch.autograd.grad
        y = (3.0 * x).sin() * x**2.5 + 2.0 / x + x.exp() * x.log()
        (g,) = grad(y.sum(), x, create_graph=True)
        (h,) = grad((g * g).sum(), x)
        results.append(h.data if m is sg else h.numpy())
    close(results[0], results[1], "float64")


def test_a_function_without_an_hvp_program_refuses_the_second_differentiation(monkeypatch, path):
    """(A function whose second derivative symgrad cannot take compiles no hvp program.)"""
    monkeypatch.delitem(cube.compiled().programs, "hvp")
    x = sg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (g,) = sg.grad(cube(x).sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.data, [3.0, 12.0])
    with pytest.raises(RuntimeError, match="double backward through the compiled function 'cube'"):
        sg.grad(g.sum(), x)


@sg.function
def sin_times(x, y):
    return sg.sin(x) * y


def derivatives(m, build, xs, order):
    """The first ``order`` derivatives of sum(build(*xs)) with respect to xs[0], each taken of the sum of
    the last with create_graph=True (``m``: sg or torch; numbers as arrays)."""
    ts = [m.tensor(a, requires_grad=True) for a in xs]
    current, found = build(*ts).sum(), []
    for _ in range(order):
        if m is sg:
            (current,) = sg.grad(current, ts[0], create_graph=True)
        else:  # (x^3's fourth derivative does not depend on x: zeros, not torch's error)
            (current,) = torch.autograd.grad(current, ts[0], create_graph=True, materialize_grads=True)
        found.append(current.detach().numpy() if m is torch else current.data)
        current = current.sum()
    return found


def close_high(a, b, dtype):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), **TOL_HIGH[dtype])


@pytest.mark.parametrize(
    "case",
    ["cube_of_primitives", "exp", "user_function"],
)
def test_third_and_fourth_derivatives_against_closed_forms_and_torch(backend, dtype, path, case):
    """x*x*x (the tape's mul), sg.exp and a user @sg.function sin(x) * y, to the fourth order."""
    rng = np.random.default_rng(8)
    x0, y0 = rng.uniform(-2, 2, size=(2, 5)).astype(dtype)
    if case == "cube_of_primitives":
        builds = (lambda x, y: x * x * x * y, lambda x, y: x * x * x * y)
        exact = [3 * x0**2 * y0, 6 * x0 * y0, 6 * y0, 0 * x0]
    elif case == "exp":
        builds = (lambda x, y: sg.exp(x) * y, lambda x, y: torch.exp(x) * y)
        exact = [np.exp(x0) * y0] * 4
    else:
        builds = (sin_times, lambda x, y: torch.sin(x) * y)
        s, c = np.sin(x0.astype(np.float64)), np.cos(x0.astype(np.float64))
        exact = [c * y0, -s * y0, -c * y0, s * y0]
    ours = derivatives(sg, builds[0], [x0, y0], 4)
    theirs = derivatives(torch, builds[1], [x0, y0], 4)
    for k, (a, b, e) in enumerate(zip(ours, theirs, exact)):
        assert a.dtype == np.dtype(dtype) and a.shape == x0.shape, k
        close_high(a, e, dtype)
        close_high(a, b, dtype)


def test_a_third_derivative_mixes_arguments_and_tracked_cotangents_like_torch(backend, dtype):
    """d^3/dx dy dx of sin(x) y through a user function, and a tracked grad_outputs, against torch."""
    rng = np.random.default_rng(9)
    x0, y0, w0 = rng.normal(size=(3, 4)).astype(dtype)
    results = []
    for m in (sg, torch):
        x, y, w = (m.tensor(a, requires_grad=True) for a in (x0, y0, w0))
        grad = sg.grad if m is sg else torch.autograd.grad
        out = sin_times(x, y) if m is sg else torch.sin(x) * y
        (gx,) = grad(out, x, grad_outputs=w, create_graph=True)  # cos(x) y w
        (gxy,) = grad(gx.sum(), y, create_graph=True)  # cos(x) w
        hx, hw = grad((gxy * gxy).sum(), [x, w])  # -2 cos sin w^2, 2 cos^2 w
        results.append([t.detach().numpy() if m is torch else t.data for t in (gx, gxy, hx, hw)])
    for a, b in zip(*results):
        close_high(a, b, dtype)
    c, s = np.cos(x0.astype(np.float64)), np.sin(x0.astype(np.float64))
    close_high(results[0][2], -2 * c * s * w0.astype(np.float64) ** 2, dtype)


def test_a_model_file_package_differentiates_to_any_order_while_its_file_is_unchanged(
    tmp_path, monkeypatch, path
):
    """A package compiled from a model file finds its source by the manifest; once the file changed, the
    third differentiation is refused."""
    model = tmp_path / "model_tape3.py"
    model.write_text("import symgrad as sg\n\n\n@sg.function\ndef quartic(x):\n    return x**4\n")
    quartic = sg.compile(model).quartic
    assert quartic.symbolic is None
    x = sg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    found = derivatives(sg, lambda t, _: quartic(t), [x.data, x.data], 4)
    for a, e in zip(found, [4 * x.data**3, 12 * x.data**2, 24 * x.data, 24 + 0 * x.data]):
        np.testing.assert_allclose(a, e, **TOL_HIGH["float64"])
    model.write_text(model.read_text() + "\n# changed\n")
    import symgrad.func

    monkeypatch.setattr(symgrad.func, "_vjps", {})  # (as in a new process)
    (g,) = sg.grad(quartic(x).sum(), x, create_graph=True)
    (h,) = sg.grad(g.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="third derivative through the compiled function 'quartic'"):
        sg.grad(h.sum(), x)


def test_third_order_of_vector_two_output_and_nondiff_uniform_functions_against_torch(backend, dtype):
    """Third derivatives through derived vjp functions of a vector argument, two outputs, and nondiff and
    uniform arguments (torch: the same closed forms)."""
    rng = np.random.default_rng(10)
    p0, k0 = rng.normal(size=(5, 3)).astype(dtype), rng.uniform(1, 2, size=5).astype(dtype)
    r0, t0 = rng.uniform(0.5, 2, size=(2, 4)).astype(dtype)
    x0, c0 = rng.normal(size=(2, 4)).astype(dtype)
    results = []
    for m in (sg, torch):
        grad = sg.grad if m is sg else torch.autograd.grad
        p, k, r, t, x, c = (m.tensor(a, requires_grad=True) for a in (p0, k0, r0, t0, x0, c0))
        out = spring(p, k) if m is sg else k * (torch.sqrt((p**2).sum(-1)) - 1) ** 2 / 2
        gp, gk = grad(out.sum(), [p, k], create_graph=True)
        (hp,) = grad((gp * gp).sum() + (gk * gk).sum(), p, create_graph=True)
        found = list(grad((hp**2).sum(), [p, k]))
        a, b = polar(r, t) if m is sg else (r * torch.cos(t), r * torch.sin(t))
        gr, gt = grad((a * b).sum() + a.sum(), [r, t], create_graph=True)
        h1, h2 = grad((gr * gt).sum(), [r, t], create_graph=True)
        found += grad((h1 * h2).sum(), [r, t])
        o = scaled(x, c, 1.5) if m is sg else 1.5 * torch.exp(c * x) + 2.25 * x
        (g,) = grad(o.sum(), x, create_graph=True)
        (h,) = grad(g.sum(), x, create_graph=True)
        found += grad(h.sum(), x)  # (c is nondiff: no gradient in symgrad)
        results.append([f.detach().numpy() if m is torch else f.data for f in found])
    for a, b in zip(*results):
        assert a.dtype == np.dtype(dtype)
        close_high(a, b, dtype)
