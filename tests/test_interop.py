"""PyTorch and JAX interop: ``CompiledFunction.to_torch()`` / ``.to_jax()`` (symgrad/interop).

Each framework's section is skipped when it is not installed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import ArgumentError

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")

MODEL = Path(__file__).resolve().parent.parent / "examples" / "model.py"
RNG = np.random.default_rng(11)


@sg.function
def norm3(p: sg.Vector(3), s):
    """A per-element vector argument and a scalar one."""
    return sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2 + 1) * s


@sg.function
def scaled(x, y):
    """One output returned as a 1-tuple."""
    return (sg.sin(x) * y,)


@pytest.fixture(scope="module")
def m():
    """examples/model.py: neo_relu, softplus, blend (two inputs), gelu_tanh, polar (two outputs)."""
    return sg.compile(MODEL)


@pytest.fixture(scope="module")
def vec():
    return norm3.compiled()


def away_from_zero(*shape):
    """Normal samples kept at least 0.1 from 0 (neo_relu's kink, where finite differences say nothing)."""
    x = RNG.normal(size=shape)
    return np.where(np.abs(x) < 0.1, np.sign(x + 1e-12) * 0.5, x)


# ============================================================================================ PyTorch ====
class TestTorch:
    torch = None

    @pytest.fixture(autouse=True)
    def _torch(self):
        type(self).torch = pytest.importorskip("torch")

    IMPLS = ("auto", "custom_op", "function")

    def op(self, fn, impl="auto"):
        from symgrad.interop.torch import to_torch

        return to_torch(fn, implementation=impl)

    def t(self, a, dtype=None, grad=False):
        torch = self.torch
        return torch.tensor(np.asarray(a), dtype=dtype or torch.float64, requires_grad=grad)

    # -- gradients --------------------------------------------------------------------------------------
    @pytest.mark.parametrize("impl", IMPLS)
    def test_gradcheck_one_input(self, m, impl):
        torch = self.torch
        for name in ("neo_relu", "softplus", "gelu_tanh"):
            x = self.t(away_from_zero(4, 5), grad=True)
            assert torch.autograd.gradcheck(self.op(getattr(m, name), impl), (x,))

    @pytest.mark.parametrize("impl", IMPLS)
    def test_gradcheck_two_inputs_broadcasting(self, m, impl):
        torch = self.torch
        x, y = self.t(RNG.normal(size=(3, 1)), grad=True), self.t(RNG.normal(size=(4,)), grad=True)
        assert torch.autograd.gradcheck(self.op(m.blend, impl), (x, y))
        assert self.op(m.blend, impl)(x, y).shape == (3, 4)

    @pytest.mark.parametrize("impl", IMPLS)
    def test_gradcheck_two_outputs(self, m, impl):
        torch = self.torch
        r, theta = self.t(RNG.normal(size=(2, 3)), grad=True), self.t(RNG.normal(size=(3,)), grad=True)
        polar = self.op(m.polar, impl)
        out = polar(r, theta)
        assert isinstance(out, tuple) and len(out) == 2 and out[0].shape == out[1].shape == (2, 3)
        assert torch.autograd.gradcheck(polar, (r, theta))
        # only one output reaches the loss: the other's cotangent is zero
        r.grad = theta.grad = None
        polar(r, theta)[1].sum().backward()
        np.testing.assert_allclose(
            theta.grad.numpy(), (r.detach() * torch.cos(theta.detach())).sum(0).numpy()
        )

    @pytest.mark.parametrize("impl", IMPLS)
    def test_gradcheck_vector_argument(self, vec, impl):
        torch = self.torch
        p, s = self.t(RNG.normal(size=(5, 3)), grad=True), self.t(RNG.normal(size=(5,)), grad=True)
        op = self.op(vec, impl)
        assert torch.autograd.gradcheck(op, (p, s))
        assert torch.autograd.gradcheck(op, (p, self.t(RNG.normal(size=(2, 1)), grad=True)))
        assert op(p, 2.0).shape == (5,)
        with pytest.raises(ArgumentError, match=r"norm3: argument 'p' must have trailing shape \(3,\)"):
            op(self.t(np.ones((5, 2))), s)

    def test_gradcheck_numpy_backend(self, m, backend):
        torch = self.torch
        x, y = self.t(RNG.normal(size=(3, 1)), grad=True), self.t(RNG.normal(size=(4,)), grad=True)
        assert torch.autograd.gradcheck(self.op(m.blend), (x, y))

    @pytest.mark.parametrize("jac", [True, False])
    def test_gradcheck_both_eager_paths(self, m, jac):
        """apply(jac=True): forward saves the Jacobian, backward is grad * J; jac=False: the vjp kernel."""
        torch = self.torch
        op = self.op(m.blend, "function")
        x, y = self.t(RNG.normal(size=(3, 4)), grad=True), self.t(RNG.normal(size=(4,)), grad=True)
        assert op._use_jacobian([x, y]) and not op._use_jacobian([x[:1].T, y])  # (4,1)x(4,): J too big
        assert torch.autograd.gradcheck(lambda a, b: op.function.apply(jac, a, b), (x, y))
        g = self.op(m.gelu_tanh, "function")
        z = self.t(0.7, grad=True)  # 0-d
        assert torch.autograd.gradcheck(lambda a: g.function.apply(jac, a), (z,))
        with torch.no_grad():
            assert not op._use_jacobian([x, y])
        t = self.op(scaled.compiled(), "function")
        assert t._use_jacobian([x, y])
        assert torch.autograd.gradcheck(lambda a, b: t.function.apply(jac, a, b), (x, y))
        assert isinstance(t(x, y), tuple)

    @pytest.mark.parametrize("impl", IMPLS)
    def test_non_contiguous_inputs(self, m, impl):
        torch = self.torch
        base = self.t(RNG.normal(size=(6, 8)), grad=True)
        x = base[:, ::2].T  # strided, transposed view
        y = self.t(RNG.normal(size=(1, 6)), grad=True)
        assert not x.is_contiguous()
        blend = self.op(m.blend, impl)
        # y.expand: a stride-0 view reaches the op (gradcheck itself only takes non-overlapping leaves)
        assert torch.autograd.gradcheck(lambda a, b: blend(a, b.expand(4, 6)), (x, y))
        out = blend(x, y.expand(4, 6))
        np.testing.assert_allclose(out.detach().numpy(), m.blend(x.detach().numpy(), y.detach().numpy()))

    @pytest.mark.parametrize("impl", IMPLS)
    def test_only_needed_gradients(self, m, impl):
        x = self.t(RNG.normal(size=(3, 4)), grad=True)
        y = self.t(RNG.normal(size=(4,)))
        self.op(m.blend, impl)(x, y).sum().backward()
        assert y.grad is None
        gx, _ = m.blend.vjp(x.detach().numpy(), y.numpy(), np.ones((3, 4)))
        np.testing.assert_allclose(x.grad.numpy(), gx)

    # -- dtypes, values, arguments ------------------------------------------------------------------------
    @pytest.mark.parametrize("impl", IMPLS)
    @pytest.mark.parametrize("dtype", ("float32", "float64"))
    def test_values_and_grads_match_compiled_function(self, m, impl, dtype):
        torch = self.torch
        x = torch.tensor(RNG.normal(size=(7, 3)).astype(dtype), requires_grad=True)
        y = torch.tensor(RNG.normal(size=(3,)).astype(dtype), requires_grad=True)
        seed = RNG.normal(size=(7, 3)).astype(dtype)
        out = self.op(m.blend, impl)(x, y)
        out.backward(torch.from_numpy(seed))
        assert out.dtype == x.grad.dtype == y.grad.dtype == getattr(torch, dtype)
        (value,) = m.blend.forward(x.detach().numpy(), y.detach().numpy())
        gx, gy = m.blend.vjp(x.detach().numpy(), y.detach().numpy(), seed)
        # the same kernels, up to rounding: with a gradient ahead, the eager path runs the fused
        # value_and_jacobian program, whose CSE may round differently from the forward program
        rtol = 2e-6 if dtype == "float32" else 1e-14
        np.testing.assert_allclose(out.detach().numpy(), value, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=10 * rtol, atol=rtol)
        np.testing.assert_allclose(y.grad.numpy(), gy, rtol=10 * rtol, atol=rtol)

    def test_mixed_dtypes_and_python_numbers(self, m):
        torch = self.torch
        blend = self.op(m.blend)
        a = torch.randn(4, requires_grad=True)
        b = torch.randn(4, dtype=torch.float64, requires_grad=True)
        out = blend(a, b)
        assert out.dtype == torch.float64
        out.sum().backward()
        assert a.grad.dtype == torch.float32 and b.grad.dtype == torch.float64
        assert blend(a, 2).dtype == torch.float32  # Python numbers are weak
        assert blend(a.detach(), 0.5).shape == (4,)
        np.testing.assert_allclose(blend(0.3, 0.5).item(), m.blend(0.3, 0.5), rtol=1e-6)
        np.testing.assert_allclose(blend(np.array([0.3]), 0.5).numpy(), m.blend(np.array([0.3]), 0.5))

    def test_zero_copy(self, m, monkeypatch):
        """The kernels see the tensors' own memory, and the results are the kernels' own arrays."""
        torch = self.torch
        from symgrad.interop import torch as interop

        op = self.op(m.blend)
        seen = {}

        class Spy:
            def __getattr__(self, name):
                real = getattr(m.blend, name)
                if name == "run_same_shape":  # same shapes: the kernel's (out, J)

                    def spy_run(program, arrays):
                        result = real(program, arrays)
                        seen[program] = (arrays, result)
                        return result

                    return spy_run
                if name not in ("forward", "vjp", "value_and_jacobian"):
                    return real

                def spy(*arrays):
                    result = real(*arrays)
                    seen[name] = (arrays, result)
                    return result

                return spy

        monkeypatch.setitem(interop._BOUND, op.op_name, Spy())

        def shares(array, tensor):
            return np.shares_memory(array, tensor.detach().numpy())

        for path in ("forward+vjp", "value_and_jacobian", "custom_op"):
            seen.clear()
            x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
            out = (
                op.op(x, y) if path == "custom_op" else op.function.apply(path == "value_and_jacobian", x, y)
            )
            out.backward(torch.ones(3, 4))
            if path == "value_and_jacobian":
                (fx, fy), (o, _) = seen["value_and_jacobian"]
                assert "vjp" not in seen  # backward is grad * J: no kernel call
            else:
                (fx, fy), (o,) = seen["forward"]
                (bx, by, _), (gx, gy) = seen["vjp"]
                assert shares(bx, x) and shares(by, y)
                assert shares(gx, x.grad) and shares(gy, y.grad)
            assert shares(fx, x) and shares(fy, y) and shares(o, out)
        assert op.function.apply(False, x, y).shape == (3, 4)

    def test_argument_errors(self, m):
        torch = self.torch
        blend, relu = self.op(m.blend), self.op(m.neo_relu)
        with pytest.raises(ArgumentError, match=r"neo_relu: argument 'x' has dtype torch.int64"):
            relu(torch.arange(3))
        with pytest.raises(
            ArgumentError,
            match=r"blend: argument batch shapes do not broadcast: 'x' \(3,\), "
            r"'y' \(4,\)",
        ):
            blend(torch.ones(3), torch.ones(4))
        with pytest.raises(ArgumentError, match=r"blend\(\) takes 2 argument\(s\) \(x, y\); got 1"):
            blend(torch.ones(3))
        with pytest.raises(ArgumentError, match=r"neo_relu: argument 'x' must be a torch.Tensor"):
            relu([1.0, 2.0])

    def test_cuda_tensor_is_a_clear_error(self, m):
        torch = self.torch

        class CudaLooking(torch.Tensor):  # a CPU tensor that says it is on a GPU (no GPU needed)
            @property
            def device(self):
                return torch.device("cuda:0")

        fake = torch.Tensor._make_subclass(CudaLooking, torch.ones(3))
        with pytest.raises(
            ArgumentError,
            match=r"neo_relu: argument 'x' is on cuda:0; symgrad's compiled "
            r"kernels run on the CPU",
        ):
            self.op(m.neo_relu)(fake)
        if torch.cuda.is_available():
            with pytest.raises(ArgumentError, match="is on cuda"):
                self.op(m.neo_relu)(torch.ones(3, device="cuda"))

    def test_to_torch_is_cached(self, m):
        assert m.neo_relu.to_torch() is m.neo_relu.to_torch()
        assert "neo_relu" in repr(m.neo_relu.to_torch())

    # -- autograd modes ------------------------------------------------------------------------------------
    @pytest.mark.parametrize("impl", IMPLS)
    def test_no_grad_and_inference_mode(self, m, impl):
        torch = self.torch
        x = torch.randn(5, requires_grad=True)
        op = self.op(m.gelu_tanh, impl)
        with torch.no_grad():
            y = op(x)
        assert not y.requires_grad and y.grad_fn is None
        with torch.inference_mode():
            y = op(x)
        assert not y.requires_grad
        np.testing.assert_allclose(y.numpy(), m.gelu_tanh(x.detach().numpy()))

    @pytest.mark.parametrize("impl", IMPLS)
    def test_third_derivative_is_refused(self, m, impl):
        """Second derivatives work (tests/test_interop_higher.py); a third one names the function."""
        torch = self.torch
        x = torch.randn(3, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(self.op(m.gelu_tanh, impl)(x).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x, create_graph=True)
        with pytest.raises(RuntimeError, match="third derivative through the compiled function 'gelu_tanh'"):
            h.sum().backward()

    def test_module_training_step(self, m):
        """gelu_tanh from symgrad in an nn.Module: same gradients as torch's own GELU, and the loss falls."""
        torch = self.torch
        gelu = self.op(m.gelu_tanh)

        class Net(torch.nn.Module):
            def __init__(self, act):
                super().__init__()
                self.l1, self.l2, self.act = torch.nn.Linear(8, 16), torch.nn.Linear(16, 3), act

            def forward(self, x):
                return self.l2(self.act(self.l1(x)))

        torch.manual_seed(0)
        ours = Net(gelu)
        ref = Net(lambda t: torch.nn.functional.gelu(t, approximate="tanh"))
        ref.load_state_dict(ours.state_dict())
        x = torch.randn(64, 8)
        target = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # learnable labels in {0, 1, 2}
        for net in (ours, ref):
            torch.nn.functional.cross_entropy(net(x), target).backward()
        for a, b in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)
        opt = torch.optim.Adam(ours.parameters(), lr=0.05)
        losses = []
        for _ in range(30):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ours(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.5 * losses[0]

    # -- torch.library ------------------------------------------------------------------------------------
    def test_opcheck(self, m, vec):
        torch = self.torch
        cases = [
            (m.neo_relu, (self.t(away_from_zero(3, 4), grad=True),)),
            (m.blend, (self.t(RNG.normal(size=(3, 1)), grad=True), self.t(RNG.normal(size=(4,)), grad=True))),
            (m.polar, (self.t(RNG.normal(size=(2, 3)), grad=True), self.t(RNG.normal(size=(3,))))),
            (vec, (self.t(RNG.normal(size=(5, 3)), grad=True), self.t(RNG.normal(size=(5,)), grad=True))),
            (m.gelu_tanh, (torch.randn(6, requires_grad=True),)),
        ]
        for fn, args in cases:
            op = self.op(fn, "custom_op")
            torch.library.opcheck(op.op, args)
            outs = op.op(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            cots = tuple(torch.randn_like(o) for o in outs)
            torch.library.opcheck(op.vjp_op, tuple(a.detach() for a in args) + cots)

    # -- torch.func ----------------------------------------------------------------------------------------
    def test_torch_func_vmap_grad_jacrev(self, m):
        torch = self.torch
        blend = self.op(m.blend)
        x, y = self.t(RNG.normal(size=(5, 3))), self.t(RNG.normal(size=(3,)))
        torch.testing.assert_close(torch.func.vmap(blend, in_dims=(0, None))(x, y), blend(x, y))
        torch.testing.assert_close(
            torch.func.vmap(blend, in_dims=(1, None))(x.T.contiguous(), y), blend(x, y)
        )

        def loss(a, b):
            return blend(a, b).sum()

        gx, gy = torch.func.grad(loss, argnums=(0, 1))(x, y)
        ex, ey = m.blend.vjp(x.numpy(), y.numpy(), np.ones((5, 3)))
        np.testing.assert_allclose(gx.numpy(), ex)
        np.testing.assert_allclose(gy.numpy(), ey)
        px, py = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)), in_dims=(0, None))(x, y)
        assert px.shape == py.shape == (5, 3)
        for i in range(5):
            ex, ey = m.blend.vjp(x[i].numpy(), y.numpy(), np.ones(3))
            np.testing.assert_allclose(px[i].numpy(), ex)
            np.testing.assert_allclose(py[i].numpy(), ey)
        jac = torch.func.jacrev(self.op(m.gelu_tanh))(x[0])
        np.testing.assert_allclose(jac.numpy(), np.diag(m.gelu_tanh.vjp(x[0].numpy(), np.ones(3))[0]))

    def test_tensor_leaked_from_a_transform(self, m, monkeypatch):
        """A functorch wrapper that outlived its transform (a dead wrapper) is a valid input: it takes the
        custom op (the eager autograd.Function is applied below torch's unwrapping layer)."""
        torch = self.torch
        op, leaked = self.op(m.softplus), []

        def loss(x):
            leaked.append(x * 2)
            return op(x).sum()

        x = torch.randn(4, dtype=torch.float64)
        torch.testing.assert_close(torch.func.grad(loss)(x), torch.sigmoid(x))
        dead = leaked[0]
        assert torch._C._functorch.is_functorch_wrapped_tensor(dead)

        def not_eager(*args):
            raise AssertionError("a functorch wrapper reached the raw autograd.Function apply")

        monkeypatch.setattr(op, "_eager_apply", not_eager)
        torch.testing.assert_close(op(dead), torch.nn.functional.softplus(2 * x))

    # -- torch.compile -------------------------------------------------------------------------------------
    def _compile_model(self, m, impl):
        torch = self.torch
        act, blend = self.op(m.gelu_tanh, impl), self.op(m.blend, impl)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.l1, self.l2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

            def forward(self, x):
                return self.l2(blend(act(self.l1(x)), 0.5))

        torch.manual_seed(0)
        return Net(), torch.randn(32, 8)

    @pytest.mark.parametrize("impl, breaks", [("auto", 0), ("custom_op", 0), ("function", 2)])
    def test_torch_compile_graph_breaks(self, m, impl, breaks):
        """The custom ops stay in one graph; the autograd.Function is one graph break per call."""
        torch = self.torch
        net, x = self._compile_model(m, impl)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(net)(x)
        assert explained.graph_break_count == breaks

    @pytest.mark.parametrize("impl", ["auto", "function"])
    def test_torch_compile_aot_eager_matches_eager(self, m, impl):
        torch = self.torch
        net, x = self._compile_model(m, impl)
        ref = net(x)
        ref.sum().backward()
        grads = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        torch._dynamo.reset()
        compiled = torch.compile(net, backend="aot_eager", fullgraph=(impl != "function"))
        out = compiled(x)
        out.sum().backward()
        torch.testing.assert_close(out, ref)
        for p, g in zip(net.parameters(), grads):
            torch.testing.assert_close(p.grad, g)

    @pytest.mark.slow
    def test_torch_compile_inductor_fullgraph(self, m):
        """Default backend (inductor), fullgraph=True: the symgrad ops and the compiled backward run."""
        torch = self.torch
        net, x = self._compile_model(m, "auto")
        ref = net(x)
        ref.sum().backward()
        grads = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        torch._dynamo.reset()
        compiled = torch.compile(net, fullgraph=True)
        out = compiled(x)
        out.sum().backward()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        for p, g in zip(net.parameters(), grads):
            torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)


# ================================================================================================ JAX ====
class TestJax:
    jax = jnp = None

    @pytest.fixture(autouse=True)
    def _jax(self):
        jax = pytest.importorskip("jax")
        type(self).jax, type(self).jnp = jax, jax.numpy
        enable_x64 = getattr(jax, "enable_x64", None)
        if enable_x64 is None:
            from jax.experimental import enable_x64
        self.x64 = enable_x64

    def check_grads(self, f, args):
        from jax.test_util import check_grads

        check_grads(f, args, order=1, modes=["rev"])

    def test_check_grads(self, m, vec):
        jnp = self.jnp
        with self.x64(True):
            cases = [
                (m.neo_relu, (jnp.asarray(away_from_zero(4, 3)),)),
                (m.softplus, (jnp.asarray(RNG.normal(size=(5,))),)),
                (m.gelu_tanh, (jnp.asarray(RNG.normal(size=(2, 3))),)),
                (m.blend, (jnp.asarray(RNG.normal(size=(3, 1))), jnp.asarray(RNG.normal(size=(4,))))),
                (m.blend, (jnp.asarray(RNG.normal(size=(3, 4))), jnp.asarray(RNG.normal(size=(4,))))),
                (m.polar, (jnp.asarray(RNG.normal(size=(2, 3))), jnp.asarray(RNG.normal(size=(3,))))),
                (vec, (jnp.asarray(RNG.normal(size=(5, 3))), jnp.asarray(RNG.normal(size=(2, 1))))),
            ]
            for fn, args in cases:
                f = fn.to_jax()
                assert f(*args)[0].dtype == jnp.float64 if fn.returns_tuple else f(*args).dtype == jnp.float64
                self.check_grads(f, args)
                self.check_grads(self.jax.jit(f), args)
            self.check_grads(lambda x: m.blend.to_jax()(x, 0.5), (jnp.asarray(RNG.normal(size=(3,))),))

    def test_jit_and_grad_match_compiled_function(self, m):
        jax, jnp = self.jax, self.jnp
        blend = m.blend.to_jax()
        x, y = RNG.normal(size=(4, 3)).astype(np.float32), RNG.normal(size=(3,)).astype(np.float32)
        out = jax.jit(blend)(x, y)
        assert out.dtype == jnp.float32  # JAX's default without x64
        np.testing.assert_allclose(np.asarray(out), m.blend(x, y), rtol=1e-6)
        gx, gy = jax.jit(jax.grad(lambda a, b: blend(a, b).sum(), argnums=(0, 1)))(x, y)
        ex, ey = m.blend.vjp(x, y, np.ones((4, 3), np.float32))
        assert gy.shape == (3,)
        np.testing.assert_allclose(np.asarray(gx), ex, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(gy), ey, rtol=1e-5)

    def test_two_outputs(self, m):
        jax, jnp = self.jax, self.jnp
        polar = m.polar.to_jax()
        with self.x64(True):
            r, t = jnp.asarray(RNG.normal(size=(2, 3))), jnp.asarray(RNG.normal(size=(3,)))
            a, b = jax.jit(polar)(r, t)
            np.testing.assert_allclose(np.asarray(a), np.asarray(r * jnp.cos(t)))
            np.testing.assert_allclose(np.asarray(b), np.asarray(r * jnp.sin(t)))
            gt = jax.grad(lambda r, t: polar(r, t)[1].sum(), argnums=1)(r, t)  # one output used
            np.testing.assert_allclose(np.asarray(gt), np.asarray((r * jnp.cos(t)).sum(0)))

    def test_vmap_and_per_example_grads(self, m):
        jax, jnp = self.jax, self.jnp
        blend = m.blend.to_jax()
        with self.x64(True):
            x, y = jnp.asarray(RNG.normal(size=(5, 3))), jnp.asarray(RNG.normal(size=(3,)))
            np.testing.assert_allclose(jax.vmap(blend, in_axes=(0, None))(x, y), blend(x, y))
            np.testing.assert_allclose(jax.vmap(blend, in_axes=(1, None))(x.T, y), blend(x, y))
            np.testing.assert_allclose(jax.vmap(blend, in_axes=(0, None))(x[:, 0], 0.5), blend(x[:, 0], 0.5))

            def loss(a, b):
                return blend(a, b).sum()

            px, py = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(0, None)))(x, y)
            for i in range(5):
                ex, ey = m.blend.vjp(np.asarray(x[i]), np.asarray(y), np.ones(3))
                np.testing.assert_allclose(np.asarray(px[i]), ex)
                np.testing.assert_allclose(np.asarray(py[i]), ey)
            jac = jax.jacrev(blend, argnums=1)(x, y)
            assert jac.shape == (5, 3, 3)

    def test_argument_errors(self, m):
        jnp = self.jnp
        with pytest.raises(ArgumentError, match=r"blend: argument batch shapes do not broadcast"):
            m.blend.to_jax()(jnp.ones(3), jnp.ones(4))
        with pytest.raises(ArgumentError, match=r"neo_relu: argument 'x' has dtype int32"):
            m.neo_relu.to_jax()(jnp.ones(3, jnp.int32))
