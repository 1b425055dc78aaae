"""``specreplay screen``: what two vLLM scrapes measure, and the SP2 depth screen from run counters.

See docs/commands.md#screen and docs/methods.md#the-screens-rate-sp2.

Inputs are run-counter JSON Lines files and vLLM Prometheus scrapes, the scrapes in BEFORE AFTER
pairs. Every pair gives its MEASURED figures (mean acceptance length, per-position and draft
acceptance rates, drafts, the latency histogram's binned median); ``--vs`` adds the Δ of the mean
acceptance length with its round-independent SE, a lower bound. The config (TOML) adds the
ESTIMATED depth screen and holds what is not a counter: D_B, caps, H, the central values and the
envelope grids, and one ``[[vllm]]`` entry per scrape pair. Decisions: runs are pooled per
(batch, context, worker) across suites and repetitions (the cell records its suites); a cell's
counted positions are the fewest any of its runs has; a batch size without a cap or a D_B in the
config is an error (D_B is a deployment's measurement, so it has no default); each scrape is
named once, on the command line (pairs in order; with a config each takes the next ``[[vllm]]``
entry without ``before``/``after``) or in its entry, and the earlier shape that named it in both
places is still read; a command-line pair without an entry under ``--config`` is an error; a file
a ``[[vllm]]`` entry names is read as a scrape whatever its first line; an entry's own
``step_p50_ms`` wins over the histogram's median; ``--vs`` compares exactly one pair with one,
B − A; a scrape with two ``model_name`` values needs ``--model-name``; ``--engine`` keeps one
engine (:mod:`specreplay.replay.archive.counters` lists every refused scrape). results.json
records every input's path and SHA-256 (the config too) and only aggregate counts: no prompt,
token or tensor; ``scrapes`` and ``scrape_delta`` appear only when there are scrapes, and the
options ``engine`` and ``vs`` only when given, so a run without them writes what it wrote before.

:mod:`specreplay.pipelines.screen` builds the result (:func:`screen_result`, the Python API's
``screen``); :func:`run_screen` writes and renders it.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.options import ScreenOptions
from specreplay.pipelines.screen import screen_inputs, screen_result
from specreplay.render.files import outputs_line, write_all
from specreplay.render.screen import scrape_lines
from specreplay.render.tables import fmt
from specreplay.results.output import check_out, output_dir

__all__ = ["run_screen", "screen_inputs", "screen_result"]


def run_screen(
    paths: list[Path],
    *,
    config: Path | None,
    out: Path,
    force: bool,
    model_name: str | None = None,
    opts: ScreenOptions | None = None,
) -> str:
    """Run the screen and write results.json and TABLES.md into ``out``; return terminal text."""
    if opts is None:
        opts = ScreenOptions.build(model_name=model_name)
    inputs = screen_inputs(paths, config, opts)
    check_out(out, force=force, inputs=inputs)
    result = screen_result(paths, config, opts=opts)  # every input is read before any write
    with output_dir(out, force=force, inputs=inputs) as tmp:
        files = write_all(result, tmp)
    lines = scrape_lines(result)
    for c in result.cells:
        ranked = [d for d in c.depths if d.rank is not None]
        best = min(ranked, key=lambda d: d.rank or 0, default=None)
        what = (
            f"depth {best.depth}: {fmt(best.tokens_per_s, 1)} tokens/s "
            f"[{fmt(best.tokens_per_s_lo, 1)}, {fmt(best.tokens_per_s_hi, 1)}]"
            if best is not None
            else "no supported depth"
        )
        lines.append(f"{c.name}: best central {what} (ESTIMATED)")
    return "\n".join([*lines, outputs_line(out, files)])
