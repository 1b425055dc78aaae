"""Issue 9, item 10: ``screen`` refuses what would be a silent wrong figure.

Each vLLM scrape below is written by hand (names and labels as vLLM v1 registers them:
``vllm/v1/spec_decode/metrics.py``) as a before/after pair named by a ``[[vllm]]`` entry. A
refusal is exit 2 with one line naming the file and the series, and leaves the inputs as they
were (``tests/corpus.py``); ``--model-name`` picks one model, whose figures are checked against
values worked out by hand in the comments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from corpus import assert_clean, assert_refused, invoke, tree_digest

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
REL = 1e-12  # a handful of float operations

CONFIG = """[draft_p50_ms]
1 = 2.0
[[vllm]]
before = "before.prom"
after = "after.prom"
suite = "bench"
worker = "vllm"
batch = 1
context = 0
step_p50_ms = 30.0
"""


def scrape(models: dict[str, dict[str, Any]]) -> str:
    """A prometheus_client scrape: per model ``drafts``, ``per_pos`` and optional overrides.

    ``draft_tokens`` defaults to drafts × positions, ``accepted`` to Σ per_pos (consistent).
    """
    lines = []
    for name, help_ in (
        (DRAFTS, "drafts"),
        (DRAFT_TOKENS, "draft tokens"),
        (ACCEPTED, "accepted tokens"),
        (PER_POS, "accepted per position"),
    ):
        lines += [
            f"# HELP {name.removesuffix('_total')} Number of {help_}.",
            f"# TYPE {name.removesuffix('_total')} counter",
        ]
        for model, m in models.items():
            lab = f'engine="0",model_name="{model}"'
            per_pos = m["per_pos"]
            if name == PER_POS:
                lines += [
                    f'{name}{{{lab},position="{i}"}} {float(v)}' for i, v in enumerate(per_pos)
                ]
                continue
            value = {
                DRAFTS: m["drafts"],
                DRAFT_TOKENS: m.get("draft_tokens", m["drafts"] * len(per_pos)),
                ACCEPTED: m.get("accepted", sum(per_pos)),
            }[name]
            lines.append(f"{name}{{{lab}}} {float(value)}")
    return "\n".join(lines) + "\n"


def write_inputs(tmp: Path, before: str, after: str) -> list[str]:
    (tmp / "before.prom").write_text(before)
    (tmp / "after.prom").write_text(after)
    (tmp / "screen.toml").write_text(CONFIG)
    return [
        "screen",
        str(tmp / "before.prom"),
        str(tmp / "after.prom"),
        "--config",
        str(tmp / "screen.toml"),
        "--out",
        str(tmp / "out"),
    ]


def refused(tmp: Path, args: list[str], *fragments: str) -> str:
    """Run, check the refusal and that nothing changed (no ``out``, no temporary folder)."""
    before = tree_digest(tmp)
    res = invoke(args)
    line = assert_refused(res, *fragments)
    assert_clean(res, before, [tmp])
    return line


def screened(tmp: Path, args: list[str]) -> dict[str, Any]:
    inputs = [tmp / "before.prom", tmp / "after.prom", tmp / "screen.toml"]
    before = tree_digest(*inputs)
    res = invoke(args)
    assert res.exit_code == 0, res.output
    assert_clean(res, before, inputs)
    doc: dict[str, Any] = json.loads((tmp / "out" / "results.json").read_text())
    return doc


# Model "a": drafts 100 → 300, per position (60, 30, 10) → (260, 180, 100):
#   Δdrafts 200, Δper_pos (200, 150, 90), Δaccepted 440; R_a = 1 + 440/200 = 3.2,
#   survivals 200/200, 150/200, 90/200 = 1.0, 0.75, 0.45.
# Model "b": drafts 0 → 200, per position (0, 0, 0) → (50, 20, 10): Δaccepted 80, R_b = 1.4.
# Summed (the silent wrong figure): R = 1 + 520/400 = 2.3, a figure of neither model.
TWO_BEFORE = {
    "a": {"drafts": 100, "per_pos": [60, 30, 10]},
    "b": {"drafts": 0, "per_pos": [0, 0, 0]},
}
TWO_AFTER = {
    "a": {"drafts": 300, "per_pos": [260, 180, 100]},
    "b": {"drafts": 200, "per_pos": [50, 20, 10]},
}


def test_two_model_names_are_refused_without_model_name(tmp_path: Path) -> None:
    args = write_inputs(tmp_path, scrape(TWO_BEFORE), scrape(TWO_AFTER))
    refused(
        tmp_path,
        args,
        f"{tmp_path / 'before.prom'}: {DRAFTS} holds 2 model_name values",
        "'a', 'b'",
        "--model-name",
    )


@pytest.mark.parametrize(
    ("model", "survivals", "r"), [("a", [1.0, 0.75, 0.45], 3.2), ("b", [0.25, 0.1, 0.05], 1.4)]
)
def test_model_name_picks_one_model(
    tmp_path: Path, model: str, survivals: list[float], r: float
) -> None:
    args = write_inputs(tmp_path, scrape(TWO_BEFORE), scrape(TWO_AFTER))
    doc = screened(tmp_path, [*args, "--model-name", model])
    (cell,) = doc["cells"]
    got = [s["value"] for s in cell["survival"]]
    assert got == pytest.approx(survivals, rel=REL)
    assert 1 + sum(got) == pytest.approx(r, rel=REL)  # R = 1 + Δaccepted/Δdrafts
    assert cell["arms"]["vllm"]["n_rounds"] == 200
    assert doc["options"]["model_name"] == model


def test_unknown_model_name_is_refused(tmp_path: Path) -> None:
    args = write_inputs(tmp_path, scrape(TWO_BEFORE), scrape(TWO_AFTER))
    refused(
        tmp_path,
        [*args, "--model-name", "c"],
        f'{tmp_path / "before.prom"}: no {DRAFTS}{{model_name="c"}} series',
        "'a', 'b'",
    )


ONE_BEFORE = {"m": {"drafts": 100, "per_pos": [60, 30, 10]}}


def test_accepted_total_must_equal_the_per_position_sum(tmp_path: Path) -> None:
    # Δaccepted = 500 − 100 = 400, Σ Δper_pos = 200 + 150 + 90 = 440
    after = scrape({"m": {"drafts": 300, "per_pos": [260, 180, 100], "accepted": 500}})
    args = write_inputs(tmp_path, scrape(ONE_BEFORE), after)
    refused(
        tmp_path,
        args,
        f"{tmp_path / 'after.prom'} (since {tmp_path / 'before.prom'})",
        f"Δ{ACCEPTED} = 400 but Σ Δ{PER_POS} = 440",
    )


def test_short_proposals_give_no_depth_screen(tmp_path: Path) -> None:
    # An n-gram drafter: 200 drafts proposed 450 tokens, not 200 × 3 = 600.
    # before: 300 draft tokens; after: 750 → Δ 450. Mean acceptance length 1 + 440/200 = 3.2.
    before = scrape({"m": {"drafts": 100, "per_pos": [60, 30, 10], "draft_tokens": 300}})
    after = scrape({"m": {"drafts": 300, "per_pos": [260, 180, 100], "draft_tokens": 750}})
    args = write_inputs(tmp_path, before, after)
    refused(
        tmp_path,
        args,
        f"{tmp_path / 'after.prom'}",
        "short proposals",
        f"Δ{DRAFT_TOKENS} = 450 < Δ{DRAFTS} × 3 positions = 600",
        "no depth screen",
        "1 + Δaccepted/Δdrafts = 3.2000",
    )


def _curl(body: str, status: str = "200 OK") -> str:
    return (
        f"HTTP/1.1 {status}\r\ndate: Tue, 01 Dec 2026 12:00:00 GMT\r\nserver: uvicorn\r\n"
        "content-type: text/plain; version=0.0.4; charset=utf-8\r\n\r\n" + body
    )


def test_curl_i_headers_are_skipped(tmp_path: Path) -> None:
    after = scrape({"m": {"drafts": 300, "per_pos": [260, 180, 100]}})
    args = write_inputs(tmp_path, _curl(scrape(ONE_BEFORE)), _curl(after))
    doc = screened(tmp_path, args)
    (cell,) = doc["cells"]
    assert [s["value"] for s in cell["survival"]] == pytest.approx([1.0, 0.75, 0.45], rel=REL)


def test_curl_il_redirect_headers_are_skipped(tmp_path: Path) -> None:
    after = scrape({"m": {"drafts": 300, "per_pos": [260, 180, 100]}})
    redirect = "HTTP/1.1 307 Temporary Redirect\r\nlocation: /metrics/\r\n\r\n"
    args = write_inputs(tmp_path, redirect + _curl(scrape(ONE_BEFORE)), _curl(after))
    (cell,) = screened(tmp_path, args)["cells"]
    assert [s["value"] for s in cell["survival"]] == pytest.approx([1.0, 0.75, 0.45], rel=REL)


@pytest.mark.parametrize(
    "line",
    ["HTTP/1.1 2000 OKAY", "HTTP/1.1 20 OK", "HTTP/1.1  200 OK", "HTTP/2.0 200 OK",
     "HTTP/1.1 200OK", "HTTP/1.1 \u0662\u0660\u0660 OK", "HTTP/4 200 OK", "HTTP/1.1\t200 OK"],
)  # fmt: skip
def test_a_loose_status_line_is_refused_with_the_line(tmp_path: Path, line: str) -> None:
    """Issue 17, item 4: a status line is HTTP/1.0, 1.1, 2 or 3, one space, three ASCII digits,
    then a space or the end of the line; a line starting HTTP/ that is not one is refused (it was
    read as 200 when its first three digits were 200)."""
    after = scrape({"m": {"drafts": 300, "per_pos": [260, 180, 100]}})
    bad = _curl(after).replace("HTTP/1.1 200 OK", line, 1)
    args = write_inputs(tmp_path, scrape(ONE_BEFORE), bad)
    refused(tmp_path, args, f"{tmp_path / 'after.prom'}:line 1: not an HTTP status line")


@pytest.mark.parametrize("line", ["HTTP/1.0 200 OK", "HTTP/2 200", "HTTP/3 200 ", "HTTP/1.1 200"])
def test_a_strict_status_line_is_read(tmp_path: Path, line: str) -> None:
    after = scrape({"m": {"drafts": 300, "per_pos": [260, 180, 100]}})
    args = write_inputs(tmp_path, scrape(ONE_BEFORE), _curl(after).replace("HTTP/1.1 200 OK", line))
    (cell,) = screened(tmp_path, args)["cells"]
    assert [s["value"] for s in cell["survival"]] == pytest.approx([1.0, 0.75, 0.45], rel=REL)


def test_after_redirects_the_last_status_line_decides(tmp_path: Path) -> None:
    """curl -iL: a 200 first and a 404 last is refused with the 404's line."""
    two = "HTTP/1.1 200 OK\r\nx: y\r\n\r\n" + _curl("Not Found\n", "404 Not Found")
    args = write_inputs(tmp_path, scrape(ONE_BEFORE), two)
    refused(tmp_path, args, f"{tmp_path / 'after.prom'}:line 4: an HTTP response with status 404")


def test_curl_i_error_response_and_counters_are_named(tmp_path: Path) -> None:
    after = _curl("Not Found\n", "404 Not Found")
    args = write_inputs(tmp_path, scrape(ONE_BEFORE), after)
    refused(tmp_path, args, f"{tmp_path / 'after.prom'}:line 1: an HTTP response with status 404")
    # a run-counter file fetched with curl -i is said to be an HTTP response, not misread
    counters = tmp_path / "counters.jsonl"
    counters.write_text(_curl('{"suite": "s"}\n').replace("text/plain", "application/json"))
    (tmp_path / "plain.toml").write_text("[draft_p50_ms]\n1 = 2.0\n")
    args = [
        "screen",
        str(counters),
        "--config",
        str(tmp_path / "plain.toml"),
        "--out",
        str(tmp_path / "out"),
    ]
    refused(tmp_path, args, f"{counters}:line 1: an HTTP response (saved with curl -i?)")


V0 = """# HELP vllm:spec_decode_draft_acceptance_rate Speulative token acceptance rate.
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.61
# HELP vllm:spec_decode_efficiency Speculative decoding system efficiency.
# TYPE vllm:spec_decode_efficiency gauge
vllm:spec_decode_efficiency{model_name="m"} 0.42
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 1220.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 2000.0
# HELP vllm:spec_decode_num_emitted_tokens_total Number of emitted tokens.
# TYPE vllm:spec_decode_num_emitted_tokens_total counter
vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 1640.0
"""


def test_vllm_v0_scrape_is_named(tmp_path: Path) -> None:
    args = write_inputs(tmp_path, V0, V0)
    refused(
        tmp_path,
        args,
        f"{tmp_path / 'before.prom'}: a vLLM V0 scrape; screen reads V1 counters ({DRAFTS})",
    )


# -- which parser: OpenMetrics (trailing # EOF, or Content-Type) or the Prometheus text format --

ONE_AFTER = {"m": {"drafts": 300, "per_pos": [260, 180, 100]}}


def _om_curl(body: str) -> str:
    return _curl(body).replace(
        "text/plain; version=0.0.4; charset=utf-8",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    )


@pytest.mark.parametrize("form", ["eof", "eof-blank-after", "content-type"])
def test_openmetrics_scrapes_give_the_text_forms_figures(tmp_path: Path, form: str) -> None:
    """The same counters as OpenMetrics (family names without _total, samples with it, # EOF)
    give the survivals worked out above: 200/200, 150/200, 90/200."""
    before, after = scrape(ONE_BEFORE) + "# EOF\n", scrape(ONE_AFTER) + "# EOF\n"
    if form == "eof-blank-after":
        before, after = before + "\n\n", after + "\n"
    elif form == "content-type":
        before, after = _om_curl(before), _om_curl(after)
    (cell,) = screened(tmp_path, write_inputs(tmp_path, before, after))["cells"]
    assert [s["value"] for s in cell["survival"]] == pytest.approx([1.0, 0.75, 0.45], rel=REL)


def test_a_text_plain_scrape_ending_in_eof_is_read_as_text(tmp_path: Path) -> None:
    """The declared Content-Type wins: text/plain goes to the text parser, whose ``# EOF`` is a
    comment, and blank lines there are fine (the OpenMetrics parser would refuse them)."""
    body = scrape(ONE_AFTER).replace("\n# HELP", "\n\n# HELP") + "# EOF\n"
    args = write_inputs(tmp_path, _curl(scrape(ONE_BEFORE)), _curl(body))
    (cell,) = screened(tmp_path, args)["cells"]
    assert [s["value"] for s in cell["survival"]] == pytest.approx([1.0, 0.75, 0.45], rel=REL)


def test_openmetrics_errors_name_the_line(tmp_path: Path) -> None:
    good = scrape(ONE_AFTER)
    n = len(good.splitlines())
    after = tmp_path / "after.prom"
    # declared OpenMetrics but cut short: the parser needs # EOF (5 header lines + the body)
    args = write_inputs(tmp_path, scrape(ONE_BEFORE) + "# EOF\n", _om_curl(good))
    refused(tmp_path, args, f"{after}:line {5 + n}: OpenMetrics text without its final # EOF")
    # a blank line inside OpenMetrics text (line 3)
    lines = good.splitlines()
    body = "\n".join([*lines[:2], "", *lines[2:]]) + "\n# EOF\n"
    args = write_inputs(tmp_path, scrape(ONE_BEFORE) + "# EOF\n", body)
    refused(tmp_path, args, f"{after}:line 3: not OpenMetrics text: Received blank line")
    # a series twice in its family: the OpenMetrics parser would keep one, silently
    body = "\n".join([*lines[:3], lines[2], *lines[3:]]) + "\n# EOF\n"
    args = write_inputs(tmp_path, scrape(ONE_BEFORE) + "# EOF\n", body)
    refused(tmp_path, args, f"{after}: repeats a series (same labels)")


def test_malformed_comment_line_is_named(tmp_path: Path) -> None:
    """The text parser checks # HELP / # TYPE lines too (a TYPE without its type, line 2)."""
    bad = scrape(ONE_AFTER).replace(" counter\n", "\n", 1)
    args = write_inputs(tmp_path, scrape(ONE_BEFORE), bad)
    refused(tmp_path, args, f"{tmp_path / 'after.prom'}:line 2: malformed comment line")
