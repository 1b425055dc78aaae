"""The project's one error type.

Every problem with a user's input or options raises :class:`SpecReplayError` carrying a complete,
self-contained one-line message (``PATH:line N: …`` for JSON Lines, ``PATH: row N (0-based): …`` for
Parquet, docs/inputs.md#position-traces-schema-v1). ``cli.py`` turns it into that line on stderr and
exit code 2, with no traceback. Nothing else in the package prints.
"""

from __future__ import annotations

__all__ = ["InvalidArchive", "SpecReplayError"]


class SpecReplayError(Exception):
    """Bad input or options: the message is the whole one-line explanation shown to the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArchive(SpecReplayError):
    """An archive that fails validation: every error line found (``errors``), one per problem.

    The message is the first line and how many more there are; ``truncated`` says the check
    stopped at its error limit (more may follow).
    """

    def __init__(self, path: str, errors: tuple[str, ...], truncated: bool) -> None:
        more = f" (+{len(errors) - 1} more error(s) in {path})" if len(errors) > 1 else ""
        super().__init__(errors[0] + more)
        self.path = path
        self.errors = errors
        self.truncated = truncated
