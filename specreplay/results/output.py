"""The atomic output folder every command writes into (SPEC §4).

SPEC §4: every command that computes writes into a temporary folder beside ``--out`` and swaps it
in when complete, so a killed run leaves no partial output; it refuses a non-empty folder that it
did not write (no ``.specreplay-output`` marker) unless ``--force``. Figures carry their label;
a null is written ``null`` in JSON and ``—`` in tables, with its reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specreplay.errors import SpecReplayError

__all__ = ["MARKER", "output_dir"]

MARKER = ".specreplay-output"


@contextmanager
def output_dir(out: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success swap it in as ``out``.

    Raises
    ------
    SpecReplayError
        When ``out`` is a non-empty folder (or a file) that specreplay did not write and ``force``
        is false. Checked before any work is done.
    """
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            if not force:
                raise SpecReplayError(f"{out}: exists and is not a folder (use --force to replace)")
        elif any(out.iterdir()) and not (out / MARKER).exists() and not force:
            raise SpecReplayError(
                f"{out}: folder is not empty and was not written by specreplay "
                "(use --force to replace it)"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        (tmp / MARKER).write_text("written by specreplay; safe to overwrite\n")
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.exists():
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()
