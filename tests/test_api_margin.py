"""Issue 16, item 8: ``margin=`` means the same whatever its type.

Before, the float ``0.5`` meant 50% of R_a and the string ``"0.5"`` 0.5 tokens/round (the
command line's reading of a bare number). Now, in the Python API:

- a float is relative to R_a, as the default ``"0.5%"`` is (``0.005`` ≡ ``"0.5%"``);
- a string carries its ``%``; a number as text without it is refused, naming both spellings;
- ``Margin.absolute(x)`` is the one absolute spelling, x tokens/round.

The command line keeps its documented reading: ``--margin 0.01`` is 0.01 tokens/round. What each
spelling means is read from the equivalence test's margin in the result (``tost``: value and
kind) and in results.json's ``options``. The arms are three requests in memory (the quickest
run with a margin).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specreplay import api
from specreplay.cli import app
from specreplay.errors import SpecReplayError
from specreplay.results.model import Role

A = ([10, 12, 9], [31.0, 40.0, 25.0])
B = ([10, 11, 9], [33.0, 41.0, 27.0])
DATA = Path(__file__).parent / "data"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
MEDUSA_A = DATA / "medusa-mtbench" / f"medusa-vicuna-7b-v1.3-{STEM}"
MEDUSA_B = DATA / "medusa-mtbench" / f"medusa-vicuna-13b-v1.3-{STEM}"
QUESTIONS = DATA / "medusa-mtbench" / "question.jsonl"


def _tost(margin: Any) -> tuple[float, str]:
    """(margin value, kind) the pooled equivalence test was judged against."""
    res = api.interval(A, B, n_boot=100, min_requests=2, margin=margin)
    d = res.pooled.delta(Role.B_VS_A)
    assert d is not None and d.tost is not None
    assert res.options["margin"]["kind"] == d.tost.kind
    return d.tost.margin, d.tost.kind


def test_a_float_is_relative_as_the_default_is() -> None:
    assert _tost(0.005) == (0.005, "relative") == _tost("0.5%")
    assert _tost(0.5) == (0.5, "relative") == _tost("50%")


def test_margin_absolute_is_tokens_per_round() -> None:
    assert _tost(api.Margin.absolute(0.5)) == (0.5, "absolute")


@pytest.mark.parametrize(
    ("text", "percent", "fraction"),
    [("0.5", "0.5%", "0.005"), (" 0.01 ", "0.01%", "0.0001"), ("2", "2%", "0.02")],
)
def test_a_number_as_text_is_refused_by_every_verb(text: str, percent: str, fraction: str) -> None:
    """Refused before any input is read (the paths do not exist), by the three verbs with a
    margin, naming the relative and the absolute spelling of what was typed."""
    absent = Path("/nonexistent-specreplay-input")
    message = (
        rf"^margin={text!r}: a number as text needs its unit: '{percent}' is relative to R_a "
        rf"\(as the float {fraction}\); an absolute margin, in tokens/round, is "
        rf"Margin\.absolute\({text.strip()}\)$"
    )
    calls = [
        lambda: api.interval(absent, absent, margin=text),
        lambda: api.requalify(absent, baseline="greedy@5", candidate="greedy@5", margin=text),
        lambda: api.sweep(absent, arms="greedy@5", margin=text),
    ]
    for call in calls:
        with pytest.raises(SpecReplayError, match=message):
            call()


def test_other_strings_keep_the_options_message() -> None:
    """Not a number: the parser's message, the one the CLI prints for the same text."""
    with pytest.raises(SpecReplayError, match=r"^--margin: 'x' should be a positive number"):
        api.interval(A, B, margin="x")


def test_the_command_line_reads_a_bare_number_as_tokens_per_round(tmp_path: Path) -> None:
    """The CLI's documented reading stays: ``--margin 0.05`` is Margin.absolute(0.05)."""
    out = tmp_path / "run"
    args = ["interval", str(MEDUSA_A), str(MEDUSA_B), "--question-file", str(QUESTIONS),
            "--margin", "0.05", "--n-boot", "100", "--out", str(out), "-q"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    margin = json.loads((out / "results.json").read_text())["options"]["margin"]
    assert margin == {"margin": 0.05, "kind": "absolute", "text": "0.05"}
    assert margin == api.Margin.absolute(0.05).to_json() | {"text": "0.05"}
