"""Golden files: the whole generated source of the example model, per emitter.

After an intended change to generated code, run `make golden` and review the diff."""

import os
from pathlib import Path

import pytest

import emitters
from symgrad.build.compile import compile_model

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return compile_model(
        ROOT / "examples" / "model.py", tmp_path_factory.mktemp("pkg") / "model_symgrad"
    ).path


@pytest.mark.parametrize("emitter", emitters.names())
def test_generated_file_matches_golden(package, emitter):
    filename = emitters.get(emitter).filename
    generated = (package / filename).read_text()
    golden = GOLDEN / f"model.{filename}"
    if os.environ.get("SYMGRAD_UPDATE_GOLDEN"):
        golden.write_text(generated)
    assert golden.exists(), f"no golden file {golden}; run `make golden`"
    assert generated == golden.read_text(), f"{filename} changed; review and run `make golden` if intended"
