"""The child process of ``build.child``: ``python -m symgrad.build.worker RESULT MODEL DEST [--force]
[--progress]`` compiles the model and writes ``{"rebuilt": bool}`` or its error to the file ``RESULT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from symgrad.build.compile import compile_model
from symgrad.build.progress import FunctionLines
from symgrad.errors import SymgradError


def main(argv: list[str]) -> int:
    """The child: ``RESULT MODEL DEST [--force] [--progress]``; writes ``{"rebuilt": bool}`` or the error."""
    result, model, dest, *flags = argv
    lines = FunctionLines() if "--progress" in flags else None
    status = 0
    try:
        built = compile_model(model, dest, force="--force" in flags, progress=lines)
        outcome: dict = {"rebuilt": built.rebuilt}
    except SymgradError as exc:
        outcome, status = {"error": type(exc).__name__, "message": str(exc)}, 1
    except OSError as exc:
        outcome, status = {"error": "OSError", "errno": exc.errno, "message": str(exc)}, 1
    finally:
        if lines is not None:
            lines.end()
    Path(result).write_text(json.dumps(outcome))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
