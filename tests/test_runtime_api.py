"""The PyTorch API a small model needs, against PyTorch 2.13 on the same inputs: factories, random tensors,
joins, Tensor methods, dtype conversions, grad-mode switches and save/load (values, gradients, dtypes and
error messages).

Tolerances: float64 rtol 1e-10 (compositions such as ``var`` sum in another order than PyTorch), float32
rtol 2e-6; structural results (shapes, dtypes, integer values, factories) must be equal.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import symgrad as sg

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(22)
RTOL = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 2e-6}
TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64, np.int64: torch.int64}


def tdtype(dt):
    return TORCH_DTYPE[np.dtype(dt).type]


def compare(f, *arrays, seed=None, check_grad=True):
    """Apply ``f(tensors, module)`` in symgrad and in torch to leaves holding ``arrays`` (floating ones
    require grad); compare results (value and dtype) and the gradients of a weighted sum of the result."""
    ours = [sg.tensor(a, requires_grad=a.dtype.kind == "f", dtype=a.dtype) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out_s, out_t = f(ours, sg), f(theirs, torch)
    assert str(out_s.dtype) == str(out_t.dtype).removeprefix("torch."), (out_s.dtype, out_t.dtype)
    assert out_s.shape == tuple(out_t.shape)
    rtol = RTOL.get(out_s.dtype, 0)
    np.testing.assert_allclose(out_s.data, out_t.detach().numpy(), rtol=rtol, atol=rtol)
    assert out_s.requires_grad == out_t.requires_grad
    if not check_grad or not out_t.requires_grad:
        return
    w = RNG.normal(size=out_s.shape) if seed is None else seed
    (out_s * sg.tensor(w, dtype=out_s.dtype)).sum().backward()
    (out_t * torch.tensor(w, dtype=out_t.dtype)).sum().backward()
    for a, b in zip(ours, theirs):
        if b.grad is None:
            assert a.grad is None
            continue
        assert a.grad.dtype == a.dtype
        rtol = RTOL[a.dtype]
        np.testing.assert_allclose(a.grad.data, b.grad.numpy(), rtol=rtol, atol=rtol)


def same_error(f):
    """``f(module)`` raises the same exception type and message in symgrad as in torch."""
    with pytest.raises(Exception) as theirs:
        f(torch)
    with pytest.raises(type(theirs.value)) as ours:
        f(sg)
    assert str(ours.value) == str(theirs.value)


def n(*shape, dtype=np.float64):
    return RNG.normal(size=shape).astype(dtype)


# -- factories -----------------------------------------------------------------------------------------
FACTORIES = {
    "zeros": lambda m: m.zeros(2, 3),
    "zeros_tuple": lambda m: m.zeros((2, 3), dtype=m.float64),
    "zeros_0d": lambda m: m.zeros(()),
    "ones": lambda m: m.ones([4]),
    "ones_int": lambda m: m.ones(2, dtype=m.int64),
    "full_int": lambda m: m.full((2,), 3),
    "full_float": lambda m: m.full((2, 2), 1.5),
    "full_bool": lambda m: m.full((2,), True),
    "full_dtype": lambda m: m.full((2,), 7, dtype=m.float64),
    "zeros_like": lambda m: m.zeros_like(m.ones(2, 3, dtype=m.float64)),
    "ones_like_dtype": lambda m: m.ones_like(m.ones(2, 3), dtype=m.int64),
    "full_like": lambda m: m.full_like(m.ones(3, dtype=m.int64), 4),
    "eye": lambda m: m.eye(3),
    "eye_rect": lambda m: m.eye(2, 4, dtype=m.int64),
    "arange": lambda m: m.arange(5),
    "arange_start": lambda m: m.arange(2, 9, 3),
    "arange_neg": lambda m: m.arange(5, -4, -2),
    "arange_float": lambda m: m.arange(0, 1, 0.1),
    "arange_float_end": lambda m: m.arange(4.5),
    "arange_odd": lambda m: m.arange(-1.3, 2.9, 0.37),
    "arange_f64": lambda m: m.arange(-1.3, 2.9, 0.37, dtype=m.float64),
    "arange_int_dtype": lambda m: m.arange(0, 10, 3, dtype=m.float32),
    "linspace": lambda m: m.linspace(-1.3, 2.9, 11),
    "linspace_f64": lambda m: m.linspace(-1.3, 2.9, 11, dtype=m.float64),
    "linspace_even": lambda m: m.linspace(0, 1, 10),
    "linspace_one": lambda m: m.linspace(3, 5, 1),
    "linspace_empty": lambda m: m.linspace(3, 5, 0),
    "linspace_int": lambda m: m.linspace(0, 10, 4, dtype=m.int64),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_match_torch_exactly(name):
    ours, theirs = FACTORIES[name](sg), FACTORIES[name](torch)
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    assert ours.shape == tuple(theirs.shape) and ours.is_leaf and not ours.requires_grad
    if ours.dtype.kind == "f":  # PyTorch's vectorized arange/linspace round per SIMD block: within 2 ulp
        eps = np.finfo(ours.dtype).eps
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=2 * eps, atol=2 * eps)
    else:
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_factories_requires_grad_device_and_errors():
    for make in (sg.zeros, sg.ones, sg.empty, sg.randn, sg.rand):
        t = make(2, requires_grad=True, device="cpu")
        assert t.requires_grad and t.is_leaf and t.dtype == np.float32 and t.shape == (2,)
    t = sg.zeros(2, 2, requires_grad=True)
    (t * 3).sum().backward()
    np.testing.assert_array_equal(t.grad.data, np.full((2, 2), 3, np.float32))
    same_error(lambda m: m.zeros(2, dtype=m.int64, requires_grad=True))
    same_error(lambda m: m.arange(0, 5, 0))
    same_error(lambda m: m.arange(5, 0))
    with pytest.raises(TypeError, match='zeros\\(\\) missing 1 required positional arguments: "size"'):
        sg.zeros()
    with pytest.raises(RuntimeError, match="CPU only"):
        sg.ones(2, device="cuda")
    assert sg.empty(3, 2, dtype=sg.float64).dtype == np.float64


# -- random ----------------------------------------------------------------------------------------------
def test_manual_seed_makes_random_tensors_reproducible():
    sg.manual_seed(3)
    a = (sg.rand(4, 5), sg.randn((3,)), sg.randint(0, 10, (6,)), sg.randn(2, dtype=sg.float64))
    sg.manual_seed(3)
    b = (sg.rand(4, 5), sg.randn((3,)), sg.randint(0, 10, (6,)), sg.randn(2, dtype=sg.float64))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.data, y.data)
    assert [x.dtype for x in a] == [np.float32, np.float32, np.int64, np.float64]
    assert sg.initial_seed() == 3
    assert not np.array_equal(sg.rand(4, 5).data, a[0].data)


def test_random_tensors_have_torch_shapes_dtypes_and_distributions():
    sg.manual_seed(0)
    u, z = sg.rand(100_000), sg.randn(1000, 100)
    assert u.dtype == z.dtype == np.float32 and z.shape == (1000, 100) and sg.randn(()).shape == ()
    assert 0 <= u.data.min() and u.data.max() < 1 and abs(u.data.mean() - 0.5) < 0.01
    assert abs(z.data.mean()) < 0.01 and abs(z.data.std() - 1) < 0.01
    k = sg.randint(5, (1000,))
    assert k.dtype == np.int64 and set(np.unique(k.data)) == set(range(5))
    assert sg.randn_like(sg.zeros(2, 3, dtype=sg.float64)).dtype == np.float64
    assert sg.rand_like(sg.zeros(4)).shape == (4,)
    with pytest.raises(TypeError, match="floating point dtype"):
        sg.randn(3, dtype=sg.int64)


# -- joins ---------------------------------------------------------------------------------------------
JOINS = {
    "cat0": (lambda t, m: m.cat([t[0], t[1]]), (2, 3), (4, 3)),
    "cat1": (lambda t, m: m.cat((t[0], t[1], t[0]), dim=1), (2, 3), (2, 1)),
    "cat_neg": (lambda t, m: m.cat([t[0], t[1]], -1).tanh(), (2, 2, 3), (2, 2, 2)),
    "stack0": (lambda t, m: m.stack([t[0], t[1]]), (2, 3), (2, 3)),
    "stack_last": (lambda t, m: m.stack([t[0], t[1] * 2, t[0]], dim=-1), (3,), (3,)),
    "stack1": (lambda t, m: m.stack([t[0], t[1]], 1).sin(), (2, 3), (2, 3)),
    "matmul": (lambda t, m: m.matmul(t[0], t[1]), (2, 3, 4), (4, 5)),
    "matmul_vec": (lambda t, m: m.matmul(t[0], t[1]), (4,), (4, 5)),
}


@pytest.mark.parametrize("name", sorted(JOINS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_joins_match_torch(name, dtype):
    f, *shapes = JOINS[name]
    compare(f, *[n(*s, dtype=dtype) for s in shapes])


def test_cat_promotes_dtypes_and_returns_each_input_its_dtype():
    compare(lambda t, m: m.cat([t[0], t[1]]), n(2, dtype=np.float32), n(3))
    compare(lambda t, m: m.cat([t[0], t[1]]), n(2, dtype=np.float32), np.arange(3))
    compare(lambda t, m: m.stack([t[0], t[1]]), np.arange(3), np.arange(3))


def second_derivative(program, a):
    """Hessian-vector product of ``program(x, module)`` at ``a`` in symgrad and in torch (create_graph)."""
    results = []
    for m in (sg, torch):
        x = m.tensor(a, requires_grad=True)
        grad = torch.autograd.grad if m is torch else sg.grad
        (g,) = grad(program(x, m), x, create_graph=True)
        (h,) = grad((g * m.tensor(a + 1)).sum(), x)
        results.append(h.detach().numpy() if m is torch else h.data)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10, atol=1e-12)


SECOND_ORDER = {  # forward ops that are not compiled primitives (those differentiate once)
    "cat": lambda x, m: m.cat([x @ x.T, x.T @ x], 1).sum(),
    "stack_prod": lambda x, m: m.stack([x, x.t()]).prod(0).sum(),
    "prod": lambda x, m: m.stack([x.prod(1).sum(), x.prod(), x.prod(0, keepdim=True).sum()]).sum(),
    "clamp": lambda x, m: x.clamp(-1, 1).prod(0).sum(),
    "double_mod": lambda x, m: m.stack([x.double().prod(), (x % 0.7).prod()]).sum(),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_derivatives_match_torch(name):
    second_derivative(SECOND_ORDER[name], np.array([[0.5, -1.5, 2.0], [1.0, 0.0, 3.0], [-0.5, 2.5, 1.5]]))


JOIN_ERRORS = [
    lambda m: m.cat([]),
    lambda m: m.stack([]),
    lambda m: m.cat([m.ones(2, 2), m.ones(3, 3)], 1),
    lambda m: m.cat([m.ones(2, 2), m.ones(2)], 1),
    lambda m: m.cat([m.ones(2, 2), m.ones(2, 2)], 2),
    lambda m: m.cat([m.ones(1), [1.0]]),
    lambda m: m.stack([m.ones(2, 3), m.ones(2, 4)]),
    lambda m: m.stack([m.ones(2, 3), m.ones(2, 3)], 3),
]


@pytest.mark.parametrize("k", range(len(JOIN_ERRORS)))
def test_join_errors_read_as_torch(k):
    if k == 0:  # torch names itself: "torch.cat(): expected a non-empty list of Tensors"
        with pytest.raises(ValueError, match="cat\\(\\): expected a non-empty list of Tensors"):
            sg.cat([])
        return
    same_error(JOIN_ERRORS[k])


# -- Tensor methods ------------------------------------------------------------------------------------
KINKS = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
METHODS = {
    "clamp": (lambda t, m: t[0].clamp(-1, 1), KINKS),
    "clamp_min": (lambda t, m: t[0].clamp(min=-0.5), KINKS),
    "clamp_max": (lambda t, m: t[0].clamp(max=0.5), KINKS),
    "clamp_crossed": (lambda t, m: t[0].clamp(1, -1), KINKS),
    "clip": (lambda t, m: t[0].clip(-1, 0.5), KINKS),
    "clamp_tensor_bounds": (
        lambda t, m: t[0].clamp(t[1], t[2]),
        KINKS,
        np.full(7, -1.0),
        np.array([1.0] * 6 + [-3]),
    ),
    "clamp_broadcast_bound": (lambda t, m: t[0].clamp(min=t[1]), n(3, 4), n(4)),
    "var": (lambda t, m: t[0].var(), n(3, 4)),
    "var_dim": (lambda t, m: t[0].var(1), n(3, 4)),
    "var_biased": (lambda t, m: t[0].var(0, unbiased=False, keepdim=True), n(3, 4)),
    "var_correction": (lambda t, m: t[0].var(dim=(0, 2), correction=2), n(3, 4, 2)),
    "var_positional_unbiased": (lambda t, m: t[0].var(False), n(5)),
    "std": (lambda t, m: t[0].std(), n(3, 4)),
    "std_dim": (lambda t, m: t[0].std(-1, keepdim=True), n(3, 4)),
    "std_constant": (lambda t, m: t[0].std(1), np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])),
    "prod": (lambda t, m: t[0].prod(), n(3, 4)),
    "prod_dim": (lambda t, m: t[0].prod(1), n(3, 4)),
    "prod_dim0_keep": (lambda t, m: t[0].prod(0, keepdim=True), n(3, 4)),
    "prod_one_zero": (lambda t, m: t[0].prod(), np.array([1.5, 0.0, 2.0, -3.0])),
    "prod_two_zeros": (lambda t, m: t[0].prod(1), np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 2.0, 1.0]])),
    "norm": (lambda t, m: t[0].norm(), n(3, 4)),
    "norm_dim": (lambda t, m: t[0].norm(dim=1), n(3, 4)),
    "norm_zero": (lambda t, m: t[0].norm(), np.zeros(3)),
    "norm_zero_row": (lambda t, m: t[0].norm(dim=1, keepdim=True), np.array([[0.0, 0.0], [3.0, 4.0]])),
    "norm_p1": (lambda t, m: t[0].norm(p=1, dim=0), n(3, 4)),
    "norm_p3": (lambda t, m: t[0].norm(3), n(3, 4)),
    "norm_p3_zero": (lambda t, m: t[0].norm(3), np.zeros(3)),
    "norm_inf": (lambda t, m: t[0].norm(float("inf")), np.array([1.0, 3.0, 3.0, -3.0])),
    "norm_minus_inf": (lambda t, m: t[0].norm(float("-inf"), dim=1), n(3, 4)),
    "softmax": (lambda t, m: t[0].softmax(1), n(3, 4)),
    "softmax_dim0": (lambda t, m: t[0].softmax(dim=0), n(3, 4)),
    "softmax_large": (
        lambda t, m: t[0].softmax(-1),
        np.array([[1000.0, 999.0, -1000.0], [-800, -801, -802]]),
    ),
    "log_softmax": (lambda t, m: t[0].log_softmax(1), n(3, 4)),
    "log_softmax_large": (
        lambda t, m: t[0].log_softmax(-1),
        np.array([[1000.0, 999.0, -1000.0], [-800, -801, -802]]),
    ),
    "unsqueeze": (lambda t, m: t[0].unsqueeze(1) * t[0].unsqueeze(-1), n(2, 3)),
    "unsqueeze0": (lambda t, m: t[0].unsqueeze(0), n(3)),
    "squeeze": (lambda t, m: t[0].squeeze(), n(1, 3, 1)),
    "squeeze_dim": (lambda t, m: t[0].squeeze(2), n(1, 3, 1)),
    "squeeze_not_one": (lambda t, m: t[0].squeeze(1), n(1, 3, 1)),
    "squeeze_dims": (lambda t, m: t[0].squeeze((0, 1)), n(1, 3, 1)),
    "flatten": (lambda t, m: t[0].flatten(), n(2, 3, 4)),
    "flatten_from1": (lambda t, m: t[0].flatten(1), n(2, 3, 4)),
    "flatten_mid": (lambda t, m: t[0].flatten(0, -2), n(2, 3, 4)),
    "flatten_0d": (lambda t, m: t[0].flatten(), np.array(2.0)),
    "expand": (lambda t, m: t[0].expand(2, 3, 4), n(3, 1)),
    "expand_keep": (lambda t, m: t[0].expand(-1, 5), n(3, 1)),
    "expand_tuple": (lambda t, m: t[0].expand((2, -1)), n(4)),
    "expand_as": (lambda t, m: t[0].expand_as(t[1]) * t[1], n(1, 4), n(3, 4)),
    "t": (lambda t, m: t[0].t() @ t[0], n(2, 3)),
    "t_1d": (lambda t, m: t[0].t(), n(3)),
    "transpose": (lambda t, m: t[0].transpose(0, 2), n(2, 3, 4)),
    "mT": (lambda t, m: t[0].mT, n(2, 3, 4)),
    "permute_T": (lambda t, m: t[0].permute(2, 0, 1) + t[0].T.transpose(1, 2), n(2, 3, 2)),
    "floordiv": (lambda t, m: t[0] // 0.7, n(10) * 3, False),
    "rfloordiv": (lambda t, m: 2.5 // t[0], n(10) * 3, False),
    "floordiv_int": (lambda t, m: t[0] // 3, np.arange(-7, 8), False),
    "mod": (lambda t, m: t[0] % 0.7, n(10) * 3),
    "mod_neg": (lambda t, m: t[0] % -0.7, n(10) * 3),
    "mod_tensors": (lambda t, m: t[0] % t[1], n(3, 4) * 3, n(4) + 0.1),
    "rmod": (lambda t, m: 2.5 % t[0], n(10) * 3, False),  # torch: no derivative for remainder(Scalar, Tensor)
    "rmod_tensor": (lambda t, m: m.tensor(2.5, dtype=t[0].dtype) % t[0], n(10) * 3),
    "mod_int": (lambda t, m: t[0] % 3, np.arange(-7, 8)),
    "mod_int_by_float": (lambda t, m: t[0] % 2.5, np.arange(-7, 8)),
    "contiguous": (lambda t, m: t[0].t().contiguous() * 2, n(2, 3)),
    "clone": (lambda t, m: t[0].clone() * t[0], n(2, 3)),
}


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_methods_match_torch(name, dtype):
    f, *arrays = METHODS[name]
    check_grad = True
    if arrays[-1] is False:
        *arrays, check_grad = arrays
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        compare(f, *arrays, check_grad=check_grad)


def test_var_with_no_degrees_of_freedom_warns_and_gives_nan_or_inf_as_torch():
    for f in (lambda x: x.var(), lambda x: x.std(correction=3), lambda x: x.var(0, correction=2)):
        for a in ([1.0], [1.0, 2.0]):
            results = []
            for m in (torch, sg):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    value = f(m.tensor(a)).item()
                results.append((value, [str(w.message).split(" (Triggered")[0] for w in caught]))
            np.testing.assert_equal(results[1], results[0])


def test_integer_and_error_cases_of_the_methods_read_as_torch():
    for f in (
        lambda m: m.ones(3).expand(2, 4),
        lambda m: m.ones(3).expand(-1, 3),
        lambda m: m.ones(2, 3).expand(3),
        lambda m: m.ones(2, 3, 4).t(),
        lambda m: m.ones(2).unsqueeze(2),
        lambda m: m.ones(2, 1).squeeze(5),
        lambda m: m.ones(2, 3).flatten(1, 0),
        lambda m: m.ones(2).softmax(2),
        lambda m: m.tensor([1.0, 2.0], requires_grad=True).clamp(),
        lambda m: m.tensor([1, 2]).std(),
        lambda m: float(m.ones(2)),
        lambda m: int(m.ones(2)),
        lambda m: m.tensor([5, -5]) // 0,
        lambda m: m.tensor([5, -5]) % 0,
        lambda m: (m.tensor([1.0, 2.0], requires_grad=True) // 2).sum().backward(),
    ):
        same_error(f)
    ints = np.array([3, -4, 7])
    for f in (lambda m, x: x.clamp(0, 5), lambda m, x: x.clamp(min=0.5), lambda m, x: x.prod()):
        ours, theirs = f(sg, sg.tensor(ints)), f(torch, torch.tensor(ints))
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.data, theirs.numpy())


# -- dtypes, conversions, facts ------------------------------------------------------------------------
CONVERSIONS = {
    "float": (lambda t, m: t[0].float() * 2, np.float64),
    "double": (lambda t, m: t[0].double() ** 2, np.float32),
    "to_dtype": (lambda t, m: t[0].to(m.float64).sin(), np.float32),
    "to_kw": (lambda t, m: t[0].to(dtype=m.float32) * t[0].to("cpu", m.float32), np.float64),
    "to_tensor": (lambda t, m: t[0].to(t[1]) * t[1], np.float32, np.float64),
    "type_as": (lambda t, m: t[0].type_as(t[1]) + t[1], np.float64, np.float32),
    "long": (lambda t, m: (t[0] * 3).long(), np.float64),
    "to_int": (lambda t, m: t[0].to(m.int64) + 1, np.float32),
}


@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_conversions_match_torch(name):
    f, *dts = CONVERSIONS[name]
    compare(f, *[n(2, 3, dtype=dt) for dt in dts])


def test_conversions_return_self_when_nothing_changes_and_name_their_nodes_as_torch():
    for m in (sg, torch):
        x = m.ones(2, 3)
        assert x.float() is x and x.to(m.float32) is x and x.contiguous() is x and x.to("cpu") is x
        assert x.to(m.float32, copy=True) is not x and x.type_as(x) is x
        leaf = m.ones(2, requires_grad=True)
        node, clone = leaf.double().grad_fn, leaf.clone().grad_fn
        names = (type(node).__name__, type(clone).__name__) if m is torch else (node.name, clone.name)
        assert names == ("ToCopyBackward0", "CloneBackward0")
        assert not leaf.to(m.int64).requires_grad and not leaf.long().requires_grad
        t = m.arange(6.0).reshape(2, 3).t()
        assert not (t.data.flags.c_contiguous if m is sg else t.is_contiguous())
        assert t.contiguous().data.flags.c_contiguous if m is sg else t.contiguous().is_contiguous()


def test_tensor_facts_dim_device_float_int_as_torch():
    for m in (sg, torch):
        x = m.tensor([[2.7]])
        assert x.dim() == 2 and float(x) == pytest.approx(2.7) and int(x) == 2 and int(-x) == -2
        assert str(x.device) == "cpu" and x.cpu() is x and m.ones(2, 3, 4).dim() == 3
        assert int(m.tensor(5)) == 5 and float(m.tensor(True)) == 1.0
    assert sg.ones(2).device == "cpu" and sg.float32 == np.float32 and sg.long == np.int64
    with pytest.raises(RuntimeError, match="CPU only"):
        sg.ones(2).to("cuda")


# -- grad mode -------------------------------------------------------------------------------------------
def test_set_grad_enabled_as_function_context_and_decorator_as_torch():
    for m in (sg, torch):
        x = m.ones(2, requires_grad=True)
        with m.set_grad_enabled(False):
            assert not (x * 2).requires_grad
            with m.set_grad_enabled(True):
                assert (x * 2).requires_grad
            assert not m.is_grad_enabled()
        assert m.is_grad_enabled()
        m.set_grad_enabled(False)
        try:
            assert not (x * 2).requires_grad and not m.is_grad_enabled()
        finally:
            m.set_grad_enabled(True)
        assert (x * 2).requires_grad

        @m.set_grad_enabled(False)
        def double(t):
            return t * 2

        assert m.is_grad_enabled() and not double(x).requires_grad and m.is_grad_enabled()


def test_inference_mode_records_nothing_and_restores_the_mode():
    for m in (sg, torch):
        x = m.ones(2, requires_grad=True)
        with m.inference_mode():
            assert not (x * 2).requires_grad
        with m.inference_mode(False):
            assert (x * 2).requires_grad
        assert m.is_grad_enabled()

        @m.inference_mode()
        def double(t):
            return t * 2

        assert not double(x).requires_grad and (x * 2).requires_grad


# -- save / load -----------------------------------------------------------------------------------------
def test_save_and_load_a_state_dict_round_trip(tmp_path):
    state = {
        "layer.weight": sg.randn(3, 4),
        "layer.bias": sg.zeros(3, dtype=sg.float64),
        "steps": sg.tensor(7),
        "scale": 0.5,
        "raw": np.arange(4),
    }
    path = tmp_path / "model.pt"
    sg.save(state, path)
    assert path.exists() and not (tmp_path / "model.pt.npz").exists()
    loaded = sg.load(path, map_location="cpu")
    assert list(loaded) == list(state)
    for name, value in state.items():
        assert isinstance(loaded[name], sg.Tensor)
        np.testing.assert_array_equal(loaded[name].data, getattr(value, "data", value))
    assert loaded["layer.bias"].dtype == np.float64 and loaded["steps"].dtype == np.int64
    assert not loaded["layer.weight"].requires_grad


def test_save_and_load_a_nested_checkpoint(tmp_path):
    checkpoint = {
        "model": {"w": sg.ones(2, 2), "b": np.zeros(2)},
        "optim": {"state": {0: {"step": 3, "exp_avg": sg.full((2,), 0.25)}}, "param_groups": [{"lr": 1e-3}]},
        "epoch": 7,
        "name": "run",
        "betas": (0.9, 0.999),
        "best": None,
    }
    sg.save(checkpoint, tmp_path / "ckpt.pt")
    loaded = sg.load(tmp_path / "ckpt.pt")
    assert loaded["epoch"] == 7 and loaded["name"] == "run" and loaded["best"] is None
    assert loaded["betas"] == (0.9, 0.999) and loaded["optim"]["param_groups"] == [{"lr": 1e-3}]
    assert loaded["optim"]["state"][0]["step"] == 3
    np.testing.assert_array_equal(loaded["optim"]["state"][0]["exp_avg"].data, np.full(2, 0.25, np.float32))
    assert isinstance(loaded["model"]["b"], sg.Tensor) and loaded["model"]["w"].dtype == np.float32


def test_save_refuses_code_and_load_never_unpickles(tmp_path):
    with pytest.raises(TypeError, match="the object\\['f'\\] is a builtin_function_or_method"):
        sg.save({"f": print}, tmp_path / "a.npz")
    with pytest.raises(TypeError, match="the object\\['m'\\]\\[0\\] is a object"):
        sg.save({"m": [object()]}, tmp_path / "a.npz")
    path = tmp_path / "pickled.npz"
    np.savez(path, code=np.array([print], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle=False"):
        sg.load(path)
