"""The atomic output folder every command writes into (SPEC §4).

SPEC §4: every command that computes writes into a temporary folder beside ``--out`` and swaps it
in when complete, so a killed run (SIGINT, or SIGTERM, which the CLI turns into an exception)
leaves no partial output, and a run removes the temporary folders that dead earlier runs left beside
``--out``. It refuses a non-empty folder that it did not write (no ``.specreplay-output`` marker)
unless ``--force``, and, even with ``--force``, a folder that is, contains or lies inside an input
of the run (real paths compared). The marker goes into report folders only, never into an archive
(``synth`` passes ``marker=False``), so an archive is never overwritten without ``--force``.
Figures carry their label; a null is written ``null`` in JSON and ``—`` in tables, with its
reason.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from specreplay.errors import SpecReplayError

__all__ = ["MARKER", "check_out", "output_dir"]

MARKER = ".specreplay-output"


@contextmanager
def output_dir(
    out: Path, *, force: bool, inputs: Sequence[Path] = (), marker: bool = True
) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success swap it in as ``out``.

    Parameters
    ----------
    out : Path
        The ``--out`` folder.
    force : bool
        Replace a non-empty ``out`` that specreplay did not write.
    inputs : sequence of Path
        The run's input paths: ``out`` may not be, contain or lie inside any of them.
    marker : bool
        Write the ``.specreplay-output`` marker (report folders); false for archives, which a
        later run may then replace only with ``force``.

    Raises
    ------
    SpecReplayError
        From :func:`check_out`, before any work is done, or when the folder cannot be written.
    """
    out = Path(out)
    _check_inputs(out, inputs)
    _check_creatable(out)
    target = Path(os.path.abspath(out))
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(target)  # may bring back a previous output, which the next check covers
        if tmp.exists():
            shutil.rmtree(tmp)
    except OSError as exc:
        raise SpecReplayError(f"--out {out}: cannot be created: {exc.strerror}") from None
    _check_foreign(out, force)
    try:
        try:
            tmp.mkdir()
            if marker:
                (tmp / MARKER).write_text("written by specreplay; safe to overwrite\n")
        except OSError as exc:
            raise SpecReplayError(f"--out {out}: cannot be created: {exc.strerror}") from None
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with _signals_held():
        _swap_in(tmp, target)


def check_out(out: Path, *, force: bool, inputs: Sequence[Path] = ()) -> None:
    """Refuse an ``--out`` that would harm an input or another folder, before any work.

    In this order: ``out`` is, contains or lies inside an input (compared as real paths, symlinks
    resolved; refused even with ``force``); ``out`` lies under a regular file or in a folder
    without write permission; ``out`` is a file, or a non-empty folder without the marker, and
    ``force`` is false.

    Raises
    ------
    SpecReplayError
        One line naming ``--out`` and, for an input, that input.
    """
    out = Path(out)
    _check_inputs(out, inputs)
    _check_creatable(out)
    _check_foreign(out, force)


def _check_inputs(out: Path, inputs: Sequence[Path]) -> None:
    """Raise when ``out`` is, contains or lies inside an input (real paths, symlinks resolved)."""
    real = out.resolve()
    for given in inputs:
        inp = Path(given).resolve()
        if real == inp:
            how = "is"
        elif inp.is_relative_to(real):
            how = "contains"
        elif real.is_relative_to(inp):
            how = "lies inside"
        else:
            continue
        raise SpecReplayError(
            f"--out {out} {how} the input {given}; choose a folder outside the inputs "
            "(refused even with --force)"
        )


def _check_foreign(out: Path, force: bool) -> None:
    """Raise when ``out`` is a file or a non-empty folder without the marker, unless ``force``."""
    if out.exists() and not force:
        if not out.is_dir():
            raise SpecReplayError(f"{out}: exists and is not a folder (use --force to replace)")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise SpecReplayError(
                f"{out}: folder is not empty and was not written by specreplay "
                "(use --force to replace it)"
            )


def _check_creatable(out: Path) -> None:
    """Raise when ``out`` cannot be created: under a regular file, or no write permission."""
    target = Path(os.path.abspath(out))
    if not target.name:
        raise SpecReplayError(f"--out {out}: the root folder cannot be an output folder")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise SpecReplayError(f"--out {out}: cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecReplayError(f"--out {out}: cannot be created: no write permission in {parent}")


def _pid_alive(pid: int) -> bool:
    """Return whether process ``pid`` exists (one that cannot be probed counts as alive)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _remove_stale(target: Path) -> None:
    """Remove the temporary folders earlier runs left beside ``target`` (their PID is gone).

    ``.NAME.tmp-PID`` (an unfinished output) is deleted. ``.NAME.old-PID`` (the previous output,
    set aside during a swap) is deleted when ``target`` exists, and otherwise renamed back to
    ``target``: the run died between the two renames of the swap, before its output was in place.
    """
    if not target.parent.is_dir():
        return
    for path in target.parent.iterdir():
        for kind in ("tmp", "old"):
            prefix = f".{target.name}.{kind}-"
            pid_text = path.name.removeprefix(prefix)
            if pid_text == path.name or not pid_text.isdigit():
                continue
            pid = int(pid_text)
            if pid != os.getpid() and _pid_alive(pid):
                continue
            if kind == "old" and not target.exists() and not target.is_symlink():
                os.replace(path, target)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def _swap_in(tmp: Path, target: Path) -> None:
    """Replace ``target`` by ``tmp`` with two renames, then delete the previous output."""
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists() or target.is_symlink():
        os.replace(target, old)
    os.replace(tmp, target)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    elif old.exists() or old.is_symlink():
        old.unlink()


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back during a swap; they are delivered when it is complete."""
    held = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
