"""sg.nn and sg.optim against PyTorch 2.13 on the same inputs and weights: modules, losses, functional forms,
state dicts, gradient clipping, AdamW/RMSprop over several steps, lr schedulers.

Tolerances: float32 rtol 1e-5 / atol 2e-6 (a few ulps of different summation orders), float64 rtol 1e-12 /
atol 1e-14, unless a test states otherwise.
"""

from __future__ import annotations

import copy
import math
import re
import warnings

import numpy as np
import pytest

import symgrad as sg

torch = pytest.importorskip("torch")
nn, F = sg.nn, sg.nn.functional
tnn, TF = torch.nn, torch.nn.functional
TOL = {np.float32: dict(rtol=1e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}
TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}
DTYPES = pytest.mark.parametrize("dtype", [np.float32, np.float64])


def pair(array, requires_grad=True):
    """The same values as an sg tensor and a torch tensor."""
    return sg.tensor(array, requires_grad=requires_grad), torch.tensor(array, requires_grad=requires_grad)


def close(ours, theirs, dtype, **tol):
    ours = ours.data if isinstance(ours, sg.Tensor) else ours
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    np.testing.assert_allclose(ours, theirs, **{**TOL[dtype], **tol})


def copy_weights(ours: nn.Module, theirs: torch.nn.Module) -> None:
    theirs.load_state_dict({k: torch.tensor(v.data) for k, v in ours.state_dict().items()})


# -- functional activations: compiled symgrad functions ------------------------------------------------------
ACTIVATIONS = {
    "gelu": (lambda: F.gelu, lambda: TF.gelu),
    "gelu_tanh": (
        lambda: lambda x: F.gelu(x, approximate="tanh"),
        lambda: lambda x: TF.gelu(x, approximate="tanh"),
    ),
    "silu": (lambda: F.silu, lambda: TF.silu),
    "GELU": (lambda: nn.GELU(), lambda: tnn.GELU()),
    "SiLU": (lambda: nn.SiLU(), lambda: tnn.SiLU()),
}


@DTYPES
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_match_torch_and_are_one_compiled_node(name, dtype):
    ours, theirs = (make() for make in ACTIVATIONS[name])
    x = np.random.default_rng(0).normal(scale=3, size=(5, 7)).astype(dtype)
    xs, xt = pair(x)
    ys, yt = ours(xs), theirs(xt)
    assert ys.grad_fn.inputs == (xs,)  # one node: the compiled function's
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    close(ys, yt, dtype)
    close(xs.grad, xt.grad, dtype)


def test_gelu_keeps_the_negative_tail_that_torch_cancels():
    x = np.array([-10.0, -7.0, -5.0], np.float32)
    ref = [v * math.erfc(-v / math.sqrt(2)) / 2 for v in x.astype(np.float64)]
    np.testing.assert_allclose(F.gelu(sg.tensor(x)).data, ref, rtol=1e-5)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh. Got exact"):
        F.gelu(sg.tensor(x), approximate="exact")


# -- binary cross-entropy with logits ------------------------------------------------------------------------
@DTYPES
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_bce_with_logits_matches_torch(dtype, reduction, weighted):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(6, 4)) * 5).astype(dtype)
    x[0, :2] = [200.0, -200.0]  # stable for any logit
    y = rng.uniform(size=(6, 4)).astype(dtype)
    kw = {}
    if weighted:
        kw = dict(
            weight=rng.uniform(size=4).astype(dtype), pos_weight=rng.uniform(0.5, 3, size=4).astype(dtype)
        )
    (xs, xt), (ys, yt) = pair(x), pair(y)
    ls = F.binary_cross_entropy_with_logits(xs, ys, reduction=reduction, **kw)
    lt = TF.binary_cross_entropy_with_logits(
        xt, yt, reduction=reduction, **{k: torch.tensor(v) for k, v in kw.items()}
    )
    module = nn.BCEWithLogitsLoss(reduction=reduction, **kw)(xs, ys)
    close(ls, lt, dtype)
    close(module, lt, dtype)
    ls.sum().backward()
    lt.sum().backward()
    assert np.all(np.isfinite(xs.grad.data))
    close(xs.grad, xt.grad, dtype)
    close(ys.grad, yt.grad, dtype)


def test_bce_with_logits_errors_match_torch():
    x, y = sg.tensor([0.5, 1.0]), sg.tensor([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=re.escape("Target size ([3]) must be the same as input size ([2])")):
        F.binary_cross_entropy_with_logits(x, y)
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        nn.BCEWithLogitsLoss(reduction="avg")
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        tnn.BCEWithLogitsLoss(reduction="avg")(torch.zeros(2), torch.zeros(2))


@DTYPES
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_cross_entropy_modules_match_torch(dtype, reduction):
    rng = np.random.default_rng(2)
    x, target, labels = (
        rng.normal(size=(5, 3)).astype(dtype),
        rng.normal(size=(5, 3)).astype(dtype),
        [0, 2, 1, 1, 0],
    )
    for ours, theirs, t in (
        (nn.MSELoss(reduction), tnn.MSELoss(reduction=reduction), target),
        (nn.CrossEntropyLoss(reduction=reduction), tnn.CrossEntropyLoss(reduction=reduction), labels),
    ):
        xs, xt = pair(x)
        ls, lt = ours(xs, np.asarray(t)), theirs(xt, torch.tensor(t))
        close(ls, lt, dtype)
        (ls * ls).sum().backward()
        (lt * lt).sum().backward()
        close(xs.grad, xt.grad, dtype)


CE_SHAPES = [(5, 4), (4,), (3, 4, 2, 2)]


def _ce_case(shape, rng):
    """Logits of ``shape`` (classes along dim 1, or dim 0), class indices (one ignored) and probabilities."""
    x = rng.normal(size=shape) * 3
    n_classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    labels = rng.integers(0, n_classes, size=target_shape)
    if labels.ndim:
        labels.flat[0] = -100
    probs = rng.dirichlet(np.ones(n_classes), size=target_shape or None)
    return x, labels, np.moveaxis(probs, -1, 1) if len(shape) > 2 else probs, rng.uniform(0.5, 2, n_classes)


@pytest.mark.parametrize("shape", CE_SHAPES)
@pytest.mark.parametrize("probabilities", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_options_match_torch(shape, probabilities, weighted, label_smoothing):
    """float64: class weights, ignore_index (-100), label smoothing, probability targets, (C,) and
    (N, C, d1, d2) inputs, each reduction; values and input gradients."""
    x, labels, probs, weight = _ce_case(shape, np.random.default_rng(11))
    target = probs if probabilities else labels
    for reduction in ("mean", "sum", "none"):
        (xs, xt), kw = pair(x), dict(reduction=reduction, label_smoothing=label_smoothing)
        module = nn.CrossEntropyLoss(weight if weighted else None, **kw)(xs, target)
        ls = F.cross_entropy(xs, target, weight=weight if weighted else None, **kw)
        lt = TF.cross_entropy(
            xt, torch.tensor(target), weight=torch.tensor(weight) if weighted else None, **kw
        )
        close(ls, lt, np.float64)
        close(module, lt, np.float64)
        (ls * ls).sum().backward()
        (lt * lt).sum().backward()
        close(xs.grad, xt.grad, np.float64)


@DTYPES
def test_nll_loss_matches_torch(dtype):
    x, labels, _, weight = _ce_case((6, 5), np.random.default_rng(12))
    logp = x.astype(dtype) - 3
    for reduction in ("mean", "sum", "none"):
        (xs, xt), w = pair(logp), weight.astype(dtype)
        ls = nn.NLLLoss(w, reduction=reduction)(xs, labels)
        lt = TF.nll_loss(xt, torch.tensor(labels), torch.tensor(w), reduction=reduction)
        close(ls, lt, dtype)
        ls.sum().backward()
        lt.sum().backward()
        close(xs.grad, xt.grad, dtype)


def test_cross_entropy_errors_match_torch():
    x = np.zeros((3, 4), np.float32)
    for target, kw in (
        ([0, 1], {}),
        ([0, 1, 4], {}),
        ([0, 1, -3], {}),
        ([0, 1, 2], dict(label_smoothing=1.5)),
    ):
        with pytest.raises(Exception) as expected:
            TF.cross_entropy(torch.tensor(x), torch.tensor(target), **kw)
        with pytest.raises(type(expected.value), match=re.escape(str(expected.value))):
            F.cross_entropy(sg.tensor(x), np.array(target), **kw)


# -- dropout -------------------------------------------------------------------------------------------------
def test_dropout_scales_kept_elements_and_routes_the_gradient_through_the_mask():
    sg.manual_seed(0)
    x = sg.tensor(np.ones((200, 50), np.float32), requires_grad=True)
    y = F.dropout(x, p=0.2)
    kept = y.data != 0
    assert abs(kept.mean() - 0.8) < 0.01
    np.testing.assert_allclose(y.data[kept], 1 / 0.8, rtol=1e-7)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.where(kept, np.float32(1 / 0.8), 0))
    assert F.dropout(x, 0.2, training=False) is x
    sg.manual_seed(0)  # the mask comes from symgrad's generator
    np.testing.assert_array_equal(F.dropout(x, p=0.2).data, y.data)
    np.testing.assert_array_equal(F.dropout(x, 1.0).data, 0)


def test_dropout_module_follows_train_and_eval_and_checks_p():
    layer = nn.Dropout(0.5)
    model = nn.Sequential(nn.Linear(3, 3), layer)
    x = sg.tensor(np.ones((4, 3), np.float32))
    assert model.training and layer.training
    sg.manual_seed(1)
    assert (model(x).data == 0).any()
    model.eval()
    assert not layer.training
    expected = model[0](x).data
    np.testing.assert_array_equal(model(x).data, expected)
    message = "dropout probability has to be between 0 and 1, but got 1.5"
    for make in (lambda: nn.Dropout(1.5), lambda: F.dropout(x, 1.5), lambda: tnn.Dropout(1.5)):
        with pytest.raises(ValueError, match=re.escape(message)):
            make()
    assert repr(layer) == repr(tnn.Dropout(0.5))
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        model.train("yes")


# -- layer norm and embedding --------------------------------------------------------------------------------
@DTYPES
@pytest.mark.parametrize("shape", [(6,), (4, 6)])
def test_layer_norm_matches_torch(dtype, shape):
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(3, 4, 6)) * 4 + 2).astype(dtype)
    ours, theirs = nn.LayerNorm(shape, dtype=dtype), tnn.LayerNorm(shape, dtype=TORCH_DTYPE[dtype])
    ours.weight.data[...] = rng.normal(size=shape)
    ours.bias.data[...] = rng.normal(size=shape)
    copy_weights(ours, theirs)
    xs, xt = pair(x)
    ys, yt = ours(xs), theirs(xt)
    close(ys, yt, dtype)
    (ys * ys * ys).sum().backward()
    (yt * yt * yt).sum().backward()
    close(xs.grad, xt.grad, dtype, atol=2e-5 if dtype == np.float32 else 1e-13)
    for name, p in ours.named_parameters():
        close(p.grad, getattr(theirs, name).grad, dtype, atol=2e-5 if dtype == np.float32 else 1e-13)
    assert repr(ours) == repr(theirs)


def test_layer_norm_without_affine_and_shape_error_match_torch():
    x = np.random.default_rng(4).normal(size=(2, 4)).astype(np.float32)
    close(F.layer_norm(sg.tensor(x), (4,)), TF.layer_norm(torch.tensor(x), (4,)), np.float32)
    assert list(nn.LayerNorm(4, elementwise_affine=False).parameters()) == []
    with pytest.raises(RuntimeError) as theirs:
        TF.layer_norm(torch.tensor(x), (3,))
    with pytest.raises(RuntimeError) as ours:
        F.layer_norm(sg.tensor(x), (3,))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("padding_idx", [None, 0, -1])
def test_embedding_matches_torch(padding_idx):
    sg.manual_seed(5)
    ours = nn.Embedding(10, 4, padding_idx=padding_idx)
    theirs = tnn.Embedding(10, 4, padding_idx=padding_idx)
    if padding_idx is not None:
        assert not ours.weight.data[padding_idx].any()
    copy_weights(ours, theirs)
    idx = np.array([[0, 3, 3, 9], [9, 0, 1, 3]])
    ys, yt = ours(sg.tensor(idx)), theirs(torch.tensor(idx))
    close(ys, yt, np.float32)
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    close(ours.weight.grad, theirs.weight.grad, np.float32)
    assert repr(ours) == repr(theirs)


def test_embedding_errors_match_torch():
    ours, theirs = nn.Embedding(5, 2), tnn.Embedding(5, 2)
    with pytest.raises(IndexError, match="index out of range in self"):
        ours(np.array([5]))
    with pytest.raises(IndexError, match="index out of range in self"):
        theirs(torch.tensor([5]))
    with pytest.raises(RuntimeError, match="Expected tensor for argument #1 'indices' to have one of the"):
        ours(sg.tensor([1.0]))


# -- containers, state_dict, train/eval ----------------------------------------------------------------------
def build_blocks(module, lib):
    """The same model in sg.nn or torch.nn: a ModuleList, a ModuleDict holding a Sequential, a LayerNorm."""
    module.layers = lib.ModuleList([lib.Linear(3, 3) for _ in range(3)])
    module.heads = lib.ModuleDict(
        {"a": lib.Linear(3, 1), "b": lib.Sequential(lib.Linear(3, 2), lib.Dropout())}
    )
    module.norm = lib.LayerNorm(3)


def run_blocks(module, x, gelu):
    for layer in module.layers:
        x = gelu(layer(x))
    x = module.norm(x)
    return module.heads["a"](x), module.heads["b"](x)


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        build_blocks(self, nn)

    def forward(self, x):
        return run_blocks(self, x, F.gelu)


class TorchBlocks(tnn.Module):
    def __init__(self):
        super().__init__()
        build_blocks(self, tnn)

    def forward(self, x):
        return run_blocks(self, x, TF.gelu)


def test_containers_register_like_torch_and_state_dicts_interchange():
    sg.manual_seed(6)
    ours, theirs = Blocks(), TorchBlocks()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    copy_weights(ours, theirs)
    ours.load_state_dict(theirs.state_dict())  # torch tensors load too
    ours.eval()
    theirs.eval()
    x = np.random.default_rng(7).normal(size=(4, 3)).astype(np.float32)
    (a, b), (ta, tb) = ours(sg.tensor(x)), theirs(torch.tensor(x))
    close(a, ta, np.float32)
    close(b, tb, np.float32)
    assert not ours.heads["b"][1].training and not ours.layers[2].training


def test_module_list_and_dict_operations_match_torch():
    ours, theirs = nn.ModuleList(), tnn.ModuleList()
    for lib, ml in ((nn, ours), (tnn, theirs)):
        ml.append(lib.Linear(1, 1))
        ml.extend([lib.Linear(1, 2), lib.Linear(1, 3)])
        ml.insert(1, lib.Linear(1, 4))
        del ml[0]
        ml[-1] = lib.Linear(1, 5)
        ml += [lib.LayerNorm(6)]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [m.out_features for m in ours[:3]] == [4, 2, 5] and len(ours) == 4
    with pytest.raises(IndexError, match="index 4 is out of range"):
        ours[4]
    with pytest.raises(IndexError, match="index 4 is out of range"):
        theirs[4]
    md, tmd = nn.ModuleDict([("x", nn.Linear(1, 1))]), tnn.ModuleDict([("x", tnn.Linear(1, 1))])
    md["y"], tmd["y"] = nn.Linear(1, 2), tnn.Linear(1, 2)
    assert list(md) == list(tmd) == ["x", "y"] and "y" in md and md.pop("x").out_features == 1
    for d in (md, tmd):
        with pytest.raises(KeyError, match="attribute 'train' already exists"):
            d["train"] = type(d["y"])(1, 1)
        with pytest.raises(KeyError, match=r'module name can.+t contain "\.", got: a\.b'):
            d["a.b"] = type(d["y"])(1, 1)


def test_double_apply_and_requires_grad_match_torch():
    sg.manual_seed(13)
    ours, theirs = Blocks().double().eval(), TorchBlocks().double().eval()
    copy_weights(ours, theirs)
    assert all(p.dtype == np.float64 for p in ours.parameters())
    x = np.random.default_rng(14).normal(size=(2, 3))
    close(ours(sg.tensor(x))[0], theirs(torch.tensor(x))[0], np.float64)
    seen, expected = [], []
    ours.apply(lambda m: seen.append(type(m).__name__))
    theirs.apply(lambda m: expected.append(type(m).__name__.removeprefix("Torch")))
    assert seen == expected
    assert not any(p.requires_grad for p in ours.requires_grad_(False).parameters())
    with pytest.raises(
        TypeError, match="only accepts floating point or complex dtypes, but got desired dtype=int64"
    ):
        ours.to(np.int64)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.emb = nn.Linear(2, 2), nn.Embedding(3, 2)


class TorchNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.emb = tnn.Linear(2, 2), tnn.Embedding(3, 2)


TorchNet.__name__ = "Net"


def test_load_state_dict_errors_have_torch_text():
    ours, theirs = Net(), TorchNet()
    state = {k: v for k, v in theirs.state_dict().items() if k != "fc.bias"}
    state["extra.weight"] = torch.zeros(1)
    with pytest.raises(RuntimeError) as expected:
        theirs.load_state_dict(state)
    with pytest.raises(RuntimeError) as got:
        ours.load_state_dict(state)
    assert str(got.value) == str(expected.value)
    result = ours.load_state_dict(state, strict=False)
    assert result.missing_keys == ["fc.bias"] and result.unexpected_keys == ["extra.weight"]
    assert tuple(result) == tuple(theirs.load_state_dict(state, strict=False))


# -- gradient clipping ---------------------------------------------------------------------------------------
@DTYPES
@pytest.mark.parametrize("norm_type, max_norm", [(2.0, 1.0), (1, 0.5), (math.inf, 0.1), (2.0, 1e6)])
def test_clip_grad_norm_matches_torch(dtype, norm_type, max_norm):
    rng = np.random.default_rng(8)
    grads = [rng.normal(size=s).astype(dtype) for s in ((3, 4), (4,), (2, 2, 2))]
    ours = [nn.Parameter(np.zeros_like(g)) for g in grads]
    theirs = [torch.nn.Parameter(torch.zeros(g.shape, dtype=TORCH_DTYPE[dtype])) for g in grads]
    for p, q, g in zip(ours, theirs, grads):
        p.grad, q.grad = sg.tensor(g), torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type)
    expected = tnn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert total.dtype == dtype and total.shape == ()
    close(total, expected, dtype)
    for p, q in zip(ours, theirs):
        close(p.grad, q.grad, dtype)


def test_clip_grad_norm_nonfinite_error_and_clip_grad_value():
    p = nn.Parameter(np.ones(2, np.float32))
    p.grad = sg.tensor([np.inf, 1.0])
    with pytest.raises(
        RuntimeError, match=re.escape("The total norm of order 2.0 for gradients from `parameters`")
    ):
        nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    p.grad = sg.tensor([3.0, -0.5])
    nn.utils.clip_grad_value_([p], 1.0)
    np.testing.assert_array_equal(p.grad.data, [1.0, -0.5])


# -- optimizers ----------------------------------------------------------------------------------------------
def _train(lib, model, opt, x, y, steps):
    """``steps`` of full-batch training on a fixed problem; the loss after each step."""
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        loss = (out - y).square().mean() if lib is nn else ((out - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


OPTIMIZERS = [
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.3, amsgrad=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, weight_decay=0.1, momentum=0.9)),
    ("RMSprop", dict(lr=0.005, centered=True)),
    ("RMSprop", dict(lr=0.005, centered=True, momentum=0.5, eps=1e-4)),
]


@DTYPES
@pytest.mark.parametrize("name, kwargs", OPTIMIZERS)
def test_optimizers_match_torch_over_several_steps(dtype, name, kwargs):
    sg.manual_seed(9)
    ours = nn.Sequential(nn.Linear(4, 8, dtype=dtype), nn.Tanh(), nn.Linear(8, 2, dtype=dtype))
    theirs = tnn.Sequential(tnn.Linear(4, 8), tnn.Tanh(), tnn.Linear(8, 2)).to(TORCH_DTYPE[dtype])
    copy_weights(ours, theirs)
    rng = np.random.default_rng(10)
    x, y = rng.normal(size=(16, 4)).astype(dtype), rng.normal(size=(16, 2)).astype(dtype)
    opt = getattr(sg.optim, name)(ours.parameters(), **kwargs)
    ref = getattr(torch.optim, name)(theirs.parameters(), **kwargs)
    losses = _train(nn, ours, opt, sg.tensor(x), y, 8)
    expected = _train(tnn, theirs, ref, torch.tensor(x), torch.tensor(y), 8)
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(losses, expected, **tol)
    for k, v in ours.state_dict().items():
        close(v, theirs.state_dict()[k], dtype, **tol)
    key = "exp_avg_sq" if name.startswith("Adam") else "square_avg"
    for p, q in zip(ours.parameters(), theirs.parameters()):
        close(opt.state[p][key], ref.state[q][key], dtype, **tol)
        assert opt.state[p].keys() == ref.state[q].keys()


@pytest.mark.parametrize("name", ["SGD", "AdamW", "RMSprop"])
def test_optimizer_step_is_an_inplace_update_that_backward_detects(name):
    """As in PyTorch, a step bumps the parameter's version: a graph that saved it refuses to backward."""
    w = nn.Parameter(np.ones((3, 3), np.float32))
    out = (w @ w).sum()
    w.grad = sg.tensor(np.ones((3, 3), np.float32))
    getattr(sg.optim, name)([w], lr=0.1).step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_optimizer_validation_matches_torch():
    w = nn.Parameter(np.ones(2))
    for name, kwargs in (
        ("AdamW", dict(betas=(0.9, 1.0))),
        ("RMSprop", dict(alpha=-1)),
        ("RMSprop", dict(lr=-1)),
    ):
        with pytest.raises(ValueError) as expected:
            getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(2))], **kwargs)
        with pytest.raises(ValueError, match=re.escape(str(expected.value))):
            getattr(sg.optim, name)([w], **kwargs)


@pytest.mark.parametrize("owner", ["optimizer", "module"])
def test_zero_grad_sets_none_by_default_or_zeros_in_place(owner):
    layer = nn.Linear(3, 1)
    target = sg.optim.AdamW(layer.parameters()) if owner == "optimizer" else layer
    layer(sg.tensor(np.ones((2, 3), np.float32))).sum().backward()
    grad = layer.weight.grad
    target.zero_grad(set_to_none=False)
    assert layer.weight.grad is grad and not grad.data.any()
    target.zero_grad()
    assert layer.weight.grad is None and layer.bias.grad is None


def _fresh(name, kwargs, lib):
    w = (nn.Parameter if lib is nn else torch.nn.Parameter)(
        np.array([1.0, -2.0, 3.0]) if lib is nn else torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    )
    b = (nn.Parameter if lib is nn else torch.nn.Parameter)(
        np.array([0.5]) if lib is nn else torch.tensor([0.5], dtype=torch.float64)
    )
    opt_cls = getattr(sg.optim if lib is nn else torch.optim, name)
    return (w, b), opt_cls([{"params": [w]}, {"params": [b], "lr": 0.003}], **kwargs)


def _steps(params, opt, n):
    w, b = params
    for _ in range(n):
        opt.zero_grad()
        ((w - 0.5) ** 2).sum().add(b.sum() * w.sum()).backward() if not isinstance(w, sg.Tensor) else (
            (w - 0.5).square().sum() + (b.sum() * w.sum())
        ).backward()
        opt.step()


@pytest.mark.parametrize("name, kwargs", [OPTIMIZERS[1], OPTIMIZERS[6], ("SGD", dict(lr=0.1, momentum=0.9))])
def test_optimizer_state_dict_has_torch_layout_and_resumes_exactly(name, kwargs):
    (ours_params, ours), (theirs_params, theirs) = _fresh(name, kwargs, nn), _fresh(name, kwargs, tnn)
    _steps(ours_params, ours, 3)
    _steps(theirs_params, theirs, 3)
    saved, expected = ours.state_dict(), copy.deepcopy(theirs.state_dict())  # torch's holds live tensors
    assert [g["params"] for g in saved["param_groups"]] == [g["params"] for g in expected["param_groups"]]
    assert {k: set(v) for k, v in saved["state"].items()} == {k: set(v) for k, v in expected["state"].items()}
    assert saved["param_groups"][1]["lr"] == 0.003 and saved["param_groups"][0]["lr"] == kwargs["lr"]
    _steps(theirs_params, theirs, 2)
    # a new optimizer loaded from ours, and another loaded from torch's state_dict, both continue as torch
    for source in (saved, expected):
        params, opt = _fresh(name, kwargs, nn)
        for p, q in zip(params, ours_params):
            p.data[...] = q.data
        opt.load_state_dict(source)
        _steps(params, opt, 2)
        for p, q in zip(params, theirs_params):
            np.testing.assert_allclose(p.data, q.detach().numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="loaded state dict has a different number of parameter groups"):
        ours.load_state_dict({"state": {}, "param_groups": saved["param_groups"][:1]})


# -- learning-rate schedulers --------------------------------------------------------------------------------
SCHEDULERS = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("CosineAnnealingLR", dict(T_max=7, eta_min=0.001)),
    ("LambdaLR", dict(lr_lambda=lambda epoch: 0.95**epoch / (1 + epoch % 4))),
]


@pytest.mark.parametrize("name, kwargs", SCHEDULERS)
def test_schedulers_match_torch_over_several_periods(name, kwargs):
    (_, ours), (_, theirs) = _fresh("SGD", dict(lr=0.1), nn), _fresh("SGD", dict(lr=0.1), tnn)
    sched = getattr(sg.optim.lr_scheduler, name)(ours, **kwargs)
    ref = getattr(torch.optim.lr_scheduler, name)(theirs, **kwargs)
    assert sched.get_last_lr() == ref.get_last_lr()
    for _ in range(25):
        ours.step()
        theirs.step()
        sched.step()
        ref.step()
        np.testing.assert_allclose(sched.get_last_lr(), ref.get_last_lr(), rtol=1e-14)
        assert [g["lr"] for g in ours.param_groups] == sched.get_last_lr()
    state = sched.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 25 and state["base_lrs"] == [0.1, 0.003]
    assert set(state) <= set(ref.state_dict()) | {"_is_initial"}


def test_scheduler_warns_when_stepped_before_the_optimizer_and_checks_its_argument():
    _, opt = _fresh("SGD", dict(lr=0.1), nn)
    sched = sg.optim.lr_scheduler.StepLR(opt, step_size=2)
    with pytest.warns(
        UserWarning, match=re.escape("Detected call of `lr_scheduler.step()` before `optimizer.step()`")
    ):
        sched.step()
    _, opt = _fresh("SGD", dict(lr=0.1), nn)
    sched = sg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        sg.optim.lr_scheduler.StepLR([], step_size=1)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        sg.optim.lr_scheduler.LambdaLR(opt, [lambda e: 1.0])
