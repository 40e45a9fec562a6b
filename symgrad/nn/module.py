"""``Module``: parameters and submodules registered by attribute assignment, as in ``torch.nn.Module``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from symgrad.nn.parameter import Parameter
from symgrad.runtime.tensor import Tensor


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


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
        """Reset every parameter's ``.grad`` (to None, as torch does by default)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = Tensor(np.zeros_like(p.data))

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

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
        for name, value in state_dict.items():
            if name in own:
                np.copyto(own[name].data, value.data if isinstance(value, Tensor) else np.asarray(value))
        return IncompatibleKeys(missing, unexpected)

    # -- display ---------------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({k}): " + repr(m).replace("\n", "\n  ") for k, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"
