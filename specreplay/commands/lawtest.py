"""``specreplay lawtest``: law tests of arms (does a verifier keep the target law)."""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.lawtest import lawtest_result
from specreplay.pipelines.options import LawtestOptions
from specreplay.render.console import validated_earlier
from specreplay.render.files import outputs_line, write_all
from specreplay.render.tables import lawtest_table
from specreplay.results.output import check_out, output_dir

__all__ = ["run_lawtest"]


def run_lawtest(
    opts: LawtestOptions, *, archive: Path | None, out: Path, force: bool
) -> tuple[str, bool]:
    """Law tests of arms on the toy laws and, given an archive, on sampled positions.

    Returns (terminal text, every test passed); see
    :func:`~specreplay.pipelines.lawtest.lawtest_result`. ``opts.hash_ids`` hashes the request ids
    of the sampled archive positions (:mod:`specreplay.results.privacy`).
    """
    read = [archive] if archive is not None else []
    check_out(out, force=force, inputs=read)
    with output_dir(out, force=force, inputs=read) as tmp:
        result = lawtest_result(opts, archive=archive)
        files = write_all(result, tmp)
    ok = all(t.passed is not False for t in result.law_tests)
    reused = validated_earlier(result)  # an archive's files a full check passed unchanged
    note = "" if reused is None else f"Reused: {reused}\n"
    return lawtest_table(result) + "\n" + note + outputs_line(out, files), ok
