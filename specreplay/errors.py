"""The project's one error type.

Every problem with a user's input or options raises :class:`SpecReplayError` carrying a complete,
self-contained one-line message (``PATH:line N: …`` for JSON Lines, ``PATH: row N (0-based): …``
for Parquet, SPEC §2.1). ``cli.py`` turns it into that line on stderr and exit code 2, with no
traceback. Nothing else in the package prints.
"""

from __future__ import annotations

__all__ = ["SpecReplayError"]


class SpecReplayError(Exception):
    """Bad input or options: the message is the whole one-line explanation shown to the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
