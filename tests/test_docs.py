"""The README and docs/ hold together: every relative link and #anchor resolves, the README fits.

Anchors follow GitHub's heading slugs: the heading text lowercased, inline markup (backquotes,
emphasis, link targets) reduced to its text, every character that is not a letter, digit, space,
hyphen or underscore dropped, each space turned into a hyphen, and a repeated slug numbered
``-1``, ``-2``, … in order. Headings and links inside fenced code blocks do not count. Links to
``http(s)://`` and ``mailto:`` targets are not followed (no network in tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200
"""Issue 11, item 7: the README fits on a screen or two."""

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_EXTERNAL = ("http://", "https://", "mailto:")


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks (HTML comments blanked)."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication).

    Examples
    --------
    >>> slug("The screen's rate (SP2)")
    'the-screens-rate-sp2'
    >>> slug("`specreplay interval A B`")
    'specreplay-interval-a-b'
    >>> slug("FastChat/Medusa answer files")
    'fastchatmedusa-answer-files'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of ``path`` (duplicates numbered)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image in ``path``'s prose."""
    found = []
    for i, line in enumerate(_prose_lines(path.read_text(encoding="utf-8")), start=1):
        for pattern in (_LINK, _IMAGE):
            found += [(i, m.group(1)) for m in pattern.finditer(line)]
    return found


def broken_links(page_list: list[Path], root: Path = ROOT) -> list[str]:
    """Every link of ``page_list`` whose file or #anchor does not exist, as ``page:line: target``
    (``page`` relative to ``root``)."""
    bad = []
    for page in page_list:
        for line, target in links(page):
            if target.startswith(_EXTERNAL):
                continue
            ref, _, anchor = target.partition("#")
            dest = (page.parent / ref).resolve() if ref else page
            rel = page.relative_to(root)
            if not dest.exists():
                bad.append(f"{rel}:{line}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                bad.append(f"{rel}:{line}: {target} (no such anchor)")
    return bad


def test_every_relative_link_and_anchor_resolves() -> None:
    assert len(pages()) >= 10, [p.name for p in pages()]
    assert broken_links(pages()) == []


def test_a_planted_broken_link_is_found(tmp_path: Path) -> None:
    """The check itself: a missing file, a missing anchor and a good link, told apart."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(
        "# A page\n\n## The screen's rate (SP2)\n\n```\n## not a heading\n```\n",
        encoding="utf-8",
    )
    page = docs / "b.md"
    page.write_text(
        "# B\n\nSee [the rate](a.md#the-screens-rate-sp2), [gone](missing.md),\n"
        "[no anchor](a.md#not-a-heading), [here](#b) and [web](https://example.org/x#y).\n",
        encoding="utf-8",
    )
    bad = broken_links([page], root=tmp_path)
    assert bad == [
        "docs/b.md:3: missing.md (no such file)",
        "docs/b.md:4: a.md#not-a-heading (no such anchor)",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Calibration of the intervals", "calibration-of-the-intervals"),
        ("Beyond one machine: Dask", "beyond-one-machine-dask"),
        ("convert (and synth's forms)", "convert-and-synths-forms"),
        ("results.json", "resultsjson"),
        ("The default interval: CR2, effective df, Hall's correction",
         "the-default-interval-cr2-effective-df-halls-correction"),
    ],
)  # fmt: skip
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_duplicate_headings_are_numbered(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# T\n\n## Notes\n\n## Notes\n\n## Notes\n", encoding="utf-8")
    assert anchors(page) == {"t", "notes", "notes-1", "notes-2"}


def test_readme_fits_on_a_screen() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


def test_readme_links_every_docs_page() -> None:
    """Each docs/ page is reachable from the README in one click."""
    targets = {t.partition("#")[0] for _, t in links(ROOT / "README.md")}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in targets, page.name


def test_no_specification_section_is_cited() -> None:
    """Users have no SPEC.md: the README and docs cite docs/ anchors instead (issue 11, item 7)."""
    for page in pages():
        text = page.read_text(encoding="utf-8")
        assert "SPEC §" not in text and "seed 00" not in text, page.name


def _command_lines() -> list[tuple[str, str]]:
    """(page, line) of every ``specreplay …`` line in the code blocks of README.md and docs/."""
    found = []
    for page in pages():
        lang: str | None = None  # the open fence's language, None outside a fence
        block: list[str] = []
        for raw in page.read_text(encoding="utf-8").splitlines():
            fence = _FENCE.match(raw.lstrip())
            if fence and lang is None:
                lang, block = raw.lstrip()[3:].strip(), []
            elif fence:
                if lang in ("", "bash", "sh", "console"):
                    for line in "\n".join(block).replace("\\\n", " ").splitlines():
                        line = line.strip().split("  #")[0]
                        if line.startswith("specreplay "):
                            found.append((page.name, line))
                lang = None
            elif lang is not None:
                block.append(raw)
    return found


def test_documented_command_lines_use_real_verbs_and_options() -> None:
    """Every documented command line (examples and synopses, run or not) names a verb of the CLI
    and only options that verb takes, so a renamed option cannot leave docs/ stale."""
    import shlex

    import typer.main

    from specreplay.cli import app

    verbs = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    lines = _command_lines()
    assert len(lines) >= 40, len(lines)
    bad = []
    for page, line in lines:
        argv = shlex.split(line)
        verb = verbs.get(argv[1])
        if verb is None:
            bad.append(f"{page}: {line} (no verb {argv[1]!r})")
            continue
        takes = {o for p in verb.params for o in (*p.opts, *p.secondary_opts)}
        for arg in (a.lstrip("[(") for a in argv[2:]):
            name = arg.split("=")[0].rstrip("])…")
            if name.startswith("-") and not re.fullmatch(r"-[\d.]+", name) and name not in takes:
                bad.append(f"{page}: {line} ({name} is not an option of {argv[1]})")
    assert bad == []


# Citations in code, help and outputs point at docs/ (issue 11, item 7). The files below still
# cite SPEC.md: they belong to the replay-engine and options work (P-B, P-C), re-pointed after
# that merge. Every other file is held to the rule now.
_CITATION = re.compile(r"SPEC §|seed 00\d|README \"")
_PENDING = re.compile(
    r"^specreplay/(cli|api)\.py$|^specreplay/(commands|pipelines)/"
    r"|^specreplay/replay/(engine|shard|shardcache|choice|measured|tails|backend|paired)\.py$"
    r"|^specreplay/replay/archive/reader\.py$|^specreplay/stats/pairing\.py$"
)
_DOCS_ANCHOR = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
_DOCS_PAGE = re.compile(r"docs/([\w-]+\.md)")
_HEADED = (
    "report.py",
    "screen.py",
    "tables.py",
    "importers.py",
    "schema.py",
    "cli.py",
    "budget.py",
    "shortrounds.py",
    "sweep.py",
)
"""Modules whose user-facing strings cite a page and heading (REPORT.md, TABLES.md, an error, a
help text, a results.json assumption)."""
_DOCS_HEADING = re.compile(r"docs/([\w-]+\.md), \\?\"((?:[^\"\\\n]|\\')+)\\?\"")


def _package_files() -> list[Path]:
    """Every text file of the specreplay package (sources and the shipped schema)."""
    package = ROOT / "specreplay"
    return sorted(p for p in package.rglob("*") if p.suffix in (".py", ".json", ".typed"))


def _citing_files(paths: list[Path]) -> list[str]:
    return [
        str(p.relative_to(ROOT)) for p in paths if _CITATION.search(p.read_text(encoding="utf-8"))
    ]


def _help_texts() -> dict[str, str]:
    """``specreplay --help`` and ``specreplay VERB --help`` for every verb, whitespace collapsed
    (so a citation the terminal wrapped is still one string)."""
    import typer.main
    from typer.testing import CliRunner

    from specreplay.cli import app

    verbs = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    out = {}
    for argv in ([], *([v] for v in verbs)):
        res = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "300"})
        assert res.exit_code == 0, (argv, res.output)
        out[" ".join(["specreplay", *argv])] = " ".join(
            re.sub(r"[│╭╮╰╯─]", " ", res.output).split()
        )
    assert len(out) >= 12, sorted(out)
    return out


def test_no_specification_section_outside_the_pending_files() -> None:
    """No module of specreplay/ outside the P-B/P-C files cites ``SPEC §``, ``seed 00…`` or a
    README section (the README no longer has them)."""
    files = [p for p in _package_files() if not _PENDING.search(str(p.relative_to(ROOT)))]
    assert len(files) >= 80, len(files)
    assert _citing_files(files) == []


def test_no_specification_section_in_code_or_help() -> None:
    """No file under specreplay/ and no ``--help`` text cites ``SPEC §``, ``seed 00…`` or a
    README section."""
    help_citing = [argv for argv, text in _help_texts().items() if _CITATION.search(text)]
    assert _citing_files(_package_files()) == [] and help_citing == []


def test_the_citation_check_sees_a_wrapped_help_line() -> None:
    """The help check collapses a rich panel's wrapping, so a split citation is still found."""
    panel = "│ counters (SPEC │\n│ §2.3)   │"
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", panel).split())
    assert _CITATION.search(text) is not None


def _docs_citations() -> list[tuple[str, str, str]]:
    """(file, page, anchor or heading) of every ``docs/PAGE.md#anchor`` and every
    ``docs/PAGE.md, "Heading"`` cited in specreplay/."""
    found = []
    for p in _package_files():
        text = p.read_text(encoding="utf-8")
        rel = str(p.relative_to(ROOT))
        found += [(rel, m.group(1), m.group(2)) for m in _DOCS_ANCHOR.finditer(text)]
        found += [(rel, m.group(1), slug(m.group(2))) for m in _DOCS_HEADING.finditer(text)]
    return found


def test_every_docs_anchor_cited_in_the_package_resolves() -> None:
    """Each ``docs/<page>.md#<anchor>`` (and ``docs/<page>.md, "Heading"``) that a docstring,
    comment, help text or output of specreplay/ cites names a heading of that page."""
    cited = _docs_citations()
    assert len(cited) >= 150, len(cited)
    headed = {p.name for p in _package_files() if _DOCS_HEADING.search(p.read_text("utf-8"))}
    assert headed >= set(_HEADED), headed  # the page-and-heading form is read, too
    pages_named = {m for p in _package_files() for m in _DOCS_PAGE.findall(p.read_text("utf-8"))}
    assert sorted(p for p in pages_named if not (ROOT / "docs" / p).exists()) == []
    bad = [
        f"{f}: docs/{page}#{anchor}"
        for f, page, anchor in cited
        if not (ROOT / "docs" / page).exists() or anchor not in anchors(ROOT / "docs" / page)
    ]
    assert bad == []
