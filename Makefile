# symgrad — every target installs what it needs into .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export SYMGRAD_CACHE_DIR ?= $(CURDIR)/.cache/symgrad

.PHONY: install lint test test-fast demo bench fuzz sanitize golden clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,examples]'
	touch $(STAMP)

install: $(STAMP)

## make lint: ruff's lint rules and its formatting (line length 110), checked, not applied
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## make test: lint, then the whole test suite on every core (bounded property-based budget; PyTorch and JAX
## installed, so that no test is skipped)
test: lint
	$(BIN)/python -m pytest -n auto

## make test-fast: the inner loop (under 90 s): the tests not marked slow, NumPy and C backends alike
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n auto -x -m "not slow"

## make demo: compile the example model, show a derived gradient, check it, train the digits MLP
demo: $(STAMP)
	$(BIN)/symgrad compile examples/model.py
	$(BIN)/symgrad show examples/model.py softplus
	$(BIN)/symgrad check examples/model.py
	$(BIN)/python examples/mlp_digits.py

## make bench: benchmark tables (ratios against NumPy, and PyTorch/JAX when installed);
## BENCH_ARGS=--quick for a short run
bench: $(STAMP)
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f $(BENCH_ARGS) || exit 1; done

## make fuzz: property-based gradient tests and hostile names, with a large example budget
fuzz: $(STAMP)
	SYMGRAD_FUZZ_EXAMPLES=2000 $(BIN)/python -m pytest tests/test_properties.py tests/test_names_fuzz.py tests/test_extremes.py

## make sanitize: the tests that run C kernels (every target, dtype, layout and extreme input), once with
## -fsanitize=address,undefined (UBSan reports are fatal); libstdc++ is preloaded after libasan so that
## ASan intercepts C++ exceptions (torch and JAX throw some when installed: ASan aborted at the first)
SANITIZE_TESTS := tests/test_c_emitter.py tests/test_activations.py tests/test_nan_regressions.py \
	tests/test_seed.py tests/test_conventions.py tests/test_adbench.py tests/test_runtime_ops.py \
	tests/test_pool.py tests/test_nn_optim.py tests/test_fused_accumulate.py tests/test_fresh_call.py \
	tests/test_c_build.py::test_direct_call_refuses_bad_buffers \
	tests/test_c_build.py::test_run_copies_an_unaligned_input tests/test_c_build.py::test_parallel_rows_match_one_thread
sanitize: $(STAMP)
	SYMGRAD_SANITIZE=1 LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
		ASAN_OPTIONS=detect_leaks=0 \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(BIN)/python -m pytest -p no:cacheprovider $(SANITIZE_TESTS)

## make golden: regenerate golden files after an intended change to generated code (review the diff)
golden: $(STAMP)
	SYMGRAD_UPDATE_GOLDEN=1 $(BIN)/python -m pytest tests/test_golden.py

clean:
	rm -rf $(VENV) .cache examples/*_symgrad .pytest_cache
