"""A compiled symgrad function as a PyTorch op: ``m.neo_relu.to_torch()``.

    act = m.neo_relu.to_torch()
    y = act(x)                      # CPU tensors, float32 or float64, broadcasting like the compiled function
    y.sum().backward()              # backward runs the compiled vjp kernel

Three implementations over the same kernels (``to_torch(fn, implementation=...)``):

* ``"custom_op"``: the forward and the vjp are two ``torch.library`` custom ops ``symgrad::<name>_<hash>``
  and ``symgrad::<name>_<hash>_vjp`` with fake (meta) implementations, joined by ``register_autograd``;
  ``torch.func.vmap`` rules are registered too. The ops are opaque to ``torch.compile``: Dynamo puts them
  into the graph as they are (no graph break, ``fullgraph=True`` works) and AOTAutograd puts the vjp op
  into the compiled backward. ``torch.library.opcheck`` passes on both.
* ``"function"``: a ``torch.autograd.Function``. Dynamo cannot trace the kernel call (cffi), so under
  ``torch.compile`` the call is one deliberate graph break (``torch.compiler.disable``) and runs eagerly.
  No ``torch.func`` transforms. For PyTorch < 2.4, and to compare.
* ``"auto"`` (the default; needs PyTorch >= 2.4, else it is ``"function"``): the custom ops whenever
  something traces or transforms the call (``torch.compile``/``torch.export``, ``torch.func`` transforms,
  fake/meta tensors, tensor subclasses, dispatch modes), and the ``autograd.Function`` for plain eager CPU
  tensors, whose per-call overhead is about a third of a Python custom op's. Same kernels.

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
cast by an ordinary, differentiable ``Tensor.to``. CUDA (or other non-CPU) tensors raise ``ArgumentError``:
the kernels are CPU code. Double backward raises a clear error (the kernels are first order). No forward-mode
AD (``torch.func.jvp``/``jacfwd``).
"""

from __future__ import annotations

import keyword
import re
import threading
from typing import Any

import numpy as np
import torch

from symgrad.errors import ArgumentError

_FLOATS = (torch.float32, torch.float64)
_LOCK = threading.Lock()
#: op name -> the CompiledFunction its kernels currently come from (two loads of one package share an op).
_BOUND: dict[str, Any] = {}
#: (op name, implementation) -> TorchFunction
_CACHE: dict[tuple[str, str], TorchFunction] = {}
#: qualified op name -> (forward op, vjp op); torch.library cannot define a name twice in a process
_OPS: dict[str, tuple] = {}


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
    op_name = _op_name(fn)
    with _LOCK:
        _BOUND[op_name] = fn
        key = (op_name, implementation)
        if key not in _CACHE:
            _CACHE[key] = TorchFunction(fn, op_name, implementation)
        return _CACHE[key]


def _op_name(fn: Any) -> str:
    manifest = fn._package.manifest
    package_hash = manifest.get("package_hash") or manifest.get("source_hash", "")
    ident = re.sub(r"\W", "_", getattr(fn, "_ident", fn.name))
    return f"{ident}_{package_hash[:16]}" if package_hash else ident


def _schema_names(names: tuple[str, ...]) -> list[str]:
    out, seen = [], set()
    for i, n in enumerate(names):
        n = (
            n
            if n.isidentifier()
            and not keyword.iskeyword(n)
            and n not in ("self", "out")
            and not n.startswith("_")
            else f"arg{i}"
        )
        while n in seen:
            n = f"{n}_{i}"
        seen.add(n)
        out.append(n)
    return out


def _returns(n: int) -> str:
    return "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"


def _np(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory (no copy for ordinary CPU tensors)."""
    return t.numpy(force=True)  # = detach().cpu().resolve_conj().resolve_neg(): all no-ops here


def _from_np(a: Any, dtype: np.dtype | None = None) -> torch.Tensor:
    a = np.asarray(a)
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    if not a.flags.writeable:  # torch.from_numpy warns on read-only memory
        a = a.copy()
    return torch.from_numpy(a)


def _broadcast_shape(shapes: list) -> tuple | None:
    """The broadcast of batch shapes, None if they do not broadcast (plain Python: cheaper than
    torch.broadcast_shapes, and fine on SymInts)."""
    result: list = []
    for shape in shapes:
        shape = tuple(shape)
        if len(shape) > len(result):
            result = [1] * (len(shape) - len(result)) + result
        for i, n in enumerate(shape, len(result) - len(shape)):
            if n == 1 or n == result[i]:
                continue
            if result[i] != 1:
                return None
            result[i] = n
    return tuple(result)


def _broadcasts(shapes: list) -> bool:
    return _broadcast_shape(shapes) is not None


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


_functorch_wrapped = getattr(
    getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", lambda t: False
)


def _plain_eager(tensors: list) -> bool:
    """Plain CPU tensors (no functorch wrapper, not even a dead one) and no dispatch mode: the NumPy-level
    autograd.Function may run the call, through ``_raw_apply``."""
    if _dispatch_modes():
        return False
    for t in tensors:
        if type(t) not in _PLAIN or t.device.type != "cpu" or _functorch_wrapped(t):
            return False
    return True


def _raw_apply(function: type) -> Any:
    """``function.apply`` without ``torch.autograd.Function``'s Python layer, which binds new-style
    signatures (ours is old-style), routes functorch transforms and unwraps dead functorch wrappers: the
    eager path calls it only when ``_plain_eager`` holds and no transform is active (~1.6 us a call)."""
    try:
        return super(torch.autograd.Function, function).apply
    except AttributeError:  # a PyTorch without the C-level apply: the public one
        return function.apply


def _batch(shape: Any, tail: tuple) -> tuple:
    return tuple(shape)[: len(shape) - len(tail)]


class TorchFunction:
    """A compiled symgrad function as a PyTorch callable; see the module docstring."""

    def __init__(self, fn: Any, op_name: str, implementation: str) -> None:
        self.fn = fn
        self.name = fn.name
        self.op_name = op_name
        self.implementation = implementation
        self.arg_names = fn.arg_names
        self.__doc__ = fn.__doc__
        self.__name__ = self.__qualname__ = fn.name
        n_args, n_out = len(fn.arg_names), fn.n_outputs
        self._n_args, self._n_out = n_args, n_out
        self._scalar_args = all(s == () for s in fn.arg_shapes)
        self._jac_ok = fn.jacobian_saving
        self.op = self.vjp_op = self.function = self.func_function = None
        if implementation in ("auto", "custom_op"):
            self.op, self.vjp_op, self.func_function = _make_custom_ops(
                op_name, fn.arg_names, fn.arg_shapes, fn.out_shapes
            )
        if implementation in ("auto", "function"):
            self.function = _make_autograd_function(op_name, n_args, n_out)
            self._eager_apply = _raw_apply(self.function)
        if implementation == "function":
            # Dynamo cannot trace into the cffi call: under torch.compile the call is one clean graph break
            # (it runs eagerly); outside, no wrapper (torch.compiler.disable costs tens of microseconds a call).
            disable = getattr(getattr(torch, "compiler", None), "disable", None)
            self._apply = self.function.apply
            self._apply_compiling = disable(self.function.apply) if disable else self.function.apply

    def __repr__(self) -> str:
        return (
            f"<symgrad torch op {self.name}({', '.join(self.arg_names)}) [{self.implementation}: "
            f"symgrad::{self.op_name}] from {self.fn.origin}>"
        )

    def _use_jacobian(self, tensors: list) -> bool:
        """Forward with the Jacobian (backward = grad * J, no recomputation) when a gradient will be needed,
        the function is per-element scalar with one output and one or two arguments, and J is no larger than
        the inputs (broadcasting does not blow it up)."""
        if not (self._jac_ok and torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return False
        if len(tensors) == 1:
            return True
        shapes = [t.shape for t in tensors]
        batch = _broadcast_shape(shapes)
        return batch is not None and any(s == batch for s in shapes)

    # -- argument handling at the boundary (runs traced under torch.compile: only metadata is used) --------
    def _prepare(self, args: tuple) -> list[torch.Tensor]:
        if self._scalar_args and len(args) == self._n_args:
            # Fast path: plain CPU tensors of one float dtype, per-element scalars, one argument or same shapes.
            first = args[0]
            if type(first) in _PLAIN and first.dtype in _FLOATS and first.device.type == "cpu":
                if self._n_args == 1:
                    return [first]
                dtype, shape = first.dtype, first.shape
                if all(
                    type(a) in _PLAIN and a.dtype == dtype and a.shape == shape and a.device.type == "cpu"
                    for a in args
                ):
                    return list(args)
        fn = self.fn
        if len(args) != self._n_args:
            raise ArgumentError(
                f"{fn.name}() takes {self._n_args} argument(s) ({', '.join(fn.arg_names)}); got {len(args)}"
            )
        tensors: list[Any] = []
        dtype = None
        for value, name, tail in zip(args, fn.arg_names, fn.arg_shapes):
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(value)
            if isinstance(value, torch.Tensor):
                if value.device.type not in ("cpu", "meta"):
                    raise ArgumentError(
                        f"{fn.name}: argument '{name}' is on {value.device}; symgrad's compiled kernels run on "
                        f"the CPU. Move it there first ({name}.cpu()) and the result back with .to(device)"
                    )
                if value.dtype not in _FLOATS:
                    raise ArgumentError(
                        f"{fn.name}: argument '{name}' has dtype {value.dtype}; expected "
                        "torch.float32 or torch.float64"
                    )
                if tail and (
                    value.dim() < len(tail) or tuple(value.shape[value.dim() - len(tail) :]) != tail
                ):
                    raise ArgumentError(
                        f"{fn.name}: argument '{name}' must have trailing shape {tail} "
                        f"(per-element), got shape {tuple(value.shape)}"
                    )
                dtype = value.dtype if dtype is None else torch.promote_types(dtype, value.dtype)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                if tail:
                    raise ArgumentError(
                        f"{fn.name}: argument '{name}' must have trailing shape {tail}, got a Python number"
                    )
            else:
                raise ArgumentError(
                    f"{fn.name}: argument '{name}' must be a torch.Tensor or a Python number, "
                    f"not {type(value).__name__}"
                )
            tensors.append(value)
        if dtype is None:
            dtype = torch.get_default_dtype()
            dtype = dtype if dtype in _FLOATS else torch.float32
        device = next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))
        tensors = [
            t.to(dtype)
            if isinstance(t, torch.Tensor) and t.dtype != dtype
            else t
            if isinstance(t, torch.Tensor)
            else torch.tensor(float(t), dtype=dtype, device=device)
            for t in tensors
        ]
        if len(tensors) > 1 and not _broadcasts([_batch(t.shape, s) for t, s in zip(tensors, fn.arg_shapes)]):
            described = ", ".join(
                f"'{n}' {tuple(_batch(t.shape, s))}" for n, t, s in zip(fn.arg_names, tensors, fn.arg_shapes)
            )
            raise ArgumentError(f"{fn.name}: argument batch shapes do not broadcast: {described}")
        return tensors

    def __call__(self, *args: Any) -> Any:
        tensors = self._prepare(args)
        if self.op is None:
            if _is_compiling():
                out = self._apply_compiling(False, *tensors)
            else:
                out = self._apply(self._use_jacobian(tensors), *tensors)
        elif _is_compiling():
            out = self.op(*tensors)
        elif _functorch_active():
            out = self.func_function.apply(*tensors)
        elif self.implementation == "auto" and _plain_eager(tensors):
            out = self._eager_apply(self._use_jacobian(tensors), *tensors)
        else:
            out = self.op(*tensors)
        if self.fn.returns_tuple:
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return out[0] if isinstance(out, (tuple, list)) else out


# -- custom ops ---------------------------------------------------------------------------------------------
def _make_custom_ops(op_name: str, arg_names: tuple, arg_shapes: tuple, out_shapes: tuple) -> tuple:
    """(forward op, vjp op, autograd.Function for torch.func transforms), defined once per process."""
    qualified = f"symgrad::{op_name}"
    if qualified in _OPS:  # a second load of the same package (same hash): same kernels
        return _OPS[qualified]
    n_args, n_out = len(arg_names), len(out_shapes)
    names = _schema_names(arg_names)
    cot_names = _schema_names(tuple(names) + tuple(f"grad{k}" for k in range(n_out)))[n_args:]
    fwd_schema = f"({', '.join(f'Tensor {n}' for n in names)}) -> {_returns(n_out)}"
    vjp_schema = f"({', '.join(f'Tensor {n}' for n in names + cot_names)}) -> {_returns(n_args)}"

    def forward_impl(*tensors: torch.Tensor) -> Any:
        outs = _BOUND[op_name].forward(*(_np(t) for t in tensors))
        results = tuple(_from_np(o) for o in outs)
        return results if n_out > 1 else results[0]

    def vjp_impl(*tensors: torch.Tensor) -> Any:
        inputs = tensors[:n_args]
        grads = _BOUND[op_name].vjp(*(_np(t) for t in tensors))
        # a nondiff argument's gradient is zero: the op's schema returns one tensor per argument
        results = tuple(
            torch.zeros_like(t) if g is None else _grad_tensor(g, t) for g, t in zip(grads, inputs)
        )
        return results if n_args > 1 else results[0]

    op = torch.library.custom_op(
        qualified, forward_impl, mutates_args=(), device_types="cpu", schema=fwd_schema
    )
    vjp_op = torch.library.custom_op(
        f"{qualified}_vjp", vjp_impl, mutates_args=(), device_types="cpu", schema=vjp_schema
    )

    def forward_fake(*tensors: torch.Tensor) -> Any:
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
        batch = torch.broadcast_shapes(*(_batch(t.shape, s) for t, s in zip(tensors, arg_shapes)))
        results = tuple(tensors[0].new_empty((*batch, *s), dtype=dtype) for s in out_shapes)
        return results if n_out > 1 else results[0]

    def vjp_fake(*tensors: torch.Tensor) -> Any:
        results = tuple(t.new_empty(t.shape) for t in tensors[:n_args])
        return results if n_args > 1 else results[0]

    op.register_fake(forward_fake)
    vjp_op.register_fake(vjp_fake)

    def save_inputs(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.save_for_backward(*inputs)  # the vjp needs the inputs only, never the outputs

    def cotangents(inputs: tuple, grads: tuple) -> list:
        if all(g is not None for g in grads):
            return list(grads)
        like = forward_fake(*inputs)  # an output that did not reach the loss: zeros of its shape
        like = like if n_out > 1 else (like,)
        return [g if g is not None else torch.zeros_like(o) for g, o in zip(grads, like)]

    def backward(ctx: Any, *grads: Any) -> tuple:
        if not any(ctx.needs_input_grad):
            return (None,) * n_args
        inputs = ctx.saved_tensors
        results = vjp_op(*inputs, *cotangents(inputs, grads))
        results = results if n_args > 1 else (results,)
        return tuple(r if need else None for r, need in zip(results, ctx.needs_input_grad))

    def refuse_double_backward(ctx: Any, *grads: Any) -> tuple:
        raise RuntimeError(
            f"double backward through the compiled symgrad function '{_BOUND[op_name].name}' "
            "is not supported: its vjp kernel is first order. Differentiate once, or write the "
            "derivative you need as its own @sg.function and compile it."
        )

    op.register_autograd(backward, setup_context=save_inputs)
    vjp_op.register_autograd(refuse_double_backward, setup_context=lambda ctx, inputs, output: None)

    fwd_vmap = _vmap_rule(arg_shapes, out_shapes, grads=False)
    vjp_vmap = _vmap_rule(arg_shapes, out_shapes, grads=True)
    torch.library.register_vmap(op, lambda info, in_dims, *ts: fwd_vmap(op, info, in_dims, ts))
    torch.library.register_vmap(vjp_op, lambda info, in_dims, *ts: vjp_vmap(vjp_op, info, in_dims, ts))

    # torch.func transforms: PyTorch's autograd for custom ops refuses torch.func.grad, so under a transform
    # the call goes through new-style autograd.Functions (setup_context, vmap) wrapping the same two ops.
    label = "".join(p.capitalize() for p in op_name.split("_")[:-1]) or op_name
    vjp_function = _functorch_function(
        f"{label}SymgradVjp", vjp_op, refuse_double_backward, vjp_vmap, save=False
    )

    def functorch_backward(ctx: Any, *grads: Any) -> tuple:
        inputs = ctx.saved_tensors
        results = vjp_function.apply(*inputs, *cotangents(inputs, grads))
        results = results if n_args > 1 else (results,)
        return tuple(r if need else None for r, need in zip(results, ctx.needs_input_grad))

    function = _functorch_function(f"{label}SymgradFunc", op, functorch_backward, fwd_vmap, save=True)
    _OPS[qualified] = (op, vjp_op, function)
    return _OPS[qualified]


def _functorch_function(name: str, call: Any, backward: Any, vmap_rule: Any, save: bool) -> type:
    """A new-style autograd.Function around a custom op, usable under torch.func transforms."""

    def forward(*tensors: torch.Tensor) -> Any:
        return call(*tensors)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        if save:
            ctx.save_for_backward(*inputs)

    def vmap(info: Any, in_dims: tuple, *tensors: torch.Tensor) -> tuple:
        return vmap_rule(cls.apply, info, in_dims, tensors)

    cls = type(
        name,
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup_context),
            "backward": staticmethod(backward),
            "vmap": staticmethod(vmap),
            "__module__": __name__,
        },
    )
    return cls


def _vmap_rule(arg_shapes: tuple, out_shapes: tuple, grads: bool) -> Any:
    """The vmap rule of the forward (``grads=False``) or the vjp op, given the callable to run batched.

    The compiled functions broadcast, so a vmapped call is one call on the batched tensors, with the vmapped
    axis in front, padded so that it lines up across arguments. For the vjp every argument gets that axis
    (a stride-0 expand when unbatched), so that per-example gradients are not summed over it."""
    n_args, n_out = len(arg_shapes), len(out_shapes)
    shapes = tuple(arg_shapes) + (tuple(out_shapes) if grads else ())

    def rule(call: Any, info: Any, in_dims: tuple, tensors: tuple) -> tuple:
        size = info.batch_size
        out = call(*_align_batched(size, in_dims, tensors, shapes, expand_all=grads))
        if not grads:
            return out, ((0,) * n_out if n_out > 1 else 0)
        out = out if n_args > 1 else (out,)
        logical = [t.shape if d is None else t.movedim(d, 0).shape[1:] for t, d in zip(tensors, in_dims)]
        results = tuple(g.reshape(size, *shape) for g, shape in zip(out, logical[:n_args]))
        return (results, (0,) * n_args) if n_args > 1 else (results[0], 0)

    return rule


def _align_batched(size: int, in_dims: tuple, tensors: tuple, shapes: tuple, expand_all: bool) -> list:
    """Move each vmapped dimension to the front and pad with size-1 axes after it, so that the vmapped axis
    lines up across arguments under trailing-aligned broadcasting; with ``expand_all`` unbatched arguments
    get the leading axis too (a stride-0 expand), so that per-example gradients are not summed over it."""
    ranks = [t.dim() - (d is not None) - len(s) for t, d, s in zip(tensors, in_dims, shapes)]
    top = max(ranks)
    out = []
    for t, d, r in zip(tensors, in_dims, ranks):
        if d is None:
            if not expand_all:
                out.append(t)
                continue
            t = t.reshape((1,) * (top - r + 1) + tuple(t.shape)).expand(size, *([-1] * (t.dim() + top - r)))
        else:
            t = t.movedim(d, 0)
            t = t.reshape((size,) + (1,) * (top - r) + tuple(t.shape[1:]))
        out.append(t)
    return out


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == torch.float64 else np.dtype(np.float32)


def _grad_tensor(g: Any, like: torch.Tensor) -> torch.Tensor:
    """A gradient array (already summed to the input's shape) as a tensor of the input's dtype."""
    g = _from_np(g, _np_dtype(like.dtype))
    return g if g.shape == like.shape else g.reshape(like.shape)


# -- autograd.Function ------------------------------------------------------------------------------------
def _make_autograd_function(op_name: str, n_args: int, n_out: int) -> type:
    """The eager ``autograd.Function``, called as ``apply(jac, *tensors)``.

    ``jac=False``: the forward kernel; backward runs the fused vjp kernel on the saved inputs.
    ``jac=True`` (per-element scalar, one output, one or two arguments; ``TorchFunction._use_jacobian``):
    the forward runs the fused ``value_and_jacobian`` kernel and saves the Jacobian instead of the inputs;
    backward is then ``grad * J`` (summed back to broadcast shapes): the forward program is not recomputed.
    Old-style ``forward(ctx, ...)``: no per-call signature binding (new-style ``setup_context`` costs an
    ``inspect.signature`` per call); ``torch.func`` transforms use the custom ops instead."""

    def forward(ctx: Any, jac: bool, *tensors: torch.Tensor) -> Any:
        fn = _BOUND[op_name]
        arrays = [t.numpy(force=True) for t in tensors]  # views of the tensors' memory (see _np)
        if jac:  # one output (see _use_jacobian)
            results = fn._run_same_shape("value_and_jacobian", arrays)  # same shapes: straight to the kernel
            if results is None:
                out, jacobian = fn.value_and_jacobian(*arrays)  # J: batch + (1, n_args)
                out = out[0] if fn.returns_tuple else out
            else:
                out, jacobian = results
            ctx.jac = [torch.from_numpy(jacobian[..., 0, i]) for i in range(n_args)]
            ctx.shapes = [t.shape for t in tensors]
            return _from_np(out)
        ctx.jac = None
        ctx.save_for_backward(*tensors)  # the vjp needs the inputs only, never the outputs
        outs = fn.forward(*arrays)
        if n_out == 1:
            return _from_np(outs[0])
        return tuple(_from_np(o) for o in outs)

    def backward(ctx: Any, *grads: Any) -> tuple:
        needs = ctx.needs_input_grad
        jac = ctx.jac
        if jac is not None:
            results = [
                _jacobian_grad(jac[i], grads[0], shape) if needs[i + 1] else None
                for i, shape in enumerate(ctx.shapes)
            ]
            anchors: tuple = ()
        elif not any(needs):
            return (None,) * (n_args + 1)
        else:
            inputs = ctx.saved_tensors
            cots = [_np(g) if g is not None else 0.0 for g in grads]
            results = _BOUND[op_name].vjp(*(_np(t) for t in inputs), *cots)
            results = [
                _grad_tensor(r, t) if need and r is not None else None
                for r, t, need in zip(results, inputs, needs[1:])
            ]
            anchors = inputs
        if torch.is_grad_enabled():  # create_graph=True: a second differentiation must fail
            with torch.enable_grad():
                anchor = torch.empty(0, requires_grad=True)
                results = [
                    None if r is None else _FirstOrder.apply(_BOUND[op_name].name, r, anchor, *anchors)
                    for r in results
                ]
        return (None, *results)

    name = "".join(p.capitalize() for p in op_name.split("_")[:-1]) or op_name
    return type(
        f"{name}SymgradFunction",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward), "__module__": __name__},
    )


def _jacobian_grad(column: torch.Tensor, grad: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """grad * J[..., 0, i], summed back to the input's (broadcast) shape."""
    if grad is None:
        return column.new_zeros(shape)
    term = grad * column
    return term if term.shape == shape else term.sum_to_size(shape)


class _FirstOrder(torch.autograd.Function):
    """Passes a gradient through and refuses to be differentiated (the vjp kernels are first order)."""

    @staticmethod
    def forward(ctx: Any, name: str, result: torch.Tensor, *anchors: Any) -> torch.Tensor:
        ctx.name = name
        return result.view_as(result)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        raise RuntimeError(
            f"double backward through the compiled symgrad function '{ctx.name}' is not "
            "supported: its vjp kernel is first order. Differentiate once, or write the "
            "derivative you need as its own @sg.function and compile it."
        )


__all__ = ["to_torch", "TorchFunction", "has_custom_op"]
