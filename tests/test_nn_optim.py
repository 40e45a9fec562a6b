"""sg.nn (modules, layers, losses) and sg.optim (SGD, Adam), against reference formulas and PyTorch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg

nn, F = sg.nn, sg.nn.functional
ROOT = Path(__file__).resolve().parents[1]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3, bias=False))
        self.scale = nn.Parameter(np.ones(3, np.float32))

    def forward(self, x):
        return self.body(x) * self.scale


def test_module_registers_parameters_and_submodules():
    net = Net()
    names = [name for name, _ in net.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "body.2.weight"]
    assert len(list(net.parameters())) == 4 and len(list(net.children())) == 1
    assert isinstance(net.body[0], nn.Linear) and len(net.body) == 3
    assert net(sg.tensor(np.ones((2, 4), np.float32))).shape == (2, 3)
    assert "(0): Linear(in_features=4, out_features=8, bias=True)" in repr(net)


def test_zero_grad_train_eval():
    net = Net()
    net(sg.tensor(np.ones((2, 4), np.float32))).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    assert net.eval() is net and not net.training and not net.body[0].training
    assert net.train().body[1].training


def test_state_dict_round_trip_and_errors():
    a, b = Net(), Net()
    state = a.state_dict()
    assert list(state) == [name for name, _ in a.named_parameters()]
    b.load_state_dict(state)
    for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p.data, q.data)
    del state["scale"]
    state["extra"] = sg.tensor([1.0])
    with pytest.raises(RuntimeError, match=re.escape('Missing key(s) in state_dict: "scale".')) as info:
        b.load_state_dict(state)
    assert 'Unexpected key(s) in state_dict: "extra".' in str(info.value)
    assert b.load_state_dict(state, strict=False).missing_keys == ["scale"]
    with pytest.raises(RuntimeError, match="size mismatch for scale"):
        b.load_state_dict({**a.state_dict(), "scale": np.ones(4)})


def test_linear_uses_torch_default_init_and_float32():
    np.random.seed(0)
    layer = nn.Linear(100, 50)
    assert layer.weight.dtype == np.float32 and layer.weight.shape == (50, 100) and layer.bias.shape == (50,)
    assert np.abs(layer.weight.data).max() <= 0.1 and np.abs(layer.weight.data).max() > 0.09
    assert layer.weight.requires_grad and layer.weight.is_leaf


def test_activation_modules_match_tensor_methods():
    x = sg.tensor(np.linspace(-3, 3, 7))
    for module, method in (
        (nn.ReLU(), "relu"),
        (nn.Tanh(), "tanh"),
        (nn.Sigmoid(), "sigmoid"),
        (nn.Softplus(), "softplus"),
    ):
        np.testing.assert_allclose(module(x).data, getattr(x, method)().data)
    np.testing.assert_allclose(nn.Softplus(beta=2.0)(x).data, np.log1p(np.exp(2 * x.data)) / 2, rtol=1e-6)
    np.testing.assert_allclose(F.relu(x).data, np.maximum(x.data, 0))


def test_activation_wraps_a_compiled_symbolic_function(tmp_path: Path):
    path = tmp_path / "acts.py"
    path.write_text(
        "import symgrad as sg\n\n@sg.function\ndef neo_relu(x):\n    return sg.where(x > 0, x, -0.1)\n"
    )
    act = nn.Activation(sg.compile(path).neo_relu)
    x = sg.tensor([-2.0, 3.0], requires_grad=True)
    y = act(x)
    np.testing.assert_allclose(y.data, [-0.1, 3.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.data, [0.0, 1.0])
    assert repr(act) == "Activation(neo_relu)"


def test_cross_entropy_is_one_node_with_softmax_minus_onehot_gradient():
    logits = sg.tensor(np.random.default_rng(0).normal(size=(4, 3)), requires_grad=True)
    labels = np.array([0, 2, 1, 2])
    loss = F.cross_entropy(logits, labels)
    assert loss.grad_fn.inputs == (logits,)
    loss.backward()
    p = np.exp(logits.data) / np.exp(logits.data).sum(1, keepdims=True)
    np.testing.assert_allclose(loss.item(), -np.log(p[np.arange(4), labels]).mean())
    np.testing.assert_allclose(logits.grad.data, (p - np.eye(3)[labels]) / 4)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = sg.tensor([[1000.0, -1000.0], [-1000.0, 1000.0]], requires_grad=True)
    loss = F.cross_entropy(logits, [1, 1])
    loss.backward()
    assert np.isclose(loss.item(), 1000.0) and np.all(np.isfinite(logits.grad.data))
    assert np.all(np.isfinite(F.log_softmax(logits, dim=1).data))


def quadratic_problem(opt_factory, steps=5):
    """Parameters after `steps` of minimising sum((w - target)^2) + sum(w) from a fixed start."""
    w = nn.Parameter(np.array([1.0, -2.0, 3.0]))
    opt = opt_factory([w])
    for _ in range(steps):
        opt.zero_grad()
        ((w - np.array([0.5, 0.5, 0.5])).square().sum() + w.sum()).backward()
        opt.step()
    return w.data


def test_sgd_with_momentum_matches_the_reference_formula():
    w, buf = np.array([1.0, -2.0, 3.0]), None
    for _ in range(5):
        g = 2 * (w - 0.5) + 1 + 0.1 * w
        buf = g.copy() if buf is None else 0.9 * buf + g
        w = w - 0.05 * (g + 0.9 * buf)
    ours = quadratic_problem(
        lambda p: sg.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1, nesterov=True)
    )
    np.testing.assert_allclose(ours, w)


def test_adam_matches_the_reference_formula():
    w, m, v = np.array([1.0, -2.0, 3.0]), 0.0, 0.0
    for t in range(1, 6):
        g = 2 * (w - 0.5) + 1
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w = w - 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    np.testing.assert_allclose(quadratic_problem(lambda p: sg.optim.Adam(p, lr=0.1)), w)


def test_adam_float32_grad_on_float64_parameter_computes_in_float64():
    w = nn.Parameter(np.array([1.0, -2.0, 3.0]))
    g = np.array([1e-3, 0.3, 7.0], np.float32)
    opt = sg.optim.Adam([w], lr=0.1)
    ref, m, v = w.data.copy(), 0.0, 0.0
    for t in range(1, 4):
        w.grad = sg.tensor(g)
        opt.step()
        g64 = g.astype(np.float64)
        m, v = 0.9 * m + 0.1 * g64, 0.999 * v + 0.001 * g64 * g64
        ref = ref - 0.1 / (1 - 0.9**t) * m / (np.sqrt(v) / np.sqrt(1 - 0.999**t) + 1e-8)
    assert w.data.dtype == np.float64
    np.testing.assert_allclose(w.data, ref, rtol=1e-13)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_fused_adam_amsgrad_weight_decay_in_place_on_a_strided_parameter(dtype, rtol):
    """The compiled update (optim_model.py) against AMSGrad + L2 decay written out, on a transposed parameter;
    the parameter's array and the state arrays stay the same objects, updated in place (as in PyTorch)."""
    rng = np.random.default_rng(3)
    start = rng.normal(size=(4, 6)).astype(dtype).T  # not C-contiguous
    w = nn.Parameter(start.copy(order="K"))
    data = w.data
    assert not data.flags.c_contiguous
    opt = sg.optim.Adam([w], lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True)
    ref, m, v, v_max = start.astype(np.float64), 0.0, 0.0, 0.0
    for t in range(1, 6):
        g = rng.normal(size=start.shape).astype(dtype)
        w.grad = sg.tensor(g)
        opt.step()
        if t == 1:
            state = {k: opt.state[w][k] for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")}
        g64 = g.astype(np.float64) + 0.1 * ref
        m, v = 0.8 * m + 0.2 * g64, 0.95 * v + 0.05 * g64 * g64
        v_max = np.maximum(v_max, v)
        ref = ref - 0.05 / (1 - 0.8**t) * m / (np.sqrt(v_max) / np.sqrt(1 - 0.95**t) + 1e-6)
    assert w.data is data and w.data.dtype == dtype
    assert all(opt.state[w][k] is a for k, a in state.items())
    np.testing.assert_allclose(w.data, ref, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(opt.state[w]["max_exp_avg_sq"], v_max, rtol=10 * rtol)


def test_adam_without_weight_decay_leaves_an_infinite_parameter_infinite():
    """PyTorch skips the decay term when weight_decay is 0: 0 * inf must not turn the parameter into NaN."""
    w = nn.Parameter(np.array([np.inf, 1.0], np.float32))
    opt = sg.optim.Adam([w], lr=np.float64(0.1))  # a NumPy scalar hyperparameter is fine
    w.grad = sg.tensor(np.array([1.0, 1.0], np.float32))
    opt.step()
    assert w.data[0] == np.inf
    np.testing.assert_allclose(w.data[1], 0.9, rtol=1e-6)


def test_optimizer_validation_and_param_groups():
    w = nn.Parameter(np.ones(2))
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        sg.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        sg.optim.Adam([])
    opt = sg.optim.SGD([{"params": [w], "lr": 0.5}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.5 and opt.param_groups[0]["momentum"] == 0


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("SGD", dict(lr=0.1)),
        ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
        ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
        ("Adam", dict(lr=0.01)),
        ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ],
)
def test_optimizers_match_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    ours = quadratic_problem(lambda p: getattr(sg.optim, name)(p, **kwargs), steps=10)
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64))
    opt = getattr(torch.optim, name)([w], **kwargs)
    for _ in range(10):
        opt.zero_grad()
        ((w - 0.5) ** 2).sum().add(w.sum()).backward()
        opt.step()
    np.testing.assert_allclose(ours, w.detach().numpy(), rtol=1e-12)


def test_mlp_training_step_matches_torch():
    torch = pytest.importorskip("torch")
    np.random.seed(3)
    net = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    ref.load_state_dict({k: torch.tensor(v.data) for k, v in net.state_dict().items()})
    x, y = np.random.randn(16, 5).astype(np.float32), np.random.randint(0, 3, 16)
    opt, ref_opt = sg.optim.Adam(net.parameters(), lr=0.01), torch.optim.Adam(ref.parameters(), lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = F.cross_entropy(net(sg.tensor(x)), y)
        ref_loss = torch.nn.functional.cross_entropy(ref(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref_opt.step()
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
    for k, v in net.state_dict().items():
        np.testing.assert_allclose(v.data, ref.state_dict()[k].numpy(), rtol=1e-4, atol=1e-6)


def test_a_small_mlp_learns():
    rng = np.random.default_rng(0)
    np.random.seed(0)
    x = rng.normal(size=(200, 2)).astype(np.float32)
    y = (x[:, 0] * x[:, 1] > 0).astype(np.int64)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = sg.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(200):
        opt.zero_grad()
        loss = F.cross_entropy(net(sg.tensor(x)), y)
        loss.backward()
        opt.step()
    with sg.no_grad():
        accuracy = (net(sg.tensor(x)).data.argmax(1) == y).mean()
    assert accuracy > 0.95


def test_mlp_lowlevel_example_trains_digits_to_96_percent():
    """examples/mlp_lowlevel.py: tensors with requires_grad, ``p -= lr * p.grad`` under no_grad, zero_()."""
    pytest.importorskip("sklearn")
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mlp_lowlevel.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    accuracy = float(re.search(r"final test accuracy (\S+)", run.stdout).group(1))
    assert accuracy >= 0.96, run.stdout
