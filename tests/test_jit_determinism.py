"""A kernel compiled in this process and the same kernel loaded from Numba's cache agree to the bit.

With ``fastmath`` reassociation the analytic kernel of a dyadic arm gave sums that differed in
the last bits between the run that compiled it and the runs that loaded it from the cache (1,697
of the values below, by up to 1.8e-15): a user's first run would not reproduce. The kernels now
compile without ``reassoc`` (``specreplay/replay/estimators/analytic.py``, ``sim/policy.py``,
``stats/bootstrap.py``, whose one resample pass is compared here too). Each side runs in a fresh
process on a fresh cache folder: the first compiles, the second loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

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
    v = get_estimator("analytic").rounds(
        batch, parse_arm(arm), LawCache(batch.offsets, batch.draft_logprobs), seed=0,
        replicates=1, max_depth=5, logging=None,
    )
    out += [v.t.ravel(), v.var.ravel(), v.surv.ravel(), v.offpath.ravel()]
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
