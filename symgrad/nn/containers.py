"""Containers that register the modules they hold: ``ModuleList`` and ``ModuleDict`` (as in ``torch.nn``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from symgrad.nn.module import Module


class ModuleList(Module):
    """A list of modules, registered as '0', '1', ... so that ``parameters()`` and ``state_dict()`` see them;
    it has no ``forward``: iterate over it in your own."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, idx: int) -> str:
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx % len(self))

    def _renumber(self, modules: list[Module]) -> None:
        for key in list(self._modules):
            delattr(self, key)
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._index(idx), module)

    def __delitem__(self, idx: int | slice) -> None:
        modules = list(self._modules.values())
        del modules[idx if isinstance(idx, slice) else int(self._index(idx))]
        self._renumber(modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        if isinstance(modules, (str, bytes)) or not isinstance(modules, Iterable):
            raise TypeError(
                "ModuleList.extend should be called with an iterable, but got " + type(modules).__name__
            )
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._renumber(modules)

    def pop(self, idx: int = -1) -> Module:
        module = self[idx]
        del self[idx]
        return module


class ModuleDict(Module):
    """A dict of modules by name (insertion order), registered so that ``parameters()`` sees them."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        if key not in self._modules:
            raise KeyError(key)
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        return self._modules.values()

    def clear(self) -> None:
        for key in list(self._modules):
            delattr(self, key)

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for j, pair in enumerate(pairs):
            if isinstance(pair, (str, bytes)) or len(pair) != 2:
                raise ValueError(
                    f"ModuleDict update sequence element #{j} has length {len(pair)}; 2 is required"
                )
            self[pair[0]] = pair[1]
