"""Issue 9, item 8: numbers at their bounds, for every numeric option of every command.

The options are enumerated from the click command objects typer builds
(``typer.main.get_command(app)``), so an option added later is tried without being listed here.
Each numeric option (``int`` or ``float``, alone or repeated) gets min − 1, max + 1, 2^63, 2^64,
−2^64, 1e309, nan, inf and a non-number; every value outside the option's range must exit 2 with
ONE line ``error: OPTION VALUE: …`` that names the range, no traceback, nothing on stdout and the
folder of the run untouched. The values are given first on the command line (click parses the
options in the order given), and the command's required arguments and options get dummy values,
so every case fails at parse time, in a few milliseconds.

Decision: every usage error is one line (``error: …``, exit 2), including click's own (a missing
argument, an unknown option): click's usage block is gone; ``specreplay`` alone still prints the
help, and ``--help`` is unchanged.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer.main
import typer.testing
from archive_factory import LOGGING_ARM, valid_rows, write_jsonl
from corpus import assert_clean, assert_refused, invoke, tree_digest

from specreplay.cli import app

INT64 = (-(2**63), 2**63 - 1)  # a bound an int option does not declare (the int64 of numpy)
FLOAT_LIMIT = 2.0**53  # a bound a float option does not declare (± this)
NAMES = {2**63 - 1: "2^63-1", -(2**63): "-2^63", 2**64 - 1: "2^64-1",
         FLOAT_LIMIT: "2^53", -FLOAT_LIMIT: "-2^53"}  # fmt: skip


def _kind(annotation: Any) -> type | None:
    if get_origin(annotation) is list:
        return _kind(get_args(annotation)[0])
    if annotation is int or annotation is float:
        return annotation  # type: ignore[no-any-return]
    return None


def _numeric_options() -> list[tuple[str, Any, type]]:
    """(command, parameter, int or float) for every numeric option of every command."""
    group: Any = typer.main.get_command(app)
    found = []
    for name, command in sorted(group.commands.items()):
        for p in command.params:
            kind = _kind(p.type_descriptor.annotation)
            if kind is not None:
                found.append((name, p, kind))
    return found


OPTIONS = _numeric_options()
CLI = typer.main.get_command(app)


@pytest.fixture(autouse=True)
def _built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """CliRunner builds the click command from the app on every invoke (0.1 s, 370 times here);
    build it once for this module (typer.testing imports ``get_command`` as ``_get_command``)."""
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: CLI)


def _bounds(p: Any, kind: type) -> tuple[float, float]:
    if kind is int:
        lo, hi = INT64
    else:
        lo, hi = -FLOAT_LIMIT, FLOAT_LIMIT
    return (p.min if p.min is not None else lo), (p.max if p.max is not None else hi)


def _shown(v: float) -> str:
    return NAMES.get(v, str(v) if isinstance(v, int) else f"{v:g}")


def _required(command: str, skip: str, tmp: Path) -> list[str]:
    """Dummy values for a command's required arguments and options (never read: parsing fails
    on the option under test first)."""
    group: Any = typer.main.get_command(app)
    args: list[str] = []
    for p in group.commands[command].params:
        if not p.required or p.name == skip:
            continue
        value = "1" if _kind(p.type_descriptor.annotation) else str(tmp / "absent")
        if p.param_type_name == "option":
            args += [p.opts[0], value]
        else:
            args.append(value)
    return args


def _out_of_range(p: Any, kind: type) -> list[str]:
    """The issue's list of values, less those inside the option's range."""
    lo, hi = _bounds(p, kind)
    values = [str(lo - 1), str(hi + 1), str(2**63), str(2**64), str(-(2**64)),
              "1e309", "nan", "inf", "-inf", "ten"]  # fmt: skip
    if kind is float:
        values[:2] = [f"{lo - 1:.17g}", f"{hi + 1:.17g}"]
        if abs(lo) == FLOAT_LIMIT:
            values[0] = str(-(2**53) - 1)  # exact text: one below the bound as a float rounds to it

    def inside(text: str) -> bool:
        try:
            exact = Fraction(text)
        except ValueError:
            return False
        return Fraction(lo) <= exact <= Fraction(hi) and (kind is float or exact.denominator == 1)

    return [v for v in values if not inside(v)]


def test_every_numeric_option_is_found() -> None:
    """The enumeration sees the options this file was written against (and any added since)."""
    names = {(c, p.opts[0]) for c, p, _ in OPTIONS}
    assert {("synth", "--seed"), ("requalify", "--level"), ("budget", "--known"),
            ("lawtest", "--family-alpha"), ("sweep", "--workers")} <= names  # fmt: skip
    assert len(OPTIONS) >= 35


@pytest.mark.parametrize(
    ("command", "option"), [(c, p.opts[0]) for c, p, _ in OPTIONS], ids=lambda x: str(x)
)
def test_numbers_outside_the_range_are_one_line(tmp_path: Path, command: str, option: str) -> None:
    _, p, kind = next(o for o in OPTIONS if o[0] == command and o[1].opts[0] == option)
    lo, hi = _bounds(p, kind)
    values = _out_of_range(p, kind)
    assert len(values) >= 8, values  # at most the two in-range infinities of nothing drop out
    before = tree_digest(tmp_path)
    for value in values:
        res = invoke([command, f"{option}={value}", *_required(command, p.name, tmp_path)])
        line = assert_refused(res, f"error: {option} {value}: ")
        assert f"{_shown(lo)} to {_shown(hi)}" in line, line
        number: float | None
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is None or (kind is int and "." in value) or value == "1e309":
            assert "not an integer" in line or "not a number" in line or "finite" in line, line
        elif not math.isfinite(number):
            assert ("not a finite number" if kind is float else "not an integer") in line, line
        else:
            assert "out of range" in line, line
        assert_clean(res, before, [tmp_path])


def test_the_issue_example_and_the_largest_seed(tmp_path: Path) -> None:
    """2^64 is refused (it was an OverflowError traceback); 2^64 − 1, the largest uint64, runs."""
    out = tmp_path / "a"
    res = invoke(["synth", str(out), "--seed", str(2**64)])
    assert_refused(res, f"error: --seed {2**64}: out of range (0 to 2^64-1)")
    assert not out.exists()
    res = invoke(["synth", str(out), "--seed", str(2**64 - 1), "--requests", "2", "--rounds",
                  "2", "-q"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (out / "SYNTH.json").is_file()


def test_every_default_is_inside_its_range() -> None:
    for command, p, kind in OPTIONS:
        lo, hi = _bounds(p, kind)
        defaults = p.default if isinstance(p.default, list | tuple) else [p.default]
        for d in defaults:
            assert d is None or lo <= d <= hi, (command, p.opts[0], d)


IN_RANGE_REFUSED = [
    # (arguments, fragments): inside the parse-time range, refused by the command: one line
    (["lawtest", "--family-alpha", "2"], ["family_alpha must be in (0, 1), got 2.0"]),
    (["budget", "--price-ms", "-1", "--base", "2", "--delta-lo", "0.1"],
     ["--price-ms: -1 should be a positive number"]),
    (["budget", "--price-ms", "1", "--base", "0", "--delta-lo", "0.1"],
     ["--base: 0 should be a positive number"]),
]  # fmt: skip


@pytest.mark.parametrize(("args", "fragments"), IN_RANGE_REFUSED, ids=lambda x: str(x))
def test_in_range_values_the_command_refuses_are_one_line(
    tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    out = tmp_path / "out"
    before = tree_digest(tmp_path)
    res = invoke([*args, "--out", str(out)])
    assert_refused(res, *fragments)
    assert_clean(res, before, [tmp_path])


def test_requalify_with_in_range_extremes_is_one_line(tmp_path: Path) -> None:
    """--sample-requests and --min-requests at their largest: a run, or one line, never a
    traceback."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    archive = write_jsonl(inputs / "trace.jsonl", valid_rows())
    before = tree_digest(inputs)
    for option in ("--sample-requests", "--min-requests"):
        res = invoke(["requalify", str(archive), "--baseline", LOGGING_ARM, "--candidate",
                      "top4:t1:dyadic24@3", "-q", "--n-boot", "100", option, str(2**63 - 1),
                      "--out", str(tmp_path / option)])  # fmt: skip
        assert res.exit_code in (0, 1, 2), res.output
        if res.exit_code == 2:
            assert_refused(res)
        assert_clean(res, before, [inputs])


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    """Click's own usage errors: one line too; the bare command still prints the help."""
    before = tree_digest(tmp_path)
    for args, fragment in [
        (["requalify"], "Missing argument 'ARCHIVE'"),
        (["synth", str(tmp_path / "x"), "--bogus"], "No such option: --bogus"),
        (["--bogus"], "No such option: --bogus"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
        (["requalify", str(tmp_path / "x"), "--candidate", "c"], "Missing option '--baseline'"),
    ]:
        res = invoke(args)
        assert_refused(res, fragment)
        assert "Usage:" not in res.output
        assert_clean(res, before, [tmp_path])
    res = invoke([])
    assert "Usage: " in res.output and "error:" not in res.output
    res = invoke(["synth", "--help"])
    assert res.exit_code == 0 and "Usage: specreplay synth" in res.stdout, res.output


@pytest.mark.parametrize("seed", [-1, 2**64, -(2**64), 2**200, True, 1.5])
def test_api_seed_has_the_same_range(tmp_path: Path, seed: Any) -> None:
    """The Python API checks the seed against the CLI's range (it was an OverflowError at
    2^64, deep in the kernels)."""
    from specreplay import api
    from specreplay.errors import SpecReplayError

    # the CLI's message (one message per bound, issue 11): names the flag, the value, the range
    bound = r"^--seed .*: (out of range|not an integer) \((range )?0 to 2\^64-1\)$"
    with pytest.raises(SpecReplayError, match=bound):
        api.synth(tmp_path / "a", requests=2, rounds=2, seed=seed)
    assert not (tmp_path / "a").exists()
