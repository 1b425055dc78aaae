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


@pytest.mark.parametrize("tty", [True, False])
def test_nothing_when_quiet(monkeypatch: pytest.MonkeyPatch, tty: bool) -> None:
    fake = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    with Phases(True) as phases, phases("replaying", None) as advance:
        advance(1)
    assert fake.getvalue() == ""


_PLAIN = re.compile(r"^specreplay: (\d+):(\d\d):(\d\d) (.*)$")


def test_plain_lines_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16, item 6: stderr not a terminal: a line at each phase's start, at least one per
    interval within a phase even when nothing advances, and one at its end, each with the time
    since the run started; stdout untouched."""
    import time

    from specreplay.commands import progress

    err, out = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.05)
    with Phases(False) as phases:
        with phases("replaying", 200) as advance:
            advance(50)
            time.sleep(0.3)  # six intervals: nothing advances, the lines keep coming
        with phases("resampling", None):
            pass
    lines = err.getvalue().splitlines()
    parsed = [_PLAIN.match(x) for x in lines]
    assert all(parsed), lines  # every line: the prefix, h:mm:ss, the text
    texts = [m.group(4) for m in parsed if m]
    assert texts[0] == "replaying …"
    beats = [t for t in texts if t == "replaying 50/200 (25%)"]
    assert len(beats) >= 3, texts  # ~6 expected at 0.05 s; 3 allows a busy host
    (done,) = [t for t in texts if t.startswith("replaying done in ")]
    assert float(done.split()[-2]) >= 0.3 and texts.index(done) < texts.index("resampling …")
    assert texts[-2:][0] == "resampling …" and texts[-1].startswith("resampling done in ")
    assert out.getvalue() == ""


def test_a_phase_that_raises_ends_its_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from specreplay.commands import progress

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.01)
    with pytest.raises(ValueError), Phases(False) as phases, phases("replaying", 5):
        raise ValueError
    assert not any(t.name == "specreplay-progress" for t in threading.enumerate())
