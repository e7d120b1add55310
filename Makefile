# Two commands for a newcomer: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast check lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[eval]'
	touch $@

$(VENV)/.test: pyproject.toml tools/install-browser | $(BIN)/python
	tools/install-browser
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

# The main job: evaluate the strategies on the built-in datasets (report in out/demo).
demo: $(VENV)/.demo
	$(BIN)/ctxwindow eval --out out/demo \
		--strategies message_window,token_window,hybrid,hybrid_norecall,full

test: $(VENV)/.test
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy
	# matplotlib's font list of its own, made after tools/install-browser put the CJK fonts in
	# (one made earlier, by make demo, would not know them)
	MPLCONFIGDIR=$(abspath $(VENV))/matplotlib-test $(BIN)/python -m pytest
	# each framework adapter's tests at the lowest and the newest versions its extra allows
	$(BIN)/python tools/check_adapter_ranges.py

# The inner loop while changing code: the suite without the tests that need Redis/PostgreSQL or
# start servers, drive chromium, or take long (markers in pyproject.toml, rules in
# tests/conftest.py). `make test` stays the whole suite, and what CI runs. Compiled modules (and
# pytest's rewritten test modules) are kept in .venv/pycache, even where the environment sets
# PYTHONDONTWRITEBYTECODE: compiling them all again cost ~10 s at every start. The tests run in
# one pytest-xdist worker a core (PYTEST_XDIST_AUTO_NUM_WORKERS=N sets the number), each with a
# one-thread embedder: the workers' OpenMP threads waiting on each other's cores made the
# embedding tests 2-3 times slower on a busy machine.
test-fast: $(VENV)/.test
	MPLCONFIGDIR=$(abspath $(VENV))/matplotlib-test OMP_NUM_THREADS=1 \
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache \
		$(BIN)/python -m pytest -p xdist -n auto -m "not servers and not browser and not slow"

check: test

bench: $(VENV)/.bench
	$(BIN)/python benchmarks/bench_windows.py
	$(BIN)/python benchmarks/bench_priority.py
	$(BIN)/python benchmarks/bench_stores.py
	$(BIN)/python benchmarks/bench_server.py
	$(BIN)/python benchmarks/bench_upstream.py
	$(BIN)/python benchmarks/bench_cold.py
	$(BIN)/python benchmarks/bench_summary.py
	$(BIN)/python benchmarks/bench_recall.py
	$(BIN)/python benchmarks/bench_manager.py
	cd benchmarks && ../$(BIN)/python bench_langchain.py
	$(BIN)/python benchmarks/bench_cache.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
