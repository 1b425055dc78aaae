"""Per-shard result cache (``--cache DIR``): a shard replayed once is not replayed again.

A shard's :class:`~specreplay.replay.shard.ShardSums` depend on the shard's bytes, the arms and
the replay options, and on the code that computed them; the cache key holds all of it
(:meth:`ShardCache.key_fields`):

- the shard's SHA-256 (:func:`~specreplay.replay.archive.filehash.file_sha256`, itself cached by
  the shard's whole stamp: device, inode, size, modification and change times), **not** its
  path: a renamed or moved shard is still a hit, and its place in the fold still follows sorted
  path order; a shard rewritten at the same size with its modification time put back, or
  re-created as ``cp -p`` leaves it, has a new change time, so a new digest and a new key;
- the canonical arms, sorted;
- every field of :class:`~specreplay.replay.shard.ReplayOptions`: the estimators in order (the
  run's own first: it must replay every batch, the others are dropped where a batch cannot
  support them), replicates, seed, the bucket table (names and bounds), max_depth,
  ``--logging-arm`` (the parsed arm's canonical form, and its spelling, which the sums carry),
  law_positions, the grouping columns (``--by``: the pass's finest cells, so a ``--by`` run and
  a plain one never share an entry), batch_rows, the columns read and ``--short-rounds``;
- the filters (``--families``, ``--sample-requests``): they are applied after the fold, so they do
  not change a shard's sums, but the key errs on the side of holding them;
- specreplay's version and a SHA-256 of the kernel sources (every ``.py`` file under
  ``specreplay/sim``, ``specreplay/stats`` and ``specreplay/replay``): editing the code that makes
  the sums invalidates every entry.

Format: one file per entry, ``DIR/<key>.shard``, where ``<key>`` is the SHA-256 of the key fields
as canonical JSON. The entry is sealed (:mod:`~specreplay.replay.archive.sealed`): a header line
``FORMAT SHA256`` holding the SHA-256 of the payload, then the payload, a pickle of
``{"format": FORMAT, "key": key, "fields": {...}, "sums": ShardSums}``; it is written to a
temporary name in DIR and renamed (concurrent runs never see half an entry). The header is
checked **before** the payload is unpickled: an entry whose payload changed (one byte will do),
that is truncated, holds only its header, or whose format, key or type do not match is
recomputed and overwritten, never trusted; its shard is counted as ``recomputed`` (results.json
``replay_backend.cache.recomputed`` and ``recomputed_files``, and the stderr cache line).
**Trust assumption:** pickle runs code when loaded, so the cache folder must be the user's own
(as the Numba cache is); never point ``--cache`` at a folder others can write (the header
catches damage, not an attacker, who can rewrite it too). An entry that cannot be written (a
full disk, a file-size limit) is not an error: the run goes on, its temporary file removed, and
the first failure is one note on stderr (:mod:`specreplay.diskfull`; :attr:`CacheReport.not_stored`
keeps the keys). Entries are never evicted: delete the folder to reclaim the space (an entry is
about the size of the shard's per-request sums: small against the shard itself). A shard's entry
is written in this process when its sums come back (from a Dask worker too), so only this machine
needs the folder.

The cache wraps any runner (:func:`cached_runner`): hits are yielded at their place in sorted
order; the misses go to the inner runner (local or Dask) as one list, in sorted order.
:class:`CacheReport` tells what it did (the run records it in results.json ``replay_backend``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specreplay import kernel_sources_hash
from specreplay.diskfull import disk_errno, note_cache_failure
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.filehash import file_sha256
from specreplay.replay.archive.reader import FileInfo
from specreplay.replay.archive.sealed import seal, unseal
from specreplay.replay.archive.sources import ArchiveFile
from specreplay.replay.distributed import Runner
from specreplay.replay.shard import ReplayOptions, ShardSums
from specreplay.sim.arms import Arm
from specreplay.stats.buckets import Buckets

__all__ = [
    "CACHE_MARKER",
    "FORMAT",
    "CacheReport",
    "ShardCache",
    "cached_runner",
    "check_cache_folder",
    "kernel_hash",
]

FORMAT = "specreplay-shard-cache/3"
# ShardSums fields keyed by arm (reordered to the run's arm order on a hit, as are the arms,
# unlogged and tails of each estimator in ShardSums.replays)
_BY_ARM = ("flagged", "no_support")


def kernel_hash() -> str:
    """SHA-256 of the kernel sources: every .py under specreplay/sim, stats and replay.

    :func:`specreplay.kernel_sources_hash`, which also keys Numba's cache folder.
    """
    return kernel_sources_hash()


CACHE_MARKER = ".specreplay-cache"
"""The file that marks a folder as a specreplay shard cache (written when the cache is made)."""
_MARKER_TEXT = "specreplay shard cache (pickles: keep this folder private); safe to delete\n"


SHARD_CACHE = "the shard cache (--cache)"
_NOT_STORED = "the shards replayed in this run are replayed again next run (the run is unaffected)"


def _write_marker(folder: Path) -> bool:
    """Write the marker into a new cache folder; False on a full disk (noted: a cache note).

    The run then stores no entry (a folder holding entries but no marker would be refused by
    the next run); a marker written in part is still a marker (a regular file of that name).
    """
    try:
        (folder / CACHE_MARKER).write_text(_MARKER_TEXT)
    except OSError as exc:
        if disk_errno(exc) is None:
            raise
        note_cache_failure(SHARD_CACHE, folder, exc, _NOT_STORED)
        return os.path.lexists(folder / CACHE_MARKER)
    return True


def check_cache_folder(folder: Path, inputs: Sequence[Path] = ()) -> None:
    """Refuse a ``--cache DIR`` that is not a private cache folder, before anything is written.

    ``DIR`` must not be, lie inside or hold an input of the run (real paths compared): the cache
    is an output. It must be absent, an empty folder, or a folder holding :data:`CACHE_MARKER` (a
    regular file), judged with ``lstat`` (a symlink is refused, never followed); and owned by this
    user and not writable by group or others (entries are pickles, and loading one runs code).

    Raises
    ------
    SpecReplayError
        One line naming ``--cache DIR`` and what is wrong.
    """
    where = f"--cache {folder}"
    real = Path(folder).resolve()
    for given in inputs:
        inp = Path(given).resolve()
        how = (
            "is"
            if real == inp
            else "holds"
            if inp.is_relative_to(real)
            else "lies inside"
            if real.is_relative_to(inp)
            else None
        )
        if how is not None:
            raise SpecReplayError(
                f"{where} {how} the input {given}; the cache is an output: choose a folder "
                "outside the inputs"
            )
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SpecReplayError(f"{where}: cannot be examined ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise SpecReplayError(f"{where}: is a symlink; give the folder itself")
    if not stat.S_ISDIR(st.st_mode):
        raise SpecReplayError(f"{where}: not a folder")
    if st.st_uid != os.geteuid():
        raise SpecReplayError(
            f"{where}: owned by another user (uid {st.st_uid}); the cache holds pickles, and "
            "loading one runs code: give a folder of your own"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SpecReplayError(
            f"{where}: others can write it (mode {stat.S_IMODE(st.st_mode):o}); the cache holds "
            "pickles, and loading one runs code: chmod go-w it or give a private folder"
        )
    try:
        entries = os.listdir(folder)
    except OSError as exc:
        raise SpecReplayError(f"{where}: cannot be examined ({exc.strerror})") from None
    marker = Path(folder) / CACHE_MARKER
    if entries and not (CACHE_MARKER in entries and stat.S_ISREG(os.lstat(marker).st_mode)):
        raise SpecReplayError(
            f"{where}: folder is not empty and is not a specreplay cache (no {CACHE_MARKER} "
            "file); give an empty or new folder"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecReplayError(f"{where}: not writable")


@dataclass
class CacheReport:
    """What the cache did over a run (every pass of it; a ``--by`` run makes one).

    Attributes
    ----------
    folder : Path
    reused, replayed : list of str
        Paths of the shards served from the cache / replayed (and stored), in the order met.
    recomputed : list of str
        Paths of shards whose entry failed its check (unreadable, payload changed, truncated,
        header only, another format or key): replayed again (so also in ``replayed``).
    """

    folder: Path
    reused: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    recomputed: list[str] = field(default_factory=list)
    not_stored: list[str] = field(default_factory=list)
    """Keys of the entries that could not be written (a full disk): a note, not an error."""

    def to_json(self) -> dict[str, Any]:
        """Return the ``cache`` entry of results.json ``replay_backend``."""
        return {
            "folder": str(self.folder),
            "shards": len(self.reused) + len(self.replayed),
            "reused": len(self.reused),
            "replayed": len(self.replayed),
            "replayed_files": list(self.replayed),
            "recomputed": len(self.recomputed),
            "recomputed_files": list(self.recomputed),
        }


class ShardCache:
    """The cache folder ``DIR`` of ``--cache DIR`` (see the module docstring).

    Parameters
    ----------
    folder : Path
        Created when missing (mode 0700, with the :data:`CACHE_MARKER` file); else it must be an
        empty folder or one holding the marker, of this user, not writable by others
        (:func:`check_cache_folder`).
    filters : dict
        ``--families`` and ``--sample-requests`` as JSON values (part of every key).
    inputs : sequence of Path
        The run's inputs: the folder may not be, hold or lie inside any of them.
    """

    def __init__(
        self,
        folder: Path,
        filters: dict[str, Any] | None = None,
        inputs: Sequence[Path] = (),
    ) -> None:
        self.folder = Path(folder)
        self._writable = True
        check_cache_folder(self.folder, inputs)
        try:
            if not os.path.lexists(self.folder):
                self.folder.parent.mkdir(parents=True, exist_ok=True)
                self.folder.mkdir(mode=0o700)  # not group or world writable, whatever the umask
            if not (self.folder / CACHE_MARKER).exists():
                self._writable = _write_marker(self.folder)
        except OSError as exc:
            msg = f"--cache {self.folder}: cannot create it ({exc.strerror})"
            raise SpecReplayError(msg) from None
        check_cache_folder(self.folder, inputs)  # what was made is what was asked for
        self.filters = dict(filters or {})
        self.report = CacheReport(self.folder)

    def key_fields(self, file: Path, arms: Sequence[Arm], options: ReplayOptions) -> dict[str, Any]:
        """Everything the shard's sums depend on (module docstring), as JSON values."""
        from specreplay import __version__

        b = options.buckets if options.buckets is not None else Buckets.parse()
        opts = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        opts["buckets"] = {"names": list(b.names), "lo": list(b.lo), "hi": list(b.hi)}
        opts["group"] = list(options.group)
        # the arm by its canonical form (what the sums depend on) and the spelling the sums
        # carry as ShardSums.logging_arm (echoed in the result): a changed arm changes the key
        arm = options.logging_arm
        opts["logging_arm"] = None if arm is None else [arm.canonical, arm.spelled]
        # sets as sorted lists: str() of a set follows the process's string-hash seed
        opts = {k: sorted(v) if isinstance(v, (set, frozenset)) else v for k, v in opts.items()}
        return {
            "format": FORMAT,
            "sha256": file_sha256(file),
            "arms": sorted(a.canonical for a in arms),
            "options": opts,
            "filters": self.filters,
            "version": __version__,
            "kernels": kernel_hash(),
        }

    @staticmethod
    def key(fields: dict[str, Any]) -> str:
        """Return the entry's name: SHA-256 of the key fields as canonical JSON."""
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.shard"

    def load(self, key: str, shard: Path | None = None) -> ShardSums | None:
        """Return the entry's sums; None when absent or when it fails its check.

        The header is checked before the payload is unpickled (module docstring). A failed entry
        is counted as recomputed under ``shard`` (the shard's path; default the entry's).
        """
        p = self._path(key)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            data = b""  # unreadable: recomputed
        sums = _sums(unseal(FORMAT, data), key)
        if sums is None:
            self.report.recomputed.append(str(shard if shard is not None else p))
        return sums

    def store(self, key: str, fields: dict[str, Any], sums: ShardSums) -> None:
        """Write the sealed entry (temporary name, then rename); a failed write costs the reuse."""
        entry = {"format": FORMAT, "key": key, "fields": fields, "sums": sums}
        data = seal(FORMAT, pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL))
        if not self._writable:
            self.report.not_stored.append(key)
            return
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".shard", dir=self.folder)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self._path(key))
        except OSError as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self.report.not_stored.append(key)
            note_cache_failure(SHARD_CACHE, self.folder, exc, _NOT_STORED)


def _sums(payload: bytes | None, key: str) -> ShardSums | None:
    """Return the sums of an unsealed payload; None unless it is this key's entry."""
    if payload is None:
        return None  # the header did not check: never unpickled
    try:
        entry = pickle.loads(payload)  # the user's own folder (module docstring)
    except Exception:  # a payload that checks but does not load is recomputed too
        return None
    ok = (
        isinstance(entry, dict)
        and entry.get("format") == FORMAT
        and entry.get("key") == key
        and isinstance(entry.get("sums"), ShardSums)
    )
    return entry["sums"] if ok else None


def _as_file(sums: ShardSums, file: ArchiveFile, arms: Sequence[Arm]) -> ShardSums:
    """Return cached sums as if just replayed from ``file`` (its path, the run's arm order)."""
    rows = sum(f.rows for f in sums.files)
    moved: dict[str, Any] = {
        "sources": [ArchiveFile(0, file.path, file.kind)],
        "files": [FileInfo(file.path, rows)],
    }

    def ordered(d: dict[str, Any]) -> dict[str, Any]:
        return {a.canonical: d[a.canonical] for a in arms if a.canonical in d}

    for name in _BY_ARM:
        moved[name] = ordered(getattr(sums, name))
    moved["replays"] = {
        e: dataclasses.replace(
            r, arms=ordered(r.arms), unlogged=ordered(r.unlogged), tails=ordered(r.tails)
        )
        for e, r in sums.replays.items()
    }
    return dataclasses.replace(sums, **moved)


def cached_runner(cache: ShardCache, inner: Runner) -> Runner:
    """Wrap ``inner``: hits come from ``cache``, misses from ``inner`` and are stored."""

    def run(
        files: Sequence[ArchiveFile],
        arms: Sequence[Arm],
        options: ReplayOptions,
        progress: Callable[[int], None] | None,
    ) -> Iterator[ShardSums]:
        fields = [cache.key_fields(f.path, arms, options) for f in files]
        keys = [cache.key(k) for k in fields]
        hits = [cache.load(k, f.path) for k, f in zip(keys, files, strict=True)]
        misses = [f for f, h in zip(files, hits, strict=True) if h is None]
        fresh = inner(misses, arms, options, progress) if misses else iter(())
        return _merged(cache, files, arms, fields, keys, hits, fresh, progress)

    return run


def _merged(
    cache: ShardCache,
    files: Sequence[ArchiveFile],
    arms: Sequence[Arm],
    fields: list[dict[str, Any]],
    keys: list[str],
    hits: list[ShardSums | None],
    fresh: Iterator[ShardSums],
    progress: Callable[[int], None] | None,
) -> Iterator[ShardSums]:
    """Hits and freshly replayed shards, interleaved back into sorted path order."""
    for f, fld, key, hit in zip(files, fields, keys, hits, strict=True):
        if hit is not None:
            cache.report.reused.append(str(f.path))
            if progress is not None:
                progress(hit.positions)
            yield _as_file(hit, f, arms)
            continue
        sums = next(fresh)
        cache.store(key, fld, sums)
        cache.report.replayed.append(str(f.path))
        yield sums
