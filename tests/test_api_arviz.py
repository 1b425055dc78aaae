"""Issue 16, item 8: ``to_arviz()`` leaves out cells that repeat the pooled series and records
the interval level.

- A cell holding every request (the Medusa files have no context lengths: one bucket,
  ``unknown``; three in-memory requests of one family) sums the same requests in every
  replicate, so its draws are the pooled cell's: the tree leaves it out and names it in
  ``attrs["cells_left_out"]``. Which cells hold every request is read here from the
  comparison's request counts, not from the draws the code compares.
- ``attrs["ci_prob"]`` is the run's level, so ``az.summary(tree, ci_prob=…)`` gives the ETI the
  result stores (results.json's ``eti``, computed in NumPy by the package) rather than ArviZ's
  89% default.

ArviZ is an optional extra: the module is skipped without it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specreplay import api
from specreplay.results.model import Result, Role
from specreplay.stats.arviz_bridge import DepthReplicates
from specreplay.stats.compare import Comparison, compare
from specreplay.stats.pairing import PairedSums

az = pytest.importorskip("arviz")

DATA = Path(__file__).parent / "data"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
MEDUSA_A = DATA / "medusa-mtbench" / f"medusa-vicuna-7b-v1.3-{STEM}"
MEDUSA_B = DATA / "medusa-mtbench" / f"medusa-vicuna-13b-v1.3-{STEM}"
QUESTIONS = DATA / "medusa-mtbench" / "question.jsonl"


def _medusa(level: float = 0.95) -> Result:
    return api.interval(MEDUSA_A, MEDUSA_B, question_file=QUESTIONS, n_boot=400, level=level)


def _comparison(res: Result) -> Comparison:
    reps = res.replicates
    assert reps is not None
    comp: Comparison = reps.comparison  # type: ignore[attr-defined]
    return comp


def test_a_cell_holding_every_request_is_left_out_and_named() -> None:
    res = _medusa()
    comp = _comparison(res)
    whole = [i for i, c in enumerate(comp.cells) if i > 0 and c.n_requests == res.pooled.n_requests]
    assert [comp.cells[i].spec.bucket for i in whole] == ["unknown"]  # the one bucket, no other
    keep = [i for i in range(len(comp.cells)) if i not in whole]
    tree = res.to_arviz()
    post = tree["posterior"]
    assert post.sizes["cell"] == len(comp.cells) - 1 == 17
    assert "unknown" not in [str(c) for c in post["cell"].values]
    for name, reps in (("delta", comp.delta_reps), ("rel", comp.rel_reps), ("rb", comp.rb_reps)):
        assert reps is not None
        np.testing.assert_array_equal(post[name].values[0], reps[:, keep])
        np.testing.assert_array_equal(reps[:, whole[0]], reps[:, 0])  # what was left out
    assert tree.attrs["cells_left_out"] == "unknown"
    assert "pooled cell" in tree.attrs["cells_left_out_because"]


def test_summary_at_the_recorded_level_is_the_results_eti() -> None:
    """ArviZ's own summary, at ``attrs["ci_prob"]``, gives the ETI results.json stores: 95%
    (columns ``eti95_*``, not ArviZ's default ``eti89_*``), and 90% for a run at level 0.9."""
    for level in (0.95, 0.9):
        res = _medusa(level=level)
        tree = res.to_arviz()
        assert tree.attrs["ci_prob"] == level
        pooled = {"cell": ["pooled"]}
        summary = az.summary(tree, var_names=["delta"], coords=pooled, kind="stats",
                             ci_prob=tree.attrs["ci_prob"], round_to="none")  # fmt: skip
        pct = f"{100 * level:g}"
        d = res.pooled.delta(Role.B_VS_A)
        assert d is not None and d.eti is not None and d.eti.prob == level
        row = summary.loc["delta[pooled]"]
        assert (row[f"eti{pct}_lb"], row[f"eti{pct}_ub"]) == pytest.approx(
            (d.eti.lo, d.eti.hi), rel=1e-12
        )


def test_a_requalification_keeps_every_cell(tmp_path: Path) -> None:
    """The synthetic archive's 4 families and 5 buckets: no cell holds every request."""
    archive = api.synth(tmp_path / "archive", requests=60, rounds=16)
    res = api.requalify(archive.path, baseline="top32:t0.7@8",
                        candidate="top32:t0.7:dyadic24@8", n_boot=200)  # fmt: skip
    tree = res.to_arviz()
    assert tree["posterior"].sizes["cell"] == len(res.cells) == 30
    assert tree.attrs == {"ci_prob": 0.95}


def _one_family(n: int, seed: int) -> PairedSums:
    """Paired requests of one family and one bucket: every cell holds every request."""
    rng = np.random.default_rng(seed)
    na = rng.integers(5, 60, n).astype(float)
    ta = na + rng.binomial((4 * na).astype(int), 0.6)
    tb = na + rng.binomial((4 * na).astype(int), 0.62)
    return PairedSums(
        request_ids=tuple(f"r{i}" for i in range(n)),
        request_keys=rng.integers(0, 2**63, n).astype(np.uint64),
        family=np.zeros(n, np.int32),
        piece_request=np.arange(n),
        piece_bucket=np.zeros(n, np.int32),
        n_a=na, t_a=ta, n_b=na.copy(), t_b=tb,
        families=("f0",), buckets=("all",),
    )  # fmt: skip


def test_a_sweep_tree_leaves_out_the_same_cells_and_records_its_level() -> None:
    """DepthReplicates (the sweep's tree): a cell is left out when it repeats the pooled draws
    at every arm and depth; here every cell but pooled does."""
    ps = _one_family(80, seed=3)
    comps = {d: compare(ps, arm_a="a@5", arm_b=f"a@{d}", n_boot=200, seed=1, level=0.9)
             for d in (2, 5)}  # fmt: skip
    tree = DepthReplicates({"a": comps}).tree()
    post = tree["posterior"]
    assert [str(c) for c in post["cell"].values] == ["pooled"]
    assert post["R"].dims == ("chain", "draw", "arm", "depth", "cell")
    np.testing.assert_array_equal(post["delta"].values[0, :, 0, 0, 0], comps[2].delta_reps[:, 0])
    assert tree.attrs["ci_prob"] == 0.9
    assert tree.attrs["cells_left_out"] == "f0; all; f0 × all"


def test_the_docs_summary_is_what_the_code_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md's to_arviz block prints the lines its comments show (the attrs, then ArviZ's
    summary at 95%: columns eti95_*)."""
    import re

    docs = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "az.summary" in b)
    shown = re.findall(r"^# ?(.*)$", block, re.M)
    first = re.search(r'print\(tree\.attrs\["ci_prob"\].*#\s*(.*)$', block, re.M)
    assert first is not None and "eti95_lb" in shown[0]
    exec(compile(block, "docs/api.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == [first.group(1), *shown]
