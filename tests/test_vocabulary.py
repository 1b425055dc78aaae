"""One vocabulary in every output (issue 12, item 6): the glossary's terms (docs/glossary.md).

The help texts, the TABLES.md headings and table headers and REPORT.md of validate, requalify,
sweep, interval, budget and lawtest use none of the synonyms the glossary lists as not used
("acceptance length", "accept rate", "speculative tokens", "draft length", "tok/s", ...), except
where vLLM's own name stands beside specreplay's term ("R (retained tokens per round; vLLM's mean
acceptance length)"). Where R first appears in a TABLES.md (as R, R_a, R_0, ...), it is named
"retained tokens per round" on that line or before it; requalify, sweep, interval and validate
name it in their ``--help``. ``screen`` is left to its own tests (issue 12, item 4 rewrites it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs import _help_texts
from typer.testing import CliRunner

from specreplay.cli import app

ROOT = Path(__file__).parent.parent
MEDUSA = ROOT / "tests" / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"
R_TERM = "retained tokens per round"

VLLM = re.compile(r"vLLM's [^;),.]*")
"""vLLM's own name of a figure, quoted beside specreplay's term: not a synonym in use."""

BANNED = {
    "acceptance length": r"accept(?:ance|ed)? length",
    "acceptance rate": r"accept(?:ance)? rate",
    "bare acceptance": r"(?<!per-position )\bacceptance\b(?! length| rate)",
    "speculative tokens": r"speculative tokens",
    "draft length": r"draft(?:ing)? length|spec(?:ulation)? length",
    "draft depth": r"draft depth",
    "gamma": r"γ|\bgamma\b|lookahead",
    "tok/s": r"\btok/s",
    "tokens per step": r"tokens per (?:step|draft)",
    "R_A / R_B": r"(?-i:\bR_[AB]\b)",
    "family x bucket": r"\bfamily x bucket",
}
"""Synonyms of glossary terms that no output uses (docs/glossary.md, "specreplay's own terms")."""

R_UNNAMED = r"(?<!retained )(?<!retain )tokens per round"
"""In a help text or a heading, R is "retained tokens per round", never bare "tokens per round"."""

R_SYMBOL = re.compile(r"(?<!\w)R(?:_\w+)?\b")


def banned_terms(text: str, *, strict: bool = False) -> list[str]:
    """Return the names of the banned synonyms in ``text`` (vLLM's quoted names left out).

    >>> banned_terms("R (retained tokens per round; vLLM's mean acceptance length)")
    []
    >>> banned_terms("the mean acceptance length, 93 tok/s")
    ['acceptance length', 'tok/s']
    >>> banned_terms("R_0: the reference's tokens per round", strict=True)
    ['tokens per round']
    """
    plain = VLLM.sub("", text)
    found = [name for name, rx in BANNED.items() if re.search(rx, plain, re.I)]
    if strict and re.search(R_UNNAMED, plain):
        found.append("tokens per round")
    return found


def headers(tables: str) -> list[str]:
    """The heading lines, the first line and every table's header row of a TABLES.md text."""
    lines = tables.split("\n")
    out = [lines[0]]
    for i, line in enumerate(lines):
        heading = line.startswith("#") or re.match(r"[A-Z][A-Z ]+ \(", line) is not None
        table_head = line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-")
        if heading or table_head:
            out.append(line)
    return out


def r_named_at_first_use(tables: str) -> bool:
    """Say whether the first line using the symbol R (R, R_a, R_0, …) names it, or one before."""
    for line in tables.split("\n"):
        if R_TERM in line:
            return True
        if R_SYMBOL.search(line):
            return False
    return True  # no R at all


def test_the_checks_catch_what_they_look_for() -> None:
    assert banned_terms("Check an archive and report its MEASURED acceptance.") == [
        "bare acceptance"
    ]
    assert banned_terms("per-position acceptance, vLLM's per-position acceptance rate") == []
    assert banned_terms("Δ = R_B − R_A by family x bucket") == ["R_A / R_B", "family x bucket"]
    assert banned_terms("R_0: the reference's R (retained tokens per round)", strict=True) == []
    assert not r_named_at_first_use("SWEEP (SIMULATED R by fixed depth)\n## R (retained tokens")
    assert r_named_at_first_use("## REQUALIFICATION\n| R_a (retained tokens per round) |")
    assert r_named_at_first_use("| top32:t0.7@5 | Δ/R |\n") is False
    assert headers("HEAD\n\n## H\n\n| a | b |\n|---|--:|\n| 1 | 2 |\nSWEEP (x)\n") == [
        "HEAD",
        "## H",
        "| a | b |",
        "SWEEP (x)",
    ]


# -- help ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def help_texts() -> dict[str, str]:
    return _help_texts()


def test_help_texts_use_no_synonym(help_texts: dict[str, str]) -> None:
    """Every verb's ``--help`` (screen's aside) and the top-level one."""
    bad = {
        argv: found
        for argv, text in help_texts.items()
        if argv != "specreplay screen" and (found := banned_terms(text, strict=True))
    }
    assert bad == {}


@pytest.mark.parametrize("verb", ["requalify", "sweep", "interval", "validate"])
def test_help_names_r_by_its_glossary_term(help_texts: dict[str, str], verb: str) -> None:
    """The help says R and names it at once: the glossary's term within 80 characters."""
    text = help_texts[f"specreplay {verb}"]
    first_r = R_SYMBOL.search(text, text.index("[OPTIONS]"))
    assert first_r is not None, text
    assert 0 <= text.find(R_TERM) <= first_r.start() + 80, text


# -- TABLES.md and REPORT.md ---------------------------------------------------------------------


def _invoke(args: list[str]) -> None:
    res = CliRunner().invoke(app, [*args, "-q"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, small_archive: Path) -> dict[str, Path]:
    """One small run of each command with tables (screen aside): {command: its folder}."""
    tmp = tmp_path_factory.mktemp("vocab")
    arch = str(small_archive)
    out = {c: tmp / c for c in ("validate", "requalify", "sweep", "interval", "budget", "lawtest")}
    _invoke(["validate", arch, "--out", str(out["validate"])])
    _invoke(["requalify", arch, "--baseline", "top32:t0.7@5", "--candidate",
             "top32:t0.7:dyadic8@5", "--reference", "greedy@5", "--n-boot", "200",
             "--out", str(out["requalify"])])  # fmt: skip
    _invoke(["sweep", arch, "--arm", "top32:t0.7@5", "--depths", "1..5", "--cost",
             "linear:1:0.05", "--n-boot", "200", "--out", str(out["sweep"])])  # fmt: skip
    _invoke(["interval", str(MEDUSA / f"medusa-vicuna-7b-v1.3-{STEM}"),
             str(MEDUSA / f"medusa-vicuna-13b-v1.3-{STEM}"), "--question-file",
             str(MEDUSA / "question.jsonl"), "--n-boot", "200",
             "--out", str(out["interval"])])  # fmt: skip
    _invoke(["budget", "--price-ms", "40", "--base", "3.2", "--delta-lo", "0.05", "--rate",
             "53.56", "--tau-ms", "40", "--gain", "0.0832",
             "--out", str(out["budget"])])  # fmt: skip
    _invoke(["lawtest", "--arm", "top32:t0.7:dyadic8/float64@5", "--max-draws", "2000",
             "--out", str(out["lawtest"])])  # fmt: skip
    return out


COMMANDS = ["validate", "requalify", "sweep", "interval", "budget", "lawtest"]


@pytest.mark.parametrize("command", COMMANDS)
def test_tables_headers_use_no_synonym(runs: dict[str, Path], command: str) -> None:
    tables = (runs[command] / "TABLES.md").read_text(encoding="utf-8")
    lines = headers(tables)
    assert len(lines) >= 2, tables
    bad = {line: found for line in lines if (found := banned_terms(line, strict=True))}
    assert bad == {}


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "lawtest"])
def test_tables_name_r_where_it_first_appears(runs: dict[str, Path], command: str) -> None:
    tables = (runs[command] / "TABLES.md").read_text(encoding="utf-8")
    assert R_SYMBOL.search(tables) is not None, command  # each of these tables shows R
    assert r_named_at_first_use(tables), tables[:2000]


@pytest.mark.parametrize("command", COMMANDS)
def test_report_uses_no_synonym(runs: dict[str, Path], command: str) -> None:
    report = (runs[command] / "REPORT.md").read_text(encoding="utf-8")
    bad = {line: found for line in report.split("\n") if (found := banned_terms(line))}
    assert bad == {}


def test_measured_tables_give_vllms_names_beside_the_glossary_terms(
    runs: dict[str, Path],
) -> None:
    """A vLLM user finds the figures of vLLM's log line: R is its mean acceptance length and
    survival P(A ≥ j) its per-position acceptance rate at position j − 1."""
    tables = (runs["validate"] / "TABLES.md").read_text(encoding="utf-8")
    heads = [ln for ln in tables.split("\n") if ln.startswith("## ")]
    assert heads[0].startswith(f"## MEASURED R ({R_TERM}; vLLM's mean acceptance length) of ")
    survival = [h for h in heads if "survival P(A ≥ j)" in h]
    assert len(survival) == 2
    vllm = "(vLLM's per-position acceptance rate at position j − 1)"
    assert all(h.endswith(vllm) for h in survival), survival
