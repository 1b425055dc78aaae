"""The checks every bad-input and safety case makes (issue 9's acceptance), in one place.

A case runs a command and then checks the outcome its class states:

- a refusal (:func:`assert_refused`): exit 2, ONE ``error: …`` line on stderr holding the expected
  fragments (the file and the row, or the option), nothing on stdout;
- every case (:func:`assert_clean`): no ``Traceback`` anywhere, the inputs byte-identical
  afterwards (:func:`tree_digest` of the tree before and after, judged with ``lstat``: a file's
  bytes, a symlink's target, a FIFO or a device node by its kind and numbers, a folder by its
  entries), and nothing half-written beside the output (no ``.NAME.tmp-PID`` or ``.NAME.old-PID``).

:func:`tree_digest` never opens a FIFO or a device node (opening a FIFO blocks) and never follows
a symlink, so it can describe the hostile trees the safety cases build.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from typer.testing import CliRunner, Result

from specreplay.cli import app

__all__ = [
    "assert_clean",
    "assert_refused",
    "error_lines",
    "invoke",
    "leftovers",
    "tree_digest",
]


def _describe(p: Path) -> str:
    st = os.lstat(p)
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return f"symlink -> {os.readlink(p)}"
    if stat.S_ISREG(mode):
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return f"file {st.st_size} {h.hexdigest()} mtime {st.st_mtime_ns}"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return f"fifo ino {st.st_ino}"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"device {stat.S_IFMT(mode)} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    if stat.S_ISSOCK(mode):
        return f"socket ino {st.st_ino}"
    return f"other {stat.S_IFMT(mode)}"  # pragma: no cover


def tree_digest(*roots: Path) -> dict[str, str]:
    """Describe every entry under ``roots`` (``lstat``; symlinks and special files not opened).

    A root that does not exist is recorded as absent, so its creation shows as a change.
    """
    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        if not os.path.lexists(root):
            out[str(root)] = "absent"
            continue
        out[str(root)] = _describe(root)
        if stat.S_ISDIR(os.lstat(root).st_mode):
            for dirpath, dirnames, filenames in os.walk(root):  # os.walk never follows symlinks
                for name in sorted(dirnames + filenames):
                    p = Path(dirpath) / name
                    out[str(p)] = _describe(p)
    return out


def invoke(args: Sequence[str], env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process with a wide terminal (a message is never wrapped)."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300", **(env or {})})


def error_lines(res: Result) -> list[str]:
    """stderr lines, less the one-time "compiling kernels" notice of a cold Numba cache and the
    plain progress lines (``specreplay: h:mm:ss …``) a run writes when stderr is not a terminal."""
    return [
        x
        for x in res.stderr.strip().splitlines()
        if not x.startswith(("compiling kernels", "specreplay: "))
    ]


def leftovers(*folders: Path) -> list[str]:
    """Temporary names a run left in ``folders`` (``.NAME.tmp-PID``, ``.NAME.old-PID``)."""
    found: list[str] = []
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        for p in Path(folder).iterdir():
            n = p.name
            if n.startswith(".") and (".tmp-" in n or ".old-" in n or n.startswith(".tmp-")):
                found.append(str(p))
    return sorted(found)


def assert_clean(res: Result, before: dict[str, str], roots: Iterable[Path]) -> None:
    """No traceback, the inputs as they were, nothing half-written beside them."""
    roots = list(roots)
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    after = tree_digest(*roots)
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
               if before.get(k) != after.get(k)}  # fmt: skip
    assert not changed, changed
    parents = {Path(r).parent for r in roots} | {Path(r) for r in roots if Path(r).is_dir()}
    assert not leftovers(*parents), leftovers(*parents)


def assert_refused(res: Result, *fragments: str) -> str:
    """Exit 2, one ``error: …`` line holding every fragment, nothing on stdout; return the line."""
    assert "Traceback" not in res.output, res.output
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = error_lines(res)
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert res.stdout == "", res.stdout
    return lines[0]
