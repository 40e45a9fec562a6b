"""The NumPy backend: runs the package's generated ``kernels_numpy.py`` as a module named for its file.

The module is executed from the very text that ``Package.read`` checked against the recorded digest (not
imported from the path again): a file removed meanwhile (``symgrad cache clear``) is read from the rebuilt
package, and a file replaced meanwhile never runs unchecked.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from symgrad import abi
from symgrad.backends.base import Package, Run


class NumPyKernels:
    def __init__(self, package: Package) -> None:
        name = f"_symgrad_np_{package.manifest['package_hash'][:16]}"
        module = sys.modules.get(name)
        if module is None:
            text = package.read("numpy")
            module = types.ModuleType(name)
            module.__file__ = str(package.path / package.manifest["files"]["numpy"])
            exec(compile(text, module.__file__, "exec"), module.__dict__)
            sys.modules[name] = module
        self.module = module
        self.shapes = {
            f["ident"]: {p: [tuple(s["shape"]) for s in v["outputs"]] for p, v in f["programs"].items()}
            for f in package.manifest["functions"]
        }

    def program(self, function: str, program: str, dtype: np.dtype) -> Run:
        fn = getattr(self.module, abi.kernel_symbol(function, program))
        shapes = self.shapes[function][program]

        def run(inputs: tuple, batch: tuple, out: tuple | None = None) -> tuple:
            results = fn(*inputs)
            fixed = []
            for k, (r, shape) in enumerate(zip(results, shapes)):
                full = batch + shape
                if out is not None:
                    np.copyto(out[k], np.broadcast_to(r, full), casting="unsafe")
                    r = out[k]
                elif (
                    type(r) is not np.ndarray
                    or r.dtype != dtype
                    or r.shape != full
                    or any(np.may_share_memory(r, a) for a in (*inputs, *fixed))
                ):
                    r = np.array(np.broadcast_to(r, full), dtype=dtype)
                fixed.append(r)
            return tuple(fixed)

        return run


class NumPyBackend:
    name = "numpy"

    def load(self, package: Package) -> NumPyKernels:
        return NumPyKernels(package)
