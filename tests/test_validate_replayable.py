"""`validate` catches every row that replay cannot use (issue 9, item 5).

Issue 9's class here: a row that passes ``specreplay validate`` must replay, under every
estimator and every arm whose depth it supports, to finite figures; a row replay cannot use
must be refused by ``validate`` itself, with the file and the row, and replay (defence in
depth) must name the same file and row.

- The property test generates single rows of schema v1 (docs/inputs.md#position-traces-schema-v1)
that satisfy every rule of
  §2.1 as written (all −inf draft log-probabilities, one candidate, zero or exactly one target
  mass, subnormal values, ties, long lists, a drafted token at q = 0 or p = 0, optional
  emitted_q, logging_arm and accepted columns) and replays each through
  :func:`specreplay.api.requalify` (in process: the CLI is this call plus the one-line print)
  under analytic, importance and Monte Carlo with a dyadic8 arm and a greedy arm. Each replay
  either succeeds with finite figures, or raises :class:`SpecReplayError` whose message starts
  with ``PATH:line 1: `` (``PATH: row 0 (0-based): `` for Parquet); then ``validate`` must refuse
  the row with that same line. Anything else (another exception, a located error validate does
  not report, a NaN figure) fails.
- The rules it found, now in ``validate`` (every reader runs them), each have a corpus case
  through the CLI (``validate``, ``requalify`` and ``sweep`` exit 2 naming PATH and row, inputs
  byte-identical, nothing left behind) and a unit test:

  1. every draft log-probability is −inf: there is no draft law, nothing to draft (row kernel,
     :data:`~specreplay.replay.archive.rowcheck.NO_DRAFT`; replay stopped with a message naming
     neither file nor row, and sweep replayed a placeholder law without a word);
  2. fewer candidates than the logging arm's top-K: its law could only be formed by clamping K
     (the reader, which knows the logging arm from its column or ``--logging-arm``; requalify
     stopped with a count and no row);
  3. drafted_id's draft log-probability is −inf and there is no emitted_q: the logging law, the
     logging arm's law on draft_logprobs, gives the logged draft probability 0 under every
     policy, so the importance weight is 0/0 (row kernel,
     :data:`~specreplay.replay.archive.rowcheck.LP_ZERO`, the twin of the emitted_q rule; the
     replay went on with a weight of 0, silently). This one is the brief's listed edge rather
     than a failure of the property, which accepts any finite figure.

  Replay itself (defence in depth) names the file and row of a row without a draft law if one
  ever reaches it (:func:`specreplay.replay.shard.replay_reader`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest
from archive_factory import clone, valid_rows, write_jsonl, write_parquet
from corpus import assert_clean, assert_refused, error_lines, invoke, tree_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specreplay import api
from specreplay.errors import InvalidArchive, SpecReplayError
from specreplay.pipelines.requalify import RequalifyArms, check_replayable
from specreplay.replay.archive import rowcheck
from specreplay.replay.engine import OpenArchive, ReplayResult
from specreplay.replay.shard import needed_columns
from specreplay.sim.arms import parse_arm

V1 = np.zeros((2, 0))  # no tail columns (schema v1)

Row = dict[str, Any]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One Numba thread: on rows this small a parallel kernel's launch costs 10x its work."""
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(threads)


ARMS = ("t0.7:dyadic8@1", "greedy@1")  # depth 1: a single row is a round of one position
LOGGING_ARMS = ("top32:t0.7@5", "t1@1", "greedy@3", "top2:p0.9:dyadic8@2", "t0.7:dyadic16@1")
EXAMPLES = 300


def where(path: Path, i: int) -> str:
    """Message prefix (docs/inputs.md#position-traces-schema-v1) of row ``i`` of a file written
    without blank lines (as test_bad_inputs)."""
    if path.suffix in (".parquet", ".arrow"):
        return f"{path}: row {i} (0-based): "
    return f"{path}:line {i + 1}: "


# ---------------------------------------------------------------------------------------------
# one row of schema v1 that satisfies every rule docs/inputs.md#position-traces-schema-v1 states

# relative weights of a law's candidates, before scaling to the row's mass: the edges on purpose
WEIGHT = st.one_of(
    st.just(0.0),  # an impossible candidate: log-probability −inf, target 0
    st.just(5e-324),  # the smallest subnormal
    st.floats(min_value=1e-320, max_value=1e-300),  # subnormal to tiny
    st.just(1.0),  # ties
    st.floats(min_value=1e-6, max_value=1.0),
)
MASS = st.one_of(st.just(1.0), st.floats(min_value=1e-300, max_value=1.0))  # Σ of a law
TARGET_MASS = MASS | st.just(0.0)  # the target may put all its mass off the candidates


def _scaled(weights: list[float], mass: float) -> list[float]:
    """``weights`` scaled to sum to ``mass`` (all zero when they sum to 0)."""
    total = math.fsum(weights)
    if total == 0.0 or mass == 0.0:
        return [0.0] * len(weights)
    return [min(1.0, w / total * mass) for w in weights]


@st.composite
def weights(draw: st.DrawFn, n: int) -> list[float]:
    """``n`` relative weights: drawn one by one (a short row), or from a drawn seed (a long one).

    A long row (tens to hundreds of candidates) mixes the same kinds as :data:`WEIGHT` from a
    seeded generator, so that drawing it costs one integer, not hundreds of choices.
    """
    if n <= 8:
        return draw(st.lists(WEIGHT, min_size=n, max_size=n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pick = rng.integers(0, 5, n)
    kinds = np.array([0.0, 5e-324, 1e-310, 1.0, 0.0])
    w = np.where(pick == 4, rng.uniform(1e-6, 1.0, n), kinds[pick])
    return [float(x) for x in w]


@st.composite
def draft_logprobs(draw: st.DrawFn, n: int) -> list[float]:
    """Draft log-probabilities ≤ 0 with Σ exp ≤ 1 + 1e-6: from a law, or raw values."""
    if n > 8 or draw(st.booleans()):
        q = _scaled(draw(weights(n)), draw(MASS))
        return [math.log(x) if x > 0.0 else -math.inf for x in q]
    raw = st.one_of(
        st.just(-math.inf),
        st.just(0.0),
        st.just(-0.0),
        st.just(-745.0),  # exp is the smallest subnormal
        st.just(-800.0),  # finite, but exp underflows to 0
        st.floats(min_value=-1e308, max_value=0.0),
    )
    lp = draw(st.lists(raw, min_size=n, max_size=n))
    total = math.fsum(math.exp(x) for x in lp)
    if total > 1.0:  # shift every finite value down (ties stay ties)
        lp = [x - math.log(total) - 1e-12 if x > -math.inf else x for x in lp]
    return lp


@st.composite
def rows(draw: st.DrawFn, *, importance: bool) -> Row:
    """One position row (round 0, position 1) that every rule of
    docs/inputs.md#position-traces-schema-v1 accepts."""
    n = draw(st.one_of(st.integers(1, 6), st.just(1), st.sampled_from([40, 64, 65, 200])))
    if n > 8:  # distinct ids, spread out (the kernel's duplicate check changes method at 64)
        cand = [int(x) * 7919 + 3 for x in np.random.default_rng(n).permutation(n)]
    else:
        cand = draw(
            st.lists(st.integers(0, 2**62), min_size=n, max_size=n, unique=True)
            | st.just(list(range(n)))
        )
    lp = draw(draft_logprobs(n))
    tp = _scaled(draw(weights(n)), draw(TARGET_MASS))
    if n == 1 and draw(st.booleans()):
        tp = [1.0]
    row: Row = {
        "request_id": "r0",
        "family": "code",
        "context_tokens": 100,
        "round": 0,
        "position": 1,
        "cand_ids": cand,
        "draft_logprobs": lp,
        "target_probs": tp,
    }
    has_drafted = importance or draw(st.booleans())
    j = draw(st.integers(0, n - 1))
    if has_drafted:
        row["drafted_id"] = cand[j]
    if draw(st.booleans()):
        row["accepted"] = draw(st.booleans())
    has_eq = has_drafted and draw(st.booleans())
    has_arm = draw(st.booleans()) or (importance and not has_eq)
    if has_arm:
        row["logging_arm"] = draw(st.sampled_from(LOGGING_ARMS))
    # a law summing to 1, positive at the drafted candidate
    # (docs/inputs.md#position-traces-schema-v1)
    if has_eq:
        w = draw(weights(n))
        w[j] = draw(st.floats(min_value=1e-6, max_value=1.0))
        row["emitted_q"] = _scaled(w, 1.0)
    return row


# ---------------------------------------------------------------------------------------------
# the property


def _write(path: Path, row: Row) -> Path:
    return _write_rows(path, [row])


def _write_rows(path: Path, rows: list[Row]) -> Path:
    if path.suffix == ".parquet":
        return write_parquet(path, rows)
    return write_jsonl(path, rows)


def _nonfinite(obj: Any, path: str = "result") -> list[str]:
    """Every NaN or infinite float anywhere in a result (dataclasses, dicts, sequences)."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [f"{path} = {obj}"]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [x for f in dataclasses.fields(obj)
                for x in _nonfinite(getattr(obj, f.name), f"{path}.{f.name}")]  # fmt: skip
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _nonfinite(v, f"{path}[{k!r}]")]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in _nonfinite(v, f"{path}[{i}]")]
    return []


def _replayed(path: Path, estimator: str) -> ReplayResult:
    """The requalify command's pass (:func:`replay_archive` + its row check), both arms."""
    base, cand = parse_arm(ARMS[0]), parse_arm(ARMS[1])
    opened = OpenArchive(path)
    log = parse_arm(opened.logging_arm) if opened.logging_arm is not None else None
    every = {a.canonical: a for a in (base, cand, log) if a is not None}
    res = opened.replay(list(every.values()), estimator=estimator)
    check_replayable(res, RequalifyArms(base, cand, None, log, every))
    return res


def replays_or_refuses(path: Path, estimator: str) -> str:
    """Replay ``path`` under ``estimator``: finite figures, or validate's own located refusal."""
    try:
        res = _replayed(path, estimator)
    except SpecReplayError as err:
        message = str(err)
        assert message.startswith(where(path, 0)), message
        with pytest.raises(InvalidArchive) as bad:
            api.validate(path)
        assert message in bad.value.errors, (message, bad.value.errors)
        return f"refused: {message.removeprefix(where(path, 0)).split(' (')[0]}"
    for arm in ARMS:
        s = res.sums[parse_arm(arm).canonical]
        assert s.n.sum() == 1, s.n
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            if f.name in ("ratio_min", "ratio_max"):  # ±inf: no ratio yet (not a figure)
                continue
            if f.name in ("bound_max", "moment_max"):  # +inf: a bound past float64's range
                assert not np.isnan(v).any() and (v >= 0).all(), (arm, f.name, v)
                continue
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                assert np.isfinite(v).all(), (arm, f.name, v)
        assert 1.0 <= s.t[0, 0] <= 2.0 or estimator == "importance", s.t  # 1 + A, A ≤ depth 1
    return "replayed"


SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _property(estimator: str, folder: Path) -> Counter[str]:
    """Run the property; return how many examples replayed, and were refused per rule."""
    outcomes: Counter[str] = Counter()

    @SETTINGS
    @given(row=rows(importance=estimator == "importance"), parquet=st.integers(0, 3))
    def check(row: Row, parquet: int) -> None:  # a Parquet file one time in four
        path = _write(folder / ("row.parquet" if parquet == 0 else "row.jsonl"), row)
        try:
            outcomes[replays_or_refuses(path, estimator)] += 1
        finally:
            path.unlink()

    check()
    return outcomes


@pytest.mark.parametrize("estimator", ["analytic", "importance", "montecarlo"])
def test_every_valid_row_replays_or_is_refused_with_its_row(estimator: str, tmp_path: Path) -> None:
    start = time.perf_counter()
    outcomes = _property(estimator, tmp_path)
    print(estimator, dict(outcomes))  # shown with -s: how many replayed, refused per rule
    assert sum(outcomes.values()) >= EXAMPLES  # ≥ 300 examples per estimator
    assert outcomes["replayed"] >= EXAMPLES // 2  # not vacuous: most rows replay
    # issue 9: ≤ 60 s in `make test` for the three together; measured 23-29 s warm here (2 cores
    # shared by ~8 jobs), 9-12 s each; a generous bound per estimator guards a regression
    assert time.perf_counter() - start < 60.0


# ---------------------------------------------------------------------------------------------
# the edges, end to end: every figure of a requalification of a valid edge row is finite

INF = -math.inf
EDGES: dict[str, Row] = {
    "one candidate, target mass 1": {"cand_ids": [7], "draft_logprobs": [0.0],
                                     "target_probs": [1.0]},
    "zero target mass": {"cand_ids": [1, 2], "draft_logprobs": [math.log(0.5)] * 2,
                         "target_probs": [0.0, 0.0]},
    "subnormal law": {"cand_ids": [1, 2, 3], "draft_logprobs": [-745.0, -800.0, INF],
                      "target_probs": [5e-324, 1e-310, 0.0]},
    "ties, target mass exactly 1": {"cand_ids": [4, 5, 6, 8],
                                    "draft_logprobs": [math.log(0.25)] * 4,
                                    "target_probs": [0.25] * 4},
    "drafted at q = 0 (emitted_q > 0)": {"cand_ids": [1, 2], "draft_logprobs": [0.0, INF],
                                         "target_probs": [0.5, 0.5], "drafted_id": 2,
                                         "emitted_q": [0.5, 0.5]},
    "target 0 at the drafted id": {"cand_ids": [1, 2], "draft_logprobs": [math.log(0.9), INF],
                                   "target_probs": [0.0, 0.3], "drafted_id": 1},
    "long list": {"cand_ids": list(range(0, 400, 2)),
                  "draft_logprobs": [math.log(1 / 256)] * 200,
                  "target_probs": [1 / 256] * 200, "drafted_id": 398},
}  # fmt: skip


@pytest.mark.parametrize("estimator", ["analytic", "importance", "montecarlo"])
@pytest.mark.parametrize("edge", sorted(EDGES))
def test_edge_rows_requalify_to_finite_figures(edge: str, estimator: str, tmp_path: Path) -> None:
    row: Row = {"request_id": "r0", "family": "code", "context_tokens": 100, "round": 0,
                "position": 1, "drafted_id": EDGES[edge]["cand_ids"][0], "accepted": False,
                "logging_arm": "t1@1", **EDGES[edge]}  # fmt: skip
    path = _write(tmp_path / "row.jsonl", row)
    api.validate(path)  # valid
    result = api.requalify(
        path, baseline=ARMS[0], candidate=ARMS[1], estimator=estimator, n_boot=100
    )
    assert not _nonfinite(result), _nonfinite(result)
    for arm in (*ARMS, "t1@1"):
        r = result.pooled.arms[parse_arm(arm).canonical].R
        assert r is not None and (1.0 <= r <= 2.0 or estimator == "importance"), (arm, r)


# ---------------------------------------------------------------------------------------------
# the rules the property found: unit tests of the row kernel / reader


def _kernel(lps: list[list[float]]) -> list[int]:
    """Row codes of the kernel on rows with these draft log-probabilities (valid otherwise)."""
    offsets = np.zeros(len(lps) + 1, np.int64)
    np.cumsum([len(r) for r in lps], out=offsets[1:])
    nnz = int(offsets[-1])
    cand = np.arange(nnz, dtype=np.int64)
    lp = np.array([x for r in lps for x in r], np.float64)
    tp = np.full(nnz, 0.01)
    code = np.empty(len(lps), np.int8)
    detail = np.empty(len(lps))
    didx = np.empty(len(lps), np.int32)
    rowcheck.check_rows(offsets, cand, lp, tp, np.zeros(0), np.zeros(0, np.int64), False, False,
                        code, detail, didx, V1)  # fmt: skip
    return code.tolist()


def test_rule_every_draft_logprob_minus_inf() -> None:
    inf = -math.inf
    got = _kernel([[inf], [inf, inf, inf], [inf, -800.0], [-745.0], [inf, 0.0], [-0.0]])
    no = rowcheck.NO_DRAFT
    assert got == [no, no, rowcheck.OK, rowcheck.OK, rowcheck.OK, rowcheck.OK]
    # a row failing an earlier rule keeps that rule's code
    assert _kernel([[inf, math.nan]]) == [rowcheck.NONFINITE_LP]
    assert (
        rowcheck.ROW_RULES[no]
        == "every draft log-probability is −inf (no candidate can be drafted)"
    )


def test_rule_drafted_at_minus_inf_without_emitted_q() -> None:
    offsets = np.array([0, 2, 4, 6], np.int64)
    cand = np.array([1, 2, 1, 2, 1, 2], np.int64)
    lp = np.array([0.0, -np.inf, math.log(0.5), -np.inf, -800.0, -np.inf])
    tp = np.full(6, 0.5)
    drafted = np.array([2, 1, 1], np.int64)  # row 0: the −inf candidate; rows 1, 2: finite
    code = np.empty(3, np.int8)
    detail = np.empty(3)
    didx = np.empty(3, np.int32)
    rowcheck.check_rows(offsets, cand, lp, tp, np.zeros(0), drafted, False, True, code, detail,
                        didx, V1)  # fmt: skip
    assert code.tolist() == [rowcheck.LP_ZERO, rowcheck.OK, rowcheck.OK]
    assert didx.tolist() == [1, 0, 0]
    # with emitted_q the logging law is emitted_q: positive there, the row is usable
    eq = np.array([0.5, 0.5, 1.0, 0.0, 1.0, 0.0])
    rowcheck.check_rows(offsets, cand, lp, tp, eq, drafted, True, True, code, detail, didx, V1)
    assert code.tolist() == [rowcheck.OK, rowcheck.OK, rowcheck.OK]
    assert rowcheck.ROW_RULES[rowcheck.LP_ZERO] == (
        "draft log-probability −inf at drafted_id and no emitted_q (the logged draft had "
        "probability 0)"
    )


@pytest.mark.parametrize("estimator", ["analytic", "montecarlo"])
def test_rule_drafted_at_minus_inf_holds_when_emitted_q_is_unread(
    estimator: str, tmp_path: Path
) -> None:
    """A pass that does not read emitted_q still knows the archive has it: the row is valid."""
    row: Row = {"request_id": "r0", "family": "code", "context_tokens": 100, "round": 0,
                "position": 1, **EDGES["drafted at q = 0 (emitted_q > 0)"]}  # fmt: skip
    path = _write(tmp_path / "row.jsonl", row)
    opened = OpenArchive(path, columns=needed_columns(estimator))
    res = opened.replay([parse_arm("greedy@1")], estimator=estimator)
    assert res.unread == ("emitted_q",)
    # greedy drafts candidate 1 (q = 1), accepted with p = 0.5: E[1 + A] = 1.5 (analytic);
    # Monte Carlo's mean of 16 accept draws is 1 + k/16, anywhere in [1, 2]
    tol = 1e-12 if estimator == "analytic" else 0.5
    assert abs(res.sums["greedy@1"].t[0, 0] - 1.5) <= tol
    swept = api.sweep(path, arms=["greedy@1"], depths="1", estimator=estimator, n_boot=100)
    r = swept.pooled.arms["greedy@1"].R
    assert r is not None and abs(r - 1.5) <= tol


def test_rule_logging_arm_top_k(tmp_path: Path) -> None:
    rows = valid_rows(n_requests=1, n_rounds=1, depth=2)  # 4 candidates, logging arm top4:t1@3
    assert api.validate(write_jsonl(tmp_path / "ok.jsonl", rows)).archive is not None
    for r in rows:
        r["logging_arm"] = "top5:t1@3"
    rows[1]["cand_ids"] += [999]  # row 1 has 5 candidates: enough
    rows[1]["draft_logprobs"] += [-math.inf]
    rows[1]["target_probs"] += [0.0]
    rows[1]["emitted_q"] += [0.0]
    path = write_jsonl(tmp_path / "column.jsonl", rows)
    with pytest.raises(InvalidArchive) as bad:
        api.validate(path)
    assert bad.value.errors == (
        f"{path}:line 1: 4 candidates, fewer than the top-5 of the logging arm top5@3 "
        "(K is never clamped)",
    )
    # the same rule when the logging arm comes from --logging-arm; greedy and K-less arms pass
    for r in rows:
        del r["logging_arm"]
    path = write_jsonl(tmp_path / "option.jsonl", rows)
    with pytest.raises(InvalidArchive, match=r"option\.jsonl:line 1: 4 candidates, fewer than "
                       r"the top-5 of the logging arm top5@3"):  # fmt: skip
        api.validate(path, logging_arm="top5:t1@3")
    for arm in ("greedy@3", "t0.7@3", "top4:t0.7@3"):
        assert api.validate(path, logging_arm=arm).archive is not None
    one = write_jsonl(tmp_path / "one.jsonl", [clone(rows)[0] | {"cand_ids": [5],
                      "draft_logprobs": [0.0], "target_probs": [1.0], "drafted_id": 5,
                      "emitted_q": [1.0]}])  # fmt: skip
    with pytest.raises(InvalidArchive, match=r"line 1: 1 candidate, fewer than the top-2"):
        api.validate(one, logging_arm="top2@1")


def test_replay_names_the_row_it_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: with the reader's rule switched off, replay itself names file and row."""
    rows = valid_rows(n_requests=2, n_rounds=1, depth=1)
    rows[1]["draft_logprobs"] = [-math.inf] * 4
    for path in (write_jsonl(tmp_path / "a.jsonl", rows),
                 write_parquet(tmp_path / "a.parquet", rows)):  # fmt: skip
        with pytest.raises(SpecReplayError) as err:
            _replayed(path, "analytic")
        assert str(err.value) == where(path, 1) + rowcheck.ROW_RULES[rowcheck.NO_DRAFT]
    real = rowcheck.check_rows

    def without_rule(*args: Any) -> None:
        real(*args)
        code = args[8]
        code[code == rowcheck.NO_DRAFT] = rowcheck.OK

    monkeypatch.setattr(rowcheck, "check_rows", without_rule)
    for path in (tmp_path / "a.jsonl", tmp_path / "a.parquet"):
        with pytest.raises(SpecReplayError) as err:
            _replayed(path, "analytic")
        assert str(err.value) == where(path, 1) + rowcheck.ROW_RULES[rowcheck.NO_DRAFT]


# ---------------------------------------------------------------------------------------------
# corpus cases (tests/corpus.py): validate and requalify refuse the row, naming file and row


def _bad_rows(rule: str) -> tuple[list[Row], int, str]:
    """A small valid archive with row ``i`` broken by ``rule``; return (rows, i, fragment)."""
    rows = clone(valid_rows())  # 3 requests × 2 rounds × 3 positions, logging arm top4:t1@3
    i = 4
    if rule == "no draft":
        rows[i]["draft_logprobs"] = [-math.inf] * 4
        return rows, i, "every draft log-probability is −inf"
    if rule == "drafted at -inf":
        for r in rows:
            del r["emitted_q"]
        rows[i]["draft_logprobs"][rows[i]["cand_ids"].index(rows[i]["drafted_id"])] = -math.inf
        return rows, i, "draft log-probability −inf at drafted_id and no emitted_q"
    assert rule == "logging top-K"
    for r in rows:
        r["logging_arm"] = "top3:t1@3"
    rows[i]["cand_ids"] = rows[i]["cand_ids"][:2]
    for c in ("draft_logprobs", "target_probs"):
        rows[i][c] = rows[i][c][:2]
    rows[i]["drafted_id"] = rows[i]["cand_ids"][0]
    rows[i]["emitted_q"] = [0.5, 0.5]  # the other rows keep 4 candidates: enough for top-3
    return rows, i, "2 candidates, fewer than the top-3 of the logging arm top3@3"


@pytest.mark.parametrize("rule", ["no draft", "drafted at -inf", "logging top-K"])
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("verb", ["validate", "requalify", "sweep"])
def test_corpus_row_replay_cannot_use(rule: str, suffix: str, verb: str, tmp_path: Path) -> None:
    rows, i, fragment = _bad_rows(rule)
    src = tmp_path / "in"
    src.mkdir()
    path = src / f"archive{suffix}"
    _write_rows(path, rows)
    out = tmp_path / "out"
    before = tree_digest(src)
    args = {
        "validate": ["validate", str(path)],
        "requalify": ["requalify", str(path), "--baseline", "top4:t1@3",
                      "--candidate", "top4:t1:dyadic8@3", "-q", "--n-boot", "100",
                      "--out", str(out)],
        "sweep": ["sweep", str(path), "--arm", "t1:dyadic8@3", "-q", "--n-boot", "100",
                  "--out", str(out)],
    }[verb]  # fmt: skip
    res = invoke(args)
    if verb == "validate":  # validate lists its error lines on stderr, then how many
        assert res.exit_code == 2, res.output
        assert res.stdout == ""
        lines = error_lines(res)
        assert len(lines) == 2 and lines[0].startswith(where(path, i) + fragment), lines
        assert lines[1] == f"1 error(s) in {path}", lines
    else:
        assert_refused(res, where(path, i) + fragment)
    assert_clean(res, before, [src])
    assert not out.exists()
