"""A compiled symgrad function as a PyTorch op: ``m.neo_relu.to_torch()``.

    act = m.neo_relu.to_torch()
    y = act(x)                      # CPU tensors, float32 or float64, broadcasting like the compiled function
    y.sum().backward()              # backward runs the compiled vjp kernel

Three implementations over the same kernels (``to_torch(fn, implementation=...)``):

* ``"custom_op"``: the forward and the vjp are two ``torch.library`` custom ops ``symgrad::<name>_<hash>``
  and ``symgrad::<name>_<hash>_vjp`` with fake (meta) implementations, joined by ``register_autograd``;
  ``torch.func.vmap`` rules are registered too. The ops are opaque to ``torch.compile``: Dynamo puts them
  into the graph as they are (no graph break, ``fullgraph=True`` works) and AOTAutograd puts the vjp op
  into the compiled backward. ``torch.library.opcheck`` passes on both (``custom_ops``, ``vmap``).
* ``"function"``: a ``torch.autograd.Function``. Dynamo cannot trace the kernel call (cffi), so under
  ``torch.compile`` the call is one deliberate graph break (``torch.compiler.disable``) and runs eagerly.
  No ``torch.func`` transforms. For PyTorch < 2.4, and to compare (``autograd_function``).
* ``"auto"`` (the default; needs PyTorch >= 2.4, else it is ``"function"``): the custom ops whenever
  something traces or transforms the call (``torch.compile``/``torch.export``, ``torch.func`` transforms,
  fake/meta tensors, tensor subclasses, dispatch modes), and the ``autograd.Function`` for plain eager CPU
  tensors, whose per-call overhead is lower (see docs/performance.md). Same kernels.

All three: tensors reach the kernels without copies (``tensor.numpy()`` shares memory; a non-contiguous or
broadcast argument is made contiguous by the kernel call, as NumPy arguments are) and results come back
through ``torch.from_numpy``. Backward saves only what it needs: the inputs, for the fused vjp kernel (which
recomputes what it needs of the forward). In eager mode, for per-element scalar functions with one output
and one or two arguments (activations, binary ops) called when a gradient will be needed, the forward runs
the fused ``value_and_jacobian`` kernel and saves only J (never larger than the inputs: not used when
broadcasting would make it so); backward is then ``grad * J`` in PyTorch, with no second kernel call and no
recomputation of the forward. Gradients of arguments that do not need one are not returned
(``ctx.needs_input_grad``). Arguments may be tensors or Python numbers; the computation dtype is
``torch.promote_types`` of the tensors' dtypes (Python numbers are weak), mixed float32/float64 tensors are
cast by an ordinary, differentiable ``Tensor.to`` (``arguments``). CUDA (or other non-CPU) tensors raise
``ArgumentError``: the kernels are CPU code.

Second order (``second_order``): the vjp is itself differentiable (its backward runs the hvp and jvp kernels),
so ``create_graph=True``, ``torch.autograd.gradgradcheck`` and ``torch.func.hessian`` work, and forward mode
(``torch.func.jvp``/``jacfwd``, ``torch.autograd.forward_ad``) runs the jvp kernel. A third derivative raises
``CompiledFunction.third_derivative_error``; a function without an hvp program raises
``double_backward_error`` at the second. The eager Jacobian-saving forward keeps a reference to its inputs
for that (a second derivative refuses an input changed in place since).
"""

from __future__ import annotations

from typing import Any

import torch

from symgrad.interop.torch.registry import BOUND as _BOUND
from symgrad.interop.torch.registry import LOCK, op_name
from symgrad.interop.torch.torch_function import TorchFunction

#: (op name, implementation) -> TorchFunction
_CACHE: dict[tuple[str, str], TorchFunction] = {}


def has_custom_op() -> bool:
    """Whether this PyTorch has ``torch.library.custom_op`` / ``register_autograd`` (2.4 and later)."""
    return hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd")


def to_torch(fn: Any, *, implementation: str = "auto") -> TorchFunction:
    """``fn`` (a ``CompiledFunction``) as a differentiable PyTorch callable.

    ``implementation``: ``"auto"`` (custom ops when traced or transformed, ``autograd.Function`` in plain
    eager mode), ``"custom_op"`` (always the torch.library custom ops) or ``"function"`` (always the
    ``autograd.Function``; a graph break under ``torch.compile``). Repeated calls return the same object."""
    if implementation == "auto" and not has_custom_op():
        implementation = "function"
    if implementation not in ("auto", "custom_op", "function"):
        raise ValueError(
            f"{fn.name}: implementation must be 'auto', 'custom_op' or 'function', not {implementation!r}"
        )
    if implementation == "custom_op" and not has_custom_op():
        raise RuntimeError(
            f"{fn.name}: torch {torch.__version__} has no torch.library.custom_op "
            "(PyTorch 2.4+); use implementation='function'"
        )
    name = op_name(fn)
    with LOCK:
        _BOUND[name] = fn
        key = (name, implementation)
        if key not in _CACHE:
            _CACHE[key] = TorchFunction(fn, name, implementation)
        return _CACHE[key]


__all__ = ["to_torch", "TorchFunction", "has_custom_op"]
