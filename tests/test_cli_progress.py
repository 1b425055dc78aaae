"""Progress on a terminal: one display per run, a line per phase, stdout untouched.

Regression kept: a phase with no known total once crashed rich's renderer.
"""

from __future__ import annotations

import io
import re
import sys

import pytest

from specreplay.commands.progress import Phases, progress_bar

_ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _last_frame(raw: str) -> list[str]:
    """The display's last drawn lines (rich redraws in place: the text after its last reset)."""
    text = _ESC.sub("", raw).replace("\r", "\n")
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    return lines[-2:]


@pytest.mark.parametrize("total", [None, 10])
def test_progress_bar_renders_with_and_without_total(
    monkeypatch: pytest.MonkeyPatch, total: int | None
) -> None:
    fake = _Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    with progress_bar(False, "replaying", total) as advance:
        advance(4)
        advance(6)
    assert "replaying" in fake.getvalue()


def test_one_display_holds_every_phase_and_leaves_stdout_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err, out = _Tty(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    with Phases(False) as phases:
        with phases("replaying", 10) as advance:
            advance(4)
            advance(6)
            print("figures")  # a print during a phase stays on stdout (no redirect to stderr)
        with phases("resampling", None) as advance:
            advance(3)
    assert out.getvalue() == "figures\n"
    first, second = _last_frame(err.getvalue())  # both phases on the one display, in order
    assert first.startswith("replaying") and "10/10" in first
    assert second.startswith("resampling") and second.split()[-2] == "3"


def test_a_failing_phase_closes_the_display(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    phases = Phases(False)
    with pytest.raises(ValueError), phases, phases("replaying", 5):
        raise ValueError
    assert err.getvalue().endswith("\x1b[2K")  # stopped and cleared (transient)


@pytest.mark.parametrize("quiet, tty", [(True, True), (False, False)])
def test_no_display_when_quiet_or_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, quiet: bool, tty: bool
) -> None:
    fake = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    with Phases(quiet) as phases, phases("replaying", None) as advance:
        advance(1)
    assert fake.getvalue() == ""
