"""A kernel compiled in this process and the same kernel loaded from Numba's cache agree to the bit.

With ``fastmath`` reassociation the analytic kernel of a dyadic arm gave sums that differed in
the last bits between the run that compiled it and the runs that loaded it from the cache (1,697
of the values below, by up to 1.8e-15): a user's first run would not reproduce. The kernels now
compile without ``reassoc`` (``specreplay/replay/estimators/analytic.py``, ``sim/policy.py``,
``stats/bootstrap.py``, whose one resample pass is compared here too, and the fused pass over
every arm, ``replay/estimators/allarms.py``) and sum rows in a fixed
lane order (``specreplay/sim/lanes.py``) that the compiler may vectorise but not reorder. Each
side runs in a fresh process on a fresh cache folder: the first compiles, the second loads.

Whether reassociation shows as a cold/warm difference depends on LLVM's choices: on this machine
in December 2026 (numba 0.68.1) the comparison below passed with ``reassoc`` put back, both on
the code before lane order and after. So :func:`test_no_kernel_reassociates` checks the flags of
every kernel directly, and ``tests/test_lanes.py`` checks each kernel's sums against their Python
twin to the bit (a reassociating build fails it).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from numba.core.dispatcher import Dispatcher

import specreplay

SCRIPT = """
import sys
import numpy as np
from pathlib import Path
from specreplay.replay.archive.reader import ArchiveReader
from specreplay.replay.estimators import get_estimator
from specreplay.sim.arms import parse_arm
from specreplay.sim.policy import LawCache

batch = next(iter(ArchiveReader(Path(sys.argv[1]))))
out = []
for arm in ("top32:t0.7:dyadic24@5", "top16:t1.3:dyadic8@5"):
    cache = LawCache(batch.offsets, batch.draft_logprobs)
    v = get_estimator("analytic").rounds(
        batch, parse_arm(arm), cache, seed=0, replicates=1, max_depth=5, logging=None,
    )
    out += [v.t.ravel(), v.var.ravel(), v.surv.ravel(), v.offpath.ravel()]
    out.append(cache.policy(parse_arm(arm).policy).q)  # the policy law's lane-order sums
# the importance kernel's lane-order second moments (the archive holds emitted_q)
v = get_estimator("importance").rounds(
    batch, parse_arm("top32:t0.7@5"), LawCache(batch.offsets, batch.draft_logprobs), seed=0,
    replicates=1, max_depth=5, logging=None,
)
out += [v.t.ravel(), v.surv.ravel(), v.ratio.ravel(), v.bound.ravel(), v.moment.ravel()]
# the fused pass over every arm (issue 18): analytic and importance of four arms in one kernel
from specreplay.replay.estimators.allarms import all_arms_rounds
arms = [parse_arm(a) for a in ("top32:t0.7@5", "top32:t0.7:dyadic24@5", "top16:t1.3:dyadic8/"
                               "float32@5", "greedy@5")]
got = all_arms_rounds(
    arms=arms, offsets=batch.offsets, draft_logprobs=batch.draft_logprobs,
    target_probs=batch.target_probs, drafted_idx=batch.drafted_idx,
    round_offsets=batch.round_offsets, max_depth=5, q_logging=batch.emitted_q,
)
for w in got.analytic + got.importance:
    out += [w.t.ravel(), w.surv.ravel(), w.offpath.ravel()]
    out += [x.ravel() for x in (w.ratio, w.bound, w.moment) if x is not None]
# the bootstrap's one pass: three tables, two sharing a layout (eight columns at a time)
from specreplay.stats.bootstrap import PairedSums, resample_sums, resampling
rng = np.random.default_rng(7)
n = 300
piece = np.concatenate([np.arange(n), np.arange(0, n, 3)])
bucket = np.concatenate([np.zeros(n, np.int32), np.ones(n // 3, np.int32)])
def table(family):
    k = piece.shape[0]
    return PairedSums(tuple(f"r{i}" for i in range(n)), np.arange(n, dtype=np.uint64) * 7919,
                      family, piece, bucket, *(rng.random(k) * 9 for _ in range(4)),
                      tuple(f"f{i}" for i in range(family.max() + 1)), ("b0", "b1"))
a = table((np.arange(n) % 3).astype(np.int32))
tables = [a, table(a.family), table((np.arange(n) % 5).astype(np.int32))]
out += [s.ravel() for s in resample_sums(resampling(a, n_boot=50, seed=3), tables)]
np.save(sys.argv[2], np.concatenate(out))
"""


def test_compiled_and_cached_kernels_agree(small_archive: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    runs = []
    for name in ("compiled", "cached"):
        out = tmp_path / f"{name}.npy"
        subprocess.run([sys.executable, "-c", SCRIPT, str(small_archive), str(out)], env=env,
                       check=True)  # fmt: skip
        runs.append(np.load(out))
    assert any((tmp_path / "numba").rglob("*.nbi"))  # the second run had a cache to load
    assert runs[0].shape == runs[1].shape and runs[0].size > 1000
    np.testing.assert_array_equal(runs[0], runs[1])


def _kernel_modules() -> list[str]:
    """Every module of the package whose source defines a Numba kernel."""
    root = Path(specreplay.__file__).parent
    names = []
    for path in sorted(root.rglob("*.py")):
        if "@njit" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(root).with_suffix("").parts
            names.append(".".join(["specreplay", *(p for p in parts if p != "__init__")]))
    return names


def test_no_kernel_reassociates() -> None:
    """No kernel compiles with fast-math reassociation (``fastmath=True`` includes it)."""
    kernels, found = 0, []
    for name in _kernel_modules():
        for attr, obj in vars(importlib.import_module(name)).items():
            if isinstance(obj, Dispatcher) and obj.__module__ == name:
                kernels += 1
                fm = obj.targetoptions.get("fastmath")
                flags = {"fast"} if fm is True else set(fm or ())
                if flags & {"fast", "reassoc"}:
                    found.append(f"{name}.{attr}: fastmath={fm!r}")
    assert kernels > 50  # the walk saw the kernels (a broken walk would pass vacuously)
    assert found == []
