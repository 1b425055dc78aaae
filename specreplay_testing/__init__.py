"""Testing support for specreplay: code the tests and ``bench/`` use, outside the runtime package.

:mod:`specreplay_testing.livetruth` runs the built-in world's rounds live and compares the replay
estimators against that ground truth (``tests/test_live_truth.py``, ``bench/live_truth.py``);
:mod:`specreplay_testing.livepolicy` does the same for rounds drafted by a drafting policy
(``stop-below``, ``stop-cum``, ``depth-by-bucket``; ``tests/test_policy_live_truth.py``).

This package is not part of the wheel (``[tool.hatch.build.targets.wheel] packages`` lists only
``specreplay``), and ``specreplay`` never imports it (``tests/test_layers.py``). The editable
install (``pip install -e .``, as ``make venv`` does) exposes it: ``dev-mode-dirs = ["."]`` puts
the repository root on ``sys.path``, so ``pytest`` and ``python bench/live_truth.py`` import it
with no ``PYTHONPATH``. It may import anything from ``specreplay``.
"""

__all__: list[str] = []
