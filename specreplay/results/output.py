"""The atomic output folder every command writes into, and what it may replace.

See docs/design.md#safety.

docs/design.md#safety: every command that computes writes into a temporary folder beside ``--out``
and swaps it in when complete, so a killed run (SIGINT, or SIGTERM, which the CLI turns into an
exception) leaves no partial output, and a run removes the temporary folders that dead earlier runs
left beside ``--out``.

What an existing ``--out`` may be (judged with ``lstat``: a symlink is never followed):

- absent, or an empty folder: written;
- a folder bearing the report marker ``.specreplay-output`` (a regular file, not a symlink or a
  folder): an earlier run's report, replaced;
- with ``--force`` only, an archive folder specreplay wrote: its manifest (one of
  :data:`ARCHIVE_MANIFESTS`, a regular file) carries ``"written_by": "specreplay"`` and every
  other entry is a file the manifest lists among its ``outputs`` (a file added since is not ours,
  so the folder is refused). A captured archive (``CAPTURE.json``) is not among them: its traces
  cannot be made again;
- anything else, never, with or without ``--force``: a regular file, FIFO, socket, device node,
  symlink, or a non-empty folder without either mark.

``--out`` may also not be, contain or lie inside an input of the run (real paths compared), nor be
or hold the current folder. The swap judges the target again, with ``lstat``, right before it
renames it away, and checks that what it moved is what it judged (same device and inode); the new
folder is then renamed in with :func:`os.rename`, which never replaces a file, a symlink or a
non-empty folder, so an output that appears during the run is left as it was.

A full disk or a file-size limit while the run writes (ENOSPC, EFBIG, also inside polars' and
pyarrow's errors: :mod:`specreplay.diskfull`) is one line naming the file under ``out`` (``out``
itself when the error named no file), the cause and what to do, after the temporary folder is
removed; ``out``, an earlier run's folder included, is left as it was. Removing never raises: on a
file system that needs space to delete, the files are truncated first, and a folder that still
cannot be removed is named in the line (the next run removes it).

Every swap is recorded (:func:`swaps`): the CLI says ``replaced OUT (written CREATED_UTC)`` for
an earlier run's folder it replaced, the time read from the folder's results.json, SYNTH.json or
CONVERT.json (``written at an unknown time`` when none records it), and an interrupted run says
whether it had written anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specreplay.diskfull import DiskFull, disk_errno, output_message
from specreplay.errors import SpecReplayError

__all__ = [
    "ARCHIVE_MANIFESTS",
    "MARKER",
    "WRITTEN_BY",
    "Swap",
    "check_out",
    "output_dir",
    "reset_swaps",
    "swaps",
]

MARKER = ".specreplay-output"
"""The report marker: a folder holding it (a regular file) was written by specreplay."""
WRITTEN_BY = "specreplay"
"""The ``written_by`` value of the manifests specreplay writes into archive folders."""
ARCHIVE_MANIFESTS: tuple[str, ...] = ("SYNTH.json", "CONVERT.json")
"""Manifests that mark an archive folder ``--force`` may replace (``synth``'s, ``convert``'s)."""
_MANIFEST_MAX_BYTES = 16 * 2**20
_CREATED = re.compile(rb'"created_utc"\s*:\s*"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"')


@dataclass(frozen=True)
class Swap:
    """One output folder swapped in: ``out`` as given; what it replaced, if anything.

    ``replaced`` is true when ``out`` held an earlier run's folder (a report or an archive
    specreplay wrote), then ``created_utc`` is when that run wrote it (None: not recorded).
    """

    out: Path
    replaced: bool = False
    created_utc: str | None = None

    def note(self) -> str | None:
        """Return the stderr line ``replaced OUT (written …)``; None when nothing was replaced."""
        if not self.replaced:
            return None
        when = f"written {self.created_utc}" if self.created_utc else "written at an unknown time"
        return f"replaced {self.out} ({when})"


_SWAPS: list[Swap] = []


def reset_swaps() -> None:
    """Forget the swaps recorded so far (the CLI calls it as a command starts)."""
    _SWAPS.clear()


def swaps() -> tuple[Swap, ...]:
    """Return the output folders swapped in since :func:`reset_swaps`, in order."""
    return tuple(_SWAPS)


@dataclass(frozen=True)
class _Existing:
    """What an existing ``--out`` is: its ``lstat`` and whether an earlier run wrote it."""

    st: os.stat_result
    earlier: bool


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
        Also replace an archive folder specreplay wrote (module docstring).
    inputs : sequence of Path
        The run's input paths: ``out`` may not be, contain or lie inside any of them.
    marker : bool
        Write the ``.specreplay-output`` marker (report folders); false for archives, which carry
        their manifest instead, so a later run replaces them only with ``force``.

    Raises
    ------
    SpecReplayError
        From :func:`check_out`, before any work is done; when the folder cannot be written; or
        when ``out`` changed during the run (then it is left as it was).
    DiskFull
        A disk error (:mod:`specreplay.diskfull`) while the run wrote: the line names the file
        under ``out`` (``out`` itself when the error named none) and says ``out`` is as it was;
        the temporary folder is removed first.
    """
    out = Path(out)
    _check_inputs(out, inputs)
    _check_creatable(out)
    _check_cwd(out)
    target = Path(os.path.abspath(out))
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(target)  # may bring back a previous output, which the next check covers
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp)
    except OSError as exc:
        _raise_disk_full(exc, out, out)
        raise SpecReplayError(f"--out {out}: cannot be created: {exc.strerror}") from None
    _judge(target, out, force)
    try:
        try:
            tmp.mkdir()
            if marker:
                (tmp / MARKER).write_text("written by specreplay; safe to overwrite\n")
        except OSError as exc:
            _raise_disk_full(exc, out / MARKER if tmp.is_dir() else out, out)
            raise SpecReplayError(f"--out {out}: cannot be created: {exc.strerror}") from None
        yield tmp
        with _signals_held():
            _SWAPS.append(_swap_in(tmp, target, out, force))
    except BaseException as exc:
        left = _remove(tmp)
        code = disk_errno(exc)
        if code is not None:
            named = exc.path if isinstance(exc, DiskFull) else out  # the file, where known
            if named.is_relative_to(tmp):  # named where it was to go, not in the temporary folder
                named = out / named.relative_to(tmp)
            extra = f"; {left} could not be removed (the next run removes it)" if left else ""
            message = output_message(named, out, code) + extra
            raise DiskFull(message, path=named, code=code) from None
        raise


def _raise_disk_full(exc: BaseException, path: Path, out: Path) -> None:
    """Raise :class:`DiskFull` naming ``path`` when ``exc`` is a disk error; else return."""
    code = disk_errno(exc)
    if code is not None:
        raise DiskFull(output_message(path, out, code), path=path, code=code) from None


def _remove(tmp: Path) -> Path | None:
    """Remove the temporary folder ``tmp``; return it when it could not be removed (else None).

    Removing never raises. On a file system that needs space to delete (a full copy-on-write
    one), the files left are truncated to nothing, which frees their blocks, and removal is
    tried again; what is still there is a ``.NAME.tmp-PID`` the next run removes
    (:func:`_remove_stale`).
    """
    shutil.rmtree(tmp, ignore_errors=True)
    if not os.path.lexists(tmp):
        return None
    for dirpath, _, filenames in os.walk(tmp):  # never follows a symlink
        for name in filenames:
            path = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode):  # a symlink's target is not ours
                    os.truncate(path, 0)
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp if os.path.lexists(tmp) else None


def check_out(out: Path, *, force: bool, inputs: Sequence[Path] = ()) -> None:
    """Refuse an ``--out`` that would harm an input or another folder, before any work.

    In this order: ``out`` is, contains or lies inside an input (compared as real paths, symlinks
    resolved; refused even with ``force``); ``out`` is the root, lies under a regular file or in a
    folder without write permission; ``out`` is or holds the current folder; ``out`` exists and
    may not be replaced (module docstring).

    Raises
    ------
    SpecReplayError
        One line naming ``out`` and, for an input, that input.
    """
    out = Path(out)
    _check_inputs(out, inputs)
    _check_creatable(out)
    _check_cwd(out)
    _judge(Path(os.path.abspath(out)), out, force)


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


def _check_cwd(out: Path) -> None:
    """Raise when ``out`` is or holds the current folder (a swap would move it away)."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the current folder was deleted: nothing to protect
        return
    if cwd.is_relative_to(out.resolve()):
        how = "is" if cwd == out.resolve() else "holds"
        raise SpecReplayError(
            f"--out {out} {how} the current folder; choose another folder "
            "(refused even with --force)"
        )


_KINDS = {
    stat.S_IFREG: "regular file",
    stat.S_IFLNK: "symlink",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


def _is_regular(path: Path) -> bool:
    """Return whether ``path`` is a regular file (``lstat``: a symlink to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _judge(target: Path, out: Path, force: bool) -> _Existing | None:
    """Return what ``target`` is when it may be replaced (None: absent); raise otherwise.

    ``out`` is the path as given, for the messages. See the module docstring for the rule.
    """
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SpecReplayError(f"{out}: cannot be examined: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "special file")
        raise SpecReplayError(
            f"{out}: exists and is a {kind}, not a folder; specreplay replaces only folders it "
            "wrote (refused even with --force)"
        )
    try:
        entries = os.listdir(target)
    except OSError as exc:
        raise SpecReplayError(f"{out}: cannot be examined: {exc.strerror}") from None
    if not entries:
        return _Existing(st, earlier=False)
    if _is_regular(target / MARKER):
        return _Existing(st, earlier=True)
    manifest, why = _own_archive(target, entries)
    if manifest is not None and why is None:
        if force:
            return _Existing(st, earlier=True)
        raise SpecReplayError(
            f"{out}: holds an archive specreplay wrote ({manifest}); use --force to replace it"
        )
    detail = why or (
        f"no {MARKER} marker, no {' or '.join(ARCHIVE_MANIFESTS)} written by specreplay"
    )
    raise SpecReplayError(
        f"{out}: folder is not empty and was not written by specreplay ({detail}); "
        "refused even with --force"
    )


def _own_archive(folder: Path, entries: list[str]) -> tuple[str | None, str | None]:
    """Return (manifest, None) for an archive folder specreplay wrote, else (manifest?, why not).

    The manifest must be a regular file holding a JSON object with ``"written_by":
    "specreplay"``, and every other entry a file its ``outputs`` list.
    """
    for name in ARCHIVE_MANIFESTS:
        path = folder / name
        if name not in entries or not _is_regular(path):
            continue
        try:
            if path.stat().st_size > _MANIFEST_MAX_BYTES:
                return name, f"{name} is too large to be a manifest"
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return name, f"{name} cannot be read as JSON"
        if not isinstance(doc, dict) or doc.get("written_by") != WRITTEN_BY:
            return name, f'{name} does not say "written_by": "{WRITTEN_BY}"'
        listed = {name}
        for o in doc.get("outputs") or []:
            if isinstance(o, dict) and isinstance(o.get("path"), str):
                listed.add(o["path"])
        extra = sorted(e for e in entries if e not in listed or not _is_regular(folder / e))
        if extra:
            return name, f"{extra[0]} is not among the files {name} lists"
        return name, None
    return None, None


def _created_utc(folder: Path) -> str | None:
    """Return when the run that wrote ``folder`` made it (its ``created_utc``), or None.

    Read from the head of results.json, SYNTH.json or CONVERT.json (``created_utc`` is among the
    first keys written), only from regular files.
    """
    for name in ("results.json", *ARCHIVE_MANIFESTS):
        path = folder / name
        if not _is_regular(path):
            continue
        try:
            with path.open("rb") as fh:
                head = fh.read(4096)
        except OSError:
            continue
        found = _CREATED.search(head)
        if found:
            return found.group(1).decode()
    return None


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


def _swap_in(tmp: Path, target: Path, out: Path, force: bool) -> Swap:
    """Replace ``target`` by ``tmp`` with two renames, then delete the previous output.

    ``target`` is judged again (``lstat``) right before it is renamed away, and what was renamed
    must be what was judged (same device and inode), else it is put back. The second rename is
    :func:`os.rename` of a folder, which never replaces a file, a symlink or a non-empty folder.

    Raises
    ------
    SpecReplayError
        ``out`` became something that may not be replaced, or changed, during the run; it is left
        as it was.
    """
    found = _judge(target, out, force)
    created = _created_utc(target) if found is not None and found.earlier else None
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    changed = f"{out}: changed while the run was writing; left as it was, nothing written"
    if found is not None:
        os.rename(target, old)
        moved = os.lstat(old)
        if (moved.st_dev, moved.st_ino) != (found.st.st_dev, found.st.st_ino):
            os.rename(old, target)
            raise SpecReplayError(changed)
    try:
        os.rename(tmp, target)
    except OSError:
        if found is not None:
            with contextlib.suppress(OSError):  # else left as .NAME.old-PID: the next run
                os.rename(old, target)  # brings it back
        raise SpecReplayError(changed) from None
    if found is not None:
        shutil.rmtree(old, ignore_errors=True)
    return Swap(out, replaced=found is not None and found.earlier, created_utc=created)


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
