"""The process-wide tables of the PyTorch interop, and the name of a compiled function's ops.

Ops are named ``<ident>_<package hash>``: a second load of the same package (same hash, same kernels) shares
them, and ``torch.library`` cannot define a name twice in a process anyway.
"""

from __future__ import annotations

import re
import threading
from typing import Any

#: Guards ``BOUND`` and the TorchFunction cache while ``to_torch`` fills them.
LOCK = threading.Lock()
#: op name -> the CompiledFunction its kernels currently come from (two loads of one package share an op).
BOUND: dict[str, Any] = {}
#: qualified op name -> (forward op, vjp op, autograd.Function for torch.func transforms).
OPS: dict[str, tuple] = {}


def op_name(fn: Any) -> str:
    """``<ident>_<first 16 hex digits of the package hash>`` (just the ident for a package without one)."""
    manifest = fn.package.manifest
    package_hash = manifest.get("package_hash") or manifest.get("source_hash", "")
    ident = re.sub(r"\W", "_", fn.ident)
    return f"{ident}_{package_hash[:16]}" if package_hash else ident
