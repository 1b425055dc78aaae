"""``specreplay demo``: the built-in archive's story, verdicts first.

:mod:`specreplay.pipelines.demo` builds every chapter from one replay pass over the generated
archive. Every chapter is written as a sub-run folder with its own results.json (``requalify``,
``bits-dyadicN``, ``lawtest``, ``sweep``, ``budget``), and the archive's MEASURED result goes to
the top level last. What the demo says (the VERDICTS block, the chapters) is a function of those
results alone (:mod:`specreplay.render.demo_story`): the terminal text here and the top-level
REPORT.md, which :func:`~specreplay.render.files.render` writes with the MEASURED result by
reading the sub-runs back, share that one source, so ``specreplay report DEMO_DIR`` re-renders the
story from the files on disk (the bits sweep included: its runs are sub-runs too).
"""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.builders import write_synth_archive
from specreplay.pipelines.demo import DEMO_DEPTH, demo_results
from specreplay.pipelines.options import N_BOOT, Estimator
from specreplay.render.demo_story import DemoRuns, terminal_text
from specreplay.render.files import write_all
from specreplay.replay.scan import Progress, no_progress, phase
from specreplay.results.output import output_dir

__all__ = ["run_demo"]


def run_demo(
    out: Path,
    *,
    n_requests: int,
    seed: int,
    force: bool,
    n_boot: int = N_BOOT.default,
    estimator: Estimator = Estimator.AUTO,
    progress: Progress = no_progress,
) -> str:
    """Generate the built-in archive into ``out/archive`` and tell its story, verdicts first.

    1. the archive (MEASURED acceptance by family × bucket, per-position survival; its logging
       arm drafts 8 positions per round);
    2. requalification of dyadic24 against float64 sampling, greedy as reference, with the law
       test and the path-bias diagnostic (``out/requalify``);
    3. a bits sweep (dyadic 8, 12, 16, 24: ``out/bits-dyadicN``) and the mismatched verifier
       ``dyadic8/float64`` failing the law test (``out/lawtest``);
    4. a depth sweep of the logging arm over depths 1..8 under a linear cost model
       (``out/sweep``) and the budget of the gain over greedy (``out/budget``).
    """
    with output_dir(out, force=force) as tmp:
        archive = tmp / "archive"
        write_synth_archive(archive, n_requests, 64, 250, seed, progress, depth=DEMO_DEPTH)
        measured, results = demo_results(
            archive,
            tmp=tmp,
            out=out,
            n_requests=n_requests,
            seed=seed,
            n_boot=n_boot,
            estimator=estimator,
            progress=progress,
        )
        outputs: dict[str, list[str]] = {}
        with phase(progress, "plots and files"):
            for name, result in results.items():
                (tmp / name).mkdir()
                outputs[name] = write_all(result, tmp / name)
            write_all(measured, tmp)  # last: its REPORT.md reads the sub-runs written above
    return terminal_text(DemoRuns(measured, results), out, outputs)
