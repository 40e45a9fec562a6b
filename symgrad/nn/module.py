"""``Module``: parameters and submodules registered by attribute assignment, as in ``torch.nn.Module``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from symgrad.nn.parameter import Parameter
from symgrad.runtime.autograd import no_grad
from symgrad.runtime.inplace import bump
from symgrad.runtime.tensor import Tensor


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


def zero_grads(params: Iterable[Tensor], set_to_none: bool = True) -> None:
    """``zero_grad`` of modules and optimizers: each ``.grad`` to None, or zeroed in place (the same Tensor,
    taken off the graph first if it was computed with ``create_graph``)."""
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
            continue
        if p.grad.requires_grad:
            p.grad = p.grad.detach()
        p.grad.data[...] = 0
        bump(p.grad.data)


class Module:
    """Base class of layers and models: define ``forward``; assign Parameters and Modules as attributes."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        registries = self.__dict__.get("_parameters"), self.__dict__.get("_modules")
        if registries[0] is None:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError("cannot assign parameters or modules before Module.__init__() call")
        else:
            params, modules = registries
            params.pop(name, None)
            modules.pop(name, None)
            if isinstance(value, Parameter):
                params[name] = value
            elif isinstance(value, Module):
                modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` under ``name`` (as attribute assignment does), with torch's checks."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        setattr(self, name, module)

    register_module = add_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        name = type(self).__name__
        raise NotImplementedError(f'Module [{name}] is missing the required "forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # -- traversal -----------------------------------------------------------------------------------------
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first, each once."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{k}" if name else k, m) for k, m in module._modules.items()]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def children(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs, each parameter once, in registration order."""
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for name, module in modules:
            for k, p in module._parameters.items():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{name}.{k}" if name else k), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        return (p for _, p in self.named_parameters(recurse=recurse))

    # -- training state --------------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad``: to None by default (as torch 2.x), else to zeros in place."""
        zero_grads(self.parameters(), set_to_none)

    def train(self, mode: bool = True) -> Module:
        """Set ``training`` on this module and every submodule (``Dropout`` acts only while training)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` of every parameter (``False`` freezes the module)."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def apply(self, fn: Any) -> Module:
        """Call ``fn(module)`` on every submodule (children first) and on this module."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, dtype: Any) -> Module:
        """Cast every floating parameter (and its gradient) to ``dtype``, keeping the Parameter objects."""
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise TypeError(
                f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}"
            )
        for p in self.parameters():
            if p.data.dtype.kind == "f":
                p.data = p.data.astype(dtype)
                if p.grad is not None:
                    p.grad = Tensor(p.grad.data.astype(dtype))
        return self

    def float(self) -> Module:
        """``to(float32)``."""
        return self.to(np.float32)

    def double(self) -> Module:
        """``to(float64)``."""
        return self.to(np.float64)

    # -- persistence ----------------------------------------------------------------------------------------
    def state_dict(self) -> OrderedDict[str, Tensor]:
        """Parameters by dotted name, detached (sharing memory with the module)."""
        return OrderedDict((name, p.detach()) for name, p in self.named_parameters())

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into the existing parameters (in place); with ``strict``, keys must match exactly."""
        own = dict(self.named_parameters())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for name, value in state_dict.items():
            if name in own:
                arr = value.data if isinstance(value, Tensor) else np.asarray(value)
                if arr.shape != own[name].data.shape:
                    errors.append(
                        f"size mismatch for {name}: copying a param with shape {arr.shape} from "
                        f"checkpoint, the shape in current model is {own[name].data.shape}."
                    )
        if strict:
            if missing:
                errors.insert(
                    0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". "
                )
            if unexpected:
                errors.insert(
                    0 if not missing else 1,
                    "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ",
                )
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors)
            )
        with no_grad():
            for name, value in state_dict.items():
                if name in own:
                    own[name].copy_(value.data if isinstance(value, Tensor) else np.asarray(value))
        return IncompatibleKeys(missing, unexpected)

    # -- display ---------------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({k}): " + repr(m).replace("\n", "\n  ") for k, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"
