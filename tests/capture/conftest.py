"""The engine tests (issue 12): run by ``make test-capture``, which installs the [capture] extra.

Every test in this folder is marked ``capture``; ``make test`` deselects them (``-m "not capture"``
in pytest's addopts) and ``make test-capture`` selects them. Without torch they fail loudly
rather than skip: a green ``make test-capture`` must mean the engines ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

try:
    import torch  # noqa: F401
except ImportError:
    # The core venv (`make test`): the engine test modules import torch at the top, so
    # collecting them (as tests, or as doctest modules) would be an error before `-m "not
    # capture"` deselects them. `make test-capture` without torch then collects nothing and
    # pytest exits 5 ("no tests ran"): still a loud failure, never a silent skip.
    collect_ignore_glob = ["*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.capture)
