"""Second derivatives through ``to_torch()`` and ``to_jax()``: double backward (``gradgradcheck``,
``create_graph=True``), ``torch.func.hessian``/``jvp``, ``torch.autograd.forward_ad``, ``jax.hessian``/
``jacfwd``/``jvp`` and grad of grad, against the compiled ``hessian``/``jvp``/``hvp`` kernels and against the
same function written in PyTorch; on both backends and dtypes.

Tolerances: float64 rtol 1e-10 (atol 1e-12), float32 rtol 2e-4 (atol 2e-4 times the largest entry): the
frameworks reach the same derivative programs as the compiled entry points (hvp or the Hessian program
against the Hessian program), so they differ by the rounding of a few dozen operations.
``gradgradcheck`` uses its own finite differences (float64, its default tolerances).
"""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy

from symgrad.interop.torch import to_torch  # noqa: E402 (after the skip)

RNG = np.random.default_rng(2101)
TOL = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-4)}
IMPLS = ("auto", "custom_op", "function")
enable_x64 = getattr(jax, "enable_x64", None)
if enable_x64 is None:
    from jax.experimental import enable_x64


@sg.function
def wave(x):
    """One scalar argument."""
    return sg.sin(x) * x**3 + sg.exp(-x * x)


@sg.function
def mix(x, y):
    """Two arguments, broadcast against each other in the tests."""
    return sg.tanh(x * y) + x**2 * sg.exp(-y)


@sg.function
def spring(p: sg.Vector(3), k):
    """A per-element vector argument and a scalar one."""
    length = sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2)
    return k * (length - 1) ** 2 / 2 + sg.softplus(-p[2])


@sg.function
def polar(r, theta):
    """Two outputs."""
    return r * sg.cos(theta), r * sg.sin(theta) * sg.sigmoid(r)


def torch_mix(x, y):
    return torch.tanh(x * y) + x**2 * torch.exp(-y)


def _args(name: str, dtype: str) -> tuple:
    """Arguments of each function; ``mix`` broadcasts a (3,) ``y`` against a (4, 3) ``x``."""
    args = {
        "wave": (RNG.uniform(-1.5, 1.5, 5),),
        "mix": (RNG.uniform(-1, 1, (4, 3)), RNG.uniform(-1, 1, 3)),
        "spring": (RNG.normal(size=(4, 3)), RNG.uniform(0.5, 2, 4)),
        "polar": (RNG.uniform(0.2, 2, 4), RNG.uniform(-3, 3, 4)),
    }[name]
    return tuple(a.astype(dtype) for a in args)


FUNCTIONS = {"wave": wave, "mix": mix, "spring": spring, "polar": polar}


def _close(actual, expected, dtype: str) -> None:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    tol = dict(TOL[dtype])
    if dtype == "float32":
        tol["atol"] *= max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, **tol)


def _row_blocks(hess, sizes: list[int]) -> np.ndarray:
    """Per-row Hessian blocks from a framework (``hess[i][j]`` of shape batch + shape_i + shape_j, as
    ``hessian(argnums=...)`` under vmap gives them) as one batch + (n_in, n_in) array, the compiled layout."""
    rows = []
    for i, si in enumerate(sizes):
        blocks = [np.asarray(hess[i][j], np.float64) for j in range(len(sizes))]
        n = blocks[0].shape[0]
        rows.append(np.concatenate([b.reshape(n, si, sj) for b, sj in zip(blocks, sizes)], axis=2))
    return np.concatenate(rows, axis=1)


def _dense_mix_hessian(x, y) -> dict:
    """Hessian blocks of ``sum(mix(x, y))`` for x (4, 3), y (3,) from the compiled per-element Hessian: the
    broadcast y's blocks sum over the rows."""
    h = mix.compiled().hessian(x, np.broadcast_to(y, x.shape)).astype(np.float64)  # (4, 3, 2, 2)
    n, m = x.shape
    hxx = np.zeros((n, m, n, m))
    hxy = np.zeros((n, m, m))
    for i in range(n):
        for j in range(m):
            hxx[i, j, i, j] = h[i, j, 0, 0]
            hxy[i, j, j] = h[i, j, 0, 1]
    return {"xx": hxx, "xy": hxy, "yy": np.diag(h[..., 1, 1].sum(0))}


# ============================================================================================ PyTorch ====
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["wave", "mix", "spring", "polar"])
def test_torch_gradgradcheck(backend, impl, name):
    op = to_torch(FUNCTIONS[name].compiled(), implementation=impl)
    args = tuple(torch.tensor(a, requires_grad=True) for a in _args(name, "float64"))
    assert torch.autograd.gradgradcheck(op, args)


@pytest.mark.parametrize("impl", ["auto", "custom_op"])
def test_torch_func_hessian_per_row(backend, dtype, impl):
    """vmap(hessian) of the vector-argument function against the compiled Hessian program."""
    fn = spring.compiled()
    op = to_torch(fn, implementation=impl)
    p, k = _args("spring", dtype)
    hess = torch.func.vmap(torch.func.hessian(op, argnums=(0, 1)))(torch.tensor(p), torch.tensor(k))
    assert hess[0][0].dtype == getattr(torch, dtype)
    _close(_row_blocks(hess, [3, 1]), fn.hessian(p, k), dtype)


@pytest.mark.parametrize("impl", ["auto", "custom_op"])
def test_torch_func_hessian_with_broadcasting(backend, dtype, impl):
    """hessian of a sum over a broadcast argument: the y blocks sum over the rows it was broadcast to."""
    op = to_torch(mix.compiled(), implementation=impl)
    x, y = _args("mix", dtype)
    hess = torch.func.hessian(lambda a, b: op(a, b).sum(), argnums=(0, 1))(torch.tensor(x), torch.tensor(y))
    expected = _dense_mix_hessian(x, y)
    _close(hess[0][0].numpy(), expected["xx"], dtype)
    _close(hess[0][1].numpy(), expected["xy"], dtype)
    _close(hess[1][1].numpy(), expected["yy"], dtype)


@pytest.mark.parametrize("name", ["wave", "mix", "spring", "polar"])
def test_torch_forward_mode(backend, dtype, name):
    """torch.func.jvp and torch.autograd.forward_ad against the compiled jvp, every implementation."""
    fn = FUNCTIONS[name].compiled()
    args = _args(name, dtype)
    tangents = tuple(RNG.normal(size=a.shape).astype(dtype) for a in args)
    expected = fn.jvp(args, tangents)[1]
    expected = expected if isinstance(expected, tuple) else (expected,)
    primals, tans = tuple(map(torch.tensor, args)), tuple(map(torch.tensor, tangents))
    for impl in IMPLS:
        op = to_torch(fn, implementation=impl)
        if impl != "function":  # the autograd.Function alone takes no torch.func transform
            got = torch.func.jvp(op, primals, tans)[1]
            for g, e in zip(got if isinstance(got, tuple) else (got,), expected):
                _close(g.numpy(), e, dtype)
        with torch.autograd.forward_ad.dual_level():
            outs = op(*(torch.autograd.forward_ad.make_dual(p, t) for p, t in zip(primals, tans)))
            for o, e in zip(outs if isinstance(outs, tuple) else (outs,), expected):
                _close(torch.autograd.forward_ad.unpack_dual(o).tangent.numpy(), e, dtype)


@pytest.mark.parametrize("impl", IMPLS)
def test_torch_gradient_penalty_matches_torch(backend, impl):
    """create_graph=True: the gradient of a gradient penalty, against the same function in PyTorch."""
    op = to_torch(mix.compiled(), implementation=impl)
    x0, y0 = _args("mix", "float64")
    results = []
    for f in (op, torch_mix):
        x, y = torch.tensor(x0, requires_grad=True), torch.tensor(y0, requires_grad=True)
        gx, gy = torch.autograd.grad(f(x, y).sum(), (x, y), create_graph=True)
        ((gx**2).sum() + (gy**3).sum()).backward()
        results.append((x.grad.numpy(), y.grad.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
def test_torch_third_derivative_and_missing_hvp_are_refused(impl, monkeypatch):
    """A third derivative names the function; without an hvp program the second one is refused and the
    first still works."""
    fn = wave.compiled()
    x = torch.tensor(_args("wave", "float64")[0], requires_grad=True)
    (g,) = torch.autograd.grad(to_torch(fn, implementation=impl)(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="third derivative through the compiled function 'wave'"):
        h.sum().backward()
    monkeypatch.setattr(fn, "programs", {k: v for k, v in fn.programs.items() if k != "hvp"})
    op = to_torch(fn, implementation=impl)
    (g,) = torch.autograd.grad(op(x).sum(), x)
    np.testing.assert_allclose(g.numpy(), fn.vjp(x.detach().numpy(), np.ones(5))[0])
    (g,) = torch.autograd.grad(op(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward through the compiled function 'wave'"):
        g.sum().backward()


def test_torch_second_order_ops_pass_opcheck():
    """The vjp, jvp and hvp custom ops: schema, fake (meta) implementation, autograd registration, and
    AOT dispatch (which differentiates the op: not for hvp, whose backward is a third derivative)."""
    op = to_torch(mix.compiled(), implementation="custom_op")
    x, y = (torch.tensor(a) for a in _args("mix", "float64"))
    cot = torch.ones(4, 3, dtype=torch.float64)
    ops = {s: getattr(torch.ops.symgrad, op.op_name + s) for s in ("_vjp", "_jvp", "_hvp")}
    no_aot = ("test_schema", "test_autograd_registration", "test_faketensor")
    results = [
        torch.library.opcheck(ops["_vjp"], (x.requires_grad_(), y.requires_grad_(), cot)),
        torch.library.opcheck(ops["_jvp"], (x, y, x.detach() * 2, y.detach() * 2)),
        torch.library.opcheck(ops["_hvp"], (x, y, cot, x.detach() * 2, y.detach() * 2), test_utils=no_aot),
    ]
    assert all(v == "SUCCESS" for r in results for v in r.values()), results


def test_torch_eager_second_derivative_refuses_an_input_changed_in_place():
    """The eager Jacobian-saving forward keeps its inputs by reference: a second derivative after an
    in-place change of one is refused (a first one still uses the saved Jacobian)."""
    op = to_torch(wave.compiled())
    a = torch.tensor(_args("wave", "float64")[0], requires_grad=True)
    x = a * 1.0
    y = op(x)
    with torch.no_grad():
        x.add_(1.0)
    (g,) = torch.autograd.grad(y.sum(), a, retain_graph=True)
    np.testing.assert_allclose(g.numpy(), wave.compiled().vjp(a.detach().numpy(), np.ones(5))[0])
    with pytest.raises(RuntimeError, match="wave: an input changed in place"):
        torch.autograd.grad(y.sum(), a, create_graph=True)


# ================================================================================================ JAX ====
@pytest.mark.parametrize("name", ["spring", "polar"])
def test_jax_hessian_per_row(backend, dtype, name):
    """vmap(jax.hessian) (forward over reverse) and grad of grad (reverse over reverse) against the compiled
    Hessian program; several outputs give one block per output."""
    fn = FUNCTIONS[name].compiled()
    f = fn.to_jax()
    args = _args(name, dtype)
    sizes = [int(np.prod(s)) for s in fn.arg_shapes]
    with enable_x64(dtype == "float64"):
        jargs = tuple(map(jnp.asarray, args))
        hess = jax.vmap(jax.hessian(f, argnums=(0, 1)))(*jargs)
        expected = fn.hessian(*args)
        if fn.n_outputs == 1:
            _close(_row_blocks(hess, sizes), expected, dtype)
            grad_of_grad = jax.grad(lambda *a: jax.grad(lambda *b: f(*b).sum())(*a).sum(), argnums=1)(*jargs)
            _close(grad_of_grad, expected[:, :3, 3].sum(-1), dtype)
        else:
            for o in range(fn.n_outputs):
                _close(_row_blocks(hess[o], sizes), expected[:, o], dtype)


def test_jax_hessian_with_broadcasting(backend, dtype):
    f = mix.compiled().to_jax()
    x, y = _args("mix", dtype)
    with enable_x64(dtype == "float64"):
        hess = jax.hessian(lambda a, b: f(a, b).sum(), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(y))
    expected = _dense_mix_hessian(x, y)
    _close(hess[0][0], expected["xx"], dtype)
    _close(hess[0][1], expected["xy"], dtype)
    _close(hess[1][1], expected["yy"], dtype)


@pytest.mark.parametrize("name", ["wave", "mix", "spring", "polar"])
def test_jax_forward_mode(backend, dtype, name):
    """jax.jvp and jax.jacfwd against the compiled jvp and Jacobian, under jit too."""
    fn = FUNCTIONS[name].compiled()
    f = fn.to_jax()
    args = _args(name, dtype)
    tangents = tuple(RNG.normal(size=a.shape).astype(dtype) for a in args)
    expected = fn.jvp(args, tangents)[1]
    expected = expected if isinstance(expected, tuple) else (expected,)
    with enable_x64(dtype == "float64"):
        jargs, jtans = tuple(map(jnp.asarray, args)), tuple(map(jnp.asarray, tangents))
        got = jax.jit(lambda a, t: jax.jvp(f, a, t)[1])(jargs, jtans)
        for g, e in zip(got if isinstance(got, tuple) else (got,), expected):
            _close(g, e, dtype)
        if name == "wave":
            jac = jax.jacfwd(f)(jargs[0])
            _close(np.diagonal(jac), fn.jacobian(*args)[:, 0, 0], dtype)


def test_jax_without_a_hessian_program_uses_hvp():
    """A function too large for the Hessian program: jax.hessian goes through the hvp kernel."""

    @sg.function
    def wide(p: sg.Vector(50)):
        return sg.log(1 + sum((k + 1) * p[k] ** 2 for k in range(50))) + p[0] * p[49]

    fn = wide.compiled()
    assert "value_jacobian_hessian" not in fn.programs
    p, v = RNG.normal(size=(2, 50)), RNG.normal(size=(2, 50))
    with enable_x64(True):
        hess = jax.vmap(jax.hessian(fn.to_jax()))(jnp.asarray(p))
    np.testing.assert_allclose(np.einsum("nij,nj->ni", hess, v), fn.hvp((p,), (v,))[0], **TOL["float64"])


def test_jax_third_derivative_and_missing_hvp_are_refused(monkeypatch):
    fn = wave.compiled()
    f = fn.to_jax()
    x = _args("wave", "float64")[0]
    with (
        enable_x64(True),
        pytest.raises(RuntimeError, match="third derivative through the compiled function 'wave'"),
    ):
        jax.grad(lambda a: jax.grad(lambda b: jax.grad(lambda c: f(c).sum())(b).sum())(a).sum())(x)
    monkeypatch.setattr(fn, "programs", {k: v for k, v in fn.programs.items() if k != "hvp"})
    with enable_x64(True):
        np.testing.assert_allclose(jax.grad(lambda a: f(a).sum())(x), fn.vjp(x, np.ones(5))[0], rtol=1e-12)
        with pytest.raises(RuntimeError, match="double backward through the compiled function 'wave'"):
            jax.hessian(lambda a: f(a).sum())(x)


def test_jax_host_call_passes_numpy_buffers_eagerly_under_jit_and_vmap():
    """``host_call`` hands the kernels XLA's buffers as NumPy arrays (no ``jax.Array`` copies, which made
    ``pure_callback`` several times slower than the kernel at 1e3 rows), and under vmap calls once with the
    batched axis in front and a leading 1 on an unbatched argument."""
    from symgrad.interop.jax_host import PRIMITIVE, host_call

    assert PRIMITIVE is not None  # this JAX's internals are the ones host_call is built on
    seen = []

    def add(a, b):
        seen.append((type(a), a.shape, b.shape))
        return (np.asarray(a + b),)

    def call(a, b):
        struct = jax.ShapeDtypeStruct(np.broadcast_shapes(a.shape, b.shape), a.dtype)
        return host_call(add, (struct,), a, b)[0]

    a, b = np.arange(6.0, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)
    np.testing.assert_array_equal(call(a, b), a + b)
    np.testing.assert_array_equal(jax.jit(call)(a, b), a + b)
    np.testing.assert_array_equal(jax.vmap(call, in_axes=(0, None))(a, b), a + b)
    assert [s[0] for s in seen] == [np.ndarray] * 3
    assert seen[2][1:] == ((2, 3), (1, 3))


def test_jax_pure_callback_fallback_matches(monkeypatch):
    """Where JAX's internals have moved (``PRIMITIVE`` None), ``to_jax`` goes through ``jax.pure_callback``
    and gives the same values and first and second derivatives."""
    from symgrad.interop import jax_host
    from symgrad.interop.jax import JaxFunction

    fn = spring.compiled()
    args = _args("spring", "float64")
    results = []
    for primitive in (jax_host.PRIMITIVE, None):
        monkeypatch.setattr(jax_host, "PRIMITIVE", primitive)
        f = JaxFunction(fn)
        with enable_x64(True):
            jargs = tuple(map(jnp.asarray, args))
            grad = jax.jit(jax.grad(lambda p, k: f(p, k).sum()))(*jargs)
            hess = jax.vmap(jax.hessian(f))(*jargs)
            results.append((np.asarray(f(*jargs)), np.asarray(grad), np.asarray(hess)))
    for ours, fallback in zip(*results):
        np.testing.assert_array_equal(ours, fallback)
    _close(results[0][2], fn.hessian(*args)[:, :3, :3], "float64")


def test_jax_internals_that_import_but_misbehave_fall_back_to_pure_callback():
    """The host call is built on JAX internals: ones that import but fail (or give wrong values) in a jitted
    and a vmapped trial call leave ``PRIMITIVE`` None, so ``to_jax`` uses ``jax.pure_callback``."""
    from symgrad.interop import jax_host

    assert jax_host._checked(None) is None
    assert jax_host._checked((object(), object(), object())) is None  # binding raises
    prim, flat, shaped = jax_host.PRIMITIVE
    wrong = (prim, lambda function, tree: flat(lambda *a: tuple(x * 3 for x in function(*a)), tree), shaped)
    assert jax_host._checked(wrong) is None  # runs, wrong values
    assert jax_host._checked(jax_host.PRIMITIVE) is jax_host.PRIMITIVE
