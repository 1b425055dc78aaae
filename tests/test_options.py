"""Options parsed once (issue 11, item 3): one bound and one message per option, CLI = API.

Every field of the two shared groups (:class:`ReplayOptions`, :class:`BootstrapOptions`) has a bad
value below; a field added to a group without one fails :func:`test_every_group_field_is_tried`.
Each bad value is given to the CLI (as text) and to the Python API (as a Python value) of the
same verb, and both must refuse it with the same message, before any input is read (the archive
does not exist). The API's Python values are checked against their text forms: a bare float
margin is relative (``0.005`` ≡ ``"0.5%"``), ``Margin.absolute(0.01)`` ≡ ``"0.01"``, an enum
member ≡ its name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from corpus import assert_refused, invoke

from specreplay import api
from specreplay.errors import SpecReplayError
from specreplay.pipelines.options import (
    BootstrapOptions,
    IntervalOptions,
    ReplayOptions,
    RequalifyOptions,
    SweepOptions,
    parse_depths,
    parse_margin,
)

BASE, CAND = "top32:t0.7@5", "top32:t0.7:dyadic24@5"
DATA = Path(__file__).parent / "data"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
MEDUSA_A = DATA / "medusa-mtbench" / f"medusa-vicuna-7b-v1.3-{STEM}"
MEDUSA_B = DATA / "medusa-mtbench" / f"medusa-vicuna-13b-v1.3-{STEM}"
QUESTIONS = DATA / "medusa-mtbench" / "question.jsonl"

# (API keyword, CLI flag, bad Python value, its CLI text); None: the CLI cannot spell it
BAD: dict[str, list[tuple[str, Any, str | None]]] = {
    "margin": [("--margin", "-1", "-1"), ("--margin", "0%", "0%")],
    "n_boot": [("--n-boot", 50, "50"), ("--n-boot", 10**7 + 1, "10000001")],
    "stratify": [("--stratify", "bucket", "bucket")],
    "level": [("--level", 0.2, "0.2"), ("--level", 1.0, "1.0")],
    "min_requests": [("--min-requests", 1, "1")],
    "buckets": [("--buckets", "short", "short"), ("--buckets", "a:<4K,a:>=4K", "a:<4K,a:>=4K")],
    "logging_arm": [("--logging-arm", "bogus", "bogus")],
    "estimator": [("--estimator", "exact", "exact")],
    "replicates": [("--replicates", 1, "1"), ("--replicates", 2**16 + 1, "65537")],
    "seed": [("--seed", -1, "-1"), ("--seed", 2**64, str(2**64))],
    "by": [("--by", "family", "family")],
    "hash_ids": [("--hash-ids", "yes", None)],
    "short_rounds": [("--short-rounds", "drop", "drop")],
    "ignore": [],  # any text is a glob: nothing to refuse
    "max_dropped": [("--max-dropped", -0.1, "-0.1"), ("--max-dropped", 1.5, "1.5")],
}


def _cases() -> list[tuple[str, str, Any, str | None]]:
    return [(field, flag, value, text) for field, bad in BAD.items() for flag, value, text in bad]


def test_every_group_field_is_tried() -> None:
    """A new field of either group needs its bad values here (or an empty list saying why)."""
    fields = {f.name for g in (ReplayOptions, BootstrapOptions) for f in dataclasses.fields(g)}
    assert fields == set(BAD)


def _api_message(field: str, value: Any, archive: Path) -> str:
    with pytest.raises(SpecReplayError) as caught:
        api.requalify(archive, baseline=BASE, candidate=CAND, **{field: value})
    return caught.value.message


@pytest.mark.parametrize(("field", "flag", "value", "text"), _cases(), ids=lambda x: str(x))
def test_cli_and_api_give_the_same_message(
    tmp_path: Path, field: str, flag: str, value: Any, text: str | None
) -> None:
    archive = tmp_path / "absent"  # never read: the options are refused first
    message = _api_message(field, value, archive)
    assert flag in message, message
    if text is None:
        return
    args = ["requalify", str(archive), "--baseline", BASE, "--candidate", CAND, flag, text]
    if field == "hash_ids":
        args = args[:-1]
    line = assert_refused(invoke(args))
    assert line == f"error: {message}"


@pytest.mark.parametrize(
    ("field", "value", "flag", "text"),
    [
        ("depths", "0..3", "--depths", "0..3"),
        ("cost", "linear:0:0", "--cost", "linear:0:0"),
        ("arms", "top32:t0.7:dyadic{8,}@5", "--arm", "top32:t0.7:dyadic{8,}@5"),
    ],
)
def test_sweep_options_give_the_same_message(
    tmp_path: Path, field: str, value: Any, flag: str, text: str
) -> None:
    archive = tmp_path / "absent"
    with pytest.raises(SpecReplayError) as caught:
        api.sweep(archive, **{"arms": BASE, field: value})
    extra = [] if field == "arms" else ["--arm", BASE]
    line = assert_refused(invoke(["sweep", str(archive), *extra, flag, text]))
    assert line == f"error: {caught.value.message}"


@pytest.mark.parametrize(
    ("kwargs", "flag_text"),
    [({"choice": -1}, ["--choice", "-1"]), ({"drafted": 0}, ["--drafted", "0"]),
     ({"fail_on": "MAYBE"}, ["--fail-on", "MAYBE"])],
)  # fmt: skip
def test_interval_options_give_the_same_message(
    tmp_path: Path, kwargs: dict[str, Any], flag_text: list[str]
) -> None:
    with pytest.raises(SpecReplayError) as caught:
        api.interval(tmp_path / "a", tmp_path / "b", **kwargs)
    line = assert_refused(invoke(["interval", str(tmp_path / "a"), str(tmp_path / "b"),
                                  *flag_text]))  # fmt: skip
    assert line == f"error: {caught.value.message}"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"margin": object()}, "--margin: <object object at"),
        ({"margin": float("nan")}, "--margin: nan should be a positive number"),
        ({"margin": True}, "--margin: True should be"),
        ({"n_boot": "x"}, "--n-boot x: not an integer (range 100 to 10000000)"),
        ({"n_boot": 200.5}, "--n-boot 200.5: not an integer"),
        ({"level": "high"}, "--level high: not a number (range 0.5 to 0.999)"),
        ({"stratify": 3}, "--stratify: 3 should be family or none"),
        ({"estimator": None}, "--estimator: None should be auto, analytic, montecarlo or"),
        ({"buckets": 5}, "--buckets: 5 should be NAME:LO-HI"),
        ({"seed": 1.5}, "--seed 1.5: not an integer (range 0 to 2^64-1)"),
        ({"families": 7}, "--families: 7 should be"),
    ],
)
def test_wrong_python_types_are_spec_replay_errors(
    tmp_path: Path, kwargs: dict[str, Any], fragment: str
) -> None:
    """Never a raw TypeError (``margin=0.005`` was one before issue 11)."""
    with pytest.raises(SpecReplayError) as caught:
        api.requalify(tmp_path / "absent", baseline=BASE, candidate=CAND, **kwargs)
    assert fragment in caught.value.message


def test_python_values_equal_their_text() -> None:
    assert parse_margin(0.005) == parse_margin("0.5%")
    assert parse_margin(api.Margin.absolute(0.01)) == parse_margin("0.01")
    assert api.Margin.absolute(0.01).relative is False
    assert parse_depths(range(1, 4)) == parse_depths("1..3") == (1, 2, 3)
    assert parse_depths([6, 2, 2]) == parse_depths("2,6")
    text = RequalifyOptions.build(baseline=BASE, candidate=CAND, estimator="importance",
                                  stratify="none", margin="0.5%")  # fmt: skip
    typed = RequalifyOptions.build(baseline=BASE, candidate=CAND,
                                   estimator=api.Estimator.IMPORTANCE,
                                   stratify=api.Stratify.NONE, margin=0.005)  # fmt: skip
    assert text == typed
    assert typed.to_json(Path("a")) == text.to_json(Path("a"))
    assert typed.to_json(Path("a"))["margin"] == {"margin": 0.005, "kind": "relative",
                                                  "text": "0.5%"}  # fmt: skip
    sweep = SweepOptions.build(arms="top32:t0.7:dyadic{8,16}@5", depths=4)
    assert [a.canonical for a in sweep.arms] == ["top32:t0.7:dyadic8@5", "top32:t0.7:dyadic16@5"]
    assert sweep.to_json(Path("a"))["arms"] == ["top32:t0.7:dyadic{8,16}@5"]
    assert sweep.boot.n_boot == 2000  # sweep's own default


def test_margin_float_runs_as_its_text() -> None:
    """``margin=0.005`` gives the very result of ``"0.5%"``; ``Margin.absolute(0.01)`` differs
    (interval: the quickest verb with a margin). The API refuses the string ``"0.01"`` since
    issue 16 (tests/test_api_margin.py); the CLI's ``--margin 0.01`` is Margin.absolute(0.01)
    (test_python_values_equal_their_text)."""
    runs = {
        name: api.interval(MEDUSA_A, MEDUSA_B, question_file=QUESTIONS, margin=m, n_boot=200)
        for name, m in [("float", 0.005), ("text", "0.5%"),
                        ("absolute", api.Margin.absolute(0.01))]
    }  # fmt: skip
    assert runs["float"].options == runs["text"].options
    assert runs["float"].cells == runs["text"].cells
    assert runs["float"].cells != runs["absolute"].cells  # the two kinds differ


def test_interval_options_are_parsed_once() -> None:
    opts = IntervalOptions.build(margin="2%", buckets="", n_boot=300)
    assert opts.boot.margin.relative and opts.boot.margin.value == 0.02
    assert opts.buckets.spec == opts.to_json(Path("a"), Path("b"))["buckets"]
