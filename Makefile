# specreplay: `make demo` and `make test` set everything up on a fresh machine.
# Python >= 3.12 is required (arviz 1.x). Override with `make test PYTHON=/path/to/python3.12`.

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

# The numba cache is keyed by a hash of the package sources, so an edited helper kernel never
# reuses a stale compiled caller (numba does not track cross-module dependencies).
SRC_HASH := $(shell cat $$(find specreplay -name '*.py' | sort) 2>/dev/null | sha256sum | cut -c1-16)
export NUMBA_CACHE_DIR := $(CURDIR)/.numba-cache/$(SRC_HASH)

.PHONY: demo test lint venv clean bench

$(STAMP): pyproject.toml
	@set -e; \
	if [ ! -x $(PY) ]; then \
	  py=$$(bash -c "$$FIND_PYTHON") || { \
	    echo "error: specreplay needs Python >= 3.12 (arviz 1.x requires it) and none was found." >&2; \
	    echo "Install one (e.g. 'pyenv install 3.12', 'apt-get install python3.12' or python.org)," >&2; \
	    echo "or point to it: make $(MAKECMDGOALS) PYTHON=/path/to/python3.12" >&2; exit 2; }; \
	  echo "Creating $(VENV) with $$py ($$($$py --version))"; \
	  "$$py" -m venv $(VENV); \
	fi; \
	$(PY) -m pip install --quiet --upgrade pip; \
	$(PY) -m pip install --quiet -e '.[dev]'; \
	touch $(STAMP)

venv: $(STAMP)
	$(VENV)/bin/specreplay warmup -q

demo: $(STAMP)
	$(VENV)/bin/specreplay demo --force

lint: $(STAMP)
	$(VENV)/bin/ruff check specreplay specreplay_testing tests bench
	$(VENV)/bin/ruff format --check specreplay specreplay_testing tests bench
	$(VENV)/bin/mypy --strict specreplay specreplay_testing
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .numba-cache specreplay-out .pytest_cache .mypy_cache .ruff_cache
