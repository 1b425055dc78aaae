"""Progress bars on a terminal (regression: a bar with no known total crashed rich's renderer)."""

from __future__ import annotations

import io
import sys

import pytest

from specreplay.cli import _progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("total", [None, 10])
def test_progress_bar_renders_with_and_without_total(
    monkeypatch: pytest.MonkeyPatch, total: int | None
) -> None:
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    with _progress(False, "replaying", total) as advance:
        advance(4)
        advance(6)
    assert "replaying" in fake.getvalue()


def test_progress_is_silent_when_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    with _progress(True, "replaying", None) as advance:
        advance(1)
    assert fake.getvalue() == ""
